"""The run's pure decisions (plugins/plugin_utils/_run/decisions.py), with hand-computed values.

Issue 16 planted seven bugs in the engine's decisions that the unit tests did not catch; each
class is killed by a named test here (its docstring names the class), the restore's
verification by tests/unit/plugins/module_utils/test_restore_verified.py. ``make mutation``
measures the rest.
"""

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions as D

P = "xccdf_org.ssgproject.content_rule_"


def _outcome(rule, reason):
    return outcomes.RuleOutcome.of(rule, reason)


def _outcomes(**reasons):
    """{P + name: the outcome of that rule with its reason}, in the order given."""
    return {P + name: _outcome(P + name, reason) for name, reason in reasons.items()}


# ---------------------------------------------------------------- verification values

def test_the_closed_lists():
    """oscap results reported but never worked (DESIGN decision 3); error kinds that mean the
    scanner itself died."""
    assert D.NOT_WORK == ("error", "unknown", "notchecked")
    assert "fail" not in D.NOT_WORK and "notapplicable" not in D.NOT_WORK
    assert D.CRASH_KINDS == {"scanner_crashed", "oom_killed", "timeout"}
    assert D.MISSING == "missing"


@pytest.mark.parametrize("kind, value", [
    ("scanner_crashed", "scanner_crash"),
    ("oom_killed", "scanner_crash"),
    ("timeout", "scanner_crash"),
    ("oscap_error", "scan_failed"),
    ("no_such_profile", "scan_failed"),
])
def test_failed_scan_value_by_error_kind(kind, value):
    assert D.failed_scan_value({"failed": True, "error_kind": kind}) == value


def test_failed_scan_without_a_kind_is_a_scan_failure():
    assert D.failed_scan_value({"failed": True}) == "scan_failed"


def test_missing_verification_result_is_never_a_pass():
    """Bug class: a missing verification result counted as a pass. A rule the verification
    scan has no result for is ``missing``, and judging an attempt on ``missing`` gives no
    pass (verify_error), whatever the fix changed."""
    scan = {"rules": {P + "other": "pass"}}
    assert D.rule_value(scan, P + "mine") == "missing"
    assert D.rule_value({"rules": None}, P + "mine") == "missing"
    assert D.rule_value({}, P + "mine") == "missing"
    assert A.judge(None, {"ok": True, "changed": True}, True, "missing") == (A.FAILED, "verify_error")
    assert A.judge(None, {"ok": True, "changed": False}, None, "missing") == (A.FAILED, "verify_error")
    assert A.after_reboot_reason("missing") == "verify_error"


def test_rule_value_is_oscaps_result():
    scan = {"rules": {P + "a": "pass", P + "b": "fail", P + "c": "notapplicable"}}
    assert [D.rule_value(scan, P + r) for r in "abc"] == ["pass", "fail", "notapplicable"]


def test_a_failed_scan_overrides_the_rules_it_still_lists():
    scan = {"failed": True, "error_kind": "oom_killed", "rules": {P + "a": "pass"}}
    assert D.rule_value(scan, P + "a") == "scanner_crash"
    assert D.rule_value({"failed": True, "rules": {P + "a": "pass"}}, P + "a") == "scan_failed"


# ---------------------------------------------------------------- whole-scan failures

def test_whole_scan_crash_says_nothing_of_stderr():
    seen = []
    result = {"failed": True, "error_kind": "timeout", "msg": "killed", "stderr_tail": "No space left on device"}
    assert D.whole_scan_failure(result, seen.append or "disk_full") == ("scanner_crash", "")
    assert seen == []  # a crash is a crash, whatever stderr says


def test_whole_scan_failure_names_the_environment_from_msg_and_stderr():
    seen = []

    def kind(text):
        seen.append(text)
        return "disk_full"

    result = {"failed": True, "msg": "oscap exited 1", "stderr_tail": "write failed\nNo space left on device\n"}
    said = "write failed | No space left on device"
    assert D.whole_scan_failure(result, kind) == ("environment:disk_full", said)
    assert seen == ["oscap exited 1\n" + said]


def test_whole_scan_failure_keeps_the_last_600_characters_of_stderr():
    tail = "x" * 700 + "\n" + "y" * 10
    reason, said = D.whole_scan_failure({"failed": True, "msg": "m", "stderr_tail": tail}, lambda text: "full_tmp")
    assert reason == "environment:full_tmp"
    assert len(said) == 600 and said == ("x" * 700 + " | " + "y" * 10)[-600:] and said.endswith("x | " + "y" * 10)


