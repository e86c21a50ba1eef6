"""Vendor fixes checked for health once per batch, with per-rule bisection (issue 9).

Four sysctl rules fail on the lab's baseline; their vendor fixes change files only (no
command, package, service, login file or access path), so they are applied in one pass
and the host's health is checked once for the batch. When the batch is unhealthy (here by
the user's own health command, which refuses one rule's setting), every attempt of the
batch is rolled back and applied again alone with its own check: only the rule at fault is
rolled back, the other three are verified.
"""

from __future__ import annotations

import json

import pytest

RULES = [
    "sysctl_net_ipv6_conf_all_accept_ra_defrtr",
    "sysctl_net_ipv6_conf_all_accept_ra_pinfo",
    "sysctl_net_ipv6_conf_all_accept_redirects",
    "sysctl_net_ipv6_conf_all_autoconf",
]
CULPRIT = "sysctl_net_ipv6_conf_all_accept_ra_pinfo"
# the user's health check: healthy unless a configuration file sets accept_ra_pinfo
REFUSE_PINFO = "! grep -rqs '^[[:space:]]*net.ipv6.conf.all.accept_ra_pinfo' /etc/sysctl.conf /etc/sysctl.d"
SETTINGS = "sudo grep -rhs '^net.ipv6.conf.all' /etc/sysctl.conf /etc/sysctl.d | sort"


def _run(lab, lab_host, lab_inventory, run_dir, remediate, extra):
    host = lab.reset([lab_host.name])[0]
    proc = remediate(lab_inventory, host.name, run_dir, dict({"scapforge_rules": RULES}, **extra))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    report = json.loads((run_dir / "latest" / "summary.json").read_text())["hosts"][host.name]
    events = [json.loads(line) for line in (run_dir / "latest" / "events.jsonl").read_text().splitlines()]
    return host, report, events


@pytest.fixture(scope="module")
def healthy(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    return _run(lab, lab_host, lab_inventory, tmp_path_factory.mktemp("healthy"), remediate, {})


@pytest.fixture(scope="module")
def bisected(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    host, report, events = _run(lab, lab_host, lab_inventory, tmp_path_factory.mktemp("bisected"), remediate,
                                {"scapforge_health_commands": [REFUSE_PINFO]})
    return host, report, events, host.ssh(SETTINGS).stdout


def test_one_health_check_for_the_batch(healthy):
    _host, report, events = healthy
    assert {r: (report["rules"][r]["outcome"], report["rules"][r]["reason"]) for r in RULES} == {
        r: ("remediated", "verified") for r in RULES}
    health = [e for e in events if e["event"] == "health"]
    assert len(health) == 1, health
    assert health[0]["rule"] is None and sorted(health[0]["data"]["batch"]) == sorted(RULES)
    assert health[0]["data"]["healthy"] is True
    for rule in RULES:
        log = report["rules"][rule]["attempt_log"]
        assert [(a["source"], a["verdict"]) for a in log] == [("vendor", "passed")], log


def test_unhealthy_batch_is_bisected_to_the_rule_at_fault(bisected):
    _host, report, events, settings = bisected
    outcomes = {r: (report["rules"][r]["outcome"], report["rules"][r]["reason"]) for r in RULES}
    assert outcomes == dict({r: ("remediated", "verified") for r in RULES},
                            **{CULPRIT: ("escalated", "unhealthy_rolled_back")}), outcomes
    assert report["stopped"] is None
    health = [e for e in events if e["event"] == "health"]
    batch = [e["data"] for e in health if e["rule"] is None]
    # the batch's check failed on the user's command; after the restore the host is healthy
    assert [(h["healthy"], bool(h.get("after_restore"))) for h in batch] == [(False, False), (True, True)], batch
    assert batch[0]["checks"]["user_1"]["ok"] is False, batch[0]["checks"]
    # then each rule was applied alone, with its own check: only the culprit's failed
    alone = {e["rule"]: e["data"]["healthy"] for e in health if e["rule"] is not None and not e["data"].get(
        "after_restore")}
    assert alone == dict({r: True for r in RULES}, **{CULPRIT: False}), alone
    for rule in RULES:
        log = report["rules"][rule]["attempt_log"]
        assert len(log) == 1, log  # the batch's attempt gave way to the one applied alone
        assert "applied alone: its batch" in log[0]["detail"], log
    # on the host: the three verified settings stay, the culprit's is gone
    assert "accept_ra_pinfo" not in settings, settings
    for rule in set(RULES) - {CULPRIT}:
        key = rule.replace("sysctl_", "").replace("net_ipv6_conf_all_", "net.ipv6.conf.all.")
        assert key in settings, (key, settings)
