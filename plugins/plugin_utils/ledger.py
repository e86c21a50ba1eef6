"""The change ledger (issue 17 item 1): every change an attempt made on the host, and what
became of it once the attempt was judged.

Two pure steps, so that both can be pinned by tests:

- :func:`task_changes`: what one task execution (module FQCN, its templated arguments, a
  result that says ``changed``) changed, as ``{kind, target, change}`` entries; the executor
  calls it for every changed execution (loop items one by one) and keeps the entries in its
  report's ``changes`` (with the task's name, module and, for files, its diff).
- :func:`entries_for`: the host report's ``ledger`` entries of one attempt, ``{rule, attempt,
  kind, target, change, state, verified}``, from those changes, whether the attempt stands
  (``kept``), its restore's result (files, packages, services) and the paths its checkpoint
  covered. ``state``: ``kept`` (the attempt passed or waits for a reboot: its change stays),
  ``undone`` (rolled back; ``verified``: the restore of that change was verified) or
  ``left`` (still on the host and not wanted: no restore undid it).
"""

from __future__ import annotations

import posixpath
import typing as t

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import checkpoint as C
from ansible_collections.scapforge.remediation.plugins.plugin_utils import safety

KINDS = ("file", "package", "service", "cron", "user", "group")
KEPT, UNDONE, LEFT = "kept", "undone", "left"
STATES = (KEPT, UNDONE, LEFT)
#: the change of a package the restore removed that no task named (a dependency).
DEPENDENCY = "installed (with the attempt's packages)"

PACKAGE_MODULES = frozenset((
    "ansible.builtin.package", "ansible.builtin.apt", "ansible.builtin.dnf", "ansible.builtin.dnf5",
    "ansible.builtin.yum", "community.general.zypper", "community.general.apk",
))
SERVICE_MODULES = frozenset((
    "ansible.builtin.service", "ansible.builtin.systemd", "ansible.builtin.systemd_service",
    "ansible.builtin.sysvinit",
))
#: where crontab(1) keeps a user's crontab: Debian's spool, then the Red Hat family's.
CRONTAB_DIRS = ("/var/spool/cron/crontabs", "/var/spool/cron")
ACCOUNT_FILES = ("/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow")
#: a file entry's diff is kept up to this many characters (the attempt log has the whole diff).
DIFF_LIMIT = 4000


def crontab_paths(user: str) -> list[str]:
    """The files crontab(1) may write for ``user`` (one per distribution family)."""
    return [posixpath.join(d, user) for d in CRONTAB_DIRS]


def _names(value: t.Any) -> list[str]:
    if isinstance(value, str):
        return [n.strip() for n in value.split(",") if n.strip()]
    if isinstance(value, (list, tuple)):
        return [str(n).strip() for n in value if str(n).strip()]
    return []


def _package(args: dict) -> list[dict]:
    state = str(args.get("state") or "present")
    change = "removed" if state in ("absent", "removed") else "upgraded" if state == "latest" else "installed"
    names = _names(args.get("name") or args.get("pkg") or args.get("package")) + _names(args.get("deb"))
    if not names:  # update_cache, upgrade=dist...: the package set as a whole
        return [{"kind": "package", "target": "(package set)", "change": "upgraded" if args.get("upgrade") else "changed"}]
    return [{"kind": "package", "target": n, "change": change} for n in names]


def _service(args: dict) -> list[dict]:
    target = str(args.get("name") or args.get("service") or args.get("unit") or "(systemd)")
    parts = []
    if "enabled" in args and args["enabled"] is not None:
        parts.append("enabled" if boolean(args["enabled"], strict=False) else "disabled")
    if args.get("state"):
        parts.append(str(args["state"]))
    if "masked" in args and args["masked"] is not None:
        parts.append("masked" if boolean(args["masked"], strict=False) else "unmasked")
    if not parts and args.get("daemon_reload"):
        parts.append("daemon-reload")
    return [{"kind": "service", "target": target, "change": ", ".join(parts) or "changed"}]


