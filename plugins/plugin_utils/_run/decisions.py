"""The run's pure judgements: no host, no I/O; every phase decides through these.

Each is pinned by tests/unit/plugins/plugin_utils/_run/test_decisions.py and by mutation
testing (``make mutation``).
"""

from __future__ import annotations

import math
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes, safety

#: results that are reported but never become work items (DESIGN decision 3).
NOT_WORK = ("error", "unknown", "notchecked")
#: oscap_eval error kinds that mean the scanner itself died (shared/cases scanner-crash).
CRASH_KINDS = frozenset({"scanner_crashed", "oom_killed", "timeout"})
#: what a rule with no result in a verification scan counts as: never a pass.
MISSING = "missing"


def failed_scan_value(result: t.Mapping) -> str:
    """The per-rule value a failed scan gives every rule it should have judged."""
    return "scanner_crash" if result.get("error_kind", "oscap_error") in CRASH_KINDS else "scan_failed"


def rule_value(result: t.Mapping, rule_id: str) -> str:
    """The rule's value in a verification scan's result: oscap's result, ``missing`` when
    the scan has none for it, or the failed scan's value."""
    if result.get("failed"):
        return failed_scan_value(result)
    return str((result.get("rules") or {}).get(rule_id, MISSING))


#: a scan's timeout once the baseline's duration is known: this many times it (issue 17 item 8)...
SCAN_TIMEOUT_FACTOR = 10
#: ...and never under this many seconds (a loaded host, a slower rescan).
SCAN_TIMEOUT_FLOOR = 120
#: before the baseline scan has a duration, without an override: oscap_eval's own default.
SCAN_TIMEOUT_UNKNOWN = 900
#: how many times one scan is run at most: a hung or crashed one is killed and run once more.
SCAN_TRIES = 2


def scan_timeout(baseline_seconds: float | None, override: int = 0) -> int:
    """Seconds oscap may run for any scan of the host: ``override`` when positive (the
    ``scan_timeout`` option), else ``SCAN_TIMEOUT_FACTOR`` times the host's own baseline scan
    (``baseline_seconds``, oscap's wall clock), never under ``SCAN_TIMEOUT_FLOOR``; before a
    baseline duration is known, ``SCAN_TIMEOUT_UNKNOWN``."""
    if override and override > 0:
        return int(override)
    if baseline_seconds is None or baseline_seconds <= 0:
        return SCAN_TIMEOUT_UNKNOWN
    return max(SCAN_TIMEOUT_FLOOR, int(math.ceil(SCAN_TIMEOUT_FACTOR * baseline_seconds)))


def retry_scan(result: t.Mapping, tries: int) -> bool:
    """True when a scan that ran ``tries`` times should run once more: its last result is a
    hung (``timeout``) or crashed scan (``CRASH_KINDS``) and it ran fewer than ``SCAN_TRIES``
    times. A scan oscap refused (bad content, a full disk: ``oscap_error``) is not retried:
    the same call would fail the same way."""
    return bool(result.get("failed")) and result.get("error_kind", "oscap_error") in CRASH_KINDS and tries < SCAN_TRIES


def unworked_after_scan_failure(code: str) -> str:
    """The reason a rule gets when a scan after changes (the rescan) failed even when run
    again and the rule was not worked yet (a rule held for last, one queued for the Worker):
    the scanner's reason (``scanner_crash``, ``environment:<kind>``), and ``verify_error`` for
    any other failed scan. Nothing can judge a fix until the scanner works, so none is tried."""
    if code == "scanner_crash" or code.startswith(outcomes.ENVIRONMENT_PREFIX):
        return code
    return "verify_error"


def whole_scan_failure(result: t.Mapping, environment_kind: t.Callable[[str], str | None]) -> tuple[str, str]:
    """(reason code, what oscap said or "") for a whole-profile scan that failed: a crash, an
    environment the scanner's words name (a full /tmp: ``environment:disk_full``), else
    ``scan_failed``."""
    said = " | ".join(str(result.get("stderr_tail") or "").splitlines())[-600:]
    if result.get("error_kind", "oscap_error") in CRASH_KINDS:
        return "scanner_crash", ""
    env = environment_kind("%s\n%s" % (result.get("msg"), said))
    if env:
        return outcomes.environment_reason(env), said
    return "scan_failed", ""


def covered(checkpoint: t.Mapping | None) -> set:
    """The files an attempt's tasks ran to change (``changing``); its checkpoint may hold
    more, saved ahead for tasks that then did not run. An attempt recorded without it: its
    saved files (``covered``)."""
    checkpoint = checkpoint or {}
    return set(checkpoint.get("changing", checkpoint.get("covered")) or [])