def test_whole_scan_failure_without_stderr_or_environment():
    seen = []
    result = {"failed": True, "msg": "oscap exited 2"}
    assert D.whole_scan_failure(result, seen.append) == ("scan_failed", "")
    assert seen == ["oscap exited 2\n"]
    assert D.whole_scan_failure({"failed": True, "msg": "m", "stderr_tail": None}, lambda text: "tmp") == \
        ("environment:tmp", "")


# ---------------------------------------------------------------- batch rollback

def test_covered_prefers_the_files_the_tasks_changed():
    assert D.covered({"changing": ["/etc/a"], "covered": ["/etc/a", "/etc/b"]}) == {"/etc/a"}
    assert D.covered({"changing": [], "covered": ["/etc/a"]}) == set()  # ran, changed no file
    assert D.covered({"covered": ["/etc/a", "/etc/b"]}) == {"/etc/a", "/etc/b"}
    assert D.covered({"changing": None, "covered": ["/etc/a"]}) == set()
    assert D.covered({}) == set()
    assert D.covered(None) == set()


def test_batch_rollback_respects_shared_files():
    """Bug class: a batch rollback ignoring shared files. A later attempt of the batch that
    still stands and changed a file of the failed one blocks its restore; one restored
    already (rolled_back True) does not; one whose restore failed (False) still stands."""
    mine = {"changing": ["/etc/a", "/etc/b"]}
    later = [
        ("r2", {"changing": ["/etc/b"]}, None),            # stands, shares /etc/b
        ("r3", {"changing": ["/etc/c"]}, None),            # stands, shares nothing
        ("r4", {"changing": ["/etc/a"]}, True),            # restored already: no longer blocks
        ("r5", {"changing": ["/etc/a", "/etc/z"]}, False),  # its restore failed: still there
        ("r6", None, None),                                # ran nothing
    ]
    assert D.rollback_blockers(mine, later) == ["r2", "r5"]
    assert D.rollback_blockers(mine, []) == []
    assert D.rollback_blockers(None, later) == []


def test_batch_rollback_changing_beats_covered():
    """Bug class: a batch rollback ignoring shared files (``changing`` beats ``covered``): a
    file saved ahead but never changed is no conflict; an attempt recorded without
    ``changing`` is judged by what it saved."""
    mine = {"changing": ["/etc/x"], "covered": ["/etc/x", "/etc/shared"]}
    later = [("r2", {"changing": ["/etc/shared"], "covered": ["/etc/shared", "/etc/x"]}, None),
             ("r3", {"covered": ["/etc/x"]}, None)]
    assert D.rollback_blockers(mine, later) == ["r3"]
    assert D.rollback_blockers({"covered": ["/etc/shared"]}, later) == ["r2"]


# ---------------------------------------------------------------- order, waivers

def test_access_impacting_rules_are_ordered_last():
    """Bug class: access-impacting rules not ordered last. The risky rules move to the end;
    both groups keep their relative order."""
    impact = {"b": "sshd access", "d": "sudo", "e": ""}.get
    assert D.access_last(["d", "a", "b", "c", "e"], impact) == ["a", "c", "e", "d", "b"]
    assert D.access_last(["a", "c"], impact) == ["a", "c"]
    assert D.access_last([], impact) == []


def _with(base, **changes):
    """``base`` with ``changes`` (a plain merge: pylint reads ``**dict(base, k=v)`` as a repeated keyword)."""
    return {**base, **changes}


NOTHING = dict(stopped=None, out_of_budget=False, waiver_detail=None, skipped=False, impact=None, allowed=False,
               unfixable=None)


