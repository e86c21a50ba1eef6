# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only probes the Worker may ask for before it writes tasks (controller only).

DESIGN "Worker": read-only probes before writing (SHIELDS: success tracked information
gathering more than model size).  A probe is a one-key mapping the model writes:

* ``{"read": "/abs/path"}``: the file's content (``ansible.builtin.slurp``);
* ``{"stat": "/abs/path"}``: type, mode, owner, size, sha256 (``ansible.builtin.stat``);
* ``{"find": {"paths": [...], "patterns": ..., "contains": ..., "file_type": ..., "recurse": bool}}``
  (``ansible.builtin.find``, only those arguments);
* ``{"getent": {"database": "passwd", "key": "root"}}`` (``ansible.builtin.getent``);
* ``{"command": ["sshd", "-T"]}`` or ``{"command": "sshd -T"}``: one command from a
  read-only allowlist (:data:`COMMANDS`), run by ``ansible.builtin.command`` without a shell.

:func:`probe_task` turns a probe into one Ansible task, to run through the executor like
any untrusted task (it passes :func:`task_gate.validate`), or raises :class:`ProbeRefused`.
slurp, stat, find and getent tasks carry ``check_mode: true`` (:func:`run_as_check`): those
modules support check mode and read the same in it, so even a mistake here cannot change
the host.  ``ansible.builtin.command`` does not run in check mode (it skips), so command
probes run for real and their safety rests on the allowlist alone: each allowed form only
reads (``sshd -T`` prints the configuration and exits; ``modprobe`` needs ``-n``; ``sysctl``
never ``-w``/``-p``; ``find`` never ``-exec``/``-delete``/``-fprint``...).

