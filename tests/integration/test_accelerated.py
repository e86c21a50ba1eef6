"""The main job under Mitogen for Ansible (the opt-in accelerator, README "Speed"), on a real lab host.

Mitogen keeps one Python interpreter per host and runs every module in it, so a fix's module
calls stop paying Python's start and AnsiballZ's imports each time (about 0.2 CPU s a call
here). What must not change with it: every fix is still proved by oscap, and every health
check still logs in afresh over plain OpenSSH (Mitogen pools its connections: a check through
it would ride on the open one and could not see a lock-out).
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from lab_fixtures import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tools"))
import accelerate  # noqa: E402  # pylint: disable=wrong-import-position

DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
PREFIX = "xccdf_org.ssgproject.content_rule_"
PROFILE = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
XCCDF = "{http://checklists.nist.gov/xccdf/1.2}"

RULES = [
    "package_audit_installed",               # a package install (package facts refreshed after it)
    "audit_rules_dac_modification_chmod",    # loops of find over the audit rules files
    "audit_rules_dac_modification_fchmod",
    "sshd_disable_root_login",               # sshd_config: the check sshd and a fresh login to it
    "accounts_umask_etc_login_defs",
]


def accepted_logins(host) -> int:
    """How many logins the host's sshd has accepted since boot (its journal)."""
    out = host.ssh("sudo journalctl --no-pager -o cat _COMM=sshd | grep -c '^Accepted publickey' || true").stdout
    return int(out.strip() or 0)


def own_scan(host) -> dict:
    """{short rule id: result} of RULES from an oscap run of the test's own."""
    args = " ".join("--rule %s%s" % (PREFIX, r) for r in RULES)
    host.ssh("sudo oscap xccdf eval --profile %s %s --results /tmp/accel-results.xml %s >/dev/null 2>&1; "
             "sudo chmod 644 /tmp/accel-results.xml" % (PROFILE, args, DS), timeout=300)
    root = ET.fromstring(host.ssh("cat /tmp/accel-results.xml", timeout=60).stdout.encode())
    return {rr.get("idref")[len(PREFIX):]: rr.find(XCCDF + "result").text
            for rr in root.iter(XCCDF + "rule-result") if rr.find(XCCDF + "result").text != "notselected"}


@pytest.fixture(scope="module")
def accelerated_run(lab, lab_host, lab_inventory, tmp_path_factory):
    host = lab.reset([lab_host.name])[0]
    before = own_scan(host)
    logins_before = accepted_logins(host)
    runs = tmp_path_factory.mktemp("runs")
    extra = {"scapforge_rules": RULES, "scapforge_runs_dir": str(runs), "scapforge_memory_path": str(runs / "memory")}
    proc = subprocess.run(["ansible-playbook", "playbooks/remediate.yml", "-i", str(lab_inventory), "-l", host.name,
                           "-e", json.dumps(extra)], cwd=REPO_ROOT, env=accelerate.mitogen_env(), capture_output=True,
                          text=True, timeout=900, check=False)
    logins_after = accepted_logins(host)  # before our own scan's logins; counts its own login
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    events = [json.loads(line) for line in (runs / "latest" / "events.jsonl").read_text().splitlines()]
    return {"host": host, "before": before, "after": own_scan(host), "events": events,
            "new_logins": logins_after - logins_before - 1,
            "summary": json.loads((runs / "latest" / "summary.json").read_text())}


def test_the_run_went_through_mitogen(accelerated_run):
    start = next(e for e in accelerated_run["events"] if e["event"] == "run_start")
    assert start["data"]["connection"] == "mitogen_ssh"


def test_every_rule_is_remediated_and_passes_in_our_own_scan(accelerated_run):
    # the audit rules apply once auditd is installed: the rescan picks them up
    assert accelerated_run["before"] == {r: "notapplicable" if r.startswith("audit_rules") else "fail" for r in RULES}
    rules = accelerated_run["summary"]["hosts"][accelerated_run["host"].name]["rules"]
    assert {r: rules[r]["outcome"] for r in RULES} == {r: "remediated" for r in RULES}
    assert accelerated_run["after"] == {r: "pass" for r in RULES}


def test_every_health_check_logged_in_afresh_over_plain_ssh(accelerated_run):
    health = [e for e in accelerated_run["events"] if e["event"] == "health"]
    assert health, "no health check ran"
    for event in health:
        assert event["data"]["healthy"] is True, event
        assert "fresh login and sudo ok" in event["data"]["detail"], event
    assert any(e["data"]["detail"].startswith("sshd with the new configuration: fresh login") for e in health)
    # the run's own logins only: Mitogen's one connection, the baseline's fresh login, and one
    # fresh login per health check (the sshd_config fix's check sshd logs to the same journal).
    # Checks riding on Mitogen's pooled connection would leave about two.
    assert accelerated_run["new_logins"] >= len(health) + 2, (accelerated_run["new_logins"], len(health))
    print("accepted logins during the run: %d; health checks: %d" % (accelerated_run["new_logins"], len(health)))
