"""Deferred fixes (DESIGN decision 4): applied, marked reboot, still failing. With
``allow_reboot`` the host reboots once and exactly those rules are verified again; then the
skill's ``resolve_deferred`` hook may settle what is still deferred."""

from __future__ import annotations

import time

from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import TaskListExecutor

#: the action that reboots a host for its deferred fixes, and the seconds it may take to come
#: back (ansible.builtin.reboot's reboot_timeout; its own default is 600 too).
REBOOT_ACTION = "ansible.builtin.reboot"
REBOOT_TIMEOUT = 600


class DeferredPhase:
    def __init__(self, ctx, state) -> None:
        self.ctx = ctx
        self.state = state

    def run(self) -> None:
        """Settle the rules deferred for a reboot. Without ``allow_reboot`` they stay
        ``deferred`` and the report's ``reboot_required`` lists them; a host that does not
        come back is stopped and its rules stay deferred."""
        ctx, state = self.ctx, self.state
        rules = outcomes.deferred_for_reboot(state.outcomes)
        if not rules:
            return
        if ctx.opts.allow_reboot and not ctx.check_mode and not state.stopped:
            ctx.parent.check()
            problem = self._reboot(rules)
            if problem:
                state.stop("the reboot for the deferred fixes (%s) failed: %s"
                           % (", ".join(safety.short_rule_id(r) for r in rules), problem))
            else:
                self._verify_after_reboot(rules)
        self._resolve_by_skill()

    def _reboot(self, rules: list[str]) -> str | None:
        """Reboot with ``ansible.builtin.reboot`` on the run's connection; record it in
        ``state.rebooted`` and event ``reboot``. None once the host is back, else why not."""
        started = time.monotonic()
        executor = TaskListExecutor(self.ctx.session, self.ctx.task_vars, trusted=False)
        try:
            result = executor.run_loop_action(
                REBOOT_ACTION, {"reboot_timeout": REBOOT_TIMEOUT,
                                "msg": "scapforge: reboot for deferred fixes (run %s)" % (self.ctx.opts.run_id or "adhoc")},
                task_name="Reboot for the deferred fixes")
        except AnsibleError as exc:
            result = {"failed": True, "msg": str(exc)}
        ok = not result.get("failed") and not result.get("unreachable") and bool(result.get("rebooted"))
        detail = "" if ok else str(result.get("msg") or "the reboot action did not report a reboot")[-500:]
        self.state.rebooted = {"rules": [safety.short_rule_id(r) for r in rules],
                               "seconds": round(time.monotonic() - started, 1), "ok": ok, "detail": detail}
        self.ctx.emit("reboot", **self.state.rebooted)
        return None if ok else detail

    def _verify_after_reboot(self, rules: list[str]) -> None:
        """Evaluate ``rules`` in ONE oscap call and give each its final outcome from its own
        result (``attempts.after_reboot_reason``). A verification that cannot reach the host
        stops it."""
        try:
            values, _evidence, result = self.ctx.verifier.check(rules, label="after_reboot")
        except AnsibleError as exc:
            result = {"failed": True, "error_kind": "connection", "msg": str(exc)[-300:]}
            values = dict.fromkeys(rules, "scan_failed")
        for rule in rules:
            self.state.reclassify(rule, A.after_reboot_reason(values[rule]),
                                  "the fix's metadata says reboot; after the reboot (%s s) OpenSCAP reports %s"
                                  % (self.state.rebooted["seconds"], values[rule]))
        if result.get("error_kind") == "connection":
            self.state.stop("verification after the reboot failed: %s" % result.get("msg"))

    def _resolve_by_skill(self) -> None:
        """The skill's ``resolve_deferred(short ids, {short id: last result})`` hook: each
        {short id: reason code} it returns for a deferred rule replaces the outcome. An
        unknown rule or reason, a non-dict answer or a raising hook changes nothing (event
        ``hook_failed`` for the last two)."""
        ctx, state = self.ctx, self.state
        rules = outcomes.deferred_for_reboot(state.outcomes)
        if not rules or ctx.skill.hook("resolve_deferred") is None:
            return

        def log(**kw):
            return ctx.emit("hook_failed", **kw)

        shorts = {safety.short_rule_id(r): r for r in rules}
        results = {short: (state.items[rule].attempts[-1].result if rule in state.items and state.items[rule].attempts
                           else None) for short, rule in shorts.items()}
        said = ctx.skill.call_hook("resolve_deferred", list(shorts), results, log=log)
        if said is None:
            return
        if not isinstance(said, dict):
            log(name="resolve_deferred", error="returned %s, not a dict" % type(said).__name__)
            return
        for short, reason in said.items():
            try:
                valid = short in shorts and outcomes.outcome_for(str(reason)) is not None
            except ValueError:
                valid = False
            if not valid:
                log(name="resolve_deferred", error="ignored %r: %r" % (short, reason))
                continue
            state.reclassify(shorts[short], str(reason), "settled by the skill's resolve_deferred hook")