Paths must be absolute.  /proc and /sys may be read; what never ends or is huge (devices,
/proc/kcore, tracing pipes) may not, and the content of secrets (shadow files, private
keys) never goes into a prompt: stat them, or grep them with -c/-l.
"""
from __future__ import annotations

import base64
import binascii
import fnmatch
import json
import posixpath
import re
import shlex
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy import effects
from ansible_collections.scapforge.remediation.plugins.plugin_utils.shell_split import find_parts

__all__ = ['ProbeRefused', 'COMMANDS', 'probe_task', 'run_as_check', 'probe_key', 'format_probe_result']

KINDS = ('read', 'stat', 'find', 'getent', 'command')
_CHECK_MODE_KINDS = frozenset({'read', 'stat', 'find', 'getent'})
_FIND_KEYS = ('paths', 'patterns', 'contains', 'file_type', 'recurse')
_FILE_TYPES = ('any', 'directory', 'file', 'link')
# getent databases the Worker may read: not shadow/gshadow (password hashes would enter a prompt).
_GETENT_DATABASES = frozenset({'passwd', 'group', 'hosts', 'services', 'protocols', 'networks', 'netgroup',
                               'initgroups', 'shells', 'ethers', 'rpc', 'aliases', 'ahosts', 'ahostsv4',
                               'ahostsv6'})
_BIN_DIRS = ('/usr/bin', '/usr/sbin', '/bin', '/sbin')
_SHELL_CHARS_RE = re.compile(r'[;&|<>`\n\r]|\$\(')
_CONTROL_RE = re.compile(r'[\x00-\x08\x0b-\x1f\x7f]')
_JINJA = ('{{', '{%', '{#')
# Contents that must not enter a prompt.  fnmatch patterns on the normalised path.
_SECRETS = ('/etc/shadow', '/etc/shadow-', '/etc/gshadow', '/etc/gshadow-', '/etc/security/opasswd*',
            '/etc/ssh/ssh_host_*_key', '/etc/ssl/private/*', '/etc/pki/tls/private/*', '/etc/krb5.keytab',
            '*/.ssh/id_*', '/etc/ipsec.secrets', '/etc/ppp/*-secrets', '/etc/NetworkManager/system-connections/*',
            '/proc/*/environ', '/var/lib/sss/secrets/*')
# Reads that never end, block, or return gigabytes.
_ENDLESS = ('/dev', '/dev/*', '/proc/kcore', '/proc/kmsg', '/proc/kpage*', '/proc/*/mem', '/proc/*/pagemap',
            '/proc/sysrq-trigger', '/sys/kernel/debug/*', '/sys/kernel/tracing/*', '/sys/kernel/debug',
            '/sys/kernel/tracing')
# Recursive reads rooted here take too long or touch endless files.
_NO_RECURSE_ROOTS = ('/', '/proc', '/sys', '/dev')


class ProbeRefused(ScapforgeError, ValueError):
    """A probe the Worker may not run; str() is the reason, written for the Worker."""

    kind = 'probe_refused'


# ============================================================================ public API

def probe_task(spec: t.Any) -> dict:
    """Return the Ansible task (a mapping) for a probe, or raise ProbeRefused with the reason.

    spec: a one-key mapping, see the module docstring.  The task is named ``probe <key>``;
    read/stat/find/getent tasks have ``check_mode: true``; command tasks use ``argv`` and
    ``changed_when: false``.
    """
    kind, value = _normalise(spec)
    name = f'probe {_key(kind, value)}'[:200]
    if kind == 'read':
        return {'name': name, 'ansible.builtin.slurp': {'src': value}, 'check_mode': True}
    if kind == 'stat':
        # stat checksums regular files: under /proc, /sys and /dev a "regular" file (kcore) may never end
        checksum = not any(effects.within(value, root) for root in ('/proc', '/sys', '/dev'))
        args = {'path': value, 'get_checksum': checksum, 'get_mime': False}
        if checksum:
            args['checksum_algorithm'] = 'sha256'
        return {'name': name, 'ansible.builtin.stat': args, 'check_mode': True}
    if kind == 'find':
        return {'name': name, 'ansible.builtin.find': dict(value), 'check_mode': True}
    if kind == 'getent':
        args = dict(value)
        if 'key' in args:
            args['fail_key'] = False  # a missing key is an answer, not a failed probe
        return {'name': name, 'ansible.builtin.getent': args, 'check_mode': True}
    return {'name': name, 'ansible.builtin.command': {'argv': list(value)}, 'changed_when': False}


def run_as_check(spec: t.Any) -> bool:
    """True when the probe's task runs in check mode (read, stat, find, getent); False for
    command probes, which ``ansible.builtin.command`` would skip in check mode: they rest on
    the read-only allowlist.  Raises ProbeRefused for a spec that is not a probe."""
    return _kind(spec)[0] in _CHECK_MODE_KINDS


def probe_key(spec: t.Any) -> str:
    """A stable one-line label for a probe, equal for equal probes (``"command sshd -T"`` for both
    ``["sshd", "-T"]`` and ``"sshd -T"``; paths normalised); used to dedupe repeated probes.
    Never raises: a malformed spec gets ``"invalid <json>"``."""
    try:
        kind, value = _normalise(spec)
        return _key(kind, value)
    except ProbeRefused:
        pass
    try:
        kind, value = _kind(spec)
        if kind == 'command' and isinstance(value, list):
            return _one_line('command ' + shlex.join(str(v) for v in value))
        if kind == 'command' and isinstance(value, str):
            return _one_line('command ' + value)
        if isinstance(value, str):
            return _one_line(f'{kind} {value}')
        return _one_line(f'{kind} {json.dumps(value, sort_keys=True, default=str)}')
    except (ProbeRefused, TypeError, ValueError):
        return _one_line('invalid ' + json.dumps(spec, sort_keys=True, default=repr))


def format_probe_result(spec: t.Any, result: t.Any, limit: int = 4000) -> str:
    """A compact text of what the probe found, at most ``limit`` characters.

    result: the task's raw result (``ExecutionReport.results``).  read: the decoded content
    (binary files by size only); stat: type, mode, owner, size, sha256; find: matched paths
    with mode and owner; getent: ``key:field:...`` rows; command: rc, stdout, stderr (a
    non-zero rc is information here: ``systemctl is-enabled`` says 1 for disabled).  A cut
    text ends with a ``[... cut ...]`` marker.  Never raises.
    """
    try:
        text = _format(spec, result)
    except Exception as ex:  # a probe's odd result must not stop the loop
        text = f'the probe result could not be read ({type(ex).__name__}): {_safe_json(result)}'
    return _cap(text, limit)


# ============================================================================ specs

def _kind(spec: t.Any) -> tuple[str, t.Any]:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise ProbeRefused(f'a probe is a mapping with exactly one of {", ".join(KINDS)}; got {_short(spec)}')
    kind, value = next(iter(spec.items()))
    if kind not in KINDS:
        raise ProbeRefused(f'unknown probe kind {kind!r}; use one of {", ".join(KINDS)}')
    return kind, value


def _normalise(spec: t.Any) -> tuple[str, t.Any]:
    """(kind, canonical value): a normalised path, find/getent argument dict, or command argv."""
    kind, value = _kind(spec)
    if kind == 'read':
        return kind, _path(value, 'read', content=True)
    if kind == 'stat':
        return kind, _path(value, 'stat')
    if kind == 'find':
        return kind, _find_args(value)
    if kind == 'getent':
        return kind, _getent_args(value)
    return kind, _command_argv(value)


def _key(kind: str, value: t.Any) -> str:
    if kind in ('read', 'stat'):
        return _one_line(f'{kind} {value}')
    if kind == 'find':
        return _one_line('find ' + ' '.join(f'{k}={json.dumps(value[k], sort_keys=True)}' for k in sorted(value)))
    if kind == 'getent':
        return _one_line(' '.join(['getent', value['database']] + ([value['key']] if 'key' in value else [])))
    return _one_line('command ' + shlex.join(value))


def _plain(value: t.Any, what: str, limit: int = 4096) -> str:
    """A literal string: no control characters, no Jinja delimiters, not too long."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ProbeRefused(f'{what} must be a string, got {type(value).__name__}')
    value = str(value)
    if _CONTROL_RE.search(value) or '\n' in value:
        raise ProbeRefused(f'{what} holds control characters or a newline')
    if any(m in value for m in _JINJA):
        raise ProbeRefused(f'{what} holds Jinja delimiters; probes take literal values')
    if len(value) > limit:
        raise ProbeRefused(f'{what} is longer than {limit} characters')
    return value


