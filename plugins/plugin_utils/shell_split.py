# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Split shell and command lines into the simple commands they would run (controller only).

One job: read a command line the way sh would cut it, so that the banned patterns of
:mod:`.untrusted_policy` can look at every command a model-written task runs.
:func:`split_shell` cuts a shell line (``ansible.builtin.shell``, a cron job) into simple
commands, quote-aware, on ``;``, ``&&``, ``||``, ``|``, ``&``, parentheses, command
substitutions and newlines, and splits each into words with :mod:`shlex`;
:func:`expand_command` adds the commands a command itself runs (``sudo``, ``env``,
``xargs`` and other wrappers, ``sh -c``, ``su -c``, ``eval``, ``find -exec``).

Text that cannot be split with confidence raises :class:`ShellParseError`; the gate then
refuses the task rather than guess (DESIGN.md "Gate": banned patterns).  Plain lines must
split cleanly: case llm-pipefail-under-dash in ../shared/cases/cases.yml
(``set -o pipefail && grep -c x /etc/passwd | head -1``) passes the gate, its dash failure
is the Reflector's to explain.  This is not a shell: a script file a task wrote, or an
interpreter such as ``python3 -c``, is not read.  Pure string work; nothing is executed.
"""
from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex

from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError

__all__ = ['MARK', 'SHELLS', 'WRAPPERS', 'ShellCommand', 'ShellParseError', 'expand_command', 'find_parts',
           'split_shell']

# Shell names (basenames) whose ``-c`` string, or stdin, is read as a script.
SHELLS = frozenset({'sh', 'bash', 'dash', 'zsh', 'ksh', 'ash', 'mksh', 'yash'})

# Marks a redirection or substitution in the word buffers; split_shell refuses text holding it,
# so a word holding it did not come from the checked text.  Not whitespace to str.strip().
MARK = '\x01'
_W = MARK + 'W'        # write redirection; the next word is its target
_WDUP = MARK + 'D'     # >& : the next word is a file unless it is a descriptor number or -
_R = MARK + 'R'        # read redirection, here-document or here-string; the next word is not an argument
_SUB = MARK + 'S'      # command substitution placeholder: _SUB <index> MARK
_MAX_NESTING = 4
_ASSIGNMENT_RE = re.compile(r'[A-Za-z_][A-Za-z0-9_]*=')  # NAME=value before a command
_RESERVED = frozenset({'!', '{', '}', 'if', 'then', 'else', 'elif', 'fi', 'do', 'done', 'while', 'until'})


class ShellParseError(ScapforgeError, ValueError):
    """Raised when a shell or command line cannot be split with confidence (the gate refuses it)."""

    kind = 'shell_parse'


@dataclasses.dataclass
class ShellCommand:
    """One simple command of a shell line.

    argv: its words (list of str, quotes removed; a command substitution reads ``$(text)``);
    writes: the targets of its write redirections (list of str, as written).
    """

    argv: list
    writes: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Frame:
    kind: str                      # top | sub ($( ) or `) | paren (subshell, process substitution)
    start: int
    index: int | None = None       # the substitution this frame fills, if any
    buf: list = dataclasses.field(default_factory=list)
    dq: bool = False               # inside double quotes


def split_shell(text: str) -> list[ShellCommand]:
    """Split a shell line into the simple commands sh would run, in order.

    Separators (outside quotes): ``;``, ``&``, ``&&``, ``|``, ``||``, ``|&``, newlines, ``(``
    and ``)``.  The commands inside ``$( )`` and backticks (also within double quotes) and
    process substitutions are listed too; in the word they stand in they become
    ``$(text)``.  Redirection targets of ``>``, ``>>``, ``>|``, ``&>``, ``>&`` and ``<>`` go to
    ``writes``; operands of ``<``, ``<<`` and ``<<<`` are dropped; here-document bodies are
    data.  Comments are dropped.  Words are split with :func:`shlex.split`.

    Raises ShellParseError for unbalanced quotes or brackets, ``case`` patterns, an
    unterminated here-document, an unquoted here-document holding ``$(`` or a backtick, and
    control characters: text the gate cannot split with confidence.
    """
    if not isinstance(text, str):
        raise ShellParseError(f'a command line must be a string, got {type(text).__name__}')
    if MARK in text or '\x00' in text:
        raise ShellParseError('it holds control characters')
    segments, subs = _shell_segments(text)
    out = []
    for seg in segments:
        try:
            words = shlex.split(seg, comments=False, posix=True)
        except ValueError as ex:
            raise ShellParseError(str(ex)) from None
        out.append(_words_to_command([_fill_subs(w, subs) for w in words]))
    return out


def _fill_subs(word: str, subs: list) -> str:
    def name(m: re.Match) -> str:
        inner = _fill_subs(subs[int(m.group(1))], subs)
        return '$(' + ' '.join(re.sub(r'[^\w./@:%+=,${}()-]+', ' ', inner).split()) + ')'
    return re.sub(re.escape(_SUB) + r'(\d+)' + re.escape(MARK), name, word)


def _words_to_command(words: list) -> ShellCommand:
    cmd = ShellCommand(argv=[])
    i = 0
    while i < len(words):
        word = words[i]
        if word in (_W, _WDUP, _R):
            if i + 1 >= len(words):
                raise ShellParseError('a redirection without a target')
            target = words[i + 1]
            if word == _W or (word == _WDUP and not re.fullmatch(r'\d+-?|-', target)):
                cmd.writes.append(target)
            i += 2
            continue
        cmd.argv.append(word)
        i += 1
    return cmd


def _shell_segments(text: str) -> tuple[list, list]:
    """Cut text into simple-command strings (quotes kept, redirections marked) and substitution texts."""
    return _Segmenter(text).run()


class _Segmenter:
    """One left-to-right pass over a shell text: a stack of frames (the top level, ``( )``,
    ``$( )`` and backticks), each step consuming one token and returning where the next starts."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.segments: list[str] = []
        self.subs: list[str] = []
        self.frames = [_Frame('top', 0)]
        self.heredocs: list[tuple] = []

    def run(self) -> tuple[list, list]:
        i = 0
        while i < len(self.text):
            fr = self.frames[-1]
            i = self._in_double_quotes(fr, i) if fr.dq else self._step(fr, i)
        if len(self.frames) != 1 or self.frames[0].dq:
            raise ShellParseError('unbalanced quotes, brackets or backticks')
        if self.heredocs:
            raise ShellParseError('an unterminated here-document')
        self._flush(self.frames[0])
        return self.segments, self.subs

    def _flush(self, fr: _Frame) -> None:
        seg = ''.join(fr.buf).strip()
        if seg:
            self.segments.append(seg)
        fr.buf = []

    def _open_sub(self, fr: _Frame, kind: str, start: int) -> None:
        self.subs.append('')
        fr.buf.append(f'{_SUB}{len(self.subs) - 1}{MARK}')
        self.frames.append(_Frame(kind, start, index=len(self.subs) - 1))

    def _close(self, fr: _Frame, end: int) -> None:
        self._flush(fr)
        self.frames.pop()
        if fr.index is not None:
            self.subs[fr.index] = self.text[fr.start:end]

    def _in_double_quotes(self, fr: _Frame, i: int) -> int:
        text = self.text
        c, nxt = text[i], text[i + 1:i + 2]
        if c == '\\':
            return self._take(fr, text[i:i + 2], i)
        if c == '"':
            fr.dq = False
            return self._take(fr, c, i)
        if c == '`':
            self._open_sub(fr, 'bt', i + 1)
            return i + 1
        if c == '$' and nxt == '(':
            self._open_sub(fr, 'sub', i + 2)
            return i + 2
        return self._take(fr, c, i)

    def _step(self, fr: _Frame, i: int) -> int:
        c = self.text[i]
        if c in "'\"\\#":
            return self._quote_escape_or_comment(fr, i)
        if c in '`$()':
            return self._substitution_or_group(fr, i)
        if c in '\n;&|':
            return self._separator(fr, i)
        if c == '>':
            return self._redirect_out(fr, i)
        if c == '<':
            return self._redirect_in(fr, i)
        return self._take(fr, c, i)

    @staticmethod
    def _take(fr: _Frame, piece: str, i: int) -> int:
        """Keep ``piece`` in the current word; the next token starts after it."""
        fr.buf.append(piece)
        return i + len(piece)

    def _quote_escape_or_comment(self, fr: _Frame, i: int) -> int:
        text = self.text
        c = text[i]
        if c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                raise ShellParseError('an unterminated single quote')
            return self._take(fr, text[i:j + 1], i)
        if c == '"':
            fr.dq = True
            return self._take(fr, c, i)
        if c == '\\':
            if text[i + 1:i + 2] == '\n':  # a line continuation
                return i + 2
            return self._take(fr, text[i:i + 2], i)
        if not fr.buf or fr.buf[-1][-1:].isspace():  # '#' starts a comment only at a word's start
            j = text.find('\n', i)
            return len(text) if j < 0 else j
        return self._take(fr, c, i)

    def _substitution_or_group(self, fr: _Frame, i: int) -> int:
        c, nxt = self.text[i], self.text[i + 1:i + 2]
        if c == '`':
            if fr.kind == 'bt':
                self._close(fr, i)
            else:
                self._open_sub(fr, 'bt', i + 1)
            return i + 1
        if c == '$':
            if nxt != '(':
                return self._take(fr, c, i)
            self._open_sub(fr, 'sub', i + 2)
            return i + 2
        if c == '(':
            if ''.join(fr.buf).rstrip().endswith((_W, _WDUP, _R)):  # <( ) >( ) stand in for a file name
                self._open_sub(fr, 'paren', i + 1)
            else:
                self._flush(fr)
                self.frames.append(_Frame('paren', i + 1))
            return i + 1
        if fr.kind not in ('sub', 'paren'):
            raise ShellParseError("an unbalanced ')' (case patterns are not supported)")
        self._close(fr, i)
        return i + 1

    def _separator(self, fr: _Frame, i: int) -> int:
        text = self.text
        c, nxt = text[i], text[i + 1:i + 2]
        if c == '&' and nxt == '>':  # &> and &>>: stdout and stderr to a file
            fr.buf.append(f' {_W} ')
            return i + (3 if text[i + 2:i + 3] == '>' else 2)
        self._flush(fr)
        if c == '\n':
            i = _skip_heredocs(text, i + 1, self.heredocs)
            self.heredocs = []
            return i
        if c == '&':
            return i + (2 if nxt == '&' else 1)
        if c == '|':
            return i + (2 if nxt in ('|', '&') else 1)
        return i + 1

    def _redirect_out(self, fr: _Frame, i: int) -> int:
        nxt = self.text[i + 1:i + 2]
        _strip_fd_number(fr.buf)
        fr.buf.append(f' {_WDUP if nxt == "&" else _W} ')
        return i + (2 if nxt in ('>', '|', '&') else 1)

    def _redirect_in(self, fr: _Frame, i: int) -> int:
        text = self.text
        nxt = text[i + 1:i + 2]
        _strip_fd_number(fr.buf)
        if text.startswith('<<<', i):
            fr.buf.append(f' {_R} ')
            return i + 3
        if nxt == '<':
            return self._heredoc(fr, i + 2)
        if nxt == '>':  # <> opens the file for reading and writing
            fr.buf.append(f' {_W} ')
            return i + 2
        fr.buf.append(f' {_R} ')
        return i + (2 if nxt == '&' else 1)

    def _heredoc(self, fr: _Frame, i: int) -> int:
        text = self.text
        strip_tabs = text[i:i + 1] == '-'
        i += 1 if strip_tabs else 0
        m = re.match(r'[ \t]*((?:[^\s;&|<>()\'"\\]|\\.|\'[^\']*\'|"[^"]*")+)', text[i:])
        if not m:
            raise ShellParseError('a here-document without a delimiter')
        word = m.group(1)
        self.heredocs.append((re.sub(r'[\'"\\]', '', word), strip_tabs, any(q in word for q in '\'"\\')))
        fr.buf.append(f' {_R} heredoc ')
        return i + m.end()


def _strip_fd_number(buf: list) -> None:
    """Drop the descriptor number of a redirection such as ``2>`` from the word buffer."""
    text = ''.join(buf)
    m = re.search(r'(?:^|(?<=\s))\d+$', text)
    if m:
        buf[:] = [text[:m.start()]]


def _skip_heredocs(text: str, i: int, heredocs: list) -> int:
    """Skip the bodies of the here-documents begun on the line that ended at i; return the new index."""
    for delim, strip_tabs, quoted in heredocs:
        body = []
        while True:
            if i >= len(text):
                raise ShellParseError(f'the here-document {delim!r} is not terminated')
            j = text.find('\n', i)
            line = text[i:] if j < 0 else text[i:j]
            i = len(text) if j < 0 else j + 1
            if (line.lstrip('\t') if strip_tabs else line) == delim:
                break
            body.append(line)
        if not quoted and any('$(' in line or '`' in line for line in body):
            raise ShellParseError('an unquoted here-document runs command substitutions')
    return i


# Wrappers: short options that take a value, long options that take one, operands before the command.
_WRAPPERS = {
    'sudo': ('ugChpDrtUTR', {'--user', '--group', '--close-from', '--host', '--prompt', '--chdir', '--role',
                             '--type', '--other-user', '--command-timeout', '--chroot'}, 0),
    'doas': ('uC', set(), 0),
    'env': ('uCS', {'--unset', '--chdir', '--split-string'}, 0),
    'nohup': ('', set(), 0),
    'nice': ('n', {'--adjustment'}, 0),
    'ionice': ('cnpPtu', {'--class', '--classdata', '--pid', '--pgid', '--uid'}, 0),
    'timeout': ('sk', {'--signal', '--kill-after'}, 1),
    'setsid': ('', set(), 0),
    'exec': ('a', set(), 0),
    'command': ('', set(), 0),
    'builtin': ('', set(), 0),
    'time': ('fo', {'--format', '--output'}, 0),
    'stdbuf': ('ioe', {'--input', '--output', '--error'}, 0),
    'chroot': ('', {'--userspec', '--groups'}, 1),
    'flock': ('wEc', {'--timeout', '--conflict-exit-code', '--command'}, 1),
    'systemd-run': ('upEMHtG', {'--unit', '--property', '--setenv', '--machine', '--host', '--uid', '--gid',
                                '--nice', '--working-directory', '--description', '--slice', '--on-active',
                                '--on-boot', '--on-calendar', '--timer-property', '--path-property'}, 0),
    'xargs': ('adEILnPs', {'--arg-file', '--delimiter', '--max-lines', '--max-args', '--max-procs',
                           '--max-chars', '--process-slot-var'}, 0),
    'watch': ('nd', {'--interval'}, 0),
    'busybox': ('', set(), 0),
}
#: Commands that run the command given in their arguments (sudo, env, xargs...).
WRAPPERS = frozenset(_WRAPPERS)


def _unwrap(name: str, args: list) -> tuple[list, dict]:
    """Split a wrapper's arguments: (the command it runs, {option: value} it was given)."""
    short_vals, long_vals, positional = _WRAPPERS[name]
    opts: dict = {}
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == '--':
            i += 1
            break
        if tok.startswith('--'):
            key, eq, val = tok.partition('=')
            if not eq and key in long_vals and i + 1 < len(args):
                val, i = args[i + 1], i + 1
            opts[key] = val
            i += 1
            continue
        if tok.startswith('-') and len(tok) > 1 and not (name == 'nice' and tok[1:].isdigit()):
            for k, ch in enumerate(tok[1:], start=1):
                if ch in short_vals:
                    val = tok[k + 1:]
                    if not val and i + 1 < len(args):
                        val, i = args[i + 1], i + 1
                    opts['-' + ch] = val
                    break
                opts['-' + ch] = ''
            i += 1
            continue
        if name in ('env', 'sudo') and _ASSIGNMENT_RE.match(tok):
            i += 1
            continue
        break
    return args[i + positional:], opts


def _shell_script(args: list) -> tuple[str | None, bool]:
    """For ``sh ARGS``: (the -c command string or None, whether a script file operand is given)."""
    has_c = False
    rest = list(args)
    while rest and rest[0][:1] in ('-', '+') and len(rest[0]) > 1:
        tok = rest.pop(0)
        if tok == '--':
            break
        has_c = has_c or 'c' in tok[1:]
        if tok[-1] in 'oO' and rest:  # -o OPTION / -O SHOPT take a value
            rest.pop(0)
    if rest:
        return (rest[0], False) if has_c else (None, True)
    return None, False


def find_parts(args: list) -> tuple[list, list, bool]:
    """Read ``find`` arguments (the words after ``find``).

    Returns (start paths, the argv of each -exec/-execdir/-ok/-okdir, whether -delete is given).
    """
    paths, execs, delete = [], [], False
    i = 0
    while i < len(args) and args[i] in ('-H', '-L', '-P'):  # symlink options come before the start paths
        i += 1
    while i < len(args) and not args[i].startswith('-') and args[i] not in ('(', '!', ')'):
        paths.append(args[i])
        i += 1
    while i < len(args):
        tok = args[i]
        if tok == '-delete':
            delete = True
        if tok in ('-exec', '-execdir', '-ok', '-okdir'):
            j = i + 1
            while j < len(args) and args[j] not in (';', '+'):
                j += 1
            execs.append(args[i + 1:j])
            i = j
        i += 1
    return paths, execs, delete


def expand_command(cmd: ShellCommand, stdin: str | None = None, depth: int = 0) -> list[ShellCommand]:
    """The command and every command it runs, in order: through wrappers (sudo, env, xargs...),
    ``sh -c``, ``su -c``, ``eval`` and ``find -exec`` (once with ``{}``, once per start path in
    its place).

    cmd: one simple command (from :func:`split_shell`, or an argv list); leading reserved words
    and ``NAME=value`` assignments are dropped.  stdin: text a shell without ``-c`` or a script
    file reads as its script.  depth: nesting level of cmd (recursion; callers leave 0).
    Raises ShellParseError when commands nest more than four deep, a nested script cannot be
    split, or an ``env -S`` string has unbalanced quotes.
    """
    if depth > _MAX_NESTING:
        raise ShellParseError('commands are nested too deeply')
    argv = list(cmd.argv)
    while argv and (argv[0] in _RESERVED or _ASSIGNMENT_RE.match(argv[0])):
        argv.pop(0)
    out = [ShellCommand(argv, list(cmd.writes))]
    if not argv:
        return out
    name, args = posixpath.basename(argv[0]), argv[1:]
    inner: list[list] = []
    scripts: list[str] = []
    if name == 'busybox' and args and args[0] in SHELLS:
        name, args = args[0], args[1:]
    if name in SHELLS:
        script, has_file = _shell_script(args)
        if script is not None:
            scripts.append(script)
        elif not has_file and stdin is not None:
            scripts.append(stdin)
    elif name == 'eval':
        scripts.append(' '.join(args))
    elif name in ('su', 'runuser'):
        for k, tok in enumerate(args):
            if tok in ('-c', '--command') and k + 1 < len(args):
                scripts.append(args[k + 1])
            elif tok.startswith('--command='):
                scripts.append(tok.split('=', 1)[1])
        if '--' in args:
            inner.append(args[args.index('--') + 1:])
    elif name == 'find':
        paths, execs, _delete = find_parts(args)
        for ex in execs:
            inner.append(ex)
            inner += [[p if a == '{}' else a for a in ex] for p in paths]
    elif name in _WRAPPERS:
        rest, opts = _unwrap(name, args)
        if name == 'env' and ('-S' in opts or '--split-string' in opts):
            try:
                rest = shlex.split(opts.get('-S') or opts.get('--split-string') or '') + rest
            except ValueError as ex:  # unbalanced quotes: unreadable, so refused like any shell line
                raise ShellParseError('cannot split env -S %r: %s' % (opts.get('-S') or opts.get('--split-string'), ex))
        if name == 'flock' and ('-c' in opts or '--command' in opts):
            scripts.append(opts.get('-c') or opts.get('--command') or '')
        elif name == 'watch':
            scripts.append(' '.join(rest))
        elif name == 'command' and ('-v' in opts or '-V' in opts):
            rest = []
        elif name == 'xargs' and rest:
            rest = rest + ['$(stdin)']
        elif name == 'xargs':
            rest = ['echo']
        if rest and name != 'watch':
            inner.append(rest)
    for argv_ in inner:
        out += expand_command(ShellCommand(list(argv_)), depth=depth + 1)
    for script in scripts:
        for sub in split_shell(script):
            out += expand_command(sub, depth=depth + 1)
    return out
