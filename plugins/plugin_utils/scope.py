"""Scope warnings (issue 17 item 7): a fix that passes but reaches past what its check reads.

Two cases, both from what the attempt changed (the executor's ``changes``: file entries with
their task's unified diff) and from what the host's configuration says after the attempt
(one read-only ``grep`` over the files and drop-in directories of the services the attempt
wrote, :func:`read_command`):

- the fix added remote endpoints (time servers, log hosts, package repositories, DNS
  servers) to a service whose configuration already named endpoints of that kind of its own
  (the main file or a drop-in file): the rule keeps its result, the warning names what was
  added and where the host's own endpoints are;
- the fix wrote a service's main file while the host configures that service in a drop-in
  file as well (a setting there may add to or override the fix's).

The host's own endpoints are those the configuration holds after the attempt less the lines
the fix added, plus the lines the fix removed (what was there before the fix). Everything
here but :func:`read_command`'s caller is pure and pinned by tests/unit/plugins/plugin_utils/test_scope.py.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
import typing as t


@dataclasses.dataclass(frozen=True)
class Service:
    """One configurable service: ``kind`` of endpoint it names (plain words, plural),
    ``main`` files, ``dropins`` {directory: file suffixes read there} and ``find``: the
    endpoints one configuration line names."""

    name: str
    kind: str
    main: tuple
    dropins: dict
    find: t.Callable[[str], list]


def _first_word_after(keywords: tuple) -> t.Callable[[str], list]:
    pattern = re.compile(r"^\s*(?:%s)\s+(\S+)" % "|".join(keywords))

    def find(line: str) -> list:
        found = pattern.match(line)
        return [found.group(1)] if found else []
    return find


def _ini_list(keys: tuple) -> t.Callable[[str], list]:
    pattern = re.compile(r"^\s*(?:%s)\s*=\s*(.*)$" % "|".join(keys))

    def find(line: str) -> list:
        found = pattern.match(line)
        return found.group(1).split() if found else []
    return find


_RSYSLOG_LEGACY = re.compile(r"^[^#]*?\s@@?(?:\([^)]*\))?([\w.\-]+|\[[0-9a-fA-F:.]+\])")
_RSYSLOG_TARGET = re.compile(r"""\btarget\s*=\s*["']([^"']+)["']""")


def _rsyslog(line: str) -> list:
    if line.lstrip().startswith("#"):
        return []
    found = _RSYSLOG_LEGACY.match(" " + line)
    if found:
        return [found.group(1)]
    return _RSYSLOG_TARGET.findall(line) if "action(" in line or "target" in line else []


_DEB = re.compile(r"^\s*deb(?:-src)?\s+(?:\[[^\]]*\]\s+)?(\S+)")
_URIS = re.compile(r"^\s*URIs\s*:\s*(.*)$")


def _apt(line: str) -> list:
    found = _DEB.match(line)
    if found:
        return [found.group(1)]
    found = _URIS.match(line)
    return found.group(1).split() if found else []


SERVICES: tuple = (
    Service("chrony", "time servers", ("/etc/chrony/chrony.conf", "/etc/chrony.conf"),
            {"/etc/chrony/conf.d": (".conf",), "/etc/chrony/sources.d": (".sources",), "/etc/chrony/chrony.d": (".conf",),
             "/etc/chrony.d": (".conf",)},
            _first_word_after(("server", "pool", "peer"))),
    Service("systemd-timesyncd", "time servers", ("/etc/systemd/timesyncd.conf",),
            {"/etc/systemd/timesyncd.conf.d": (".conf",)}, _ini_list(("NTP", "FallbackNTP"))),
    Service("ntp", "time servers", ("/etc/ntp.conf", "/etc/ntpsec/ntp.conf"), {"/etc/ntpsec/ntp.d": (".conf",)},
            _first_word_after(("server", "pool", "peer"))),
    Service("rsyslog", "log hosts", ("/etc/rsyslog.conf",), {"/etc/rsyslog.d": (".conf",)}, _rsyslog),
    Service("apt", "package repositories", ("/etc/apt/sources.list",),
            {"/etc/apt/sources.list.d": (".list", ".sources")}, _apt),
    Service("resolver", "DNS servers", ("/etc/resolv.conf",), {}, _first_word_after(("nameserver",))),
    Service("systemd-resolved", "DNS servers", ("/etc/systemd/resolved.conf",),
            {"/etc/systemd/resolved.conf.d": (".conf",)}, _ini_list(("DNS", "FallbackDNS"))),
)


def service_of(path: str) -> tuple[Service | None, bool]:
    """(the service whose configuration ``path`` is, True when it is one of its drop-in
    files) or (None, False). A drop-in counts only with its directory's suffix (not a README)."""
    path = posixpath.normpath(path)
    for service in SERVICES:
        if path in service.main:
            return service, False
        for directory, suffixes in service.dropins.items():
            if posixpath.dirname(path) == directory and path.endswith(tuple(suffixes)):
                return service, True
    return None, False


def _setting(line: str) -> bool:
    text = line.strip()
    return bool(text) and not text.startswith(("#", ";"))


