"""The change ledger's decisions (issue 17 item 1): what a task changed, and whether each
change of an attempt is kept, undone (verified or not) or left."""

from __future__ import annotations

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_summary as HS
from ansible_collections.scapforge.remediation.plugins.plugin_utils import ledger as L
from ansible_collections.scapforge.remediation.plugins.plugin_utils import state_checkpoint as S

CRON = {"name": "run AIDE check", "minute": 5, "hour": 4, "weekday": 0, "user": "root",
        "job": "/usr/sbin/aide --check"}
SPOOL = ["/var/spool/cron/crontabs/root", "/var/spool/cron/root"]


def test_task_changes_of_the_aide_fix():
    assert L.task_changes("ansible.builtin.cron", CRON) == [
        {"kind": "cron", "target": "root: run AIDE check", "change": "set: 5 4 * * 0 /usr/sbin/aide --check",
         "paths": SPOOL}]
    assert L.task_changes("ansible.builtin.package", {"name": ["aide"], "state": "present"}) == [
        {"kind": "package", "target": "aide", "change": "installed"}]
    assert L.task_changes("apt", {"name": "a,b", "state": "absent"}) == [
        {"kind": "package", "target": "a", "change": "removed"}, {"kind": "package", "target": "b", "change": "removed"}]


@pytest.mark.parametrize("module, args, want", [
    ("ansible.builtin.systemd", {"name": "auditd", "enabled": True, "state": "started"},
     [{"kind": "service", "target": "auditd", "change": "enabled, started"}]),
    ("ansible.builtin.service", {"name": "rsync", "enabled": "no"},
     [{"kind": "service", "target": "rsync", "change": "disabled"}]),
    ("ansible.builtin.cron", {"name": "x", "cron_file": "aide", "special_time": "daily", "job": "j"},
     [{"kind": "cron", "target": "/etc/cron.d/aide: x", "change": "set: @daily j", "paths": ["/etc/cron.d/aide"]}]),
    ("ansible.builtin.cron", {"name": "x", "state": "absent", "user": "bob"},
     [{"kind": "cron", "target": "bob: x", "change": "removed",
       "paths": ["/var/spool/cron/crontabs/bob", "/var/spool/cron/bob"]}]),
    ("ansible.builtin.user", {"name": "games", "state": "absent"},
     [{"kind": "user", "target": "games", "change": "removed", "paths": list(L.ACCOUNT_FILES)}]),
    ("ansible.builtin.group", {"name": "sftponly"},
     [{"kind": "group", "target": "sftponly", "change": "created or modified", "paths": ["/etc/group", "/etc/gshadow"]}]),
    ("ansible.builtin.lineinfile", {"path": "/etc/login.defs", "line": "UMASK 027"},
     [{"kind": "file", "target": "/etc/login.defs", "change": "changed"}]),
    ("ansible.builtin.shell", {"_raw_params": "apt-get install -y aide"},
     [{"kind": "package", "target": "(package set)", "change": "changed by a command"}]),
])
def test_task_changes_by_kind(module, args, want):
    assert L.task_changes(module, args) == want


FILE = {"kind": "file", "target": "/etc/login.defs", "change": "changed", "task": "t", "diff": "-a\n+b\n"}
CRON_CHANGE = L.task_changes("ansible.builtin.cron", CRON)[0]
PKG = {"kind": "package", "target": "aide", "change": "installed"}
SVC = {"kind": "service", "target": "auditd", "change": "enabled, started"}


def _states(entries):
    return [(e["kind"], e["target"], e["state"], e["verified"]) for e in entries]


def test_a_passing_attempt_keeps_its_changes_verified_by_openscap():
    entries = L.entries_for("r", 1, [FILE, PKG], kept=True, restore=None, covered=[], passed=True)
    assert _states(entries) == [("file", "/etc/login.defs", "kept", True), ("package", "aide", "kept", True)]
    assert entries[0]["diff"] == "-a\n+b\n" and entries[0]["rule"] == "r" and entries[0]["attempt"] == 1


