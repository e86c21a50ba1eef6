"""The run's pure judgements: no host, no I/O; every phase decides through these.

Each is pinned by tests/unit/plugins/plugin_utils/_run/test_decisions.py and by mutation
testing (``make mutation``).
"""

from __future__ import annotations

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
