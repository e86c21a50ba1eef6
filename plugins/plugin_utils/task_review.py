"""A review of model-written tasks before they run (issue 18 item 8): tasks that would make a
check pass by disabling what the rule protects, not by configuring it.

The gate (:mod:`.task_gate`) asks "may this task run on the host at all"; this review asks
"would it fix the rule, or only fool the check". The shortest way to make a failing rule pass
is often to make the thing it checks inert: a drop-in whose ``ExecStart`` does nothing, a
masked unit the check does not read, a file the check parses emptied, a line that matches
the check's pattern only as a comment, permissions opened, a package held instead of removed.
OpenSCAP would then say pass, and the report would say remediated, for a host that is less
safe than before. Each finding names its task and says why in words the Worker gets back
(the attempt is refused and its next call sees the reason in the history).

Deterministic patterns, on the task's module and arguments as Ansible's own parser reads
them (:func:`.task_gate.split_task`); a command line is matched as text. Pure: nothing runs.
"""

from __future__ import annotations

import dataclasses
import re
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import ledger, task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy.routing import resolve_module

INERT_UNIT = "inert_unit"          # a unit or drop-in whose ExecStart does nothing
MASKS = "masks_unit"               # masking a unit the rule does not ask to disable
EMPTIES = "empties_file"           # a file written empty
COMMENT_ONLY = "comment_only"      # a line or block that is only comments
OPENS_MODE = "opens_permissions"   # group or world write, or a set-id bit, granted
HOLDS_PACKAGE = "holds_package"    # a package held (apt-mark, dpkg selections, versionlock)
CODES = frozenset({INERT_UNIT, MASKS, EMPTIES, COMMENT_ONLY, OPENS_MODE, HOLDS_PACKAGE})

#: rules whose purpose is to stop a service: masking it is their fix, not a trick.
_STOPS_A_SERVICE = re.compile(r"(_disabled|_masked|_removed)$")
_SYSTEMD_DIRS = ("/etc/systemd/", "/run/systemd/", "/usr/lib/systemd/", "/lib/systemd/")
_NOOP = r"(?:/usr)?/bin/(?:true|false|sleep|echo)\b|true\b|sleep\b|:\s*$"
_EXEC_NOOP = re.compile(r"^\s*ExecStart\s*=\s*[-@:+!]*\s*(?:%s)" % _NOOP, re.M)
#: a condition that always fails: systemd skips the unit (one that always passes is harmless).
_CONDITION_FALSE = re.compile(r"^\s*ExecCondition\s*=\s*[-@:+!]*\s*(?:(?:/usr)?/bin/false\b|false\b)", re.M)
_EXEC_ANY = re.compile(r"^\s*ExecStart\s*=\s*(\S.*)$", re.M)
_WRITE_MODULES = ("ansible.builtin.copy", "ansible.builtin.lineinfile", "ansible.builtin.blockinfile",
                  "ansible.builtin.file", "ansible.builtin.replace", "community.general.ini_file")