def test_the_aide_fix_rolled_back_is_undone_entry_by_entry():
    restore = {"verified": True, "removed": ["/var/spool/cron/crontabs/root"],
               "packages": {"removed": ["aide", "aide-common"], "lost": [], "still_there": [], "verified": True}}
    entries = L.entries_for("aide_periodic_cron_checking", 1, [PKG, CRON_CHANGE], kept=False, restore=restore,
                            covered=SPOOL)
    assert _states(entries) == [("package", "aide", "undone", True), ("cron", "root: run AIDE check", "undone", True),
                                ("package", "aide-common", "undone", True)]
    assert L.fully_undone(entries)


def test_what_no_restore_undid_is_left():
    """The defect of issue 17: nothing saved the crontab and no package undo ran."""
    restore = {"verified": True, "restored": [], "removed": []}
    entries = L.entries_for("r", 1, [PKG, CRON_CHANGE, SVC], kept=False, restore=restore, covered=[])
    assert _states(entries) == [("package", "aide", "left", False), ("cron", "root: run AIDE check", "left", False),
                                ("service", "auditd", "left", False)]
    assert not L.fully_undone(entries)
    # an ineffective attempt that no restore reached at all (a batch blocker, a stop): left too
    assert [e["state"] for e in L.entries_for("r", 2, [FILE], kept=False, restore=None, covered=[])] == ["left"]


def test_an_unverified_restore_is_undone_but_not_verified_and_a_package_still_there_is_not_verified():
    restore = {"verified": False, "mismatches": ["/etc/login.defs: sha256"],
               "packages": {"removed": ["aide"], "still_there": [], "lost": ["nano"], "verified": False},
               "services": {"auditd.service": {"restored": True, "verified": True}}}
    entries = L.entries_for("r", 3, [FILE, PKG, SVC], kept=False, restore=restore, covered=["/etc"])
    assert _states(entries) == [("file", "/etc/login.defs", "undone", False), ("package", "aide", "undone", False),
                                ("service", "auditd", "undone", True), ("package", "nano", "left", False)]
    assert not L.fully_undone(entries)


def test_attempt_ledger_and_host_counts():
    item = A.WorkItem("xccdf_org.ssgproject.content_rule_aide_periodic_cron_checking")
    kept = item.new_attempt(A.VENDOR)
    kept.verdict, kept.reason, kept.result = A.INEFFECTIVE, "reboot_required", "fail"
    kept.report = {"changes": [FILE]}
    undone = item.new_attempt(A.WORKER)
    undone.verdict, undone.reason = A.INEFFECTIVE, "fix_ineffective"
    undone.report, undone.checkpoint = {"changes": [CRON_CHANGE, PKG]}, {"covered": SPOOL}
    undone.restore = {"verified": True, "packages": {"removed": [], "lost": [], "still_there": [], "verified": True}}
    ledger = L.host_ledger([item])
    assert _states(ledger) == [("file", "/etc/login.defs", "kept", False), ("cron", "root: run AIDE check", "undone", True),
                               ("package", "aide", "left", False)]
    assert {e["rule"] for e in ledger} == {"aide_periodic_cron_checking"}
    report = {"ledger": ledger}
    assert HS.ledger_counts(report) == {"cron": {"undone": 1}, "file": {"kept": 1}, "package": {"left": 1}}


@pytest.mark.parametrize("before, now, steps", [
    (("disabled", "inactive"), ("enabled", "active"), ["systemctl disable auditd", "systemctl stop auditd"]),
    (("enabled", "active"), ("disabled", "inactive"), ["systemctl enable auditd", "systemctl start auditd"]),
    (("masked", "inactive"), ("enabled", "inactive"), ["systemctl mask auditd"]),
    (("enabled", "active"), ("masked", "inactive"), ["systemctl unmask auditd", "systemctl enable auditd",
                                                     "systemctl start auditd"]),
    (("not-found", "inactive"), ("enabled", "failed"), ["systemctl disable --now auditd"]),
    (("enabled", "active"), ("enabled", "active"), []),
])
def test_service_steps_put_a_unit_back(before, now, steps):
    assert S.service_steps("auditd", before, now) == steps


