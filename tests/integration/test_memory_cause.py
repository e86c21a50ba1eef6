"""A failed fix's lesson holds only while its cause does (issue 19 item 3), on real lab hosts.

accounts_password_pam_minlen's fix (Debian 12 content) sets ``minlen`` in
/etc/security/pwquality.conf; its OVAL check also wants pam_pwquality in
/etc/pam.d/common-password, which only libpam-pwquality's pam-auth-update puts there. On a host
without the package the fix is ineffective: run 1 learns that, with the check it left failing.
Run 2, a fresh host like the first, ends the rule from memory after one check of the rule,
with zero attempts. Run 3, a fresh host with the package installed: the check finds the cause
gone, the fix is tried again, passes (our own oscap run says so) and the lesson is retired.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.store import MemoryStore
from lab_fixtures import REPO_ROOT
from test_agents import events_of, own_oscap, run_job

MINLEN = "accounts_password_pam_minlen"


def has_pwquality(host) -> bool:
    return host.ssh("dpkg-query -W -f='${Status}' libpam-pwquality 2>/dev/null; true").stdout.strip() == \
        "install ok installed"


@pytest.fixture(scope="module")
def three_runs(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    store = tmp_path_factory.mktemp("memory")
    out = {"store": store}
    for label in ("first", "second", "third"):
        host = lab.reset([lab_host.name])[0]
        if label == "third":
            host.ssh("sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
                     "libpam-pwquality >/tmp/apt.log 2>&1 || (tail -20 /tmp/apt.log; false)", timeout=600)
        out[label + "_package"] = has_pwquality(host)
        runs = tmp_path_factory.mktemp("runs")
        out[label] = run_job(remediate, lab_inventory, host, runs, None, [MINLEN], scapforge_memory_path=str(store))
        out[label + "_events"] = events_of(runs)
        out[label + "_after"] = own_oscap(host, [MINLEN])
    with MemoryStore(str(store)).snapshot() as tx:
        out["lessons"] = [dict(d) for d in tx.lessons.all()]
    # run 4, the same host: lessons.json cut to two thirds (a full disk, a killed copy)
    data = (store / "lessons.json").read_bytes()
    (store / "lessons.json").write_bytes(data[:len(data) * 2 // 3])
    out["doctor_cut"] = lessons_tool("doctor", store)
    runs = tmp_path_factory.mktemp("runs")
    proc = remediate(lab_inventory, host.name, runs, {"scapforge_rules": [MINLEN], "scapforge_memory_path": str(store)})
    assert proc.returncode == 0, proc.stdout[-4000:]
    out["fourth_console"] = proc.stdout
    out["fourth"] = json.loads((runs / "latest" / "summary.json").read_text())["hosts"][host.name]
    out["fourth_html"] = (runs / "latest" / "report.html").read_text()
    out["aside"] = sorted(p.name for p in store.iterdir() if ".corrupt-" in p.name)
    out["repair"] = lessons_tool("repair", store)
    out["doctor_after"] = lessons_tool("doctor", store)
    return out


def lessons_tool(command, store):
    return subprocess.run([sys.executable, "tools/lessons.py", command, "--path", str(store)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def causes(events) -> list[dict]:
    return [e["data"] for e in events if e["event"] == "memory_cause"]


def test_without_the_package_the_fix_is_ineffective_and_its_cause_is_kept(three_runs):
    assert three_runs["first_package"] is False
    first = three_runs["first"]["rules"][MINLEN]
    assert (first["outcome"], first["reason"], first["attempts"]) == ("escalated", "fix_ineffective", 1)
    [lesson] = [d for d in three_runs["lessons"] if d["kind"] == "negative" and (d["scope"] or {}).get("rule") == MINLEN]
    checks = lesson["rules"][MINLEN]["vendor_checks"]
    assert checks and any("pam_pwquality" in line or "pwquality" in line for line in checks), checks
    assert lesson["cause"]["checks"] == checks and lesson["cause"]["reason"] == "fix_ineffective"


def test_a_host_like_the_first_ends_the_rule_from_memory_after_one_check(three_runs):
    assert three_runs["second_package"] is False
    second = three_runs["second"]["rules"][MINLEN]
    assert (second["outcome"], second["reason"], second["attempts"]) == ("escalated", "fix_ineffective", 0)
    assert second["from_memory"] and "still fails" in second["detail"]
    [cause] = causes(three_runs["second_events"])
    assert (cause["stands"], cause["result"], cause["lesson"]) == (True, "fail", second["from_memory"])
    assert three_runs["second_after"][MINLEN] == "fail"


def test_where_the_package_is_present_the_fix_is_tried_again_passes_and_the_lesson_retires(three_runs):
    assert three_runs["third_package"] is True
    third = three_runs["third"]["rules"][MINLEN]
    assert (third["outcome"], third["reason"], third["attempts"]) == ("remediated", "verified", 1)
    assert third["from_memory"] is None
    [cause] = causes(three_runs["third_events"])
    assert cause["stands"] is False and "no longer fails" in cause["why"]
    assert three_runs["third_after"][MINLEN] == "pass"  # an independent scan
    [lesson] = [d for d in three_runs["lessons"] if d["id"] == cause["lesson"]]
    assert lesson["status"] == "retired"


def test_a_truncated_table_is_reported_moved_aside_and_repairable(three_runs):
    assert three_runs["doctor_cut"].returncode == 1 and "lessons.json" in three_runs["doctor_cut"].stdout
    [moved] = three_runs["aside"]  # moved aside once, its bytes kept
    memory = three_runs["fourth"]["memory"]
    assert memory["state"] == "degraded" and moved in memory["reason"] and "lessons.json is corrupt" in memory["reason"]
    assert "memory degraded: lessons.json is corrupt" in three_runs["fourth_console"]
    assert moved in three_runs["fourth_html"]
    assert three_runs["repair"].returncode == 0, three_runs["repair"].stdout + three_runs["repair"].stderr
    assert "dropped" in three_runs["repair"].stdout  # what it could not keep is listed
    assert three_runs["doctor_after"].returncode == 0 and "healthy" in three_runs["doctor_after"].stdout
