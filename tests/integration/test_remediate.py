"""The main job end to end on a real lab host, over SSH, with a fixed rule set.

Cases from shared/cases/cases.yml: sshd-match-block and login-defs-umask (remediation),
plus an access-impacting sudo rule, a rule no running host can pass, a reboot-flagged
sysctl rule in a container and rules that only become applicable once auditd is installed.
Every claim of the product is checked against an oscap run of the test's own, not the
product's oscap_eval.
"""

from __future__ import annotations

import hashlib
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
PREFIX = "xccdf_org.ssgproject.content_rule_"
PROFILE = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
XCCDF = "{http://checklists.nist.gov/xccdf/1.2}"

RULES = [
    "accounts_umask_etc_login_defs",      # case login-defs-umask
    "sshd_disable_root_login",            # case sshd-match-block (we log in as scapforge, not root)
    "sshd_set_idle_timeout",              # case sshd-match-block; outside the profile; requires keepalive
    "sshd_disable_empty_passwords",       # outside the profile
    "file_permissions_sshd_config",
    "accounts_umask_etc_profile",
    "sudo_add_umask",                     # edits sudoers and must leave become working
    "sudo_add_noexec",                    # access-impacting: must be skipped, sudoers untouched
    "package_audit_installed",            # installs through the lab proxy
    "service_auditd_enabled",             # notapplicable until auditd is installed; requires the above
    "audit_rules_immutable",              # notapplicable until auditd is installed
    "sysctl_kernel_dmesg_restrict",       # reboot-flagged; /proc/sys is read-only in the container
    "kernel_config_bug",                  # no running host can pass it
    "file_permissions_etc_passwd",        # passes at baseline: must still pass
]
# Selected for the test's own oscap run (rules outside anssi_bp28_high and what they require).
TAILORED = ["sshd_set_idle_timeout", "sshd_set_keepalive", "sshd_disable_empty_passwords"]
MATCH_TAIL = "Subsystem sftp internal-sftp\nMatch Group sftponly\n    ChrootDirectory /srv/sftp\n    ForceCommand internal-sftp\n"

OWN_TAILORING = """<?xml version="1.0" encoding="UTF-8"?>
<xccdf-1.2:Tailoring xmlns:xccdf-1.2="http://checklists.nist.gov/xccdf/1.2" id="xccdf_test_tailoring_own">
  <xccdf-1.2:version time="2026-11-30T00:00:00">1</xccdf-1.2:version>
  <xccdf-1.2:Profile id="xccdf_test_profile_own" extends="%s">
    <xccdf-1.2:title>own check</xccdf-1.2:title>
%s
  </xccdf-1.2:Profile>
</xccdf-1.2:Tailoring>
""" % (PROFILE, "\n".join('    <xccdf-1.2:select idref="%s%s" selected="true"/>' % (PREFIX, r) for r in TAILORED))


def own_oscap(host) -> dict:
    """Evaluate RULES (and keepalive) with oscap directly on the host; {short id: result}."""
    write = "printf '%%s' %s > /tmp/own-tailoring.xml" % _sh_quote(OWN_TAILORING)
    host.ssh(write)
    rules = " ".join("--rule %s%s" % (PREFIX, r) for r in RULES + ["sshd_set_keepalive"])
    host.ssh(
        "sudo oscap xccdf eval --tailoring-file /tmp/own-tailoring.xml --profile xccdf_test_profile_own "
        "%s --results /tmp/own-results.xml %s >/dev/null 2>&1; test -s /tmp/own-results.xml" % (rules, DS),
        timeout=300,
    )
    xml = host.ssh("sudo cat /tmp/own-results.xml").stdout
    root = ET.fromstring(xml.encode() if isinstance(xml, str) else xml)
    results = {}
    for rr in root.iter(XCCDF + "rule-result"):
        value = rr.find(XCCDF + "result").text
        if value != "notselected":
            results[rr.get("idref")[len(PREFIX):]] = value
    return results


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def run_playbook(remediate, inventory: Path, host, runs_dir: Path) -> dict:
    proc = remediate(inventory, host.name, runs_dir, {"scapforge_rules": RULES})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    summary = json.loads((runs_dir / "latest" / "summary.json").read_text())
    return summary


