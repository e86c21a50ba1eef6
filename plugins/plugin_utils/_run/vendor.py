"""The vendor phase: per rule, what memory knows, then the content's (or the skill's) own fix,
applied in batches with one health check and one oscap call each; what does not pass is
rolled back, newest first, and goes on to the Worker phase."""

from __future__ import annotations

import dataclasses
import re
import time
import typing as t

import yaml
from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils import waivers as W
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import TaskListExecutor
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import preconditions
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.lessons import tasks_sha


@dataclasses.dataclass
class Applied:
    """A fix that ran and waits for verification: its work item and attempt, whether its
    metadata says reboot (DESIGN decision 4), and how its tasks ran (to apply them again
    alone when its batch fails the health check)."""

    item: A.WorkItem
    attempt: A.Attempt
    reboot: bool
    trusted: bool = False
    variables: dict | None = None


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


class VendorPhase:
    """Applies and verifies the vendor fixes of a list of rules (:meth:`work`)."""

    def __init__(self, ctx, state) -> None:
        self.ctx = ctx
        self.state = state
        self.runner = ctx.runner

    # -- the batches -----------------------------------------------------------------------
    def work(self, rule_ids: t.Sequence[str]) -> None:
        """Apply and verify the vendor fixes of the rules, access-impacting ones last.

        Rules tied by <requires> (even in a cycle, as sshd_set_idle_timeout and
        sshd_set_keepalive are) are applied together, since neither passes before the other
        is fixed. Up to ``verify_batch`` applied rules share one health check and one oscap
        call, each judged by its own rule-result after the whole batch ran: within a batch a
        later fix that undoes an earlier one shows as fix_ineffective on the earlier rule;
        across batches the final scan marks it regressed."""
        todo = decisions.access_last(list(rule_ids), self.ctx.access_impact)
        done: set[str] = set()
        pending: list[Applied] = []
        batch_size = max(1, self.ctx.opts.verify_batch)
        for rule_id in todo:
            if rule_id in done:
                continue
            group = [r for r in self.ctx.catalog.expand_requires([rule_id]) if r in todo and r not in done]
            done.update(group)
            try:
                pending.extend(a for a in (self.apply(r, defer_health=batch_size > 1) for r in group) if a is not None)
                if len(pending) >= batch_size or self.state.stopped:
                    pending, batch = [], pending
                    self._verify_or_stop(batch)
            except AnsibleError as exc:  # an Ansible error outside the executor (connection, become): stop
                self.state.stop("stopped during %s: %s" % (safety.short_rule_id(rule_id), str(exc)[-300:]), group)
        self._verify_or_stop(pending)

    def _verify_or_stop(self, applied: list[Applied]) -> None:
        """The batch's health check (for the attempts that deferred it), then its verification."""
        try:
            applied = self._check_batch_health(applied)
            if applied:
                self.verify(applied)
        except AnsibleError as exc:
            self.state.stop("verification failed: %s" % str(exc)[-300:], [a.item.rule for a in applied],
                            "verify_error")

    # -- one rule --------------------------------------------------------------------------
    def _not_attempted(self, rule_id: str) -> tuple[str, str] | None:
        ctx, waiver = self.ctx, self.ctx.waivers.get(rule_id)
        return decisions.not_attempted(
            rule_id, stopped=self.state.stopped, out_of_budget=self.state.out_of_budget(),
            waiver_detail=W.detail(waiver) if waiver is not None else None, skipped=rule_id in ctx.skipped,
            impact=ctx.access_impact(rule_id), allowed=ctx.allow_all or rule_id in ctx.allowed,
            unfixable=ctx.skill.unfixable_kind(rule_id))

    def _vendor_tasks(self, rule_id: str) -> tuple[list | None, bool, str | None]:
        """(tasks, the skill's own, why the content's fix cannot be rendered)."""
        tasks = self.ctx.skill.fix_tasks(rule_id)
        own = tasks is not None  # the skill's fix replaces the content's (shipped with the collection: trusted)
        if own or self.ctx.rule(rule_id).ansible_fix is None:
            return tasks, own, None
        try:
            return yaml.safe_load(self.ctx.catalog.render_fix(rule_id, self.ctx.profile.id)) or [], False, None
        except (CatalogError, yaml.YAMLError) as exc:  # content fault: this rule, not the run
            return None, False, "the content's fix cannot be rendered: %s" % exc

    def apply(self, rule_id: str, defer_health: bool = False) -> Applied | None:
        """Decide and, where allowed, apply one rule's vendor fix; never raises for a
        host-side failure. Returns the Applied fix waiting for verification, or None when the
        rule got its outcome or went to the Worker queue."""
        ctx, state = self.ctx, self.state
        ctx.parent.check()
        rule = ctx.rule(rule_id)
        ctx.emit("rule_start", rule=rule.short_id, title=rule.title, category=ctx.category_of(rule_id))
        skip = self._not_attempted(rule_id)
        if skip is not None:
            waiver = ctx.waivers.get(rule_id) if skip[0] == "waived" else None
            state.finish(rule_id, skip[0], detail=skip[1],
                         waiver=dict(waiver.to_dict(), rule=rule.short_id) if waiver else None)
            return None
        item = state.item(rule_id)
        tasks, own, unrenderable = self._vendor_tasks(rule_id)
        acted, applied = self._from_memory(item, tasks, defer_health)
        if acted:
            return applied
        if unrenderable:
            attempt = item.new_attempt(A.VENDOR)
            attempt.gate = attempt.detail = unrenderable
            attempt.verdict, attempt.reason = A.REFUSED, "fix_refused"
            state.queue.append(rule_id)
            return None
        if tasks is None:
            if ctx.check_mode:
                state.finish(rule_id, "check_mode" if ctx.agents else "llm_unavailable",
                             detail="the content has no Ansible fix for this rule")
            else:
                state.queue.append(rule_id)
            return None
        trusted = ctx.trusted or own
        if ctx.check_mode:
            self._plan(rule_id, tasks, trusted)
            return None
        attempt = item.new_attempt(A.VENDOR)
        # a skill's fix templates with the rule's XCCDF Values, as the content's fixes get
        # them from their set_fact of each Value
        variables = ctx.catalog.rule_values(rule_id, ctx.profile.id) if own else None
        started = time.monotonic()
        self.runner.run(item, attempt, tasks, trusted=trusted, variables=variables, defer_health=defer_health)
        attempt.seconds = time.monotonic() - started
        if attempt.verdict:  # refused or unhealthy: decided without verification
            self._after_vendor(item)
            return None
        fix = rule.ansible_fix
        return Applied(item, attempt, bool(fix is not None and fix.reboot) or ctx.skill.needs_reboot(rule_id),
                       trusted=trusted, variables=variables)

    def _plan(self, rule_id: str, tasks: list, trusted: bool) -> None:
        """Check mode: what the fix would run, or why the gate refuses it."""
        problems = TaskListExecutor(self.ctx.session, self.ctx.task_vars, trusted=trusted).validate(tasks)
        if problems:
            self.state.finish(rule_id, "fix_refused", detail="; ".join(problems)[:500])
            return
        plan = task_names(tasks)
        self.state.finish(rule_id, "check_mode",
                          detail=("vendor fix would run %d tasks: %s" % (len(plan), "; ".join(plan)))[:800])

    def _from_memory(self, item: A.WorkItem, vendor_tasks: list | None,
                     defer_health: bool = False) -> tuple[bool, Applied | None]:
        """Act on what memory knows before the vendor fix: classify the rule with zero
        attempts, skip the vendor fix for the Worker, or first try tasks that verified on a
        host like this one. Returns (acted, the Applied attempt to verify or None)."""
        ctx, state = self.ctx, self.state
        if ctx.memory is None:
            return False, None
        decision = ctx.memory.decide(item.rule, item.category, llm=ctx.agents is not None,
                                     tasks_sha=tasks_sha(vendor_tasks) if vendor_tasks else None,
                                     look=lambda: self.runner.evaluate(item.rule, evidence=True, label="memory_check"),
                                     missing=self._missing)
        if decision is None or (decision.action == "try_first" and decision.source == "vendor"):
            return False, None  # proven vendor tasks are the content's fix: it runs as usual
        item.lessons_shown.append(decision.lesson)
        if ctx.check_mode:
            state.finish(item.rule, "check_mode", detail="memory would act: %s" % decision.detail,
                         lessons_shown=[decision.lesson])
            return True, None
        if decision.action == "classify":
            state.finish(item.rule, decision.reason, detail=decision.detail, from_memory=decision.lesson,
                         lessons_shown=[decision.lesson])
            return True, None
        if decision.action == "skip_vendor":
            state.queue.append(item.rule)
            return True, None
        attempt = item.new_attempt(A.WORKER)  # try_first: tasks a Worker wrote that verified before
        attempt.origin = attempt.detail = decision.detail
        started = time.monotonic()
        self.runner.run(item, attempt, decision.tasks, trusted=False, defer_health=defer_health)
        attempt.seconds = time.monotonic() - started
        if attempt.verdict:
            self._after_vendor(item)
            return True, None
        return True, Applied(item, attempt, False)

    def _missing(self, needs: list) -> list:
        """Which of a proven fix's preconditions the host lacks now (one read-only command)."""
        try:
            answer = self.ctx.session.run_command(preconditions.check_command(needs))
        except AnsibleError as exc:  # the check itself failed: the replay runs, and its verification judges it
            self.ctx.emit("memory_precondition_unread", error=str(exc)[:300])
            return []
        return preconditions.parse_missing(str(answer.get("stdout") or ""), needs)

    def _after_vendor(self, item: A.WorkItem) -> None:
        """A vendor attempt is judged: finish the rule when nothing more can be done, else
        queue it for the Worker phase."""
        step = A.next_step(item, self.ctx.opts.budget, llm=True, now=time.monotonic())
        if step.kind == "finish":
            self.state.finish_item(item, step.reason, step.detail)
        else:
            self.state.queue.append(item.rule)

    # -- verification and rollback ---------------------------------------------------------
    def verify(self, applied: list[Applied]) -> None:
        """Re-evaluate applied fixes in ONE oscap call, judge each by its own rule-result
        (a missing result is never a pass), then roll back those that did not pass, newest
        first."""
        self.ctx.parent.check()
        rules = [a.item.rule for a in applied]
        values, evidence, result = self.ctx.verifier.check(
            rules, evidence=self.runner.want_evidence, attempts={a.item.rule: a.attempt.number for a in applied})
        for entry in applied:
            self.runner.judge(entry.item, entry.attempt, values[entry.item.rule], evidence.get(entry.item.rule),
                              entry.reboot)
            if result.get("failed"):
                entry.attempt.say("verification failed: %s" % str(result.get("msg"))[:500])
            elif entry.attempt.verdict == A.PASSED:
                self._hold_if_frozen(entry.item, entry.attempt)
        self._roll_back_batch(applied)
        for entry in applied:
            self.runner.close(entry.item, entry.attempt)
            self._after_vendor(entry.item)

    def _hold_if_frozen(self, item: A.WorkItem, attempt: A.Attempt) -> None:
        """Case audit-immutable-last: on disk, not loaded until a reboot."""
        frozen = next((p for p in self.ctx.frozen if re.search(p["rules"], item.short_id)), None)
        if frozen:
            attempt.verdict, attempt.reason = A.INEFFECTIVE, "reboot_required"
            attempt.say("its lines are on disk; %s" % frozen.get("why", "loaded only after a reboot"))

    def _roll_back_batch(self, applied: list[Applied]) -> None:
        """Roll back the batch's attempts that did not pass, newest first; one whose files a
        later standing fix of the batch also changed is kept and says so."""
        for index in range(len(applied) - 1, -1, -1):
            entry = applied[index]
            if not A.needs_rollback(entry.attempt) or self.state.stopped:
                continue
            blockers = decisions.rollback_blockers(entry.attempt.checkpoint, [
                (later.item.short_id, later.attempt.checkpoint, later.attempt.rolled_back)
                for later in applied[index + 1:]])
            if blockers:
                entry.attempt.rolled_back = False
                entry.attempt.add_note("not rolled back: shares files with %s, applied after it in the same batch"
                                       % ", ".join(blockers))
                continue
            self.runner.roll_back(entry.item, entry.attempt)

    def _check_batch_health(self, applied: list[Applied]) -> list[Applied]:
        """One health check for the batch's attempts that deferred theirs. Healthy: each gets
        the batch's health. Unhealthy: they are rolled back, newest first, and applied again
        one at a time, each with its own check, so only the one at fault is rolled back; a
        batch still unhealthy once rolled back stops the host. Returns the attempts to verify."""
        deferred = [a for a in applied if (a.attempt.health or {}).get("deferred")]
        if not deferred or self.state.stopped:
            return applied
        self.ctx.parent.check()
        shorts = [a.item.short_id for a in deferred]
        status = self.runner.batch_health([(a.item, a.attempt) for a in deferred])
        self.ctx.emit("health", batch=shorts, **status.to_dict())
        if status.healthy:
            for entry in deferred:
                entry.attempt.health = dict(status.to_dict(), batch=shorts)
            return applied
        restored = [self.runner.roll_back(a.item, a.attempt) for a in reversed(deferred)]
        after = self.runner.batch_health([])
        self.ctx.emit("health", batch=shorts, after_restore=True, by="restore", **after.to_dict())
        if decisions.batch_verdict(status.healthy, restored, after.healthy) == "stop":
            for entry in deferred:
                entry.attempt.verdict, entry.attempt.reason = A.UNHEALTHY, "unhealthy"
                entry.attempt.health = status.to_dict()
            self.state.stop("the batch %s left the host unhealthy (%s)%s" % (
                ", ".join(shorts), status.detail[:300], "" if after.healthy else "; the rollback did not heal it"),
                [a.item.rule for a in applied])
            return []
        return [a for a in applied if a not in deferred] + self._apply_alone(deferred, shorts, status.detail)

    def _apply_alone(self, deferred: list[Applied], shorts: list[str], why: str) -> list[Applied]:
        kept: list[Applied] = []
        for entry in deferred:
            self.runner.close(entry.item, entry.attempt)
            entry.item.attempts.remove(entry.attempt)
            attempt = entry.item.new_attempt(entry.attempt.source)
            alone = "applied alone: its batch (%s) failed the health check: %s" % (", ".join(shorts), why[:200])
            attempt.origin = "%s; %s" % (entry.attempt.origin, alone) if entry.attempt.origin else alone
            attempt.detail = attempt.origin
            started = time.monotonic()
            self.runner.run(entry.item, attempt, entry.attempt.tasks, trusted=entry.trusted, variables=entry.variables)
            attempt.seconds = time.monotonic() - started
            if self.state.stopped:
                break
            if attempt.verdict:
                self._after_vendor(entry.item)
            else:
                kept.append(dataclasses.replace(entry, attempt=attempt))
        return kept