def _path(value: t.Any, what: str, content: bool = False) -> str:
    """An absolute path, normalised; ``content``: its content would enter the prompt."""
    path = _plain(value, f'the {what} path')
    if not path.startswith('/'):
        raise ProbeRefused(f'the {what} path {path!r} is not absolute; probes take absolute paths')
    path = '/' + posixpath.normpath(path).lstrip('/')
    if content:
        _readable(path, what)
    return path


def _readable(path: str, what: str) -> None:
    if any(fnmatch.fnmatchcase(path, pat) for pat in _ENDLESS):
        raise ProbeRefused(f'{what} {path}: reading it never ends, blocks or returns gigabytes')
    if any(fnmatch.fnmatchcase(path, pat) for pat in _SECRETS) and not path.endswith('.pub'):
        raise ProbeRefused(f'{what} {path}: its content is a secret and would enter a prompt; stat it, or grep it'
                           ' with -c or -l')


def _find_args(value: t.Any) -> dict:
    if not isinstance(value, dict):
        raise ProbeRefused('find takes a mapping: {"paths": [...], "patterns": ..., "contains": ..., "file_type": ...,'
                           ' "recurse": true|false}')
    unknown = sorted(str(k) for k in value if k not in _FIND_KEYS)
    if unknown:
        raise ProbeRefused(f'find takes only {", ".join(_FIND_KEYS)}; not {", ".join(unknown)}')
    paths = value.get('paths')
    paths = [paths] if isinstance(paths, str) else paths
    if not isinstance(paths, list) or not paths or len(paths) > 16:
        raise ProbeRefused('find needs "paths": one to 16 absolute paths')
    out: dict = {'paths': [_path(p, 'find') for p in paths]}
    if 'patterns' in value:
        patterns = value['patterns']
        patterns = [patterns] if isinstance(patterns, str) else patterns
        if not isinstance(patterns, list) or not patterns or len(patterns) > 32:
            raise ProbeRefused('find "patterns" is a glob or a list of up to 32 globs')
        out['patterns'] = [_plain(p, 'a find pattern', 256) for p in patterns]
    if 'contains' in value:
        contains = _plain(value['contains'], 'find "contains"', 1024)
        try:
            re.compile(contains)
        except re.error as ex:
            raise ProbeRefused(f'find "contains" is not a valid (Python) regular expression: {ex}') from None
        out['contains'] = contains
    if 'file_type' in value:
        if value['file_type'] not in _FILE_TYPES:
            raise ProbeRefused(f'find "file_type" is one of {", ".join(_FILE_TYPES)}')
        out['file_type'] = value['file_type']
    if 'recurse' in value:
        if not isinstance(value['recurse'], bool):
            raise ProbeRefused('find "recurse" is true or false')
        out['recurse'] = value['recurse']
    deep = out.get('recurse') or 'contains' in out
    for path in out['paths']:
        if deep and any(path == r if r == '/' else effects.within(path, r) for r in _NO_RECURSE_ROOTS):
            raise ProbeRefused(f'find from {path} with recurse or contains walks too much (or endless files); start'
                               ' lower')
    return out


