"""Skill knowledge on a real lab host (issue 8): case audit-immutable-last from shared/cases.

`-e 2` freezes the loaded audit rules. The anssi-debian12 skill orders audit_rules_immutable
after every other fix of the run (``ordering.last``) and replaces the content's fix (which
re-adds `-e 2` to immutable.rules, a file that sorts before perm_mod.rules and
privileged.rules) with its own (``fixes``): one `-e 2`, in the file that sorts last.
"""

from __future__ import annotations

import json

import pytest

RULES = [
    "package_audit_installed",              # installs auditd: the audit rules become applicable
    "audit_rules_immutable",                # the case's rules
    "audit_rules_usergroup_modification_passwd",
    "audit_rules_dac_modification_chmod",   # its fix writes perm_mod.rules (sorts after immutable.rules)
    "audit_rules_session_events",           # its fix writes session.rules
]
AUDIT_TREE = "sudo find /etc/audit -type f -exec sha256sum {} + | sort"


@pytest.fixture(scope="module")
def runs(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    host = lab.reset([lab_host.name])[0]
    # an old `-e 1` in an early file (`-e 2` there would make the rule pass): the run must leave
    # exactly one -e line
    host.ssh("sudo mkdir -p /etc/audit/rules.d && echo '-e 1' | sudo tee /etc/audit/rules.d/10-old.rules >/dev/null")
    out = []
    for n in (1, 2):
        run_dir = tmp_path_factory.mktemp("run%d" % n)
        before = host.ssh(AUDIT_TREE).stdout
        proc = remediate(lab_inventory, host.name, run_dir, {"scapforge_rules": RULES})
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        summary = json.loads((run_dir / "latest" / "summary.json").read_text())
        events = [json.loads(line) for line in (run_dir / "latest" / "events.jsonl").read_text().splitlines()]
        out.append({"report": summary["hosts"][host.name], "events": events, "before": before,
                    "after": host.ssh(AUDIT_TREE).stdout})
    return host, out


def test_one_e2_in_the_file_that_sorts_last(runs):
    host, (first, _second) = runs
    rules = first["report"]["rules"]
    assert (rules["audit_rules_immutable"]["outcome"], rules["audit_rules_immutable"]["reason"]) == ("remediated", "verified")
    files = host.ssh("ls /etc/audit/rules.d | LC_ALL=C sort").stdout.split()
    assert files[-1] == "zz-immutable.rules"
    found = host.ssh("sudo grep -HE '^[[:space:]]*-e[[:space:]]' /etc/audit/rules.d/*.rules", check=False).stdout
    assert found.strip() == "/etc/audit/rules.d/zz-immutable.rules:-e 2"
    assert {"perm_mod.rules", "session.rules", "10-old.rules"} <= set(files)


def test_immutable_is_applied_after_every_other_audit_rule(runs):
    _host, (first, _second) = runs
    started = [e["rule"] for e in first["events"] if e["event"] == "rule_start"]
    audit = [r for r in started if r.startswith("audit_rules_")]
    assert audit[-1] == "audit_rules_immutable"
    assert {"audit_rules_dac_modification_chmod", "audit_rules_session_events"} <= set(audit[:-1])
    fixed = [e["rule"] for e in first["events"] if e["event"] == "fix_applied"]
    assert fixed.index("audit_rules_immutable") > max(fixed.index(r) for r in fixed if r != "audit_rules_immutable"
                                                      and r.startswith("audit_rules_"))


def test_a_second_run_changes_nothing_in_etc_audit(runs):
    _host, (first, second) = runs
    assert second["report"]["before"].get("fail", 0) <= first["report"]["after"].get("fail", 0)
    assert "audit_rules_immutable" not in second["report"]["rules"]  # passes at baseline: not worked
    assert second["after"] == second["before"] == first["after"]


def test_audit_rules_on_disk_wait_for_a_reboot_while_the_kernel_rules_are_immutable(lab, lab_host, lab_inventory,
                                                                                    tmp_path, remediate):
    """The last clause of the case: with `-e 2` loaded the kernel refuses new audit rules, so a
    rule whose lines are now on disk is deferred/reboot_required, not remediated. A container
    shares the machine's kernel, whose audit state a test must never change: a stand-in
    auditctl (first on sudo's secure_path) reports "enabled 2" as a frozen kernel would."""
    host = lab.reset([lab_host.name])[0]
    host.ssh("printf '#!/bin/sh\\necho enabled 2\\necho failure 1\\n' | sudo tee /usr/local/sbin/auditctl >/dev/null"
             " && sudo chmod 0755 /usr/local/sbin/auditctl")
    proc = remediate(lab_inventory, host.name, tmp_path, {"scapforge_rules": [
        "package_audit_installed", "audit_rules_dac_modification_chmod", "audit_rules_immutable"]})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "latest" / "summary.json").read_text())["hosts"][host.name]
    events = [json.loads(line) for line in (tmp_path / "latest" / "events.jsonl").read_text().splitlines()]
    assert [(e["data"]["command"], e["data"]["holds"]) for e in events if e["event"] == "frozen_probe"] == [
        ("auditctl -s", True)], [e for e in events if e["event"] == "frozen_probe"]
    chmod = report["rules"]["audit_rules_dac_modification_chmod"]
    assert (chmod["outcome"], chmod["reason"]) == ("deferred", "reboot_required")
    assert "auditctl -s says enabled 2" in chmod["detail"]
    assert "chmod" in host.ssh("sudo cat /etc/audit/rules.d/perm_mod.rules").stdout  # on disk, not undone
    immutable = report["rules"]["audit_rules_immutable"]
    assert (immutable["outcome"], immutable["reason"]) == ("remediated", "verified")


def test_the_skills_tmout_fix_passes_and_keeps_every_login_shell_quiet(lab, lab_host, lab_inventory, tmp_path,
                                                                       remediate):
    """The content's accounts_tmout fix writes `typeset -xr TMOUT=600` in a file dash sources
    at every login ("typeset: not found") with a mode that follows root's umask; the loop's
    side-effect check rolls it back (escalated/side_effect_rolled_back). The anssi-debian12
    skill's own fix passes the rule with the profile's Value and harms no shell."""
    host = lab.reset([lab_host.name])[0]
    host.ssh("sudo sh -c 'umask 077; true'")
    proc = remediate(lab_inventory, host.name, tmp_path, {"scapforge_rules": ["accounts_tmout"]})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "latest" / "summary.json").read_text())["hosts"][host.name]
    outcome = report["rules"]["accounts_tmout"]
    assert (outcome["outcome"], outcome["reason"], outcome["side_effects"]) == ("remediated", "verified", [])
    assert host.ssh("stat -c %a /etc/profile.d/tmout.sh").stdout.strip() == "644"
    dash = host.ssh("sh -l -c 'echo $TMOUT' 2>&1")
    bash = host.ssh("bash -l -c 'echo $TMOUT; readonly -p | grep -c TMOUT' 2>&1")
    assert dash.stdout.strip() == "600"  # the anssi_bp28_high Value, no error from dash
    assert bash.stdout.split() == ["600", "1"]
