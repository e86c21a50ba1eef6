"""One host's run, as the story of the host (``RemediationLoop.run``)."""

from __future__ import annotations

import os
import time
import typing as t

from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import package_checks, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions, report, setup
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.arf import ArfStore
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.deferred import DeferredPhase
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.host_lock import HostLock
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.options import LoopOptions
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.resume import resume
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.verifier import ScanError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.vendor import VendorPhase
from ansible_collections.scapforge.remediation.plugins.plugin_utils.agent_loop import WorkerPhase
from ansible_collections.scapforge.remediation.plugins.plugin_utils.console import ConsoleProgress
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import ControllerGone, LoopError, ParentWatch
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import session as memory_session
from ansible_collections.scapforge.remediation.plugins.plugin_utils.progress import Progress


class RemediationLoop:
    """One host's run over a ``HostSession``. ``run()`` returns the host report written to
    ``hosts/<host>.json`` (``_run.report.build`` lists its keys). Until setup has run,
    ``outcomes`` is empty and ``events`` already writes to the run's log, so a failed start
    is recorded too."""

    def __init__(self, session, opts: LoopOptions) -> None:
        self.session = session
        self.opts = opts
        self.started = time.monotonic()
        host = session.host
        self.console = ConsoleProgress(host)
        self.events = EventLog(os.path.join(opts.run_dir, "events.jsonl"), host, listener=self.console.event)
        self.progress = Progress(opts.run_dir, host)
        self.parent = ParentWatch()
        self.ctx: t.Any = None
        self.state: t.Any = None

    @property
    def outcomes(self) -> dict:
        return self.state.outcomes if self.state is not None else {}

    @property
    def changed(self) -> bool:
        """True once an attempt changed the host."""
        return bool(self.ctx is not None and self.ctx.runner.changed)

    def run(self) -> dict:
        """Run the host and return its report. Raises LoopError when the run cannot start
        (``host_busy``: another run holds the host's run lock; content, profile, LLM
        endpoint, baseline scan). The lock is taken once the options are sound and the host
        is known not to be the controller, before anything that could change it, and held to
        the end, and released on every way out but a dead controller's (ControllerGone: the
        resumed run finds its holder gone and takes it over)."""
        lock = HostLock(self.session, self.opts.run_id, self.parent.parent, self.events.emit)
        release = True
        try:
            return self._run(lock)
        except ControllerGone:
            release = False
            raise
        finally:
            if release:
                lock.release()

    def _run(self, lock: HostLock) -> dict:
        ctx, state = self.ctx, self.state = setup.build(self.session, self.opts, self.events, self.console,
                                                        self.progress, self.parent, self.started, lock=lock)
        self.events.emit("run_start", **setup.run_start_fields(ctx, time.monotonic() - self.started))
        arf = ArfStore(ctx, state.arf)
        vendor, worker = VendorPhase(ctx, state), WorkerPhase(ctx, state, ctx.opts.budget)
        baseline = self._baseline(arf)
        failing = self._work_items(baseline)
        held = [r for r in failing if ctx.skill.runs_last(r)] if self.opts.rescan else []
        ctx.console.planned(len(failing), ctx.profile.id, len(state.outcomes), ctx.check_mode)
        vendor.work([r for r in failing if r not in held])
        final = None if ctx.check_mode else self._scan_after(arf, "rescan" if self.opts.rescan else "final")
        picked_up = self._picked_up(baseline, final) if final is not None and self.opts.rescan else []
        if state.scan_failed is not None:  # no scanner to judge a fix: the rest is named, not worked
            held = self._unworked(held)
        if held or picked_up:  # the skill's last rules after every other fix, the rescan's included
            vendor.work(ctx.skill.order(picked_up + held))
        worked_by_agents = bool(state.queue) and ctx.agents is not None
        self._worker_queue(worker)
        if state.scan_failed is None:
            DeferredPhase(ctx, state).run()
        if final is not None and (picked_up or held or worked_by_agents or state.rebooted):
            final = self._scan_after(arf, "final") or final  # a stopped host keeps the rescan's counts
        if final is not None and state.scan_failed is None:  # a failed final: the rescan predates later fixes
            self._mark_regressed(final.get("rules", {}))
            self._mark_passing(final.get("rules", {}), final.get("label") or "final")
            self._mark_unreliable(final.get("rules", {}))
        self._close_checkpoints()
        if not state.stopped:
            arf.fetch()
        memory = ctx.memory.close() if ctx.memory is not None else memory_session.disabled()
        return report.build(ctx, state, baseline, final, picked_up, memory, worker.llm_down)

    # -- the steps of the story ------------------------------------------------------------
    def _baseline(self, arf: ArfStore) -> dict:
        """The baseline scan, or the interrupted start's (resumed)."""
        ctx = self.ctx
        if not ctx.check_mode:
            ctx.progress.append("start", run_id=self.opts.run_id)
            if ctx.resume.baseline is not None:
                resumed = resume(ctx, self.state)
                ctx.verifier.follow(resumed)  # the scans' timeout, from the first start's baseline
                return resumed
        baseline = ctx.verifier.scan(ctx.scan_rules, "baseline", arf_path=arf.path("baseline"))
        if not ctx.check_mode:
            ctx.progress.append("baseline", scan={k: baseline.get(k) for k in (
                "rules", "oscap_version", "content_version", "label", "elapsed")})
        return baseline

    def _work_items(self, baseline: dict) -> list[str]:
        """The rules that fail at baseline, in scope and not finished by an earlier start, in
        the skill's order."""
        in_scope = set(self.ctx.scan_rules) if self.ctx.scope else None
        work = [r for r, v in baseline.get("rules", {}).items()
                if v == "fail" and (in_scope is None or r in in_scope) and r not in self.state.outcomes]
        return self.ctx.skill.order(work)

    def _picked_up(self, baseline: dict, rescan: dict) -> list[str]:
        """Rules the rescan finds failing that were not applicable (or not evaluated) at
        baseline: a fix made them applicable (a package got installed)."""
        state, before = self.state, baseline.get("rules", {})
        in_scope = set(self.ctx.scan_rules) if self.ctx.scope else None
        picked = [r for r, v in rescan.get("rules", {}).items()
                  if v == "fail" and r not in state.outcomes and r not in state.items and r not in state.queue
                  and before.get(r) not in ("fail", "pass") and (in_scope is None or r in in_scope)]
        if picked:
            self.ctx.emit("rescan_picked_up", rules=[safety.short_rule_id(r) for r in picked])
            self.ctx.console.added(len(picked), "the rescan found")
        return picked

    def _worker_queue(self, worker: WorkerPhase) -> None:
        """The Worker phase over the queued rules, in the skill's order."""
        state = self.state
        queue, state.queue = self.ctx.skill.order(state.queue), []
        for rule_id in queue:
            if rule_id in state.outcomes:
                continue
            item = state.item(rule_id)
            try:
                worker.run(item)
            except AnsibleError as exc:
                state.stop("stopped during %s: %s" % (item.short_id, str(exc)[-300:]), [rule_id])

    def _scan_after(self, arf: ArfStore, label: str) -> dict | None:
        """A scan after changes were made; None when it failed. A failed scan (``ScanError``,
        run twice when it hung or crashed; issue 17 item 8) does not stop the host: the rules
        already worked keep their verified results, the rest are named with the scanner's
        reason (``_unworked``), the report says which scan failed (``scan_failed``). A host the
        controller can no longer reach stops; the report is still written (``after`` null),
        since what was applied must not be lost."""
        if self.state.stopped:
            return None  # the controller cannot scan a host it can no longer manage
        try:
            return self.ctx.verifier.scan(self.ctx.scan_rules, label, arf_path=arf.path(label))
        except ScanError as exc:
            self.state.scan_failed = exc.record()
            self.ctx.emit("scan_gave_up", **self.state.scan_failed)
            return None
        except (LoopError, AnsibleError) as exc:
            self.state.stop("%s scan failed: %s" % (label, exc), ())
            return None

    def _unworked(self, rules: t.Sequence[str]) -> list[str]:
        """After a scan that failed twice: the rules not worked yet (``rules``: held for last;
        the Worker's queue when there are agents: without, the Worker phase finishes them from
        their vendor attempt, no scan needed) end with the scanner's reason
        (``decisions.unworked_after_scan_failure``), none attempted; returns the rules left to
        work (none)."""
        failed, state = self.state.scan_failed or {}, self.state
        reason = decisions.unworked_after_scan_failure(str(failed.get("reason")))
        queue: list[str] = []
        if self.ctx.agents is not None:
            queue, state.queue = list(state.queue), []
        state.finish_unworked(list(rules) + queue, reason, "not worked: %s" % failed.get("msg"))
        return []

    def _mark_regressed(self, after: dict) -> None:
        for rule_id in decisions.regressed(self.state.outcomes, after):
            self.state.reclassify(rule_id, "regressed", "passed after its fix, %s in the final scan" % after.get(rule_id))

    def _mark_passing(self, after: dict, label: str) -> None:
        """Rules left for a human that pass in the final scan are not left for a human
        (issue 17 item 5): other rules' fixes made them pass, and the detail says so."""
        for rule_id in decisions.passing_at_the_end(self.state.outcomes, after):
            old = self.state.outcomes[rule_id]
            detail = decisions.passes_after_other_fixes_detail("%s/%s" % (old.outcome, old.reason), label,
                                                               old.attempt_log, old.detail)
            self.state.reclassify(rule_id, decisions.PASSES_AFTER_OTHER_FIXES, detail)

    def _mark_unreliable(self, after: dict) -> None:
        """Rules that pass only because a package name this host's sources do not have is not
        installed (issue 17 item 7): ``check_unreliable``, a person checks (one read-only
        ``apt-cache policy``; a failed read judges nothing)."""
        checks = getattr(self.ctx.catalog, "removed_packages", None) or {}
        passing = [r for r, v in after.items() if v == "pass" and r in checks]
        if not passing:
            return
        try:
            answer = self.session.run_command(package_checks.candidates_command(n for r in passing for n in checks[r]))
        except AnsibleError as exc:
            self.ctx.emit("package_candidates_unread", error=str(exc)[:300])
            return
        found = package_checks.unreliable(passing, checks, package_checks.parse_candidates(str(answer.get("stdout") or "")))
        for rule_id, names in sorted(found.items()):
            why = package_checks.detail(names, self.ctx.skill.known_defect(rule_id))
            if rule_id in self.state.outcomes:
                self.state.reclassify(rule_id, package_checks.REASON, why)
            else:
                self.state.finish(rule_id, package_checks.REASON, detail=why)

    def _close_checkpoints(self) -> None:
        """Remove this run's checkpoints from the host: every attempt is judged by now and
        every one due was restored (a failure here is logged, never fatal). A stopped host
        keeps them for a human (or a resumed run)."""
        root = getattr(self.ctx.runner.checkpoints, "root", None)
        if self.ctx.check_mode or self.state.stopped or root is None:
            return
        try:
            result = self.session.execute_module("ansible.builtin.file", {"path": root, "state": "absent"})
            if result.get("failed"):
                self.ctx.emit("checkpoints_left", path=root, msg=result.get("msg"))
        except AnsibleError as exc:
            self.ctx.emit("checkpoints_left", path=root, msg=str(exc)[-300:])