def _getent_args(value: t.Any) -> dict:
    if not isinstance(value, dict) or 'database' not in value or set(value) - {'database', 'key'}:
        raise ProbeRefused('getent takes {"database": ..., "key": ...} (key optional)')
    database = value['database']
    if database not in _GETENT_DATABASES:
        allowed = ', '.join(sorted(_GETENT_DATABASES))
        raise ProbeRefused(f'getent database {database!r} is not allowed (allowed: {allowed});'
                           ' shadow and gshadow hold password hashes')
    out = {'database': database}
    if value.get('key') is not None:
        out['key'] = _plain(value['key'], 'the getent key', 256)
    return out


# ============================================================================ command allowlist

def _command_argv(value: t.Any) -> list:
    if isinstance(value, str):
        if _SHELL_CHARS_RE.search(value):
            raise ProbeRefused('probes run without a shell: no ; | & < > ` $( or newlines in a command string;'
                               ' give the command as an argv list (patterns with such characters go there too)')
        try:
            argv = shlex.split(value)
        except ValueError as ex:
            raise ProbeRefused(f'the command cannot be split: {ex}') from None
    elif isinstance(value, list):
        argv = value
    else:
        raise ProbeRefused('command takes an argv list or a string')
    if not argv or len(argv) > 64:
        raise ProbeRefused('command takes one to 64 arguments')
    argv = [_plain(a, 'a command argument') for a in argv]
    head = argv[0]
    if '/' in head and posixpath.dirname(head) not in _BIN_DIRS:
        raise ProbeRefused(f'{head}: commands are named, or taken from {", ".join(_BIN_DIRS)}')
    name = posixpath.basename(head)
    check = COMMANDS.get(name)
    if check is None:
        raise ProbeRefused(f'{name} is not a read-only probe command (allowed: {", ".join(sorted(COMMANDS))})')
    check(argv[1:])
    return argv


def _refuse(name: str, args: list, why: str) -> t.NoReturn:
    raise ProbeRefused(f'`{shlex.join([name] + list(args))}`: {why}')


def _abs_paths(name: str, args: list, ops: list, content: bool = False, need: int = 1) -> None:
    if len(ops) < need:
        _refuse(name, args, f'it needs {need} or more absolute paths')
    for op in ops:
        _path(op, name, content=content)


def _exact(*forms: tuple) -> t.Callable[[list], None]:
    def check(args: list) -> None:
        if tuple(args) not in forms:
            raise ProbeRefused(f'allowed forms: {"; ".join(" ".join(f) or "(no arguments)" for f in forms)}')
    return check


def _sshd(args: list) -> None:
    i, mode = 0, False
    while i < len(args):
        a = args[i]
        if a in ('-T', '-t'):
            mode = True
        elif a == '-C' and i + 1 < len(args) \
                and re.fullmatch(r'[\w.@:/-]+=[^,\s]*(,[\w.@:/-]+=[^,\s]*)*', args[i + 1]):
            i += 1
        elif a == '-f' and i + 1 < len(args):
            _path(args[i + 1], 'sshd -f')
            i += 1
        else:
            _refuse('sshd', args, f'{a!r} is not allowed; sshd runs only as sshd -T [-C key=value,...] [-f FILE]')
        i += 1
    if not mode:
        _refuse('sshd', args, 'sshd without -T (or -t) would start a daemon')


_SYSTEMCTL_VERBS = frozenset({'show', 'is-enabled', 'is-active', 'is-failed', 'cat', 'status'})


def _systemctl(args: list) -> None:
    verb, units, pager, i = None, [], False, 0
    while i < len(args):
        a = args[i]
        if a == '--no-pager':
            pager = True
        elif a in ('--value', '--all', '-a'):
            pass
        elif a in ('-p', '--property') and i + 1 < len(args):
            i += 1
        elif a.startswith(('--property=', '-p')) and len(a) > 2:
            pass
        elif a.startswith('-'):
            _refuse('systemctl', args, f'option {a} is not allowed')
        elif verb is None:
            verb = a
        elif re.fullmatch(r'[\w@.:\\-]+', a):
            units.append(a)
        else:
            _refuse('systemctl', args, f'{a!r} is not a unit name')
        i += 1
    if verb not in _SYSTEMCTL_VERBS:
        _refuse('systemctl', args, f'only {", ".join(sorted(_SYSTEMCTL_VERBS))}')
    if not units:
        _refuse('systemctl', args, 'name the unit(s)')
    if verb == 'status' and not pager:
        _refuse('systemctl', args, 'status needs --no-pager')