def test_waivers_are_honoured_in_order():
    """Bug class: waivers ignored. An active waiver or the skip list makes the rule
    ``waived`` (the waiver's detail kept); only a stopped host and the run's budget come
    before it, and it comes before the access impact and an unfixable rule."""
    waived = _with(NOTHING, waiver_detail="waived until 2031-01-01: ticket 7")
    assert D.not_attempted("r", **waived) == ("waived", "waived until 2031-01-01: ticket 7")
    assert D.not_attempted("r", **_with(NOTHING, waiver_detail="")) == ("waived", "")
    assert D.not_attempted("r", **_with(NOTHING, skipped=True)) == ("waived", "")
    assert D.not_attempted("r", **_with(waived, skipped=True)) == ("waived", "waived until 2031-01-01: ticket 7")
    assert D.not_attempted("r", **_with(waived, impact="sshd", unfixable="kernel_config")) == \
        ("waived", "waived until 2031-01-01: ticket 7")
    assert D.not_attempted("r", **_with(NOTHING, skipped=True, impact="sshd", unfixable="kernel_config")) == \
        ("waived", "")
    assert D.not_attempted("r", **_with(waived, out_of_budget=True)) == ("budget", "")
    assert D.not_attempted("r", **_with(waived, stopped="lost sudo")) == ("host_stopped", "lost sudo")


def test_not_attempted_order_of_the_other_checks():
    everything = dict(stopped="lost sudo", out_of_budget=True, waiver_detail="w", skipped=True, impact="sshd",
                      allowed=False, unfixable="kernel_config")
    assert D.not_attempted("r", **everything) == ("host_stopped", "lost sudo")
    assert D.not_attempted("r", **_with(everything, stopped="")) == ("budget", "")
    assert D.not_attempted("r", **_with(NOTHING, impact="sshd", unfixable="kernel_config")) == \
        ("access_impacting", "sshd")
    assert D.not_attempted("r", **_with(NOTHING, impact="sshd", allowed=True, unfixable="kernel_config")) == \
        ("environment:kernel_config", "no fix on a running host can pass this rule")
    assert D.not_attempted("r", **_with(NOTHING, unfixable="partitioning")) == \
        ("environment:partitioning", "no fix on a running host can pass this rule")
    assert D.not_attempted("r", **_with(NOTHING, impact="sshd", allowed=True)) is None
    assert D.not_attempted("r", **_with(NOTHING, impact="", allowed=False)) is None
    assert D.not_attempted("r", **NOTHING) is None


# ---------------------------------------------------------------- regressions

def test_regressions_are_rules_that_passed_at_baseline_and_no_longer_pass():
    before = {P + "zeta": "pass", P + "alpha": "pass", P + "beta": "fail", P + "gone": "pass", P + "same": "pass",
              "other_rule": "pass", P + "err": "pass", P + "na": "notapplicable"}
    after = {P + "zeta": "fail", P + "alpha": "error", P + "beta": "fail", P + "same": "pass", "other_rule": "fail",
             P + "err": "unknown", P + "na": "fail"}
    assert D.regressions(before, after) == ["alpha", "err", "other_rule", "zeta"]
    assert D.regressions(before, dict(before)) == []


def test_a_regression_is_marked():
    """Bug class: a regression never marked. A rule remediated during the run that the final
    scan shows failing (or with any result but pass) is regressed; one that still passes,
    one the final scan did not judge and one that was never remediated are not."""
    by_rule = _outcomes(
        z_undone="verified",
        kept="verified",
        unscanned="verified",
        after_reboot="verified_after_reboot",
        escalated="fix_failed",
        a_error="verified",
    )
    after = {P + "z_undone": "fail", P + "kept": "pass", P + "after_reboot": "fail", P + "escalated": "fail",
             P + "a_error": "error"}
    assert D.regressed(by_rule, after) == [P + "z_undone", P + "after_reboot", P + "a_error"]  # by_rule's order
    assert D.regressed(by_rule, {}) == []


def test_outcome_counts_are_sorted_outcome_slash_reason():
    by_rule = {"r1": _outcome("r1", "verified"), "r2": _outcome("r2", "no_effect"),
               "r3": _outcome("r3", "verified"), "r4": _outcome("r4", "environment:kernel_config"),
               "r5": _outcome("r5", "access_impacting")}
    counts = D.outcome_counts(by_rule)
    assert counts == {"escalated/environment:kernel_config": 1, "escalated/no_effect": 1,
                      "remediated/verified": 2, "skipped/access_impacting": 1}
    assert list(counts) == sorted(counts)
    assert D.outcome_counts({}) == {}


# ---------------------------------------------------------------- batch health

