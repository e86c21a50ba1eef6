"""One host's run, as the story of the host (``RemediationLoop.run``)."""

from __future__ import annotations

import os
import time
import typing as t

from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions, report, setup
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.arf import ArfStore
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.deferred import DeferredPhase
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.options import LoopOptions
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.resume import resume
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.vendor import VendorPhase
from ansible_collections.scapforge.remediation.plugins.plugin_utils.agent_loop import WorkerPhase
from ansible_collections.scapforge.remediation.plugins.plugin_utils.console import ConsoleProgress
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import LoopError, ParentWatch
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
        (content, profile, LLM endpoint, baseline scan)."""
        ctx, state = self.ctx, self.state = setup.build(self.session, self.opts, self.events, self.console,
                                                        self.progress, self.parent, self.started)
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
        if held or picked_up:  # the skill's last rules after every other fix, the rescan's included
            vendor.work(ctx.skill.order(picked_up + held))
        worked_by_agents = bool(state.queue) and ctx.agents is not None
        self._worker_queue(worker)
        DeferredPhase(ctx, state).run()
        if final is not None and (picked_up or held or worked_by_agents or state.rebooted):
            final = self._scan_after(arf, "final") or final  # a stopped host keeps the rescan's counts
        if final is not None:
            self._mark_regressed(final.get("rules", {}))
        self._close_checkpoints()
        if not state.stopped:
            arf.fetch()
        memory = ctx.memory.close() if ctx.memory is not None else None
        return report.build(ctx, state, baseline, final, picked_up, memory, worker.llm_down)

    # -- the steps of the story ------------------------------------------------------------
    def _baseline(self, arf: ArfStore) -> dict:
        """The baseline scan, or the interrupted start's (resumed)."""
        ctx = self.ctx
        if not ctx.check_mode:
            ctx.progress.append("start", run_id=self.opts.run_id)
            if ctx.resume.baseline is not None:
                return resume(ctx, self.state)
        baseline = ctx.verifier.scan(ctx.scan_rules, "baseline", arf_path=arf.path("baseline"))
        if not ctx.check_mode:
            ctx.progress.append("baseline", scan={k: baseline.get(k) for k in (
                "rules", "oscap_version", "content_version", "label")})
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
        """A scan after changes were made: on failure the host stops and the report is still
        written (``after`` null), since what was applied must not be lost."""
        if self.state.stopped:
            return None  # the controller cannot scan a host it can no longer manage
        try:
            return self.ctx.verifier.scan(self.ctx.scan_rules, label, arf_path=arf.path(label))
        except (LoopError, AnsibleError) as exc:
            self.state.stop("%s scan failed: %s" % (label, exc), ())
            return None

    def _mark_regressed(self, after: dict) -> None:
        for rule_id in decisions.regressed(self.state.outcomes, after):
            self.state.reclassify(rule_id, "regressed", "passed after its fix, %s in the final scan" % after.get(rule_id))

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