def file_digest(host, path: str) -> str:
    return hashlib.sha256(host.ssh("sudo cat %s" % path).stdout.encode()).hexdigest()


@pytest.fixture(scope="module")
def first_run(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    host = lab.reset([lab_host.name])[0]
    # case sshd-match-block: the stock file with its sftp Subsystem moved to internal-sftp,
    # then a Match block at its end (a second Subsystem line would make `sshd -t` fail)
    host.ssh("sudo sed -i '/^Subsystem/d' /etc/ssh/sshd_config")
    host.ssh("printf '%%s' %s | sudo tee -a /etc/ssh/sshd_config >/dev/null" % _sh_quote(MATCH_TAIL))
    # case login-defs-umask: a UMASK line with the tab spacing of the report
    host.ssh("sudo sed -i 's/^UMASK.*/UMASK\\t\\t022/' /etc/login.defs")
    assert host.ssh("grep -c '^UMASK' /etc/login.defs").stdout.strip() == "1"
    before = own_oscap(host)
    runs = tmp_path_factory.mktemp("runs")
    summary = run_playbook(remediate, lab_inventory, host, runs)
    after = own_oscap(host)
    return {"host": host, "before": before, "after": after, "summary": summary, "runs": runs,
            "inventory": lab_inventory, "remediate": remediate}


def host_report(run):
    return run["summary"]["hosts"][run["host"].name]


def test_every_remediated_rule_passes_in_our_own_scan(first_run):
    rules = host_report(first_run)["rules"]
    remediated = sorted(r for r, o in rules.items() if o["outcome"] == "remediated")
    assert {"accounts_umask_etc_login_defs", "sshd_disable_root_login", "sshd_set_idle_timeout",
            "sshd_disable_empty_passwords", "file_permissions_sshd_config"} <= set(remediated)
    for rule in remediated:
        assert first_run["after"][rule] == "pass", rule


def test_no_regression_and_every_baseline_failure_has_an_outcome(first_run):
    before, after = first_run["before"], first_run["after"]
    assert before["file_permissions_etc_passwd"] == "pass"
    assert [r for r, v in before.items() if v == "pass" and after.get(r) != "pass"] == []
    report = host_report(first_run)
    assert report["regressions"] == []
    for rule, value in before.items():
        if value == "fail":
            outcome = report["rules"][rule]
            assert outcome["outcome"] in ("remediated", "escalated", "skipped", "deferred")
            assert outcome["reason"]


def test_access_impacting_sudo_rule_is_skipped_and_sudoers_untouched(first_run):
    outcome = host_report(first_run)["rules"]["sudo_add_noexec"]
    assert (outcome["outcome"], outcome["reason"], outcome["attempts"]) == ("skipped", "access_impacting", 0)
    host = first_run["host"]
    assert host.ssh("sudo -n true").returncode == 0
    found = host.ssh("sudo grep -rlE '^[[:space:]]*Defaults.*noexec' /etc/sudoers /etc/sudoers.d", check=False)
    assert found.stdout.strip() == "", found.stdout


def test_environment_and_reboot_rules_are_classified(first_run):
    rules = host_report(first_run)["rules"]
    assert (rules["kernel_config_bug"]["outcome"], rules["kernel_config_bug"]["reason"]) == (
        "escalated", "environment:kernel_config")
    # reboot-flagged: verified at once (decision 4), deferred only if it still fails; the
    # container's read-only /proc/sys makes the reload fail, which the outcome must say.
    dmesg = rules["sysctl_kernel_dmesg_restrict"]
    assert dmesg["attempts"] == 1
    if first_run["after"]["sysctl_kernel_dmesg_restrict"] == "pass":
        # issue 17 item 5: a task failed (the reload), so the pass is not "verified"
        assert (dmesg["outcome"], dmesg["reason"]) == ("remediated", "passes_without_fix")
        assert "permission denied" in dmesg["detail"] or "Read-only" in dmesg["detail"]
    else:  # still failing: the read-only /proc/sys is named, or it waits for a reboot
        assert (dmesg["outcome"], dmesg["reason"]) in (
            ("escalated", "environment:read_only_proc_sys"), ("deferred", "reboot_required"))


def test_rescan_picks_up_rules_that_became_applicable(first_run):
    before, after = first_run["before"], first_run["after"]
    assert before["audit_rules_immutable"] == "notapplicable"
    assert after["package_audit_installed"] == "pass"
    report = host_report(first_run)
    assert "audit_rules_immutable" in report["picked_up_by_rescan"]
    assert report["rules"]["audit_rules_immutable"]["outcome"] in ("remediated", "escalated", "deferred")


def test_login_defs_has_exactly_one_umask_line_with_the_profile_value(first_run):
    lines = [line for line in first_run["host"].ssh("cat /etc/login.defs").stdout.splitlines()
             if re.match(r"\s*UMASK\b", line)]
    assert len(lines) == 1 and re.fullmatch(r"UMASK\s+077", lines[0]), lines


def test_sshd_directives_land_before_the_match_block_which_is_unchanged(first_run):
    host = first_run["host"]
    text = host.ssh("sudo cat /etc/ssh/sshd_config").stdout
    assert text.endswith(MATCH_TAIL)
    match_at = text.index("Match Group sftponly")
    for directive in ("PermitRootLogin no", "ClientAliveInterval", "PermitEmptyPasswords no"):
        position = text.find(directive)
        assert 0 <= position < match_at, directive
    assert host.ssh("sudo /usr/sbin/sshd -t").returncode == 0


def test_events_name_the_modules_each_fix_ran(first_run):
    events = [json.loads(line) for line in (first_run["runs"] / "latest" / "events.jsonl").read_text().splitlines()]
    applied = {e["rule"]: e["data"]["modules"] for e in events if e["event"] == "fix_applied"}
    assert "ansible.builtin.lineinfile" in applied["accounts_umask_etc_login_defs"]
    assert "ansible.builtin.package_facts" in applied["sshd_disable_root_login"]
    report = host_report(first_run)
    assert report["rules"]["accounts_umask_etc_login_defs"]["modules"] == applied["accounts_umask_etc_login_defs"]
    assert {e["event"] for e in events} >= {"run_start", "scan", "rule_start", "fix_applied", "health", "verify",
                                            "rule_complete", "run_end"}


def test_one_checkpoint_save_covers_a_fixs_loop_and_its_later_tasks(first_run):
    """Issue 9: sysctl_kernel_dmesg_restrict's vendor fix comments the key out in every file
    its `find` returned (a loop), then sets it with ansible.posix.sysctl in /etc/sysctl.conf.
    One checkpoint save covers them all, before the first change (one per file before)."""
    events = [json.loads(line) for line in (first_run["runs"] / "latest" / "events.jsonl").read_text().splitlines()]
    fix = next(e for e in events if e["event"] == "fix_applied" and e["rule"] == "sysctl_kernel_dmesg_restrict")
    assert [c["state"] for c in fix["data"]["checkpoint"]["calls"]] == ["save"]
    covered = set(fix["data"]["checkpoint"]["covered"])
    assert {"/etc/sysctl.conf", "/etc/sysctl.d/99-sysctl.conf", "/usr/lib/sysctl.d/50-pid-max.conf"} <= covered, covered
    replaced = next(t for t in fix["data"]["tasks"] if t["module"] == "ansible.builtin.replace")
    assert not replaced["skipped"]  # the loop ran: its items' files were saved ahead, not skipped


def test_second_run_changes_nothing_for_remediated_rules(first_run, tmp_path):
    host = first_run["host"]
    remediated = {r for r, o in host_report(first_run)["rules"].items() if o["outcome"] == "remediated"}
    files = ("/etc/login.defs", "/etc/ssh/sshd_config", "/etc/profile", "/etc/sudoers")
    digests = {f: file_digest(host, f) for f in files}
    summary = run_playbook(first_run["remediate"], first_run["inventory"], host, tmp_path)
    second = summary["hosts"][host.name]
    assert remediated and not (remediated & set(second["rules"])), second["rules"].keys()
    assert {f: file_digest(host, f) for f in files} == digests
    assert second["before"]["pass"] >= host_report(first_run)["after"]["pass"]
