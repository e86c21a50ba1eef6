"""What a reader wants first from one host report: before -> after, outcome counts, and every
rule that still fails at the end in exactly one bucket (issue 20 items 1 and 2).

report.html's first screen, the console's closing lines and tools/print_summary.py read
these, computed from what the host report already carries (``rules``, ``scan_results``,
``before``/``after``, ``regressions``...). The reconciliation is done here, not trusted from
a count: a rule's final result is the final scan's (else the baseline's, in check mode or on
a stopped host), and each failing rule is put in the bucket of its outcome's reason; a
failing rule without an outcome (a regression the engine did not mark, a rule only the
rescan saw fail) gets a bucket of its own, so the buckets always add up to the final fail
count.
"""

from __future__ import annotations

import json
import os
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions
from ansible_collections.scapforge.remediation.plugins.plugin_utils.outcomes import ENVIRONMENT_PREFIX, REASONS

#: bucket id -> what it means, in the order a reader wants them (what needs a person first).
BUCKETS = {
    "human": "for a human: the run tried, or could not try, and a person must act",
    "regressed": "passed before the run, fails after it",
    "deferred": "fix applied, waits for a reboot",
    "environment": "the host's environment, not the rule, stops the fix (container, running kernel, partitions)",
    "access_impacting": "skipped: the fix can cut the controller off; opt in with scapforge_allow_access_impacting",
    "waived": "skipped on purpose: scapforge_waivers or scapforge_skip_rules",
    "check_mode": "check mode: planned, not applied",
    "not_attempted": "not attempted: the host stopped, or the run's time budget was spent",
    "no_outcome": "fails at the end but has no outcome in this report (the rescan saw it, or a report of an "
                  "older run)",
}
#: the buckets a person must act on ("left for a human"); the others are explained by the run.
HUMAN = ("human", "regressed", "deferred", "no_outcome")
#: results that are neither pass nor fail nor notapplicable: listed, never counted as failing.
NOT_EVALUATED = ("notchecked", "error", "unknown", "informational")


def bucket_of(rule: t.Mapping[str, t.Any] | None) -> str:
    """The bucket of a failing rule's outcome (None: no outcome)."""
    if not rule:
        return "no_outcome"
    outcome, reason = rule.get("outcome"), rule.get("reason") or ""
    if reason.startswith(ENVIRONMENT_PREFIX):
        return "environment"
    if outcome == "deferred":
        return "deferred"
    if reason == "regressed":
        return "regressed"
    if outcome == "skipped":
        return {"waived": "waived", "access_impacting": "access_impacting",
                "check_mode": "check_mode"}.get(reason, "not_attempted")
    return "human"


def final_fail(report: HR.HostReport) -> list[str]:
    """The short ids whose last result is fail."""
    return sorted(s for s, row in (report.get("scan_results") or {}).items() if HR.final_result(row) == "fail")


def reconcile(report: HR.HostReport) -> dict[str, list[str]]:
    """{bucket: [short ids]} of every rule that fails at the end, each in exactly one bucket
    (only non-empty buckets, in :data:`BUCKETS` order)."""
    rules, regressions = report.get("rules") or {}, set(report.get("regressions") or ())
    out: dict[str, list[str]] = {}
    for short in final_fail(report):
        bucket = bucket_of(rules.get(short))
        if bucket == "no_outcome" and short in regressions:
            bucket = "regressed"
        out.setdefault(bucket, []).append(short)
    return {b: out[b] for b in BUCKETS if b in out}


def not_evaluated(report: HR.HostReport) -> dict[str, list[str]]:
    """{result: [short ids]} of the rules whose last result is notchecked, error, unknown or
    informational (not failing, not passing: a person reads them)."""
    out: dict[str, list[str]] = {}
    for short, row in sorted((report.get("scan_results") or {}).items()):
        result = HR.final_result(row)
        if result in NOT_EVALUATED:
            out.setdefault(result, []).append(short)
    return out


