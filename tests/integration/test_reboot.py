"""Deferred reboot-required fixes on a real lab host (issue 8 item 6, DESIGN decision 4).

No reboot-marked fix of the lab's content ends deferred by itself in a container: the net.*
sysctl fixes pass at once (the container's /proc/sys/net is writable) and the kernel-wide
ones fail on the read-only /proc/sys (environment:read_only_proc_sys). So the test gives
sysctl_net_ipv4_tcp_syncookies (reboot="true" in its Ansible fix) what a real "applies at
boot" setting has: a transient unit (it lives in /run, so a reboot ends it) that keeps the
running value at 0. The vendor fix then runs cleanly (config file written, value set) and
oscap still reports fail: deferred/reboot_required. After a reboot the unit is gone and the
boot applies the fix's /etc/sysctl.d file, so the rule passes: remediated/verified_after_reboot.
"""

from __future__ import annotations

import json

import pytest

RULE = "sysctl_net_ipv4_tcp_syncookies"
BOOT_ID = "cat /proc/sys/kernel/random/boot_id"
PENDING_UNIT = "scapforge-pending-syncookies"


def _pending_until_reboot(host):
    """Hold net.ipv4.tcp_syncookies at 0 until the next boot (a transient unit in /run)."""
    host.ssh("sudo -n systemd-run --quiet --unit %s /bin/sh -c "
             "'while :; do /sbin/sysctl -qw net.ipv4.tcp_syncookies=0; sleep 0.2; done'" % PENDING_UNIT)
    host.ssh("sleep 0.5; test \"$(cat /proc/sys/net/ipv4/tcp_syncookies)\" = 0")


def _run(lab, lab_host, lab_inventory, remediate, tmp_path, allow_reboot):
    host = lab.reset([lab_host.name])[0]
    _pending_until_reboot(host)
    boot_before = host.ssh(BOOT_ID).stdout.strip()
    proc = remediate(lab_inventory, host.name, tmp_path, {"scapforge_rules": [RULE],
                                                          "scapforge_allow_reboot": allow_reboot})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "latest"
    report = json.loads((run_dir / "hosts" / ("%s.json" % host.name)).read_text())
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return host, boot_before, report, events


def test_without_allow_reboot_the_fix_stays_deferred_and_is_listed(lab, lab_host, lab_inventory, remediate, tmp_path):
    host, boot_before, report, events = _run(lab, lab_host, lab_inventory, remediate, tmp_path, False)
    outcome = report["rules"][RULE]
    assert (outcome["outcome"], outcome["reason"]) == ("deferred", "reboot_required"), outcome
    assert outcome["attempt_log"][0]["rolled_back"] is None  # a deferred fix stays applied
    assert report["reboot_required"] == [RULE]
    assert report["rebooted"] is None and report["stopped"] is None
    assert not [e for e in events if e["event"] == "reboot"]
    assert host.ssh(BOOT_ID).stdout.strip() == boot_before
    assert "net.ipv4.tcp_syncookies" in host.ssh("sudo -n cat /etc/sysctl.d/*.conf").stdout


def test_with_allow_reboot_the_host_reboots_once_and_the_rule_is_verified(lab, lab_host, lab_inventory, remediate,
                                                                          tmp_path):
    host, boot_before, report, events = _run(lab, lab_host, lab_inventory, remediate, tmp_path, True)
    boot_after = host.ssh(BOOT_ID).stdout.strip()
    assert boot_after and boot_after != boot_before
    outcome = report["rules"][RULE]
    assert (outcome["outcome"], outcome["reason"]) == ("remediated", "verified_after_reboot"), outcome
    assert outcome["attempts"] == 1 and outcome["attempt_log"][0]["reason"] == "reboot_required"
    assert report["reboot_required"] == [] and report["stopped"] is None
    reboots = [e["data"] for e in events if e["event"] == "reboot"]
    assert len(reboots) == 1 and reboots[0]["ok"] is True and reboots[0]["rules"] == [RULE]
    assert 0 < reboots[0]["seconds"] < 600
    print("reboot took %s s" % reboots[0]["seconds"])
    assert report["rebooted"] == reboots[0]
    verified = [e for e in events if e["event"] == "verify" and e["data"].get("label") == "after_reboot"]
    assert [(v["rule"], v["data"]["result"], v["data"]["batch"]) for v in verified] == [(RULE, "pass", [RULE])]
    # the final scan came after the reboot and agrees
    assert report["after_scan"] == "final" and report["still_failing"] == []
    assert host.ssh("systemctl is-active %s" % PENDING_UNIT, check=False).stdout.strip() != "active"
    assert host.ssh("cat /proc/sys/net/ipv4/tcp_syncookies").stdout.strip() == "1"


@pytest.fixture(autouse=True, scope="module")
def _leave_a_baseline_host(lab, lab_host):
    yield
    lab.reset([lab_host.name])