def rollback_blockers(mine: t.Mapping | None, later: t.Sequence[tuple[str, t.Mapping | None, bool | None]]) -> list[str]:
    """Why a failed attempt of a batch must be kept rather than restored: the short ids of
    the attempts applied after it in the batch (``later``: short id, checkpoint, rolled_back)
    that still stand (not rolled back) and changed some of the same files; restoring its
    checkpoint would undo them too. Empty: restore it. The batch is undone newest first, so
    a later attempt restored already no longer blocks."""
    files = covered(mine)
    return [short for short, checkpoint, rolled_back in later if rolled_back is not True and covered(checkpoint) & files]


def access_last(rule_ids: t.Sequence[str], impact: t.Callable[[str], t.Any]) -> list[str]:
    """The rules in their order, with the access-impacting ones moved to the end (issue 7
    item 4): a lock-out they cause can then cost no other rule."""
    risky = [r for r in rule_ids if impact(r)]
    return [r for r in rule_ids if r not in risky] + risky


def not_attempted(rule_id: str, *, stopped: str | None, out_of_budget: bool, waiver_detail: str | None,
                  skipped: bool, impact: str | None, allowed: bool, unfixable: str | None) -> tuple[str, str] | None:
    """(reason, detail) when the rule is not attempted at all, in this order: the host
    stopped, the run's time budget, an active waiver (``waiver_detail``), the user's skip list
    (``skipped``), an access impact without opt-in (``allowed``), a rule no running host can
    pass (``unfixable``: its environment kind). None: attempt it."""
    if stopped:
        return "host_stopped", stopped
    if out_of_budget:
        return "budget", ""
    if waiver_detail is not None:
        return "waived", waiver_detail
    if skipped:
        return "waived", ""
    if impact and not allowed:
        return "access_impacting", impact
    if unfixable:
        return outcomes.environment_reason(unfixable), "no fix on a running host can pass this rule"
    return None


def regressions(before: t.Mapping[str, str], after: t.Mapping[str, str]) -> list[str]:
    """Short ids of the rules that passed at baseline and do not pass in the final scan."""
    return sorted(safety.short_rule_id(r) for r, v in before.items() if v == "pass" and after.get(r) not in (None, "pass"))


def regressed(by_rule: t.Mapping[str, outcomes.RuleOutcome], after: t.Mapping[str, str]) -> list[str]:
    """The rules remediated during the run that the final scan shows failing (or with any
    result but pass): another fix undid them."""
    return [rule for rule, o in by_rule.items() if o.outcome == outcomes.REMEDIATED and after.get(rule) not in (None, "pass")]


def outcome_counts(by_rule: t.Mapping[str, outcomes.RuleOutcome]) -> dict[str, int]:
    """{"outcome/reason": number of rules}, sorted."""
    counts: dict[str, int] = {}
    for outcome in by_rule.values():
        key = "%s/%s" % (outcome.outcome, outcome.reason)
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def batch_verdict(status_healthy: bool, restored: t.Sequence[bool], after_healthy: bool) -> str:
    """What a batch whose shared health check ran comes to: ``healthy`` (verify it as it
    is), ``bisect`` (unhealthy, every restore verified and the host healthy again: apply its
    fixes again one at a time), ``stop`` (unhealthy and not healed by the rollback)."""
    if status_healthy:
        return "healthy"
    return "bisect" if all(restored) and after_healthy else "stop"


#: how long a run lock held from another controller (whose process this controller cannot
#: see) protects its host: longer than the longest run seen (a full anssi_bp28_high with the
#: agents takes hours), short enough that a controller that died elsewhere blocks its host
#: for a day at most. A holder on this controller is judged by its process, at once.
LOCK_MAX_AGE_S = 24 * 3600


def lock_verdict(holder: t.Mapping, me: t.Mapping, alive: bool | None, max_age_s: float = LOCK_MAX_AGE_S) -> tuple[str, str]:
    """(``take_over`` or ``refuse``, why) for a run lock ``holder`` found on the host when the
    run ``me`` wants it. ``alive``: whether the holder's process runs (True, False), or None
    when it runs on another controller (then only its ``age`` can free the host)."""
    del me  # the same run id is no pass: two playbooks with one run id on one host would undo each other
    age = holder.get("age")
    if alive is False:
        return "take_over", "its process %s on %s is gone" % (holder.get("pid"), holder.get("controller"))
    if alive is None and isinstance(age, (int, float)) and age > max_age_s:
        return "take_over", "it was taken %d s ago, more than %d s" % (age, max_age_s)
    if holder.get("unreadable"):
        return "refuse", "its file cannot be read (%s), %s s old" % (holder["unreadable"], age)
    return "refuse", "run %s holds it (controller %s, process %s, since %s)" % (
        holder.get("run_id") or "?", holder.get("controller") or "?", holder.get("pid") or "?",
        holder.get("started") or "?")


