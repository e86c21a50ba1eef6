"""oscap hangs in the rescan (issue 17 item 8), injected for real on a lab host: a wrapper in
place of /usr/bin/oscap runs the real one, except that one ``oscap xccdf eval`` call of the
run (counted in /run) sleeps forever instead, as oscap 1.3.7 did when it deadlocked (every
thread on a futex, no CPU). The scan is killed at the run's scan timeout (``scapforge_scan_timeout``,
60 s here: the hang is found in a minute, not in the 900 s the loop used to wait), run once more, and
the run goes on: the rules the rescan finds applicable are still worked, the final scan gives
the counts, no host error. When the retry hangs too, the host still goes on with what it knows
(the second test).

Rules: package_audit_installed (its fix installs auditd) and audit_rules_immutable, which is
notapplicable until auditd is installed: the rescan picks it up, as the 41 rules of the issue.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from llm_server import ScriptedLLM
from oscap_wrapper import calls, root, wrapped_oscap

PREFIX = "xccdf_org.ssgproject.content_rule_"
INSTALL, PICKED = "package_audit_installed", "audit_rules_immutable"
#: seconds any scan of the run may take (the scoped scans of two rules took 6 to 17 s on the loaded lab).
SCAN_TIMEOUT = 60

#: the oscap call that hangs: it writes its pid and sleeps forever.
HANG = """    echo $$ >> /run/scapforge-oscap-hung.pid
    exec sleep 86400"""


def events_of(runs: Path) -> list[dict]:
    return [json.loads(x) for x in (runs / "latest" / "events.jsonl").read_text().splitlines() if x.strip()]


def run_with_hangs(lab, lab_host, lab_inventory, tmp_path, remediate, hang_at: str, extra: dict):
    """Run the main job with the calls ``hang_at`` (one number a line) hanging; returns
    (CompletedProcess, seconds, oscap calls made, host report). The hung calls were killed."""
    host = lab.reset([lab_host.name])[0]
    with wrapped_oscap(host, [int(n) for n in hang_at.split()], HANG, ["/run/scapforge-oscap-hung.pid"]):
        started = time.monotonic()
        proc = remediate(lab_inventory, host.name, tmp_path, dict(extra, scapforge_scan_timeout=SCAN_TIMEOUT))
        seconds = time.monotonic() - started
        assert proc.returncode == 0, proc.stdout[-4000:]
        hung = root(host, "cat /run/scapforge-oscap-hung.pid").split()
        assert len(hung) == len(hang_at.split()) and all(p.isdigit() for p in hung)
        for pid in hung:  # killed, not left behind
            assert root(host, "kill -0 %s 2>/dev/null && echo alive; true" % pid).strip() == ""
        count = calls(host)
    report = json.loads((tmp_path / "latest" / "hosts" / ("%s.json" % host.name)).read_text())
    return proc, seconds, count, report


def test_a_rescan_that_hangs_once_is_killed_run_again_and_the_run_completes(lab, lab_host, lab_inventory, tmp_path,
                                                                            remediate):
    # calls: 1 the baseline, 2 the verification of package_audit_installed's fix, 3 the rescan
    _proc, seconds, calls, report = run_with_hangs(lab, lab_host, lab_inventory, tmp_path, remediate, "3\n",
                                                   {"scapforge_rules": [INSTALL, PICKED]})
    events = events_of(tmp_path)
    scans = [e["data"] for e in events if e["event"] == "scan"]
    retries = [e["data"] for e in events if e["event"] == "scan_retry"]
    print("\nscan hang: %d oscap calls, %.1f s; scans %s; retry %s; outcomes %s" % (
        calls, seconds, [(s["label"], s["tries"], s["timeout"], s["elapsed"]) for s in scans], retries,
        report["outcomes"]))
    # the hung call was killed at the timeout and the rescan run once more: its result was used
    assert [(r["label"], r["error_kind"], r["timeout"], r["tries"]) for r in retries] == [
        ("rescan", "timeout", SCAN_TIMEOUT, 1)]
    assert SCAN_TIMEOUT <= retries[0]["elapsed"] < SCAN_TIMEOUT + 5
    assert [(s["label"], s["tries"]) for s in scans] == [("baseline", 1), ("rescan", 2), ("final", 1)]
    assert all(s["timeout"] == SCAN_TIMEOUT for s in scans)
    assert not [e for e in events if e["event"] in ("scan_failed", "scan_gave_up", "host_stopped")]
    # no host error, no stop: the run completed
    assert "error" not in report and report["stopped"] is None and report["scan_failed"] is None
    assert report["after_scan"] == "final"
    # every rule worked: the one the (retried) rescan found applicable too
    assert report["picked_up_by_rescan"] == [PICKED]
    assert sorted(report["rules"]) == [PICKED, INSTALL]
    install, picked = report["rules"][INSTALL], report["rules"][PICKED]
    assert (install["outcome"], install["reason"]) == ("remediated", "verified"), install
    assert picked["attempts"] >= 1 and picked["reason"] not in ("host_stopped", "scanner_crash", "verify_error"), picked
    assert report["after"]["pass"] >= 1
    # baseline, verify, the hung rescan, its retry, the picked-up rule's verify, the final scan
    assert calls == 6


#: no content fix: with an endpoint it waits for the Worker phase, after the rescan.
NO_FIX = "accounts_passwords_pam_faillock_deny"


def test_a_rescan_that_hangs_twice_leaves_the_host_running_with_what_it_knows(lab, lab_host, lab_inventory, tmp_path,
                                                                              remediate):
    """The rescan hangs, and hangs again when it is run once more: the host is not stopped.
    The rule worked before keeps its verified result; the rule still waiting for the Worker
    is named with the scanner's reason, and no fix is tried for it (the LLM is never asked)."""
    with ScriptedLLM() as llm:
        llm.script(lambda b: True, {"verdict": "PLAN", "plan": "p", "tasks": [], "diagnosis": "d"}, times=None)
        extra = {"scapforge_rules": [INSTALL, NO_FIX], "scapforge_llm_base_url": llm.url,
                 "scapforge_llm_model": "scripted"}
        proc, seconds, calls, report = run_with_hangs(lab, lab_host, lab_inventory, tmp_path, remediate, "3\n4\n",
                                                      extra)
        asked = list(llm.requests)
    events = events_of(tmp_path)
    print("\nscan hang twice: %d oscap calls, %.1f s; scan_failed %s; outcomes %s" % (
        calls, seconds, report["scan_failed"], report["outcomes"]))
    assert calls == 4  # baseline, verify, the rescan and its retry; nothing scanned after
    assert [(e["data"]["label"], e["data"]["error_kind"]) for e in events if e["event"] == "scan_retry"] == [
        ("rescan", "timeout")]
    assert "error" not in report and report["stopped"] is None
    assert not [e for e in events if e["event"] == "host_stopped"]
    failed = report["scan_failed"]
    assert (failed["label"], failed["reason"], failed["error_kind"], failed["tries"]) == (
        "rescan", "scanner_crash", "timeout", 2)
    assert report["after"] is None and report["after_scan"] is None
    assert sorted(report["rules"]) == [NO_FIX, INSTALL]
    install, waiting = report["rules"][INSTALL], report["rules"][NO_FIX]
    assert (install["outcome"], install["reason"]) == ("remediated", "verified"), install
    assert (waiting["outcome"], waiting["reason"], waiting["attempts"]) == ("escalated", "scanner_crash", 0), waiting
    assert waiting["detail"].startswith("not worked: rescan scan failed (timeout, twice)")
    assert asked == []  # no Worker fix is tried without a scanner to judge it
    assert proc.stdout.count("no final scan (rescan scan failed") == 1