def _package_names(name: str, args: list, ops: list) -> None:
    for op in ops:
        if op.startswith('-') or not re.fullmatch(r'[\w.+:*?/\[\]~-]+', op):
            _refuse(name, args, f'{op!r} is not a package name or pattern')


def _dpkg(args: list) -> None:
    actions = {'-l', '-s', '-S', '-L', '--list', '--status', '--search', '--listfiles'}
    if not args or args[0] not in actions:
        _refuse('dpkg', args, f'only dpkg {" | ".join(sorted(actions))} ...')
    if args[0] not in ('-l', '--list') and len(args) < 2:
        _refuse('dpkg', args, 'name the package(s) or path(s)')
    _package_names('dpkg', args, args[1:])


def _options_and_operands(tool: str, args: list, flags, takes_value, value_prefixes: tuple = (),
                          refusal: str = 'option {} is not allowed') -> tuple:
    """(the named flags given, in order; the operands) of ``args``. An option that takes a value
    skips it (``-c FMT``, ``--format=FMT``); any other option is refused."""
    seen, ops, i = [], [], 0
    while i < len(args):
        a = args[i]
        if a in flags:
            seen.append(a)
        elif a in takes_value and i + 1 < len(args):
            i += 1
        elif value_prefixes and a.startswith(value_prefixes):
            pass
        elif a.startswith('-'):
            _refuse(tool, args, refusal.format(a))
        else:
            ops.append(a)
        i += 1
    return seen, ops


def _dpkg_query(args: list) -> None:
    actions = {'-W', '--show', '-l', '--list', '-s', '--status', '-S', '--search', '-L', '--listfiles'}
    seen, ops = _options_and_operands('dpkg-query', args, actions, ('-f', '--showformat'), ('--showformat=', '-f='))
    if len(seen) != 1:
        _refuse('dpkg-query', args, 'give exactly one of -W, -l, -s, -S, -L')
    _package_names('dpkg-query', args, ops)


def _rpm(args: list) -> None:
    if not args or args[0] not in ('-q', '-qa', '-qf', '-V'):
        _refuse('rpm', args, 'only rpm -q | -qa | -qf | -V ...')
    if args[0] != '-qa' and len(args) < 2:
        _refuse('rpm', args, 'name the package(s) or file(s)')
    _package_names('rpm', args, args[1:])


def _apt_cache(args: list) -> None:
    if not args or args[0] not in ('policy', 'show') or (args[0] == 'show' and len(args) < 2):
        _refuse('apt-cache', args, 'only apt-cache policy [PKG...] or apt-cache show PKG...')
    _package_names('apt-cache', args, args[1:])


def _getent(args: list) -> None:
    if not args or args[0] not in _GETENT_DATABASES:
        _refuse('getent', args, f'the database is one of {", ".join(sorted(_GETENT_DATABASES))}')
    for a in args[1:]:
        if a.startswith('-'):
            _refuse('getent', args, 'options are not allowed')


def _sysctl(args: list) -> None:
    if args == ['-a']:
        return
    keys = args[1:] if args[:1] == ['-n'] else args
    if not keys:
        _refuse('sysctl', args, 'name the key(s): sysctl [-n] KEY... or sysctl -a')
    for k in keys:
        if not re.fullmatch(r'[\w.*/-]+', k) or k.startswith('-'):
            _refuse('sysctl', args, f'{k!r} is not a key; sysctl probes never write (-w, -p, KEY=VALUE)')


def _find(args: list) -> None:
    paths, _execs, _delete = find_parts(args)
    _abs_paths('find', args, paths)
    for a in args:
        if a in effects.FIND_ACTIONS:
            _refuse('find', args, f'{a} acts on what it finds; probes only read')


