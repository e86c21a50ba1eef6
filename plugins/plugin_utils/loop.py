"""The per-host remediation loop (first version: vendor fixes, verification, outcomes).

Runs inside the ``scapforge.remediation.ralph`` action plugin on the controller:

1. baseline scan with ``oscap_eval`` (the profile, or the requested rules and the rules
   they require, DESIGN decision 6);
2. every rule that fails is a work item; ``error``/``unknown``/``notchecked`` are reported,
   never worked on (decision 3);
3. per work item: waiver and access checks, the vendor fix from the datastream rendered with
   the profile's XCCDF Values, executed on the action's own connection (decision 1), a
   fresh-connection health check, re-evaluation of the rule with oscap;
4. a rescan picks up rules that became applicable (a package got installed) and works them;
5. the final scan gives the ``after`` counts and the regressions (pass before, not after).

Everything a human needs later goes to the run's ``events.jsonl`` and the host's JSON file.
"""

from __future__ import annotations

import dataclasses
import os
import time
import typing as t

import yaml
from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import health, outcomes, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import TaskListExecutor
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import (
    LoopError,
    load_catalog,
    with_host_facts,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.scanner import CRASH_KINDS, Scanner, counts_of
from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import write_host_report
from ansible_collections.scapforge.remediation.plugins.plugin_utils.tailoring import build_tailoring

#: results that are reported but never become work items (DESIGN decision 3).
NOT_WORK = ("error", "unknown", "notchecked")


@dataclasses.dataclass
class LoopOptions:
    """What the user asked for; field meanings are documented in plugins/modules/ralph.py."""

    datastream: str
    profile: str
    datastream_src: str | None = None
    trusted_sha256: list[str] = dataclasses.field(default_factory=list)
    rules: list[str] = dataclasses.field(default_factory=list)
    skip_rules: list[str] = dataclasses.field(default_factory=list)
    allow_access_impacting: list[str] = dataclasses.field(default_factory=list)
    health_check: bool = True
    rescan: bool = True
    run_dir: str = "."
    run_id: str = ""
    time_budget: float = 0.0  # seconds, 0 = no limit
    verify_batch: int = 8  # applied rules re-evaluated per oscap call


@dataclasses.dataclass
class Applied:
    """A fix that ran and waits for verification: the rule, the executor's report, and
    whether the fix's metadata says reboot (DESIGN decision 4)."""

    rule_id: str
    report: t.Any
    reboot: bool


def task_names(tasks: list) -> list[str]:
    """Names of the tasks of a fix, blocks flattened (unnamed tasks are shown by their keys)."""
    names: list[str] = []
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        if isinstance(task.get("block"), list):
            names.extend(task_names(task["block"]))
        else:
            names.append(str(task.get("name") or ", ".join(k for k in task if k not in ("when", "tags"))))
    return names


class RemediationLoop:
    """One host's run. ``run()`` returns the host report written to ``hosts/<host>.json``:
    host, run_id, profile, content {sha256, benchmark_version, oscap_version}, check_mode,
    before/after counts by result (after null when the host stopped or in check mode),
    outcomes {"outcome/reason": n}, regressions, picked_up_by_rescan, not_work_items,
    still_failing, stopped, seconds (wall time), rules {short id: RuleOutcome dict}."""

    def __init__(self, action, task_vars: dict, opts: LoopOptions, check_mode: bool) -> None:
        self.action = action
        self.task_vars = task_vars
        self.opts = opts
        self.check_mode = check_mode
        self.host = task_vars.get("inventory_hostname", "localhost")
        self.events = EventLog(os.path.join(opts.run_dir, "events.jsonl"), self.host)
        self.outcomes: dict[str, outcomes.RuleOutcome] = {}
        self.stopped: str | None = None  # detail of the failed health check, once stopped
        self.changed = False
        self.started = time.monotonic()
        self.remote_user = self._remote_user()

    # -- setup -----------------------------------------------------------------------------
    def _remote_user(self) -> str | None:
        try:
            user = self.action._connection.get_option("remote_user")
        except Exception:
            user = None
        return user or self.task_vars.get("ansible_user") or self.action._play_context.remote_user

    def _prepare(self) -> None:
        self.catalog, self.trusted, source = load_catalog(
            self.action, self.task_vars, self.opts.datastream, self.opts.datastream_src, self.opts.trusted_sha256
        )
        self.task_vars = with_host_facts(self.action, self.task_vars)
        try:
            self.profile = self.catalog.profile(self.opts.profile)
        except CatalogError as exc:
            raise LoopError("profile", str(exc)) from None
        try:  # a typo in a waiver must not let the rule run (or an opt-in silently do nothing)
            self.scope = [self.catalog.rule(r).id for r in self.opts.rules]
            self.waived = {self.catalog.rule(r).id for r in self.opts.skip_rules}
            self.allowed = {self.catalog.rule(r).id for r in self.opts.allow_access_impacting if r != "all"}
        except CatalogError as exc:
            raise LoopError("rule", str(exc)) from None
        self.allow_all = "all" in self.opts.allow_access_impacting
        if self.opts.health_check and not self.check_mode:
            status = health.check_host(self.action)
            if not status.healthy:
                raise LoopError(
                    "unhealthy_before",
                    "a fresh login with become fails before any change, so the health check cannot "
                    "protect this host: %s" % status.detail,
                )
        selected = set(self.profile.selected_rules)
        scope = self.catalog.expand_requires(self.scope) if self.scope else []
        outside = [r for r in scope if r not in selected]
        tailoring_xml, profile_id = None, self.profile.id
        if outside:  # decision 5: select them with a generated tailoring file
            xml_bytes, profile_id = build_tailoring(self.catalog, self.profile.id, select=outside)
            tailoring_xml = xml_bytes.decode("utf-8")
        self.scan_rules = scope
        self.scanner = Scanner(self.action, self.task_vars, self.opts.datastream, profile_id, tailoring_xml)
        self.events.emit(
            "run_start",
            run_id=self.opts.run_id,
            profile=self.profile.id,
            datastream=self.opts.datastream,
            content_source=source,
            content_sha256=self.catalog.sha256,
            trusted=self.trusted,
            scope=[safety.short_rule_id(r) for r in scope],
            waived=sorted(safety.short_rule_id(r) for r in self.waived),
            allowed_access_impacting="all" if self.allow_all else sorted(safety.short_rule_id(r) for r in self.allowed),
            tailored=[safety.short_rule_id(r) for r in outside],
            check_mode=self.check_mode,
        )

    def _scan(self, label: str) -> dict:
        started = time.monotonic()
        result = self.scanner.scan(self.scan_rules)
        if result.get("failed"):
            kind = result.get("error_kind", "oscap_error")
            self.events.emit("scan_failed", label=label, error_kind=kind, msg=result.get("msg"))
            code = "scanner_crash" if kind in CRASH_KINDS else "scan_failed"
            raise LoopError(code, "%s scan failed (%s): %s" % (label, kind, result.get("msg")))
        results = result.get("rules", {})
        result["label"] = label
        self.events.emit(
            "scan",
            label=label,
            counts=counts_of(results),
            seconds=round(time.monotonic() - started, 2),
            oscap_version=result.get("oscap_version"),
            content_version=result.get("content_version"),
            missing=result.get("missing", []),
        )
        return result

    # -- one rule --------------------------------------------------------------------------
    def _finish(self, rule_id: str, reason: str, **kwargs: t.Any) -> outcomes.RuleOutcome:
        rule = self.catalog.rule(rule_id)
        outcome = outcomes.RuleOutcome.of(rule_id, reason, category=rule.category, **kwargs)
        self.outcomes[rule_id] = outcome
        data = outcome.to_dict()
        del data["rule"], data["attempts"]
        self.events.emit("rule_complete", rule=safety.short_rule_id(rule_id), attempt=outcome.attempts or None, **data)
        return outcome

    def _out_of_budget(self) -> bool:
        return bool(self.opts.time_budget) and time.monotonic() - self.started > self.opts.time_budget

    def apply(self, rule_id: str) -> Applied | outcomes.RuleOutcome:
        """Decide and, where allowed, apply one rule's fix; never raises for a host-side failure.

        Returns the Applied fix waiting for verification, or the rule's final outcome when
        nothing is left to verify (skipped, refused, no fix, unhealthy host...).
        """
        short = safety.short_rule_id(rule_id)
        rule = self.catalog.rule(rule_id)
        self.events.emit("rule_start", rule=short, title=rule.title, category=rule.category)
        if self.stopped:
            return self._finish(rule_id, "host_stopped", detail=self.stopped)
        if self._out_of_budget():
            return self._finish(rule_id, "budget")
        if rule_id in self.waived:
            return self._finish(rule_id, "waived")
        impact = safety.access_impact(rule_id, self.remote_user)
        if impact and rule_id not in self.allowed and not self.allow_all:
            return self._finish(rule_id, "access_impacting", detail=impact)
        unfixable = safety.unfixable_kind(rule_id)
        if unfixable:
            return self._finish(rule_id, outcomes.environment_reason(unfixable),
                                           detail="no fix on a running host can pass this rule")
        fix = rule.ansible_fix
        if fix is None:
            return self._finish(rule_id, "no_fix", detail="the datastream has no Ansible fix for this rule")

        try:
            tasks = yaml.safe_load(self.catalog.render_fix(rule_id, self.profile.id)) or []
        except (CatalogError, yaml.YAMLError) as exc:  # content fault: this rule, not the run
            return self._finish(rule_id, "fix_refused", detail="the content's fix cannot be rendered: %s" % exc)
        executor = TaskListExecutor(self.action, self.task_vars, trusted=self.trusted)
        if self.check_mode:
            problems = executor.validate(tasks)
            if problems:
                return self._finish(rule_id, "fix_refused", detail="; ".join(problems)[:500])
            plan = task_names(tasks)
            return self._finish(rule_id, "check_mode",
                                detail=("vendor fix would run %d tasks: %s" % (len(plan), "; ".join(plan)))[:800])

        report = executor.run(tasks)
        self.changed = self.changed or report.changed
        self.events.emit(
            "fix_applied", rule=short, attempt=1, source="vendor", ok=report.ok, changed=report.changed,
            refused=report.refused, failed_task=report.failed_task, error=report.error,
            modules=report.modules, reboot=fix.reboot, tasks=report.task_results,
        )
        if report.refused:
            return self._finish(rule_id, "fix_refused", attempts=1, detail=report.refused[:500])
        if report.unreachable:  # the connection dropped during the fix
            return self._stop("connection lost during %s: %s" % (short, report.error), [rule_id],
                              modules=report.modules)
        if self.opts.health_check:
            status = health.check_host(self.action)
            if status.healthy and report.changed and rule.category == "ssh":
                status = health.check_sshd_config(self.action)
            self.events.emit("health", rule=short, attempt=1, **status.to_dict())
            if not status.healthy:
                return self._stop("stopped after %s: %s" % (short, status.detail), [rule_id],
                                  modules=report.modules)
        return Applied(rule_id, report, fix.reboot)

    def verify(self, applied: list[Applied]) -> None:
        """Re-evaluate applied fixes in ONE oscap call (with the rules they require) and
        give each its outcome from its own rule-result; a missing result is never a pass."""
        batch = self.catalog.expand_requires([a.rule_id for a in applied])
        result = self.scanner.scan(batch)
        shorts = [safety.short_rule_id(r) for r in batch]
        if result.get("failed"):
            kind = result.get("error_kind", "oscap_error")
            self.events.emit("verify", failed=True, error_kind=kind, msg=result.get("msg"), batch=shorts)
            reason = "scanner_crash" if kind in CRASH_KINDS else "verify_error"
            for item in applied:
                self._finish(item.rule_id, reason, attempts=1, modules=item.report.modules,
                             detail=str(result.get("msg"))[:500])
            return
        for item in applied:
            value = result.get("rules", {}).get(item.rule_id, "missing")
            self.events.emit("verify", rule=safety.short_rule_id(item.rule_id), attempt=1, result=value, batch=shorts)
            self._judge(item, value)

    def _judge(self, item: Applied, value: str) -> outcomes.RuleOutcome:
        report = item.report
        changed = ["%s (%s)" % (r.get("name"), r.get("module")) for r in report.task_results
                   if r.get("changed") and not r.get("check_mode")]
        common = {"attempts": 1, "modules": report.modules, "changed_tasks": changed}
        error = (report.error or "")[:500]
        if value == "pass":
            detail = "a task failed but the rule passes: %s" % error if not report.ok else ""
            return self._finish(item.rule_id, "verified", detail=detail, **common)
        if value == "fail":
            kind = None if report.ok else safety.environment_kind(report.error or "")
            if kind:  # the host, not the rule: a reboot would not help either
                return self._finish(item.rule_id, outcomes.environment_reason(kind),
                                    detail="%s: %s" % (report.failed_task, error), **common)
            if item.reboot and report.ok:
                return self._finish(item.rule_id, "reboot_required", detail="the fix ran; its metadata says reboot",
                                    **common)
            if not report.ok:
                return self._finish(item.rule_id, "fix_failed", detail="%s: %s" % (report.failed_task, error), **common)
            return self._finish(item.rule_id, "fix_ineffective", detail="the fix ran; oscap still reports fail", **common)
        return self._finish(item.rule_id, "verify_error", detail="oscap result after the fix: %s" % value, **common)

    # -- the run ---------------------------------------------------------------------------
    def _work(self, rule_ids: t.Sequence[str]) -> None:
        """Apply and verify the rules.

        Rules tied by <requires> (even in a cycle, as sshd_set_idle_timeout and
        sshd_set_keepalive are) are applied together, since neither passes before the other
        is fixed. Verification is batched: up to ``verify_batch`` applied rules are
        re-evaluated in one oscap call (bench/verify_batch.py: 7.35x faster for 8 rules), each
        judged by its own rule-result after the whole batch ran, so within a batch a later fix
        that undoes an earlier one shows as fix_ineffective on the earlier rule; across batches
        the final scan marks it regressed.
        """
        todo = list(rule_ids)
        done: set[str] = set()
        pending: list[Applied] = []
        for rule_id in todo:
            if rule_id in done:
                continue
            group = [r for r in self.catalog.expand_requires([rule_id]) if r in todo and r not in done]
            done.update(group)
            try:
                pending.extend(a for a in (self.apply(r) for r in group) if isinstance(a, Applied))
                if len(pending) >= max(1, self.opts.verify_batch) or self.stopped:
                    pending, batch = [], pending
                    self._verify_or_stop(batch)
            except AnsibleError as exc:  # an Ansible error outside the executor (connection, become): stop
                self._stop("stopped during %s: %s" % (safety.short_rule_id(rule_id), str(exc)[-300:]), group)
        self._verify_or_stop(pending)

    def _verify_or_stop(self, applied: list[Applied]) -> None:
        if not applied:
            return
        try:
            self.verify(applied)
        except AnsibleError as exc:
            self._stop("verification failed: %s" % str(exc)[-300:], [a.rule_id for a in applied], "verify_error")

    def _stop(self, detail: str, rules: t.Iterable[str], reason: str = "unhealthy",
              modules: list[str] | None = None) -> outcomes.RuleOutcome | None:
        """Stop working this host; give ``rules`` still without an outcome ``reason`` and
        return the last outcome given (None if none). Later rules get ``host_stopped``."""
        self.stopped = self.stopped or detail
        self.events.emit("host_stopped", detail=detail)
        last = None
        for rule in rules:
            if rule not in self.outcomes:
                last = self._finish(rule, reason, attempts=1, detail=detail, modules=list(modules or []))
        return last

    def run(self) -> dict:
        """Run the loop for this host and return its report (also written to hosts/<host>.json).

        Raises LoopError when the run cannot start (content, profile, baseline scan).
        """
        self._prepare()
        baseline = self._scan("baseline")
        before = baseline.get("rules", {})
        in_scope = set(self.scan_rules) if self.scope else None
        work = [r for r, v in before.items() if v == "fail" and (in_scope is None or r in in_scope)]
        self._work(work)

        picked_up: list[str] = []
        final = None if self.check_mode else self._scan_after("rescan" if self.opts.rescan else "final")
        if final is not None and self.opts.rescan:
            picked_up = [
                r for r, v in final.get("rules", {}).items()
                if v == "fail" and r not in self.outcomes and before.get(r) not in ("fail", "pass")
                and (in_scope is None or r in in_scope)
            ]
            if picked_up:
                self.events.emit("rescan_picked_up", rules=[safety.short_rule_id(r) for r in picked_up])
                self._work(picked_up)
                final = self._scan_after("final") or final  # a stopped host keeps the rescan's counts
        if final is not None:
            self._mark_regressed(final.get("rules", {}))
        return self._report(baseline, final, picked_up)

    def _scan_after(self, label: str) -> dict | None:
        """A scan after changes were made: on failure the host stops and the report is still
        written (``after`` null), since what was applied must not be lost."""
        if self.stopped:
            return None  # the controller cannot scan a host it can no longer manage
        try:
            return self._scan(label)
        except (LoopError, AnsibleError) as exc:
            self._stop("%s scan failed: %s" % (label, exc), ())
            return None

    def _mark_regressed(self, after: dict) -> None:
        for rule_id, outcome in list(self.outcomes.items()):
            if outcome.outcome == outcomes.REMEDIATED and after.get(rule_id) not in (None, "pass"):
                self._finish(rule_id, "regressed", attempts=outcome.attempts, modules=outcome.modules,
                             changed_tasks=outcome.changed_tasks,
                             detail="passed after its fix, %s in the final scan" % after.get(rule_id))

    def _report(self, baseline: dict, final: dict | None, picked_up: list[str]) -> dict:
        """The host report; ``after`` is None when the host was stopped before a final scan."""
        before, after = baseline.get("rules", {}), (final or {}).get("rules", {})
        regressions = sorted(
            safety.short_rule_id(r) for r, v in before.items() if v == "pass" and after.get(r) not in (None, "pass")
        )
        by_reason: dict[str, int] = {}
        for outcome in self.outcomes.values():
            key = "%s/%s" % (outcome.outcome, outcome.reason)
            by_reason[key] = by_reason.get(key, 0) + 1
        last = after if final is not None else before
        not_work = {
            value: sorted(safety.short_rule_id(r) for r, v in last.items() if v == value) for value in NOT_WORK
        }
        report = {
            "host": self.host,
            "run_id": self.opts.run_id,
            "profile": self.profile.id,
            "content": {
                "sha256": self.catalog.sha256,
                "benchmark_version": self.catalog.benchmark_version,
                "oscap_version": baseline.get("oscap_version"),
            },
            "check_mode": self.check_mode,
            "before": counts_of(before),
            "after": counts_of(after) if final is not None else None,
            "after_scan": final.get("label") if final is not None else None,
            "outcomes": dict(sorted(by_reason.items())),
            "regressions": regressions,
            "picked_up_by_rescan": sorted(safety.short_rule_id(r) for r in picked_up),
            "not_work_items": {k: v for k, v in not_work.items() if v},
            "still_failing": sorted(safety.short_rule_id(r) for r, v in after.items() if v == "fail"),
            "stopped": self.stopped,
            "seconds": round(time.monotonic() - self.started, 1),
            "rules": {safety.short_rule_id(r): o.to_dict() for r, o in sorted(self.outcomes.items())},
        }
        for outcome in report["rules"].values():
            outcome["rule"] = safety.short_rule_id(outcome["rule"])
        write_host_report(self.opts.run_dir, self.host, report)
        self.events.emit("run_end", before=report["before"], after=report["after"], outcomes=report["outcomes"],
                         regressions=regressions, seconds=report["seconds"])
        return report