def test_package_undo_purges_what_was_installed_and_names_what_was_removed():
    assert S.package_undo(["bash", "nano"], ["aide", "aide-common", "bash"]) == (["aide", "aide-common"], ["nano"])


def test_report_html_shows_the_ledger_and_lists_what_is_left_for_a_human():
    import sys
    from pathlib import Path

    import lxml.html

    from ansible_collections.scapforge.remediation.plugins.plugin_utils import report_html

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "unit"))
    import report_samples  # pylint: disable=import-outside-toplevel

    report = report_samples.debian_full_run()
    report["ledger"] = [
        {"rule": "aide_periodic_cron_checking", "attempt": 1, "kind": "cron", "target": "root: run AIDE check",
         "change": "set: 5 4 * * 0 /usr/sbin/aide --check", "state": "left", "verified": False},
        {"rule": "aide_periodic_cron_checking", "attempt": 1, "kind": "package", "target": "aide",
         "change": "installed", "state": "undone", "verified": True},
    ]
    page = lxml.html.fromstring(report_html.render({"lab1": report}, "run1", "2026-12-02T06:00:00Z"))
    rows = page.xpath("//section[@id='ledger']//tr[@data-ledger-rule]")
    assert [(r.get("data-kind"), r.get("data-state")) for r in rows] == [("cron", "left"), ("package", "undone")]
    left = page.xpath("//div[@class='left']//li[@data-kind]")
    assert [li.text_content() for li in left] == [
        "aide_periodic_cron_checking (attempt 1): cron root: run AIDE check: set: 5 4 * * 0 /usr/sbin/aide --check"]
    assert page.xpath("//div[@class='left']//p[@data-ledger-left]")[0].get("data-ledger-left") == "1"
    assert "it was rolled back" not in page.text_content()


class _FakeHost:
    """A session whose package set and units answer the StateCheckpoint's commands."""

    def __init__(self, packages, units):
        self.packages, self.units, self.commands = set(packages), dict(units), []

    def run_command(self, command):
        self.commands.append(command)
        if command == S.PACKAGE_LIST:
            return {"rc": 0, "stdout": "\n".join(sorted(self.packages)) + "\n"}
        if "apt-get purge" in command:
            names = command.split("apt-get purge -y -q ", 1)[1].split(";", 1)[0].split()
            self.packages -= set(names)
            return {"rc": 0, "stdout": ""}
        if command.startswith("systemctl is-enabled"):
            unit = command.split()[2]
            enabled, active = self.units.get(unit, ("not-found", "inactive"))
            return {"rc": 0, "stdout": "%s\n\n%s\n" % (enabled, active)}
        for verb, field, value in (("enable", 0, "enabled"), ("disable", 0, "disabled"), ("start", 1, "active"),
                                   ("stop", 1, "inactive")):
            if command.startswith("systemctl %s " % verb):
                unit = command.split()[2]
                state = list(self.units[unit])
                state[field] = value
                self.units[unit] = tuple(state)
        return {"rc": 0, "stdout": ""}