_GREP_FLAGS = 'rRnilcvwxsHhEF'
_GREP_LONG = frozenset({'--recursive', '--dereference-recursive', '--line-number', '--ignore-case',
                        '--files-with-matches', '--count', '--invert-match', '--word-regexp', '--line-regexp',
                        '--no-messages', '--with-filename', '--no-filename', '--extended-regexp', '--fixed-strings'})
# --include/--exclude/--exclude-dir only narrow which files a recursive grep reads: allowed.
_GREP_LONG_VALUES = ('--include=', '--exclude=', '--exclude-dir=', '--regexp=')


def _grep(args: list) -> None:
    patterns, ops, flags, i, done = 0, [], set(), 0, False
    while i < len(args):
        a = args[i]
        if done or not a.startswith('-') or a == '-':
            ops.append(a)
        elif a == '--':
            done = True
        elif a.startswith('--'):
            if a in _GREP_LONG:
                flags.add({'--count': 'c', '--files-with-matches': 'l', '--recursive': 'r',
                           '--dereference-recursive': 'R'}.get(a, ''))
            elif a.startswith(_GREP_LONG_VALUES):
                patterns += a.startswith('--regexp=')
            else:
                _refuse('grep', args, f'option {a} is not allowed')
        else:
            for k, ch in enumerate(a[1:], start=1):
                if ch == 'e':
                    patterns += 1
                    if k == len(a) - 1:
                        i += 1
                    break
                if ch == 'f':
                    _refuse('grep', args, '-f reads patterns from a file; give them with -e')
                if ch not in _GREP_FLAGS:
                    _refuse('grep', args, f'-{ch} is not allowed (allowed: -{" -".join(_GREP_FLAGS)} -e PATTERN)')
                flags.add(ch)
        i += 1
    files = ops if patterns else ops[1:]
    if not patterns and not ops:
        _refuse('grep', args, 'give a pattern')
    quiet = bool(flags & {'c', 'l'})
    _abs_paths('grep', args, files, content=False)
    for f in files:
        norm = _path(f, 'grep')
        if not quiet:
            _readable(norm, 'grep')
        elif any(fnmatch.fnmatchcase(norm, pat) for pat in _ENDLESS):
            _readable(norm, 'grep')
        if flags & {'r', 'R'} and any(norm == r if r == '/' else effects.within(norm, r) for r in _NO_RECURSE_ROOTS):
            _refuse('grep', args, f'a recursive grep from {norm} reads too much (or endless files); start lower')


def _stat(args: list) -> None:
    _seen, ops = _options_and_operands('stat', args, ('-L', '--dereference', '-t', '--terse', '-f', '--file-system'),
                                       ('-c',), ('--format=', '--printf='))
    _abs_paths('stat', args, ops)


def _ls(args: list) -> None:
    opts = [a for a in args if a.startswith('-')]
    if not opts or any(not re.fullmatch(r'-[ladnZ]+', o) for o in opts) or not any('l' in o for o in opts):
        _refuse('ls', args, 'only ls -l, -la or -ld (with -n, -Z) and absolute paths')
    _abs_paths('ls', args, [a for a in args if not a.startswith('-')])


def _id(args: list) -> None:
    ops = [a for a in args if not a.startswith('-')]
    if any(not re.fullmatch(r'-[ugGnr]+', a) for a in args if a.startswith('-')) or len(ops) > 1 \
            or any(not re.fullmatch(r'[\w.$-]+', o) for o in ops):
        _refuse('id', args, 'only id [-u|-g|-G|-n|-r] [USER]')


def _ss(args: list) -> None:
    if len(args) != 1 or not re.fullmatch(r'-[ltnpu]+', args[0]) or 'l' not in args[0]:
        _refuse('ss', args, 'only listening sockets: ss -ltn or -ltnp (-u for UDP)')


_FINDMNT_FLAGS = frozenset({'-n', '--noheadings', '-l', '--list', '-r', '--raw', '-J', '--json', '-a', '--ascii',
                            '-s', '--fstab', '-m', '--mtab', '-k', '--kernel', '-f', '--first-only'})
_FINDMNT_VALUES = frozenset({'-o', '--output', '-t', '--types', '-O', '--options', '-T', '--target', '-M',
                             '--mountpoint', '-S', '--source'})


def _findmnt(args: list) -> None:
    _seen, ops = _options_and_operands('findmnt', args, _FINDMNT_FLAGS, _FINDMNT_VALUES,
                                       tuple(v + '=' for v in _FINDMNT_VALUES), 'option {} is not allowed (no --poll)')
    if len(ops) > 1:
        _refuse('findmnt', args, 'at most one mount point or device')