def _cron(args: dict) -> list[dict]:
    user = str(args.get("user") or "root")
    cron_file = args.get("cron_file")
    if cron_file:
        path = cron_file if str(cron_file).startswith("/") else "/etc/cron.d/" + str(cron_file)
        paths, owner = [str(path)], str(path)
    else:
        paths, owner = crontab_paths(user), user
    label = args.get("name") or args.get("job") or "?"
    if str(args.get("state") or "present") == "absent":
        change = "removed"
    elif args.get("env"):
        change = "set variable: %s=%s" % (label, args.get("job") or args.get("value") or "")
    else:
        when = args.get("special_time")
        when = "@%s" % when if when else " ".join(str(args.get(k) if args.get(k) is not None else "*")
                                                  for k in ("minute", "hour", "day", "month", "weekday"))
        change = "set: %s %s%s" % (when, args.get("job") or "", " (disabled)" if args.get("disabled") else "")
    return [{"kind": "cron", "target": "%s: %s" % (owner, label), "change": change, "paths": paths}]


def _account(kind: str, args: dict) -> list[dict]:
    name = str(args.get("name") or args.get("user") or "?")
    state = str(args.get("state") or "present")
    return [{"kind": kind, "target": name, "change": "removed" if state == "absent" else "created or modified",
             "paths": list(ACCOUNT_FILES) if kind == "user" else list(ACCOUNT_FILES[2:])}]


def task_changes(fqcn: str, args: t.Any) -> list[dict]:
    """What one changed task execution changed: ``{kind, target, change}`` entries (cron,
    user and group entries add ``paths``: the files that hold them). Never raises."""
    name = C.canonical_module(fqcn)
    args = args if isinstance(args, dict) else {}
    try:
        if name in PACKAGE_MODULES:
            return _package(args)
        if name in SERVICE_MODULES:
            return _service(args)
        if name == "ansible.builtin.cron":
            return _cron(args)
        if name in ("ansible.builtin.user", "ansible.builtin.group"):
            return _account(name.rsplit(".", 1)[1], args)
        touched = C.paths_touched(name, args)
    except Exception:  # pylint: disable=broad-except  # the ledger names it rather than fail the task
        return [{"kind": "file", "target": "(%s)" % name, "change": "changed (arguments unreadable)"}]
    how = "changed by a command" if touched.heuristic else "changed"
    out = [{"kind": "file", "target": p, "change": how} for p in list(touched.paths) + list(touched.shallow)]
    if touched.unknown and "packages" in touched.unknown:
        out.append({"kind": "package", "target": "(package set)", "change": how})
    if touched.unknown and "service state" in touched.unknown:
        out.append({"kind": "service", "target": "(%s)" % touched.unknown[:120], "change": how})
    if not out and (touched.unknown or not touched.heuristic):
        out.append({"kind": "file", "target": "(%s)" % (touched.unknown or name)[:160], "change": how})
    return out  # a command the effects table knows writes nothing (a grep pipeline) changed nothing


def _covered(path: str, covered: t.Collection[str]) -> bool:
    return any(path == c or path.startswith(c.rstrip("/") + "/") for c in covered)


def _undo_of(change: dict, restore: dict, covered: t.Collection[str]) -> tuple[str, bool]:
    """(state, verified) of one change of an attempt whose restore ran (``restore``)."""
    kind, target = change.get("kind"), str(change.get("target") or "")
    files_ok = bool(restore.get("verified"))
    if kind == "package":
        packages = restore.get("packages") or {}
        if change.get("change") != "removed" and target in (packages.get("removed") or ()):
            return UNDONE, bool(packages.get("verified")) and target not in (packages.get("still_there") or ())
        if target == "(package set)" and packages.get("removed") and packages.get("verified"):
            return UNDONE, True
        return LEFT, False
    if kind == "service":
        services = restore.get("services") or {}
        found = services.get(target) or services.get(target[:-8] if target.endswith(".service") else target + ".service")
        if found and found.get("restored"):
            return UNDONE, bool(found.get("verified"))
        return LEFT, False
    paths = change.get("paths") or [target]
    if kind == "cron" and not (change.get("target") or "").startswith("/"):
        ok = any(_covered(p, covered) for p in paths)  # one spool per distribution: either saved it
    else:
        ok = all(_covered(p, covered) for p in paths)
    return (UNDONE, files_ok) if ok else (LEFT, False)