def test_state_checkpoint_purges_only_its_own_packages_and_puts_a_service_back():
    host = _FakeHost(["bash", "cron"], {"auditd": ("disabled", "inactive")})
    first = S.StateCheckpoint(host)
    assert first.before("ansible.builtin.package", {"name": "aide"}, "packages (ansible.builtin.package)") is True
    host.packages |= {"aide", "aide-common"}  # the attempt's install
    assert first.before("ansible.builtin.systemd", {"name": "auditd", "enabled": True, "state": "started"},
                        "service state (ansible.builtin.systemd)") is True
    host.units["auditd"] = ("enabled", "active")
    first.after_run()
    host.packages.add("later-fix-package")  # a later attempt's, which stands: never this one's to purge
    undo = first.undo()
    assert undo["packages"] == {"removed": ["aide", "aide-common"], "lost": [], "still_there": [], "verified": True,
                                "detail": ""}
    assert host.packages == {"bash", "cron", "later-fix-package"}
    assert undo["services"]["auditd"]["verified"] is True and host.units["auditd"] == ("disabled", "inactive")
    assert undo["services"]["auditd"]["steps"] == ["systemctl disable auditd", "systemctl stop auditd"]
    assert "systemctl daemon-reload" in host.commands


def test_a_unit_its_package_brought_is_undone_when_the_package_is_purged():
    """chrony's postinst enables chrony.service before the attempt's systemd task saves it:
    after the purge the unit is not-found, which is how the host was before the attempt."""
    host = _FakeHost(["bash"], {})
    state = S.StateCheckpoint(host)
    state.before("ansible.builtin.apt", {"name": "chrony"}, None)
    host.packages.add("chrony")
    host.units["chrony.service"] = ("enabled", "inactive")  # the package's own postinst
    state.before("ansible.builtin.systemd_service", {"name": "chrony.service", "enabled": True, "state": "started"}, None)
    state.after_run()
    real_run = host.run_command

    def purge_takes_the_unit(command):
        out = real_run(command)
        if "apt-get purge" in command:
            host.units.pop("chrony.service")
        return out

    host.run_command = purge_takes_the_unit
    undo = state.undo()
    assert undo["packages"]["removed"] == ["chrony"] and undo["packages"]["verified"] is True
    assert undo["services"]["chrony.service"] == {"restored": True, "verified": True, "steps": [],
                                                  "before": ["enabled", "inactive"], "after": ["not-found", "inactive"],
                                                  "gone_with_packages": True}
    again = _FakeHost(["bash"], {"chrony.service": ("enabled", "inactive")})  # no purge: the unit stays
    kept = S.StateCheckpoint(again)
    kept.before("ansible.builtin.systemd_service", {"name": "chrony.service", "state": "started"}, None)
    again.units["chrony.service"] = ("enabled", "active")
    assert kept.undo()["services"]["chrony.service"]["steps"] == ["systemctl stop chrony.service"]


def test_a_restored_unit_file_reloads_systemd_and_sshd_config_reloads_sshd():
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempt_runner as R

    assert R.reloads_after(["/etc/systemd/system/chronyd.service.d/x.conf"]) == ["systemctl daemon-reload"]
    assert R.reloads_after(["/etc/ssh/sshd_config.d/01.conf", "/usr/lib/systemd/system/a.service"]) == [
        "systemctl daemon-reload", R.RELOAD_SSHD]
    assert R.reloads_after(["/etc/pam.d/common-password", "/etc/login.defs"]) == []