def diff_lines(diff: str, default_path: str) -> dict:
    """{path: {"added": [lines], "removed": [lines]}} of a unified diff (the executor's text;
    ``+++ after: PATH`` names the file, else ``default_path``). Comment lines are left out."""
    out: dict = {}
    path = default_path
    for line in (diff or "").splitlines():
        if line.startswith("+++ "):
            header = line[4:].strip()
            path = header.split(":", 1)[1].strip() if header.startswith("after:") else default_path
            path = re.sub(r"\s+\([^()]*\)$", "", path)  # lineinfile's "PATH (content)", "(file attributes)"
            continue
        if line.startswith("--- ") or line.startswith("@@"):
            continue
        if line[:1] in "+-" and _setting(line[1:]):
            side = out.setdefault(path, {"added": [], "removed": []})
            side["added" if line[0] == "+" else "removed"].append(line[1:])
    return out


def written(changes: t.Sequence[dict]) -> dict:
    """{path: {"added", "removed"}} of the files an attempt's changes wrote that a service of
    :data:`SERVICES` reads (lines from each entry's diff; an entry without one: no lines)."""
    out: dict = {}
    for change in changes or ():
        if change.get("kind") != "file":
            continue
        target = str(change.get("target") or "")
        found = diff_lines(str(change.get("diff") or ""), target) if change.get("diff") else {}
        if target.startswith("/") and target not in found:
            found[target] = {"added": [], "removed": []}
        for path, lines in found.items():
            if service_of(path)[0] is None:
                continue
            into = out.setdefault(posixpath.normpath(path), {"added": [], "removed": []})
            for side in ("added", "removed"):
                into[side].extend(x for x in lines[side] if x not in into[side])
    return out


def read_command(paths: t.Iterable[str]) -> str | None:
    """The one read-only shell command that prints every setting line (``PATH:LINE``) of the
    services the written ``paths`` belong to (main files and drop-in directories); None when
    no written path is a service's."""
    services = [s for s in SERVICES if any(service_of(p)[0] is s for p in paths)]
    if not services:
        return None
    where = sorted({p for s in services for p in list(s.main) + list(s.dropins)})
    return "grep -RHsE '^[[:space:]]*[^#;[:space:]]' -- %s; true" % " ".join(shlex.quote(p) for p in where)


def parse_read(stdout: str) -> dict:
    """{path: [setting lines]} from :func:`read_command`'s output."""
    out: dict = {}
    for line in (stdout or "").splitlines():
        path, sep, text = line.partition(":")
        if sep and path.startswith("/"):
            out.setdefault(posixpath.normpath(path), []).append(text)
    return out


def _own(service: Service, host: dict, wrote: dict) -> dict:
    """{path: [endpoints]} the host's own configuration of ``service`` named before the fix."""
    own: dict = {}
    paths = set(host) | set(wrote)
    for path in sorted(paths):
        if service_of(path)[0] is not service:
            continue
        lines = list(host.get(path) or [])
        change = wrote.get(path) or {}
        for added in change.get("added") or ():
            if added in lines:
                lines.remove(added)
        lines.extend(change.get("removed") or ())
        endpoints = [e for line in lines for e in service.find(line)]
        if endpoints:
            own[path] = list(dict.fromkeys(endpoints))
    return own


def _names(values: t.Iterable[str], limit: int = 6) -> str:
    values = list(values)
    text = ", ".join(values[:limit])
    return text + (" and %d more" % (len(values) - limit) if len(values) > limit else "")


def warnings_for(wrote: dict, host: dict) -> list[str]:
    """The scope warnings of an attempt that wrote ``wrote`` ({path: {added, removed}},
    :func:`written`) on a host whose configuration reads ``host`` ({path: [setting lines]}
    after the attempt, :func:`parse_read`). One warning per service at most: added
    endpoints where the host had its own first, else a main file written while a drop-in
    file configures the same service."""
    out: list[str] = []
    for service in SERVICES:
        mine = {p: c for p, c in wrote.items() if service_of(p)[0] is service}
        if not mine:
            continue
        added = {p: [e for line in c["added"] for e in service.find(line)] for p, c in mine.items()}
        added = {p: list(dict.fromkeys(e)) for p, e in added.items() if e}
        own = _own(service, host, wrote)
        new = {p: [e for e in ends if not any(e in o for o in own.values())] for p, ends in added.items()}
        new = {p: e for p, e in new.items() if e}
        if new and own:
            out.append("the fix added %s %s to %s, but the host already names its own %s in %s: check which "
                       "the host should use" % (
                           service.kind, "; ".join("%s (in %s)" % (_names(e), p) if len(new) > 1 else _names(e)
                                                   for p, e in sorted(new.items())),
                           ", ".join(sorted(new)), service.kind,
                           "; ".join("%s (%s)" % (p, _names(e)) for p, e in sorted(own.items()))))
            continue
        mains = sorted(p for p in mine if not service_of(p)[1])
        dropins = sorted(p for p, lines in host.items() if service_of(p) == (service, True) and p not in mine
                         and any(_setting(x) for x in lines))
        if mains and dropins:
            out.append("the fix wrote %s, but the host configures %s in %s as well: a setting there may add to or "
                       "override the fix's" % (", ".join(mains), service.name, _names(dropins)))
    return out