def entries_for(rule: str, number: int, changes: t.Sequence[dict], kept: bool, restore: dict | None,
                covered: t.Collection[str], passed: bool = False) -> list[dict]:
    """The ledger entries of one attempt (see the module docstring). ``kept``: the attempt
    stands (passed, or applied and waiting for a reboot); ``restore``: its restore's record
    (``Attempt.restore``: the files' ``verified``, ``packages`` {removed, still_there,
    verified}, ``services`` {name: {restored, verified}}) or None when none ran; ``covered``:
    the paths its checkpoint saved; ``passed``: OpenSCAP verified the rule (a kept entry's
    ``verified``). Packages the restore removed that no task named (dependencies) are
    entries of their own. The same change twice (a loop) is one entry."""
    out: list[dict] = []
    seen: set[tuple] = set()
    for change in changes:
        key = (change.get("kind"), change.get("target"), change.get("change"))
        if key in seen:
            continue
        seen.add(key)
        if kept:
            state, verified = KEPT, bool(passed)
        elif restore is None:
            state, verified = LEFT, False
        else:
            state, verified = _undo_of(change, restore, covered)
        entry = {"rule": rule, "attempt": number, "kind": change.get("kind"), "target": change.get("target"),
                 "change": change.get("change"), "state": state, "verified": verified}
        for extra in ("task", "diff"):
            if change.get(extra):
                entry[extra] = change[extra]
        out.append(entry)
    packages = (restore or {}).get("packages") or {}
    named = {e["target"] for e in out if e["kind"] == "package"}
    for name in packages.get("removed") or ():
        if name not in named:
            out.append({"rule": rule, "attempt": number, "kind": "package", "target": name,
                        "change": DEPENDENCY, "state": UNDONE,
                        "verified": bool(packages.get("verified")) and name not in (packages.get("still_there") or ())})
    for name in packages.get("lost") or ():  # removed by the attempt: not put back
        if name not in named:
            out.append({"rule": rule, "attempt": number, "kind": "package", "target": name,
                        "change": "removed", "state": LEFT, "verified": False})
    return out


def attempt_ledger(rule: str, attempt: t.Any) -> list[dict]:
    """The ledger's entries of one ``attempts.Attempt`` (:func:`entries_for`) from what it
    recorded: its report's changes, its checkpoint's covered paths, its restore; kept when
    no restore ran and it passed or waits for a reboot."""
    changes = (attempt.report or {}).get("changes") or []
    if not changes and not (attempt.restore or {}).get("packages"):
        return []
    kept = attempt.restore is None and (attempt.verdict == A.PASSED or attempt.reason == "reboot_required")
    return entries_for(rule, attempt.number, changes, kept, attempt.restore,
                       (attempt.checkpoint or {}).get("covered") or [], passed=attempt.result == "pass")


def host_ledger(items: t.Iterable[t.Any]) -> list[dict]:
    """The host report's ``ledger``: every attempt's entries, rules sorted, attempts in order."""
    out: list[dict] = []
    for item in sorted(items, key=lambda i: i.rule):
        for attempt in item.attempts:
            out.extend(attempt_ledger(safety.short_rule_id(item.rule), attempt))
    return out


def fully_undone(entries: t.Sequence[dict]) -> bool:
    """An attempt's restore undid every change it made, each verified (``rolled_back``)."""
    return all(e.get("state") == UNDONE and e.get("verified") for e in entries)
