"""The host report (``hosts/<host>.json``) and the run_end event, from the context and state."""

from __future__ import annotations

import os
import time

from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils import ledger, outcomes, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.arf import rule_messages
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.setup import tailoring_record
from ansible_collections.scapforge.remediation.plugins.plugin_utils.scanner import counts_of
from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import write_host_report


def llm_summary(ctx, state, llm_down: str | None) -> dict | None:
    """The endpoint, model and tokens this host spent (null without an endpoint)."""
    if ctx.agents is None:
        return None
    return {"endpoint": ctx.opts.llm.base_url, "model": ctx.opts.llm.model,
            "tokens": sum(item.tokens for item in state.items.values()), "down": llm_down}


def not_judged(ctx, state, before: dict, last: dict, final_scan: bool) -> dict:
    """{short id: {before, result, why, message}} of the rules OpenSCAP left unjudged at the
    end (``decisions.not_judged``), each with why in words and the scanner's message from
    the last scan's ARF (null when it has none, or no ARF was fetched)."""
    unjudged = decisions.not_judged(before, last)
    arf = state.arf.get("after" if final_scan else "before")
    messages = rule_messages(os.path.join(ctx.opts.run_dir, arf) if arf else None, unjudged)
    return {safety.short_rule_id(rule): {"before": was, "result": value, "message": messages.get(rule),
                                         "why": decisions.not_judged_why(was, value, messages.get(rule))}
            for rule, (was, value) in unjudged.items()}


def build(ctx, state, baseline: dict, final: dict | None, picked_up: list[str], memory: dict | None,
          llm_down: str | None) -> dict:
    """The host report; ``after`` is None when the host stopped before a final scan or in check mode."""
    before, after = baseline.get("rules", {}), (final or {}).get("rules", {})
    last = after if final is not None else before
    not_work = {value: sorted(safety.short_rule_id(r) for r, v in last.items() if v == value)
                for value in decisions.NOT_WORK}
    resume = ctx.resume
    report = {
        "host": ctx.host,
        "run_id": ctx.opts.run_id,
        "profile": ctx.profile.id,
        "tailoring": tailoring_record(ctx.catalog, ctx.profile, ctx.scan_profile),
        "content": {"sha256": ctx.catalog.sha256, "benchmark_version": ctx.catalog.benchmark_version,
                    "oscap_version": baseline.get("oscap_version")},
        "check_mode": ctx.check_mode,
        "llm": llm_summary(ctx, state, llm_down),
        "memory": memory,
        "resumed": {"count": resume.starts, "interrupted": state.interrupted} if resume.starts else None,
        "health_baseline": {"failing": ctx.health_baseline.failing} if ctx.health_baseline is not None else None,
        "before": counts_of(before),
        "after": counts_of(after) if final is not None else None,
        "after_scan": final.get("label") if final is not None else None,
        "outcomes": decisions.outcome_counts(state.outcomes),
        "regressions": decisions.regressions(before, after),
        "picked_up_by_rescan": sorted(safety.short_rule_id(r) for r in picked_up),
        "not_work_items": {k: v for k, v in not_work.items() if v},
        "not_judged": not_judged(ctx, state, before, last, final is not None),
        "still_failing": sorted(safety.short_rule_id(r) for r, v in after.items() if v == "fail"),
        "reboot_required": sorted(safety.short_rule_id(r) for r in outcomes.deferred_for_reboot(state.outcomes)),
        "rebooted": state.rebooted,
        "stopped": state.stopped,
        "scan_failed": state.scan_failed,
        "seconds": round(time.monotonic() - state.started, 1),
        "package_facts": {"gathered": ctx.package_facts.gathered, "served": ctx.package_facts.served},
        "rules": {},
        "scan_results": HR.scan_results(ctx.catalog, ctx.skill, before, after if final is not None else None,
                                        ctx.profile),
        "waivers": [dict(w.to_dict(), rule=safety.short_rule_id(r)) for r, w in sorted(ctx.waivers.items())],
        "expired_waivers": list(ctx.expired_waivers),
        "arf": dict(state.arf) or None,
        "ledger": ledger.host_ledger(state.items.values()),
    }
    for rule_id, outcome in sorted(state.outcomes.items()):
        entry = outcome.to_dict()
        entry["rule"] = safety.short_rule_id(entry["rule"])
        entry.update(HR.rule_meta(ctx.catalog.rule(rule_id), ctx.profile))
        report["rules"][entry["rule"]] = entry
    write_host_report(ctx.opts.run_dir, ctx.host, report)
    ctx.emit("run_end", before=report["before"], after=report["after"], outcomes=report["outcomes"],
             regressions=report["regressions"], seconds=report["seconds"], package_facts=report["package_facts"])
    ctx.console.finished(report["outcomes"], state.stopped)
    return report