def test_an_unhealthy_batch_is_never_treated_as_healthy():
    """Bug class: an unhealthy batch treated as healthy. Only a healthy shared check lets the
    batch be verified as it is; an unhealthy one is bisected only when every restore was
    verified and the host is healthy again, else the host stops."""
    assert D.batch_verdict(True, [False], False) == "healthy"
    assert D.batch_verdict(False, [True, True], True) == "bisect"
    assert D.batch_verdict(False, [True, False], True) == "stop"
    assert D.batch_verdict(False, [False, True], True) == "stop"
    assert D.batch_verdict(False, [True, True], False) == "stop"
    assert D.batch_verdict(False, [False], False) == "stop"
    # nothing needed restoring: the verdict rests on the host's health after (all([]) is True, any([]) is not)
    assert D.batch_verdict(False, [], True) == "bisect"
    assert D.batch_verdict(False, [], False) == "stop"


# ---------------------------------------------------------------- a hung or crashed scan (issue 17 item 8)

@pytest.mark.parametrize("baseline, override, timeout", [
    (11.0, 0, 120),      # the anssi_bp28_high host of the issue: 110 s is under the floor
    (11.9, 0, 120),      # 119 s: still the floor
    (12.0, 0, 120),      # exactly the floor
    (12.01, 0, 121),     # just over: ten times, rounded up
    (30.0, 0, 300),      # ten times the baseline
    (0.4, 0, 120),       # a few rules' baseline
    (None, 0, 900),      # no baseline yet: oscap_eval's own default
    (0, 0, 900),         # a duration of 0 is no duration
    (-1.0, 0, 900),
    (30.0, 5, 5),        # the override wins, even under the floor
    (None, 45, 45),      # and before the baseline too
    (30.0, -3, 300),     # a negative override is no override
])
def test_scan_timeout_follows_the_baseline(baseline, override, timeout):
    assert D.scan_timeout(baseline, override) == timeout
    assert isinstance(D.scan_timeout(baseline, override), int)


def test_scan_timeout_constants():
    assert (D.SCAN_TIMEOUT_FACTOR, D.SCAN_TIMEOUT_FLOOR, D.SCAN_TIMEOUT_UNKNOWN, D.SCAN_TRIES) == (10, 120, 900, 2)


@pytest.mark.parametrize("result, tries, again", [
    ({"failed": True, "error_kind": "timeout"}, 1, True),          # hung: killed, run once more
    ({"failed": True, "error_kind": "scanner_crashed"}, 1, True),  # SIGSEGV
    ({"failed": True, "error_kind": "oom_killed"}, 1, True),
    ({"failed": True, "error_kind": "timeout"}, 2, False),         # once more only
    ({"failed": True, "error_kind": "scanner_crashed"}, 3, False),
    ({"failed": True, "error_kind": "oscap_error"}, 1, False),     # refused: the same call fails the same way
    ({"failed": True}, 1, False),                                   # no kind: oscap_error
    ({"failed": True, "error_kind": "unknown_rule"}, 1, False),
    ({"rules": {P + "a": "pass"}}, 1, False),                       # a scan that finished
    ({"failed": False, "error_kind": "timeout"}, 1, False),
])
def test_retry_scan_once_for_a_hung_or_crashed_scan(result, tries, again):
    assert D.retry_scan(result, tries) is again


@pytest.mark.parametrize("code, reason", [
    ("scanner_crash", "scanner_crash"),
    ("environment:disk_full", "environment:disk_full"),
    ("scan_failed", "verify_error"),
    ("oscap_error", "verify_error"),
    ("", "verify_error"),
])
def test_a_rule_not_worked_after_a_failed_rescan_gets_the_scanners_reason(code, reason):
    assert D.unworked_after_scan_failure(code) == reason
    assert outcomes.outcome_for(D.unworked_after_scan_failure(code)) == outcomes.ESCALATED


# ---------------------------------------------------------------- reconciled with the final scan

