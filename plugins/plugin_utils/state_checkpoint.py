"""What a files checkpoint cannot hold, saved and undone (issue 17 item 3): the host's package
set and the enabled/active state of the services an attempt's tasks name.

One :class:`StateCheckpoint` per attempt, beside its files checkpoint. The attempt's change
guard calls :meth:`StateCheckpoint.before` before each change: before the first task that
changes packages (a package module, or a command the effects table says installs) the
installed package set is read once; before a service module's first change to a unit, that
unit's ``is-enabled`` and ``is-active``. :meth:`StateCheckpoint.undo` (the attempt's rollback,
after its files are restored) purges the packages installed since, puts each service back as
it was, and reads both again to verify. A package the attempt removed is not reinstalled: it
is named in ``lost`` (the ledger lists it as left). The decisions are pure functions
(:func:`package_undo`, :func:`service_steps`), the commands go through the HostSession.
"""

from __future__ import annotations

import shlex
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import ledger

#: the installed package names, one a line (dpkg: any state but not-installed and config-files).
PACKAGE_LIST = ("if command -v dpkg-query >/dev/null 2>&1; then "
                "dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' | awk '$1 !~ /^.[nc]/ {print $2}'; "
                "elif command -v rpm >/dev/null 2>&1; then rpm -qa --qf '%{NAME}\\n'; else exit 3; fi")
PURGE = ("if command -v apt-get >/dev/null 2>&1; then DEBIAN_FRONTEND=noninteractive apt-get purge -y -q %s; "
         "elif command -v dnf >/dev/null 2>&1; then dnf -y -q remove %s; else yum -y -q remove %s; fi")
SERVICE_STATE = "systemctl is-enabled %s 2>/dev/null; echo; systemctl is-active %s 2>/dev/null; true"
#: is-enabled values that mean "starts at boot" (restored with enable) and "masked".
ENABLED = ("enabled", "enabled-runtime", "alias")
MASKED = ("masked", "masked-runtime")


def package_undo(before: t.Collection[str], now: t.Collection[str]) -> tuple[list[str], list[str]]:
    """(to purge: installed since ``before``, lost: removed since ``before``), sorted."""
    return sorted(set(now) - set(before)), sorted(set(before) - set(now))


def service_steps(unit: str, before: tuple[str, str], now: tuple[str, str]) -> list[str]:
    """The systemctl commands that put ``unit`` back from ``now`` to ``before`` ((is-enabled,
    is-active) each); [] when they match or ``before`` says the unit did not exist."""
    (was_enabled, was_active), (is_enabled, is_active) = before, now
    quoted = shlex.quote(unit)
    steps: list[str] = []
    if was_enabled in ("", "not-found"):
        return ["systemctl disable --now %s" % quoted] if is_enabled in ENABLED else []
    if is_enabled != was_enabled:
        if is_enabled in MASKED:
            steps.append("systemctl unmask %s" % quoted)
        if was_enabled in MASKED:
            steps.append("systemctl mask %s" % quoted)
        elif was_enabled in ENABLED:
            steps.append("systemctl enable %s" % quoted)
        elif was_enabled == "disabled":
            steps.append("systemctl disable %s" % quoted)
    if (is_active == "active") != (was_active == "active"):
        steps.append("systemctl %s %s" % ("start" if was_active == "active" else "stop", quoted))
    return steps