def _modprobe(args: list) -> None:
    opts = [a for a in args if a.startswith('-')]
    mods = [a for a in args if not a.startswith('-')]
    if any(o not in ('-n', '-v', '-nv', '-vn', '--dry-run', '--verbose') for o in opts) \
            or not any(o in ('-n', '-nv', '-vn', '--dry-run') for o in opts) \
            or len(mods) != 1 or not re.fullmatch(r'[\w-]+', mods[0]):
        _refuse('modprobe', args, 'only modprobe -n -v MODULE (a dry run)')


def _crontab(args: list) -> None:
    user = args[1] if args[:1] == ['-u'] and len(args) > 1 else args[2] if args[1:2] == ['-u'] and len(args) > 2 else ''
    if args in (['-l'], ['-u', user, '-l'], ['-l', '-u', user]) and (args == ['-l'] or re.fullmatch(r'[\w.-]+', user)):
        return
    _refuse('crontab', args, 'only crontab -l [-u USER]')


def _head_tail(name: str) -> t.Callable[[list], None]:
    number = r'\+?\d+' if name == 'tail' else r'\d+'

    def check(args: list) -> None:
        ops, count, i = [], False, 0
        while i < len(args):
            a = args[i]
            if a == '-n' and i + 1 < len(args) and re.fullmatch(number, args[i + 1]):
                count, i = True, i + 1
            elif re.fullmatch(r'-n' + number, a) or re.fullmatch(r'--lines=' + number, a):
                count = True
            elif a.startswith('-'):
                _refuse(name, args, f'only {name} -n N FILE...')
            else:
                ops.append(a)
            i += 1
        if not count:
            _refuse(name, args, f'give the number of lines: {name} -n N FILE')
        _abs_paths(name, args, ops, content=True)
    return check


def _cat(args: list) -> None:
    if any(a.startswith('-') for a in args):
        _refuse('cat', args, 'no options; prefer {"read": PATH}, which runs in check mode')
    _abs_paths('cat', args, args, content=True)


#: command name -> check(args) raising ProbeRefused; the read-only allowlist.
COMMANDS: dict = {
    'sshd': _sshd,
    'systemctl': _systemctl,
    'dpkg': _dpkg,
    'dpkg-query': _dpkg_query,
    'rpm': _rpm,
    'apt-cache': _apt_cache,
    'getent': _getent,
    'auditctl': _exact(('-l',), ('-s',)),
    'sysctl': _sysctl,
    'find': _find,
    'grep': _grep,
    'stat': _stat,
    'ls': _ls,
    'id': _id,
    'ss': _ss,
    'findmnt': _findmnt,
    'mount': _exact(()),
    'lsmod': _exact(()),
    'modprobe': _modprobe,
    'uname': _exact(('-r',), ('-a',)),
    'aa-status': _exact(()),
    'authselect': _exact(('current',)),
    'update-crypto-policies': _exact(('--show',)),
    'crontab': _crontab,
    'head': _head_tail('head'),
    'tail': _head_tail('tail'),
    'cat': _cat,
}


# ============================================================================ results

def _format(spec: t.Any, result: t.Any) -> str:
    try:
        kind, value = _kind(spec)
    except ProbeRefused:
        kind, value = '?', None
    if not isinstance(result, dict):
        return f'no result ({type(result).__name__})'
    if kind == 'command' and 'rc' in result:
        return _format_command(result)
    if result.get('unreachable'):
        return f'unreachable: {_text(result.get("msg"))}'
    if result.get('failed'):
        detail = [_text(result.get(k)) for k in ('msg', 'stderr', 'module_stderr') if result.get(k)]
        return 'failed: ' + (': '.join(dict.fromkeys(detail)) or 'no message')
    if result.get('skipped'):
        return f'skipped: {_text(result.get("skip_reason") or result.get("msg") or "")}'
    if kind == 'read':
        return _format_read(value, result)
    if kind == 'stat':
        return _format_stat(value, result)
    if kind == 'find':
        return _format_find(result)
    if kind == 'getent':
        return _format_getent(value, result)
    if kind == 'command':
        return _format_command(result)
    return _safe_json(result)