def test_a_rule_left_for_a_human_that_passes_at_the_end_is_reconciled():
    """Bug class (issue 17 item 5): a rule that passes in the final scan (another rule's fix
    made it pass) stays escalated and is listed for a human. Every escalated reason and every
    skipped reason but a waiver is reconciled when the final scan says pass; a waived rule, a
    remediated or deferred one, one that still fails and one without a final result are not."""
    by_rule = _outcomes(
        z_no_fix="llm_unavailable",
        rolled_back="fix_ineffective",
        still_fails="llm_unavailable",
        access="access_impacting",
        waived="waived",
        budget="budget",
        kernel="environment:kernel_config",
        verified="verified",
        reboot="reboot_required",
        unscanned="fix_failed",
        a_error="fix_failed",
        package_x_removed="check_unreliable",  # its pass proves nothing
    )
    after = {r: "pass" for r in by_rule if not r.endswith(("unscanned", "still_fails", "a_error"))}
    after.update({P + "still_fails": "fail", P + "a_error": "error"})
    assert D.passing_at_the_end(by_rule, after) == [P + "z_no_fix", P + "rolled_back", P + "access", P + "budget",
                                                    P + "kernel"]  # by_rule's order
    assert D.passing_at_the_end(by_rule, {}) == []
    assert D.PASSES_AFTER_OTHER_FIXES == "passes_after_other_fixes"
    assert outcomes.outcome_for(D.PASSES_AFTER_OTHER_FIXES) == "remediated"
    assert [D.left_for_a_human(_outcome("r", reason)) for reason in (
        "llm_unavailable", "host_stopped", "check_mode", "waived", "verified", "passes_without_fix", "reboot_required")] == [
        True, True, True, False, False, False, False]


def test_the_detail_says_whether_a_fix_of_its_own_stays_applied():
    log = [{"attempt": 1, "changed": True, "rolled_back": True}, {"attempt": 2, "changed": False, "rolled_back": None},
           {"attempt": 3, "changed": True, "rolled_back": False}, {"attempt": 4, "changed": True, "rolled_back": None}]
    assert D.kept_attempts(log) == [3, 4]
    assert D.kept_attempts(log[:2]) == []
    assert D.passes_after_other_fixes_detail("escalated/llm_unavailable", "final", []) == (
        "passes in the final scan after other rules' fixes; it was escalated/llm_unavailable; "
        "no fix of its own stays applied")
    assert D.passes_after_other_fixes_detail("escalated/fix_failed", "rescan", log, "task 2 failed") == (
        "passes in the rescan after other rules' fixes; it was escalated/fix_failed; "
        "its own attempt 3, 4 changed the host and stays applied (earlier: task 2 failed)")
    assert D.passes_after_other_fixes_detail(None, "precheck", log[:1]) == (
        "passes in the Worker's precheck after other rules' fixes; no attempt of its own passed; "
        "no fix of its own stays applied")
    assert len(D.passes_after_other_fixes_detail("escalated/x", "final", [], "y" * 2000)) == 800
    assert D.passes_after_other_fixes_detail(None, "second", []).startswith("passes in the second scan after")


def test_rules_openscap_leaves_unjudged_at_the_end():
    """notchecked, error and unknown at the end, and notapplicable after a judged baseline; a
    rule not applicable from the start, and every pass or fail, are not listed."""
    before = {P + "patches": "notchecked", P + "gone": "fail", P + "was_pass": "pass", P + "na": "notapplicable",
              P + "err": "pass", P + "ok": "fail"}
    last = {P + "patches": "notchecked", P + "gone": "notapplicable", P + "was_pass": "notapplicable",
            P + "na": "notapplicable", P + "err": "error", P + "ok": "pass", P + "new": "unknown"}
    assert D.not_judged(before, last) == {P + "err": ("pass", "error"), P + "gone": ("fail", "notapplicable"),
                                          P + "new": (None, "unknown"), P + "patches": ("notchecked", "notchecked"),
                                          P + "was_pass": ("pass", "notapplicable")}
    assert D.not_judged(before, {}) == {}
    assert D.NOT_JUDGED == ("notchecked", "error", "unknown")


def test_why_a_rule_is_unjudged_names_the_scanners_message():
    msg = "None of the check-content-ref elements\n   was resolvable."
    assert D.not_judged_why("notchecked", "notchecked", msg) == (
        "OpenSCAP did not check it (notchecked): the content has no automated check OpenSCAP can run for this rule; "
        "check it by hand; OpenSCAP says: None of the check-content-ref elements was resolvable.")
    assert D.not_judged_why("notchecked", "notchecked", None) == D.NOT_JUDGED_WHY["notchecked"]
    assert D.not_judged_why("fail", "notapplicable", None) == D.NOT_JUDGED_WHY["notapplicable"]
    assert D.not_judged_why("pass", "error", None) == D.NOT_JUDGED_WHY["error"] + " (it was pass at baseline)"
    assert D.not_judged_why(None, "informational", "") == "OpenSCAP's result is informational; check it by hand"