_COMMANDS = ("ansible.builtin.command", "ansible.builtin.shell")
_CMD_MASK = re.compile(r"\bsystemctl\b[^;&|]*\bmask\b")
_CMD_HOLD = re.compile(r"\bapt-mark\s+hold\b|\bdpkg\s+--set-selections\b|\b(?:dnf|yum)\s+versionlock\b|\bhold\b.*\|\s*dpkg")
_CMD_EMPTY = re.compile(r"\btruncate\s+(?:-s\s*0|--size[= ]0)\b|\bcp\s+/dev/null\s+\S|^\s*:?\s*>\s*/\S+|\bcat\s+/dev/null\s*>")
_CMD_CHMOD = re.compile(r"\bchmod\s+(?:-\S+\s+)*(?:[0-7]?[0-7][0-7][2367]\b|[0-7]?[0-7][2367][0-7]\b|"
                        r"[ugoa]*[+=][rwxXst]*w|[0-7]?[4-7][0-7]{3}\b|[ugoa]*\+[rwx]*s)")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One task that games the check: ``code`` (one of :data:`CODES`), ``task`` (its label)
    and ``why`` (words for the Worker and the report)."""

    code: str
    task: str
    why: str

    @property
    def message(self) -> str:
        return "%s: %s" % (self.task, self.why)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def review(rule_short_id: str, tasks: t.Any, patterns: t.Sequence[str] = ()) -> list[Finding]:
    """The findings for a model-written task list for rule ``rule_short_id`` ([] when none).
    ``patterns``: the regular expressions the rule's OVAL objects match lines with
    (:func:`check_patterns`): a comment the check would match is a finding, a comment alone
    (a marker, a note) is not."""
    found: list[Finding] = []
    for label, fqcn, args in _tasks(tasks if isinstance(tasks, list) else [], "task"):
        found.extend(Finding(code, label, why) for code, why in task_findings(rule_short_id, fqcn, args, patterns))
    return found


def check_patterns(evidence: t.Any) -> list[str]:
    """The ``pattern`` of each OVAL object in a rule's evidence (oscap_eval's ``evidence``
    entry), in order, once each."""
    found: list[str] = []
    for test in (evidence or {}).get("tests") or [] if isinstance(evidence, dict) else []:
        fields = ((test or {}).get("object") or {}).get("fields") or {} if isinstance(test, dict) else {}
        pattern = fields.get("pattern") if isinstance(fields, dict) else None
        if isinstance(pattern, str) and pattern and pattern not in found:
            found.append(pattern)
    return found


def task_findings(rule_short_id: str, fqcn: str, args: dict, patterns: t.Sequence[str] = ()) -> list[tuple[str, str]]:
    """(code, why) for one task: module ``fqcn`` with its parsed ``args``."""
    out: list[tuple[str, str]] = []
    path = str(args.get("path") or args.get("dest") or args.get("name") or "")
    text = _written_text(fqcn, args)
    if text is not None and path.startswith(_SYSTEMD_DIRS) and _inert(text):
        out.append((INERT_UNIT, "makes the unit do nothing (%s): the check reads the unit, the service no longer "
                                "runs; configure the service itself" % path))
    if fqcn == "community.general.ini_file" and str(args.get("option")) in ("ExecStart", "ExecCondition") \
            and _inert("%s=%s" % (args.get("option"), args.get("value") or "")):
        out.append((INERT_UNIT, "sets %s=%s in %s: the unit would do nothing" % (args.get("option"), args.get("value"), path)))
    if fqcn in ledger.SERVICE_MODULES and _true(args.get("masked")) and not _STOPS_A_SERVICE.search(rule_short_id):
        out.append((MASKS, "masks %s: the rule does not ask for it to be disabled, and a masked unit can never run"
                           % (args.get("name") or "a unit")))
    if fqcn == "ansible.builtin.file" and str(args.get("src") or "") == "/dev/null" and path.startswith(_SYSTEMD_DIRS) \
            and not _STOPS_A_SERVICE.search(rule_short_id):
        out.append((MASKS, "links %s to /dev/null (masks it): the rule does not ask for it to be disabled" % path))
    if fqcn == "ansible.builtin.copy" and "content" in args and not str(args.get("content") or "").strip():
        out.append((EMPTIES, "writes %s empty: a check that parses it finds nothing to fail on, and the setting is "
                             "gone; write the setting the rule asks for" % path))
    if fqcn in ("ansible.builtin.lineinfile", "ansible.builtin.blockinfile") and str(args.get("state", "present")) == "present":
        line = str(args.get("line" if fqcn == "ansible.builtin.lineinfile" else "block") or "")
        matched = _matched_by(line, patterns) if _only_comments(line) else None
        if matched:
            out.append((COMMENT_ONLY, "writes only a comment to %s (%r), which the check's pattern %r matches: it "
                                      "changes nothing the service reads" % (path, line.strip()[:80], matched[:80])))
    if fqcn in _WRITE_MODULES and _opens(args.get("mode")):
        out.append((OPENS_MODE, "mode %s grants group or world write or a set-id bit on %s: never what a rule asks"
                                % (args.get("mode"), path)))
    if fqcn == "ansible.builtin.dpkg_selections" and str(args.get("selection")) == "hold":
        out.append((HOLDS_PACKAGE, "holds the package %s: a held package stays installed; remove it or configure it"
                                   % args.get("name")))
    if fqcn in _COMMANDS:
        out.extend(_command_findings(rule_short_id, _command_text(args)))
    return out


def _command_findings(rule_short_id: str, command: str) -> list[tuple[str, str]]:
    out = []
    if _CMD_MASK.search(command) and not _STOPS_A_SERVICE.search(rule_short_id):
        out.append((MASKS, "`%s` masks a unit the rule does not ask to disable" % command[:120]))
    if _CMD_HOLD.search(command):
        out.append((HOLDS_PACKAGE, "`%s` holds a package instead of removing or configuring it" % command[:120]))
    if _CMD_EMPTY.search(command):
        out.append((EMPTIES, "`%s` empties a file: write the setting the rule asks for instead" % command[:120]))
    if _CMD_CHMOD.search(command):
        out.append((OPENS_MODE, "`%s` grants group or world write or a set-id bit" % command[:120]))
    return out


def _tasks(tasks: list, prefix: str) -> t.Iterator[tuple[str, str, dict]]:
    for index, ds in enumerate(tasks, 1):
        if not isinstance(ds, dict):
            continue
        label = "%s %d%s" % (prefix, index, " %r" % ds["name"] if isinstance(ds.get("name"), str) else "")
        if any(k in ds for k in ("block", "rescue", "always")):
            for key in ("block", "rescue", "always"):
                if isinstance(ds.get(key), list):
                    yield from _tasks(ds[key], "%s %s" % (label, key))
            continue
        module, args, problem = task_gate.split_task(ds)
        ref = resolve_module(module) if module and not problem else None
        if ref is not None and isinstance(args, dict):
            yield label, ref.fqcn, args


def _written_text(fqcn: str, args: dict) -> str | None:
    if fqcn == "ansible.builtin.copy":
        return str(args.get("content")) if "content" in args else None
    if fqcn == "ansible.builtin.lineinfile":
        return str(args.get("line") or "")
    if fqcn == "ansible.builtin.blockinfile":
        return str(args.get("block") or "")
    return None


def _inert(unit_text: str) -> bool:
    """The text makes ExecStart a no-op: a no-op command, or ExecStart reset with nothing after."""
    if _EXEC_NOOP.search(unit_text) or _CONDITION_FALSE.search(unit_text):
        return True
    starts = [m.group(1).strip() for m in _EXEC_ANY.finditer(unit_text)]
    return bool(re.search(r"^\s*ExecStart\s*=\s*$", unit_text, re.M)) and not starts


def _only_comments(text: str) -> bool:
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return bool(lines) and all(x.startswith(("#", ";")) for x in lines)


def _matched_by(text: str, patterns: t.Sequence[str]) -> str | None:
    """The first pattern that matches a line of ``text`` (OVAL's are Perl-like; one Python's
    ``re`` cannot compile is skipped)."""
    for pattern in patterns:
        try:
            if any(re.search(pattern, line) for line in text.splitlines()):
                return pattern
        except re.error:
            continue
    return None


def _opens(mode: t.Any) -> bool:
    """An octal mode with group or world write or a set-id bit; a symbolic one (``u=rw,go=r``)
    with a clause that adds write for group, others or all, or adds ``s``."""
    if mode is None:
        return False
    text = str(mode).strip()
    if re.fullmatch(r"0?o?[0-7]{3,4}", text):
        value = int(text.lstrip("0o") or "0", 8)
        return bool(value & 0o022) or bool(value & 0o6000)
    for clause in text.split(","):
        match = re.fullmatch(r"([ugoa]*)([+=])([rwxXst]*)", clause.strip())
        if match is None:
            continue
        who, perms = match.group(1) or "a", match.group(3)
        if ("w" in perms and set(who) & set("goa")) or "s" in perms:
            return True
    return False


def _true(value: t.Any) -> bool:
    return str(value).lower() in ("true", "yes", "1", "on")


def _command_text(args: dict) -> str:
    if isinstance(args.get("argv"), list):
        return " ".join(str(a) for a in args["argv"])
    return str(args.get("_raw_params") or args.get("cmd") or "")