def not_judged(report: HR.HostReport) -> list[dict]:
    """The rules OpenSCAP left unjudged at the end, for a person to check by hand: [{rule,
    title, before, result, why, message}] sorted by rule, from the report's ``not_judged``;
    a report written before it existed gets them from ``scan_results`` (why in the
    decision's words, no message)."""
    rows = report.get("scan_results") or {}
    given = report.get("not_judged")
    if given is None:
        found = decisions.not_judged({s: r.get("before") for s, r in rows.items()},
                                     {s: HR.final_result(r) for s, r in rows.items() if HR.final_result(r)})
        given = {s: {"before": b, "result": a, "message": None, "why": decisions.not_judged_why(b, a, None)}
                 for s, (b, a) in found.items()}
    return [dict(entry, rule=short, title=(rows.get(short) or {}).get("title") or short)
            for short, entry in sorted(given.items())]


def became_applicable(report: HR.HostReport) -> list[str]:
    """Rules not evaluated at baseline (notapplicable or absent) that pass or fail in the
    final scan: a fix installed what they check (a category that grows is not a regression)."""
    return sorted(s for s, row in (report.get("scan_results") or {}).items()
                  if row.get("before") in (None, "notapplicable", "notselected") and row.get("after") in ("pass", "fail"))


def outcome_counts(report: HR.HostReport) -> dict[str, int]:
    """{"outcome/reason": n}: the report's ``outcomes``, else counted from its rules."""
    if report.get("outcomes"):
        return dict(report["outcomes"])
    out: dict[str, int] = {}
    for rule in (report.get("rules") or {}).values():
        key = "%s/%s" % (rule.get("outcome"), rule.get("reason"))
        out[key] = out.get(key, 0) + 1
    return out


def outcome_totals(report: HR.HostReport) -> dict[str, int]:
    """{outcome: n} from the report's {"outcome/reason": n}."""
    out: dict[str, int] = {}
    for key, count in outcome_counts(report).items():
        name = key.split("/", 1)[0]
        out[name] = out.get(name, 0) + int(count)
    return out


def reason_meaning(reason: str) -> str:
    """The documented meaning of a reason code."""
    meaning = REASONS.get(reason, (None, ""))[1]
    if not meaning and reason.startswith(ENVIRONMENT_PREFIX):
        meaning = "the host's environment (%s), not the rule, stops the fix" % reason[len(ENVIRONMENT_PREFIX):]
    return meaning


def changes(report: HR.HostReport) -> list[dict]:
    """The change ledger: what the run left changed on the host, one entry per attempt that
    changed something and was not rolled back: {rule, attempt, source, verdict, outcome,
    tasks (YAML), changed_tasks, diffs, side_effects}. Attempts that were rolled back are
    not in it (their restore was verified); the order is the rules' (sorted) then the
    attempts'."""
    out = []
    for short, rule in sorted((report.get("rules") or {}).items()):
        for entry in rule.get("attempt_log") or ():
            if not entry.get("changed") or entry.get("rolled_back"):
                continue
            out.append({"rule": short, "attempt": entry.get("attempt"), "source": entry.get("source"),
                        "verdict": entry.get("verdict"), "outcome": "%s/%s" % (rule.get("outcome"), rule.get("reason")),
                        "tasks": entry.get("tasks") or "", "changed_tasks": list(rule.get("changed_tasks") or ()),
                        "modules": list(entry.get("modules") or ()), "diffs": list(entry.get("diffs") or ()),
                        "side_effects": list(entry.get("side_effects") or ())})
    return out