def test_a_reloaded_sshd_is_waited_for_until_a_login_is_no_longer_refused(monkeypatch):
    """sshd executes itself anew on its reload: the health check right after a restore of
    sshd_config was refused on a loaded host, and the host was stopped as unreachable."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempt_runner as R
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import health as H

    answers = [H.HealthReport(False, "fresh login + become failed: ssh: connect to host lab1 port 22: "
                                     "Connection refused", 0.0, codes=[H.UNREACHABLE])] * 2
    answers.append(H.HealthReport(True, "fresh login and sudo ok", 0.0))
    logins = []
    monkeypatch.setattr(H, "check_host", lambda session: logins.append(session) or answers[len(logins) - 1])
    monkeypatch.setattr(R.time, "sleep", lambda seconds: None)
    host = _FakeHost(["bash"], {})
    runner = R.AttemptRunner(host, {}, None, None, None, _Events(), None, health_check=False, stop_host=lambda d: None)
    item = A.WorkItem("xccdf_org.ssgproject.content_rule_sshd_disable_root_login")
    attempt = item.new_attempt(A.WORKER)
    out = runner._undo_state(item, attempt, {"restored": ["/etc/ssh/sshd_config"]})  # pylint: disable=protected-access
    assert len(logins) == 3 and out["reloaded"] == [R.RELOAD_SSHD] and R.RELOAD_SSHD in host.commands
    assert isinstance(out["sshd_answered_after"], float)
    logins.clear()
    assert "sshd_answered_after" not in runner._undo_state(  # pylint: disable=protected-access
        item, attempt, {"restored": ["/etc/pam.d/common-password"]}) and logins == []


class _Events:
    def __init__(self):
        self.seen = []

    def emit(self, event, **data):
        self.seen.append((event, data))


class _Checkpoint:
    def restore(self):
        from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import RestoreResult
        return RestoreResult(True, removed=["/var/spool/cron/crontabs/root"], detail="restored 0, removed 1, verified")


@pytest.mark.parametrize("packages_saved, rolled_back", [(False, False), (True, True)])
def test_roll_back_is_true_only_when_every_change_was_undone(packages_saved, rolled_back):
    """The issue's case: the crontab file restored but, without a package checkpoint, aide stays:
    rolled_back is False, the detail names what is left; with it, both undone: True."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempt_runner as R

    host = _FakeHost(["bash"], {})
    events = _Events()
    runner = R.AttemptRunner(host, {}, None, None, None, events, None, health_check=False, stop_host=lambda d: None)
    item = A.WorkItem("xccdf_org.ssgproject.content_rule_aide_periodic_cron_checking")
    attempt = item.new_attempt(A.VENDOR)
    attempt.verdict, attempt.reason = A.INEFFECTIVE, "fix_ineffective"
    attempt.report = {"changed": True, "changes": [dict(PKG, task="Ensure AIDE is installed"), CRON_CHANGE]}
    attempt.checkpoint = {"covered": SPOOL}
    runner._checkpoints[(item.rule, 1)] = _Checkpoint()  # pylint: disable=protected-access
    state = S.StateCheckpoint(host)
    if packages_saved:
        state.before("ansible.builtin.package", {"name": "aide"}, "packages (ansible.builtin.package)")
        host.packages |= {"aide", "aide-common"}
        state.after_run()
    runner._states[(item.rule, 1)] = state  # pylint: disable=protected-access
    assert runner.roll_back(item, attempt) is True  # the files' restore was verified either way
    assert attempt.rolled_back is rolled_back
    entries = L.attempt_ledger(item.short_id, attempt)
    if rolled_back:
        assert _states(entries) == [("package", "aide", "undone", True), ("cron", "root: run AIDE check", "undone", True),
                                    ("package", "aide-common", "undone", True)]
        assert "rolled back: 3 change(s) undone, each verified" in attempt.detail
    else:
        assert _states(entries) == [("package", "aide", "left", False), ("cron", "root: run AIDE check", "undone", True)]
        assert "left on the host: package aide (installed)" in attempt.detail
    restore = [data for event, data in events.seen if event == "restore"][0]
    assert restore["rolled_back"] is rolled_back


def test_a_command_that_writes_nothing_is_no_change_and_one_with_unknown_writes_is_named():
    # a read-only grep pipeline (aide_verify_acls' vendor fix) changed nothing the ledger could list
    assert L.task_changes("ansible.builtin.shell", {"_raw_params": "set -o pipefail; grep -q x /etc/aide/aide.conf"}) == []
    assert L.task_changes("ansible.builtin.shell", {"_raw_params": "echo x >> /etc/foo"}) == [
        {"kind": "file", "target": "/etc/foo", "change": "changed by a command"}]