def _format_read(path: t.Any, result: dict) -> str:
    content = result.get('content')
    if not isinstance(content, str):
        return f'{path}: no content in the result'
    if result.get('encoding', 'base64') == 'base64':
        try:
            data = base64.b64decode(content, validate=False)
        except (binascii.Error, ValueError):
            return f'{path}: content is not valid base64'
    else:
        data = content.encode('utf-8', 'replace')
    if b'\x00' in data[:8192]:
        return f'{path}: binary file, {len(data)} bytes'
    return f'{path} ({len(data)} bytes):\n' + data.decode('utf-8', 'replace')


def _format_stat(path: t.Any, result: dict) -> str:
    st = result.get('stat')
    if not isinstance(st, dict):
        return f'{path}: no stat in the result'
    if not st.get('exists'):
        return f'{path}: does not exist'
    kinds = [('islnk', f'symlink to {st.get("lnk_source") or st.get("lnk_target")}'), ('isdir', 'directory'),
             ('isreg', 'regular file'), ('ischr', 'character device'), ('isblk', 'block device'),
             ('isfifo', 'fifo'), ('issock', 'socket')]
    kind = next((label for key, label in kinds if st.get(key)), 'file')
    parts = [f'{path}: {kind}', f'mode {st.get("mode")}',
             f'owner {st.get("pw_name", "?")}:{st.get("gr_name", "?")} (uid {st.get("uid")}, gid {st.get("gid")})']
    if 'size' in st:
        parts.append(f'{st["size"]} bytes')
    if st.get('checksum'):
        parts.append(f'sha256 {st["checksum"]}')
    return ', '.join(parts)


def _format_find(result: dict) -> str:
    files = result.get('files')
    files = [f for f in files if isinstance(f, dict)] if isinstance(files, list) else []
    if not files:
        return f'no match (examined {result.get("examined", "?")})'
    rows = sorted(f'{f.get("path")} {f.get("mode", "?")} {f.get("pw_name", f.get("uid", "?"))}:'
                  f'{f.get("gr_name", f.get("gid", "?"))}' for f in files)
    return f'{len(rows)} matched (path mode owner:group):\n' + '\n'.join(rows)


def _format_getent(value: t.Any, result: dict) -> str:
    facts = result.get('ansible_facts')
    facts = facts if isinstance(facts, dict) else {}
    database = value.get('database') if isinstance(value, dict) else None
    rows = facts.get(f'getent_{database}')
    if rows is None:
        rows = next((v for k, v in facts.items() if str(k).startswith('getent_')), None)
    if not isinstance(rows, dict) or not rows:
        return 'no entries'
    lines = []
    for key in sorted(rows, key=str):
        entry = rows[key]
        if entry is None:
            lines.append(f'{key}: not found')
        elif isinstance(entry, list) and entry and all(isinstance(e, list) for e in entry):
            lines += [':'.join([str(key)] + [_text(x) for x in e]) for e in entry]
        elif isinstance(entry, list):
            lines.append(':'.join([str(key)] + [_text(x) for x in entry]))
        else:
            lines.append(f'{key}:{_text(entry)}')
    return '\n'.join(lines)


def _format_command(result: dict) -> str:
    out = [f'rc={result.get("rc")}']
    for key in ('stdout', 'stderr'):
        text = _text(result.get(key) or '').rstrip('\n')
        if text:
            out.append(f'{key}:\n{text}')
    if len(out) == 1 and result.get('msg'):
        out.append(f'msg: {_text(result["msg"])}')
    return '\n'.join(out)


def _text(value: t.Any) -> str:
    return value if isinstance(value, str) else '' if value is None else str(value)


def _safe_json(value: t.Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, default=repr)[:2000]
    except Exception:  # circular or hostile objects: say what it was
        return f'<{type(value).__name__}>'


def _cap(text: str, limit: t.Any) -> str:
    """At most ``limit`` characters; a cut text ends with a marker saying how much was shown."""
    try:
        limit = max(0, int(limit))
    except (TypeError, ValueError):
        limit = 4000
    if len(text) <= limit:
        return text
    marker = f'\n[... cut: the first {limit} of {len(text)} characters shown]'
    keep = max(0, limit - len(marker))
    marker = f'\n[... cut: the first {keep} of {len(text)} characters shown]'
    return (text[:keep] + marker)[:limit]


def _one_line(text: str, limit: int = 300) -> str:
    text = ' '.join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _short(value: t.Any) -> str:
    return _one_line(_safe_json(value), 120)