def keep_old_report(existing: t.Mapping | None, changed: bool) -> bool:
    """True when a start that failed must leave the host's report as it is: one is there
    with rules or counts (a finished or stopped start of this run id) and this start changed
    nothing. An error-only report (an earlier failed start) is replaced."""
    if existing is None or changed:
        return False
    return bool(existing.get("rules")) or existing.get("before") is not None


# -- outcomes reconciled with the final scan (issue 17 item 5) ----------------------------
#: the reason of a rule left for a human during the run that passes at the end.
PASSES_AFTER_OTHER_FIXES = "passes_after_other_fixes"
#: last results of a rule that OpenSCAP did not judge pass or fail: a person checks it by hand.
NOT_JUDGED = ("notchecked", "error", "unknown")
#: why, per last result, when the scanner's own message says nothing.
NOT_JUDGED_WHY = {
    "notchecked": "OpenSCAP did not check it (notchecked): the content has no automated check OpenSCAP can run "
                  "for this rule; check it by hand",
    "error": "OpenSCAP's check of it ended in an error; check it by hand (the ARF results hold the check's messages)",
    "unknown": "OpenSCAP could not tell pass from fail (unknown); check it by hand",
    "notapplicable": "not applicable in the final scan although OpenSCAP judged it at baseline: a change of the run "
                     "made its platform (a package, a file) absent, so nothing checks it any more",
}


def left_for_a_human(outcome: outcomes.RuleOutcome) -> bool:
    """True for an outcome that leaves the rule to a person: escalated, or skipped for any
    reason but a waiver (a waiver is a decision already made)."""
    return outcome.outcome in (outcomes.ESCALATED, outcomes.SKIPPED) and outcome.reason != "waived"


def passing_at_the_end(by_rule: t.Mapping[str, outcomes.RuleOutcome], after: t.Mapping[str, str]) -> list[str]:
    """The rules left for a human (:func:`left_for_a_human`) that pass in the final scan:
    other rules' fixes made them pass, so they are not left for a human (reason
    :data:`PASSES_AFTER_OTHER_FIXES`). A rule without a final result keeps its outcome, and so
    does a ``check_unreliable`` one (its pass is what proves nothing)."""
    return [rule for rule, o in by_rule.items()
            if left_for_a_human(o) and after.get(rule) == "pass" and o.reason != "check_unreliable"]


def kept_attempts(attempt_log: t.Sequence[t.Mapping]) -> list:
    """The numbers of the rule's attempts that changed the host and were not undone (its
    ``rolled_back`` is not true): what of its own fixes stays applied."""
    return [e.get("attempt") for e in attempt_log if e.get("changed") and e.get("rolled_back") is not True]


def passes_after_other_fixes_detail(was: str | None, scan: str, attempt_log: t.Sequence[t.Mapping],
                                    earlier: str = "") -> str:
    """The outcome's detail of a rule reclassified :data:`PASSES_AFTER_OTHER_FIXES`: the scan
    that shows the pass (its label: final, rescan, precheck), the outcome it had (``was``:
    "escalated/llm_unavailable", None: no outcome yet), whether a fix of its own stays
    applied, then the earlier detail."""
    kept = kept_attempts(attempt_log)
    own = ("no fix of its own stays applied" if not kept else
           "its own attempt %s changed the host and stays applied" % ", ".join(str(n) for n in kept))
    words = {"final": "final scan", "rescan": "rescan", "precheck": "Worker's precheck"}.get(scan, "%s scan" % scan)
    text = "passes in the %s after other rules' fixes; %s; %s" % (
        words, "it was %s" % was if was else "no attempt of its own passed", own)
    return ("%s (earlier: %s)" % (text, earlier) if earlier else text)[:800]


def not_judged(before: t.Mapping[str, str], last: t.Mapping[str, str]) -> dict[str, tuple[str | None, str]]:
    """{full id: (baseline result, last result)} of the rules OpenSCAP leaves unjudged at the
    end: the last result is one of :data:`NOT_JUDGED`, or ``notapplicable`` while the
    baseline judged the rule pass or fail (it became not applicable after the baseline)."""
    out: dict[str, tuple[str | None, str]] = {}
    for rule, value in sorted(last.items()):
        if value in NOT_JUDGED or (value == "notapplicable" and before.get(rule) in ("pass", "fail")):
            out[rule] = (before.get(rule), value)
    return out


def not_judged_why(before: str | None, result: str, message: str | None) -> str:
    """Why a rule is unjudged at the end, in words: :data:`NOT_JUDGED_WHY`'s sentence for its
    result, then the scanner's own message (the ARF rule-result's ``message``) when it has
    one; a rule that was judged at baseline says so."""
    why = NOT_JUDGED_WHY.get(result, "OpenSCAP's result is %s; check it by hand" % result)
    if before in ("pass", "fail") and result != "notapplicable":
        why += " (it was %s at baseline)" % before
    if message:
        why += "; OpenSCAP says: %s" % " ".join(message.split())[:300]
    return why