def ledger_counts(report: HR.HostReport) -> dict[str, dict[str, int]]:
    """{kind: {state: n}} of the report's change ledger (issue 17), kinds and states that occur."""
    out: dict[str, dict[str, int]] = {}
    for entry in report.get("ledger") or ():
        cell = out.setdefault(str(entry.get("kind")), {})
        cell[str(entry.get("state"))] = cell.get(str(entry.get("state")), 0) + 1
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def glance(report: HR.HostReport) -> dict:
    """The first-screen facts of one host: {before, after (None in check mode or when
    stopped), pass/fail before and after, outcomes {"outcome/reason": n}, totals {outcome: n},
    regressions, picked_up, resumed, waivers (active, expired), memory, buckets (reconcile),
    final_fail (count), left_for_human (count of the :data:`HUMAN` buckets), not_evaluated,
    not_judged (:func:`not_judged`: rules for a person to check by hand, not counted in
    left_for_human),
    check_mode, stopped, result_kinds (the results the counts table shows: pass, fail,
    notapplicable and any other that occurs), ledger_left (the change ledger's entries left
    on the host: a human's to undo or accept), ledger_counts ({kind: {state: n}})}."""
    before, after = report.get("before") or {}, report.get("after")
    buckets = reconcile(report)
    return {
        "before": before, "after": after,
        "pass_before": before.get("pass", 0), "fail_before": before.get("fail", 0),
        "pass_after": (after or {}).get("pass", 0) if after is not None else None,
        "fail_after": (after or {}).get("fail", 0) if after is not None else None,
        "outcomes": dict(sorted(outcome_counts(report).items(), key=lambda kv: (-kv[1], kv[0]))),
        "totals": outcome_totals(report),
        "regressions": list(report.get("regressions") or ()),
        "picked_up": list(report.get("picked_up_by_rescan") or ()),
        "resumed": report.get("resumed"),
        "waivers": len(report.get("waivers") or ()), "expired_waivers": len(report.get("expired_waivers") or ()),
        "memory": report.get("memory"),
        "buckets": buckets,
        "final_fail": sum(len(v) for v in buckets.values()),
        "left_for_human": sum(len(buckets.get(b, ())) for b in HUMAN),
        "not_evaluated": not_evaluated(report),
        "not_judged": not_judged(report),
        "check_mode": bool(report.get("check_mode")),
        "stopped": report.get("stopped"),
        "ledger_left": [e for e in report.get("ledger") or () if e.get("state") == "left"],
        "ledger_counts": ledger_counts(report),
        "result_kinds": ["pass", "fail", "notapplicable"] + [
            k for k in ("notchecked", "error", "unknown", "informational", "fixed")
            if before.get(k) or (after or {}).get(k)],
    }


def console_lines(host: str, report: HR.HostReport) -> list[str]:
    """Three lines for the end of the play: before -> after, what the run did, what is left."""
    if report.get("error"):
        error = report["error"]
        return ["%s: not run (%s): %s" % (host, error.get("reason"), " ".join(str(error.get("msg")).split())[:200])]
    g = glance(report)
    if g["after"] is None:
        first = "%s: pass %d, fail %d at baseline; %s" % (
            host, g["pass_before"], g["fail_before"], "check mode: nothing changed" if g["check_mode"]
            else "no final scan (%s)" % (" ".join(str(g["stopped"] or (report.get("scan_failed") or {}).get("msg")
                                                      or "stopped").split())[:120]))
    else:
        first = "%s: pass %d -> %d, fail %d -> %d, regressions: %s" % (
            host, g["pass_before"], g["pass_after"], g["fail_before"], g["fail_after"],
            ", ".join(g["regressions"][:5]) + (" ..." if len(g["regressions"]) > 5 else "") if g["regressions"]
            else "none")
    totals = g["totals"]
    second = "%s:   %d remediated, %d escalated, %d skipped, %d deferred%s" % (
        host, totals.get("remediated", 0), totals.get("escalated", 0), totals.get("skipped", 0),
        totals.get("deferred", 0), ", %d picked up by the rescan" % len(g["picked_up"]) if g["picked_up"] else "")
    parts = ["%d %s" % (len(v), b.replace("_", " ")) for b, v in g["buckets"].items() if b not in HUMAN]
    third = "%s:   left for a human: %d of the %d rules failing at the end%s" % (
        host, g["left_for_human"], g["final_fail"], "; the others: %s" % ", ".join(parts) if parts else "")
    if g["not_judged"]:
        third += "; %d not judged by OpenSCAP, to check by hand: %s" % (
            len(g["not_judged"]), ", ".join(e["rule"] for e in g["not_judged"][:5]) + (" ..." if len(g["not_judged"]) > 5 else ""))
    return [first, second, third]


LEDGER = "ledger.json"


def write_ledger(run_dir: str, hosts: t.Mapping[str, HR.HostReport]) -> str:
    """Write ``<run_dir>/ledger.json``: {host: :func:`changes`}, what the run left changed on
    each host (atomically); returns its path. Raises OSError."""
    path = os.path.join(run_dir, LEDGER)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({host: changes(report) for host, report in sorted(hosts.items())}, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path
