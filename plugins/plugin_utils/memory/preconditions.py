"""What a proven fix needs on the host that it does not create itself (issue 19 item 4).

Seen on the lab: two AIDE fixes proven on one host were replayed on a fresh one and failed
("package aide is installed: false", "/etc/aide/aide.conf does not exist"): on the first host
they had passed only because an earlier attempt had installed aide. A positive lesson now
carries its ``preconditions``, read from its tasks: the files a task edits but would not
create (``lineinfile``/``blockinfile`` without ``create``, ``replace``, ``file`` with ``state:
file``), the units it manages, the commands its ``command``/``shell`` tasks start, less what
an earlier task of the same list installs or creates. Before a replay one read-only shell
command on the host (:func:`check_command`) says which are missing; a replay with a missing
precondition is not attempted blind (``session.MemorySession.decide``).

Each precondition is ``{"kind": "file" | "command" | "service", "name": ...}``.
"""

from __future__ import annotations

import shlex
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import lessons as L

#: modules that edit a file in place and fail (or do nothing) when it is missing, unless ``create``.
_EDITS = {"ansible.builtin.lineinfile": True, "ansible.builtin.blockinfile": True, "ansible.builtin.replace": False}
_SERVICES = frozenset({"ansible.builtin.service", "ansible.builtin.systemd", "ansible.builtin.systemd_service"})
_COMMANDS = frozenset({"ansible.builtin.command", "ansible.builtin.shell"})
_PACKAGES = frozenset({"ansible.builtin.apt", "ansible.builtin.package", "ansible.builtin.dnf", "ansible.builtin.yum"})
_CREATES = frozenset({"ansible.builtin.copy", "ansible.builtin.template", "ansible.builtin.get_url"})
#: shell words that start no program of the fix's own.
_SHELL_WORDS = frozenset({"set", "cd", "test", "[", "echo", "printf", "true", "false", "if", "for", "while", "export",
                          "{", "("})
#: words before the program of a simple command.
_PREFIX_WORDS = frozenset({"sudo", "env", "exec", "!", "then", "do", "else"})
MAX_PRECONDITIONS = 12


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


def _program(args: dict) -> str | None:
    """The program a command or shell task starts first (None for a shell builtin only)."""
    argv = args.get("argv")
    words = [str(w) for w in argv] if isinstance(argv, list) else _words(str(args.get("cmd") or args.get("_raw_params") or ""))
    start = True  # at the start of a simple command
    for word in words:
        if word in (";", "&&", "||", "|"):
            start = True
            continue
        if start and (word in _PREFIX_WORDS or word.startswith("-") or "=" in word.split("/")[0]):
            continue
        if start:
            if word.rstrip(";") not in _SHELL_WORDS:
                return word.rstrip(";")
            start = False  # a builtin: its arguments up to the next separator are no program
        if word.endswith(";"):
            start = True
    return None


def of_tasks(tasks: t.Any) -> list[dict]:
    """The preconditions of a task list (module docstring), in task order, deduplicated, at
    most :data:`MAX_PRECONDITIONS`."""
    out: list[dict] = []
    provided: set[tuple[str, str]] = set()
    installs = False

    def need(kind: str, name: str) -> None:
        item = {"kind": kind, "name": L.clean_text(name, 200)}
        if item["name"] and (kind, item["name"]) not in provided and item not in out:
            out.append(item)

    for fqcn, args in L.iter_tasks(tasks):
        path = str(args.get("path") or args.get("dest") or "")
        if fqcn in _PACKAGES and str(args.get("state") or "present") in ("present", "installed", "latest"):
            installs = True  # what a package brings is unknown here: later needs are its own
        elif fqcn in _CREATES and path:
            provided.add(("file", path))
        elif fqcn == "ansible.builtin.file" and path:
            state = str(args.get("state") or "file")
            if state == "file" and not installs:
                need("file", path)
            else:
                provided.add(("file", path))
        elif fqcn in _EDITS and path:
            if _EDITS[fqcn] and args.get("create") in (True, "true", "yes", "True"):
                provided.add(("file", path))
            elif not installs:
                need("file", path)
        elif fqcn in _SERVICES and args.get("name") and not installs:
            need("service", str(args["name"]))
        elif fqcn in _COMMANDS and not installs:
            program = _program(args)
            if program:
                need("file" if program.startswith("/") else "command", program)
    return out[:MAX_PRECONDITIONS]


def check_command(preconditions: t.Sequence[t.Mapping]) -> str:
    """One read-only POSIX shell command: a line ``missing <kind> <name>`` per precondition
    that is not met (a file that does not exist, a command not on PATH, a unit systemd does
    not know)."""
    parts = []
    for item in preconditions:
        kind, name = str(item.get("kind")), str(item.get("name"))
        q = shlex.quote(name)
        test = {"file": "test -e %s" % q, "command": "command -v %s >/dev/null 2>&1" % q,
                "service": "systemctl cat %s >/dev/null 2>&1" % q}.get(kind)
        if test is not None:
            parts.append("%s || echo missing %s %s" % (test, kind, q))
    return "; ".join(parts) + "; true" if parts else "true"


def parse_missing(stdout: str, preconditions: t.Sequence[t.Mapping]) -> list[dict]:
    """The preconditions :func:`check_command`'s output names as missing, in their order."""
    named = set()
    for line in (stdout or "").splitlines():
        words = line.split(" ", 2)
        if len(words) == 3 and words[0] == "missing":
            named.add((words[1], words[2].strip()))
    return [dict(item) for item in preconditions if (item.get("kind"), item.get("name")) in named]