class StateCheckpoint:
    """The package set and service states of one attempt (see the module docstring)."""

    def __init__(self, session) -> None:
        self.session = session
        self.packages: list[str] | None = None   # the set before the first package change
        self.services: dict[str, tuple[str, str]] = {}
        self.problems: dict[str, str] = {}        # what could not be saved, with why
        self.installed: list[str] | None = None  # what the attempt's own run installed (after_run)
        self.lost: list[str] = []                # what it removed

    def summary(self) -> dict:
        """What was saved, for the attempt's checkpoint record."""
        return {"packages": self.packages is not None, "services": sorted(self.services),
                "problems": dict(self.problems)}

    def saved(self) -> bool:
        return self.packages is not None or bool(self.services)

    def _run(self, command: str) -> tuple[int, str]:
        result = self.session.run_command(command)
        return int(result.get("rc", 1)), str(result.get("stdout") or "")

    def _package_set(self) -> list[str] | None:
        rc, out = self._run(PACKAGE_LIST)
        return sorted({line.strip() for line in out.splitlines() if line.strip()}) if rc == 0 else None

    def _service(self, unit: str) -> tuple[str, str]:
        quoted = shlex.quote(unit)
        _rc, out = self._run(SERVICE_STATE % (quoted, quoted))
        enabled, _sep, active = out.partition("\n\n")
        return enabled.strip() or "not-found", active.strip() or "inactive"

    def before(self, fqcn: str, args: dict, unknown: str | None) -> bool:
        """Save what the change is about to alter; True when it is saved (or nothing to)."""
        changes = ledger.task_changes(fqcn, args) if fqcn in ledger.SERVICE_MODULES | ledger.PACKAGE_MODULES else []
        wants_packages = fqcn in ledger.PACKAGE_MODULES or "packages" in (unknown or "")
        if wants_packages and self.packages is None:
            self.packages = self._package_set()
            if self.packages is None:
                self.problems["packages"] = "the installed package set could not be read"
                return False
        for change in changes:
            unit = str(change.get("target") or "")
            if change.get("kind") == "service" and not unit.startswith("(") and unit not in self.services:
                self.services[unit] = self._service(unit)
        return fqcn in ledger.PACKAGE_MODULES or fqcn in ledger.SERVICE_MODULES

    def after_run(self) -> None:
        """Read the package set again once the attempt's tasks ran: what they installed and
        removed (a later attempt's packages are never this one's to purge)."""
        if self.packages is None:
            return
        now = self._package_set()
        if now is None:
            self.problems["packages"] = "the package set after the attempt could not be read"
            return
        self.installed, self.lost = package_undo(self.packages, now)

    def undo(self) -> dict:
        """Purge the packages installed since, restore the services; verified by reading both
        again. Returns {packages: {removed, lost, still_there, verified, detail}, services:
        {unit: {restored, verified, steps}}} (a key only for what was saved)."""
        out: dict = {}
        if self.packages is not None:
            out["packages"] = self._undo_packages(self.packages)
        if self.services:
            self._run("systemctl daemon-reload")
            purged = bool((out.get("packages") or {}).get("removed")) and not (out.get("packages") or {}).get("lost")
            out["services"] = {unit: self._undo_service(unit, before, purged)
                               for unit, before in sorted(self.services.items())}
        return out

    def _undo_packages(self, before: list[str]) -> dict:
        now = self._package_set()
        if now is None:
            return {"removed": [], "lost": [], "still_there": [], "verified": False,
                    "detail": "the installed package set could not be read"}
        purge, lost = package_undo(before, now)
        if self.installed is not None:  # only what this attempt installed, and is still there
            purge, lost = [n for n in self.installed if n in set(now)], list(self.lost)
        detail = ""
        if purge:
            names = " ".join(shlex.quote(n) for n in purge)
            rc, out = self._run(PURGE % (names, names, names))
            detail = "" if rc == 0 else "purge exited %d: %s" % (rc, out[-300:])
        after = self._package_set() or now
        still = sorted(set(purge) & set(after))
        return {"removed": [n for n in purge if n not in still], "lost": lost, "still_there": still,
                "verified": not still and not detail, "detail": detail}

    def _undo_service(self, unit: str, before: tuple[str, str], purged: bool = False) -> dict:
        """Put ``unit`` back as ``before`` said. ``purged``: the undo purged the packages the
        attempt installed (and it removed none): a unit gone with them came with them - it was
        saved after the attempt's install enabled it (chrony's postinst), and not-found is how it
        was before the attempt (a relay trial: "left on the host: service chrony" was untrue)."""
        now = self._service(unit)
        if purged and now[0] == "not-found":
            return {"restored": True, "verified": True, "steps": [], "before": list(before), "after": list(now),
                    "gone_with_packages": True}
        steps = service_steps(unit, before, now)
        for step in steps:
            self._run(step + " 2>&1")
        again = self._service(unit)
        was_missing = before[0] in ("", "not-found")
        verified = (again[0] not in ENABLED) if was_missing else (
            again[0] == before[0] and (again[1] == "active") == (before[1] == "active"))
        return {"restored": True, "verified": verified, "steps": steps, "before": list(before), "after": list(again)}
