"""The Worker phase of one host's run: per rule, attempt after attempt with the agents.

The story of a rule the vendor fix did not remediate (or that has none), one step at a time
as :func:`attempts.next_step` decides:

1. a fresh check of the rule with its OVAL evidence (other fixes may have made it pass);
2. the Architect writes a plan (or escalates at once: ESCALATE or ``cannot_fix``, and no
   Worker attempt follows);
3. the Worker answers tasks, or first asks for read-only probes (run on the host, their
   output fenced as data and shown to it), or says the rule cannot be fixed here
   (``cannot_fix``: the rule ends with ``environment:<kind>`` or ``needs_human``);
4. the tasks pass the gate (untrusted: no Jinja, allowlisted modules, banned patterns, the
   Reflector's banned patterns for this rule) or the attempt is refused, host untouched;
5. they run under a checkpoint, the host's health is checked, OpenSCAP re-evaluates the rule;
6. an attempt that did not pass is rolled back and the restore verified;
7. the Reflector diagnoses it and proposes a lesson; after every N failed attempts or a
   plateau the Architect is re-engaged: CONTINUE, PIVOT or ESCALATE (seed 001);
8. until pass, a budget, a verdict or a meta-plateau ends the rule.

An endpoint that fails at the transport level (``LLMError``: after the client's retries, or
bodies that are not chat completions ``llm.BAD_BODY_TRIES`` times in a row) is marked down
for the rest of the host's run: its later rules end ``llm_error`` unasked.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

import yaml

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import context, probes, task_gate, task_review
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import TaskListExecutor
from ansible_collections.scapforge.remediation.plugins.plugin_utils.llm import LLMError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.prompts import PromptError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.untrusted_policy import GatePolicy

#: probe rounds the Worker may take inside one attempt before it must answer tasks.
PROBE_ROUNDS = 2
#: a Reflector pattern shorter than this is too generic to refuse tasks by.
MIN_BANNED_CHARS = 8
#: patterns kept per rule (the newest).
MAX_PATTERNS = 5


class WorkerPhase:
    """Works queued rules of one host with the agents: ``ctx`` the run's ``RunContext`` (its
    catalog, profile, events, runner, agents (None without an endpoint) and token ledger),
    ``state`` its ``RunState`` (the stop, the time budget, ``finish_item``)."""

    def __init__(self, ctx, state, budget: A.Budget) -> None:
        self.ctx = ctx
        self.state = state
        self.agents = ctx.agents
        self.budget = budget
        self.ledger = ctx.token_ledger
        self.llm_down: str | None = None
        self._skill_context: dict[str, str] = {}  # rule id -> the skill's worker_context text

    # ------------------------------------------------------------------ the story
    def run(self, item: A.WorkItem) -> None:
        """Work ``item`` to an outcome (recorded through ``state.finish_item``); never raises
        for a host, gate or model failure."""
        ctx, state = self.ctx, self.state
        if self.agents is not None and not state.stopped and not self.llm_down:
            if not self._precheck(item):
                return
        while True:
            ctx.parent.check()
            left = self.ledger.left() if self.ledger is not None else float("inf")
            step = A.next_step(item, self.budget, llm=self.agents is not None, now=time.monotonic(),
                               run_tokens_left=left, llm_down=self.llm_down)
            if step.kind == "finish":
                return state.finish_item(item, step.reason, step.detail)
            if state.stopped:
                return state.finish_item(item, "host_stopped", state.stopped)
            if state.out_of_budget():
                return state.finish_item(item, "budget", "the run's time budget was spent")
            if item.started is None:
                item.started = time.monotonic()
            try:
                done = None
                if step.kind == "plan":
                    done = self._plan(item)
                elif step.kind == "review":
                    done = self._review(item)
                else:
                    self._attempt(item)
                if done is not None:
                    return state.finish_item(item, done.reason, done.detail)
            except LLMError as exc:
                self._drop_unanswered(item)
                self.llm_down = ("the LLM endpoint is marked down for the rest of this host's run: it failed (%s): %s"
                                 % (exc.kind, str(exc)[:300]))
                ctx.events.emit("llm_down", rule=item.short_id, error_kind=exc.kind, msg=str(exc)[:300])
            except PromptError as exc:  # a user's template that cannot render fails every later call too
                self.llm_down = "a prompt template failed: %s" % str(exc)[:300]
                ctx.events.emit("llm_down", rule=item.short_id, error_kind="prompt", msg=str(exc)[:300])

    @staticmethod
    def _drop_unanswered(item: A.WorkItem) -> None:
        """Forget a Worker attempt the endpoint's failure cut off before any answer: nothing
        ran and nobody judged it, so neither the report nor memory counts it."""
        last = item.last
        if last is not None and last.source == A.WORKER and not last.verdict and not last.report:
            item.attempts.pop()

    def _precheck(self, item: A.WorkItem) -> bool:
        """Evaluate the rule now, with its OVAL evidence; finish it when it no longer fails.
        Returns True when the Worker should go on."""
        ctx, state = self.ctx, self.state
        result, evidence = ctx.runner.evaluate(item.rule, evidence=True, label="precheck")
        item.evidence = evidence
        if result == "fail":
            return True
        if result == "pass":
            state.finish_item(item, decisions.PASSES_AFTER_OTHER_FIXES, decisions.passes_after_other_fixes_detail(
                item.last.reason if item.last is not None else None, "precheck", [a.log_entry() for a in item.attempts]))
        else:
            state.finish_item(item, "verify_error", "oscap result before the Worker started: %s" % result)
        return False

    # ------------------------------------------------------------------ the agents
    def _variables(self, item: A.WorkItem) -> dict:
        """The template variables of one rule: ``rule``, ``plan``, ``skill_context`` (the
        skill's ``worker_context`` hook text, "" without one; asked once per rule) and
        ``seen_environment`` (the ``environment:<kind>`` reasons other rules of this run ended on)."""
        rule = self.ctx.catalog.rule(item.rule)
        data = {"id": rule.id, "short_id": rule.short_id, "title": rule.title, "severity": rule.severity,
                "category": item.category, "identifiers": {k: list(v) for k, v in rule.identifiers.items()}}
        if item.rule not in self._skill_context:
            said = self.ctx.skill.call_hook("worker_context", dict(data), dict(self.agents.base.get("host") or {}),
                                            log=lambda **kw: self.ctx.events.emit("hook_failed", rule=rule.short_id, **kw))
            self._skill_context[item.rule] = str(said)[:2000] if said else ""
        ended = getattr(self.state, "outcomes", None) or {}
        seen = sorted({o.reason for o in ended.values() if str(getattr(o, "reason", "")).startswith("environment:")})
        return {"rule": data, "plan": item.plan or "", "skill_context": self._skill_context[item.rule],
                "seen_environment": seen}

    def _lessons(self, item: A.WorkItem) -> tuple[str | None, list[str]]:
        """The memory block for this rule's prompts (None in shadow mode) and its lesson ids."""
        memory = self.ctx.memory
        if memory is None:
            return None, []
        block, ids = memory.lessons_for(item.rule, item.category)
        if memory.mode == "inject":
            item.lessons_shown.extend(i for i in ids if i not in item.lessons_shown)
        return block, ids

    def _plan(self, item: A.WorkItem) -> A.Step | None:
        """Ask for the first plan; a finish Step when the Architect escalates at once (no
        Worker attempt follows), else None with the plan in force."""
        ctx = self.ctx
        sections, skipped = context.architect_sections(ctx.catalog, item.rule, ctx.profile.id, item, item.evidence,
                                                       self._lessons(item)[0])
        reply = self.agents.ask("architect", item.short_id, None, sections, skipped,
                                dict(self._variables(item), mode="plan"))
        item.tokens += reply.tokens
        answer = reply.answer
        if answer is not None and answer.verdict == "ESCALATE":
            return self._escalated(item, answer, reply, "plan")
        plan = answer.plan if answer is not None else ""
        if not plan:  # an unusable plan must not stop the Worker: it works from the rule alone
            plan = "Make the OVAL check of %s pass, as the rule's description says." % item.short_id
        item.plan = plan
        item.plans.append(plan)
        ctx.events.emit("architect", rule=item.short_id, mode="plan", verdict="PLAN", plan=plan[:1000],
                        tokens=reply.tokens, error=reply.error)
        return None

    def _escalated(self, item: A.WorkItem, answer, reply, mode: str) -> A.Step:
        """The finish Step of an Architect ESCALATE (or ``cannot_fix``) in ``mode`` plan or
        review, and its ``architect`` event with the verdict as answered."""
        declined = answer.cannot_fix
        if declined is not None:
            done = A.declined("Architect", declined.reason, declined.evidence)
        elif mode == "plan":
            done = A.plan_escalation(answer.plan)
        else:  # ESCALATE always finishes a review
            done = A.apply_review(item, "ESCALATE", answer.plan) or A.Step("finish", "architect_escalate")
        if done.reason != "architect_escalate":  # an environment or needs_human the agents said, none observed
            item.declared_by = "architect"
        if mode == "review" and declined is not None:
            item.reviews += 1
            item.reviewed_at = len(item.attempts)
        self.ctx.events.emit("architect", rule=item.short_id, attempt=len(item.attempts) if mode == "review" else None,
                             mode=mode, verdict="ESCALATE", plan=(answer.plan or "")[:1000],
                             cannot_fix=dataclasses.asdict(declined) if declined else None, review=item.reviews,
                             plateau=A.plateau(item), tokens=reply.tokens, error=reply.error, outcome=done.reason)
        return done

    def _review(self, item: A.WorkItem) -> A.Step | None:
        ctx = self.ctx
        sections, skipped = context.architect_sections(ctx.catalog, item.rule, ctx.profile.id, item, item.evidence,
                                                       self._lessons(item)[0])
        reply = self.agents.ask("architect", item.short_id, len(item.attempts), sections, skipped,
                                dict(self._variables(item), mode="review"))
        item.tokens += reply.tokens
        if reply.answer is not None and reply.answer.verdict == "ESCALATE":
            return self._escalated(item, reply.answer, reply, "review")
        if reply.answer is None or reply.answer.verdict not in ("CONTINUE", "PIVOT"):
            verdict, plan = "CONTINUE", ""  # an unusable review keeps the plan; the meta-plateau still bounds it
        else:
            verdict, plan = reply.answer.verdict, reply.answer.plan
        done = A.apply_review(item, verdict, plan)
        ctx.events.emit("architect", rule=item.short_id, attempt=len(item.attempts), mode="review",
                        verdict=verdict, plan=(plan or item.plan or "")[:1000], review=item.reviews,
                        plateau=A.plateau(item), tokens=reply.tokens, error=reply.error,
                        outcome=done.reason if done else None)
        return done

    def _reflect(self, item: A.WorkItem, attempt: A.Attempt) -> None:
        ctx = self.ctx
        sections, skipped = context.reflector_sections(ctx.catalog, item.rule, ctx.profile.id, item, attempt)
        reply = self.agents.ask("reflector", item.short_id, attempt.number, sections, skipped,
                                dict(self._variables(item), attempt=attempt.number, verdict=attempt.verdict,
                                     reason=attempt.reason))
        item.tokens += reply.tokens
        attempt.tokens += reply.tokens
        if reply.answer is None:
            ctx.events.emit("reflection", rule=item.short_id, attempt=attempt.number, error=reply.error,
                            tokens=reply.tokens)
            return
        ans = reply.answer
        lesson = {"cue": ans.lesson.cue, "action": ans.lesson.action} if ans.lesson else None
        attempt.reflection = {"diagnosis": ans.diagnosis, "lesson": lesson, "banned": list(ans.banned),
                              "preferred": list(ans.preferred)}
        item.banned = (item.banned + [p for p in ans.banned if p not in item.banned])[-MAX_PATTERNS:]
        item.preferred = (item.preferred + [p for p in ans.preferred if p not in item.preferred])[-MAX_PATTERNS:]
        # a lesson candidate: it stays a candidate until an outcome confirms it (memory issue)
        ctx.events.emit("reflection", rule=item.short_id, attempt=attempt.number, diagnosis=ans.diagnosis[:1000],
                        lesson=lesson, banned=list(ans.banned), preferred=list(ans.preferred),
                        status="candidate", tokens=reply.tokens)

    # ------------------------------------------------------------------ one attempt
    def _attempt(self, item: A.WorkItem) -> None:
        ctx, state = self.ctx, self.state
        started = time.monotonic()
        attempt = item.new_attempt(A.WORKER)
        ctx.events.emit("attempt_start", rule=item.short_id, attempt=attempt.number, source=A.WORKER,
                        plan=(item.plan or "")[:300])
        block, lesson_ids = self._lessons(item)
        tasks = self._ask_tasks(item, attempt, block)
        if tasks is not None:
            ctx.runner.run(item, attempt, tasks, trusted=False)
            if not attempt.verdict:
                ctx.runner.verify_one(item, attempt)
            if A.needs_rollback(attempt):
                ctx.runner.roll_back(item, attempt)
            ctx.runner.close(item, attempt)
        attempt.seconds = time.monotonic() - started
        if ctx.memory is not None:
            ran = attempt.tasks if attempt.report and not attempt.gate else None
            ctx.memory.saw(item.rule, item.category, attempt.number, lesson_ids, ran)
        ctx.events.emit("attempt_end", rule=item.short_id, attempt=attempt.number, **{
            k: v for k, v in attempt.log_entry().items() if k != "attempt"})
        terminal = attempt.verdict in (A.PASSED, A.CANNOT_FIX) or state.stopped or attempt.reason == "probe_budget"
        if not terminal and self.agents is not None:
            self._reflect(item, attempt)

    def _ask_tasks(self, item: A.WorkItem, attempt: A.Attempt, lessons: str | None) -> list | None:
        """Ask the Worker until it answers tasks (running its probes in between, at most
        PROBE_ROUNDS rounds and the rule's probe budget). ``lessons``: the memory block.
        Returns the task list, or None when the attempt ended before anything could run (its
        verdict then says why)."""
        ctx = self.ctx
        outputs: list[str] = []
        for round_no in range(PROBE_ROUNDS + 1):
            sections, skipped = context.worker_sections(ctx.catalog, item.rule, ctx.profile.id, item,
                                                        item.evidence, outputs, lessons)
            limits = {"probes_left": max(0, self.budget.probes - item.probes) if self.budget.probes else 99,
                      "attempts_left": max(0, self.budget.attempts - item.worker_attempts) if self.budget.attempts else 99,
                      "modules": sorted((getattr(ctx, "gate_policy", None) or GatePolicy()).allowed_modules())}
            reply = self.agents.ask("worker", item.short_id, attempt.number, sections, skipped,
                                    dict(self._variables(item), attempt=attempt.number, limits=limits,
                                         banned=item.banned, preferred=item.preferred))
            item.tokens += reply.tokens
            attempt.tokens += reply.tokens
            if reply.answer is None:
                return self._refuse(attempt, "the Worker's answer is unusable: %s" % reply.error)
            answer = reply.answer
            attempt.rationale = answer.rationale or ""
            if answer.tasks is not None or answer.tasks_text is not None:
                return self._tasks_of(item, attempt, answer)
            if answer.cannot_fix is not None:
                return self._declined(item, attempt, answer.cannot_fix)
            if self.budget.probes and item.probes >= self.budget.probes:
                return self._refuse(attempt, "the Worker asked for probes past the rule's budget (%d)"
                                    % self.budget.probes, reason="probe_budget")
            if round_no == PROBE_ROUNDS:
                return self._refuse(attempt, "the Worker asked for probes %d times in one attempt without "
                                    "answering tasks" % (PROBE_ROUNDS + 1))
            outputs.extend(self._run_probes(item, attempt, answer.probes or []))
        return None

    @staticmethod
    def _declined(item: A.WorkItem, attempt: A.Attempt, declined) -> None:
        """The Worker's ``cannot_fix``: the attempt ends with its reason code and evidence,
        nothing ran, and it is no refusal (memory never learns it as the fix's failure)."""
        done = A.declined("Worker", declined.reason, declined.evidence)
        attempt.verdict, attempt.reason = A.CANNOT_FIX, done.reason
        attempt.detail = done.detail
        item.declared_by = "worker"

    def _refuse(self, attempt: A.Attempt, why: str, reason: str = "fix_refused") -> list | None:
        """Refuse the attempt before anything runs; no tasks (None) for the caller to return."""
        attempt.gate = why
        attempt.verdict, attempt.reason = A.REFUSED, reason
        attempt.detail = why[:500]
        return None

    def _tasks_of(self, item: A.WorkItem, attempt: A.Attempt, answer) -> list | None:
        """The answer's tasks as data: YAML text is parsed by Ansible's DataLoader (its
        message names line and column, case llm-yaml-unquoted-colon); the Reflector's banned
        patterns for this rule are refused by substring."""
        if answer.tasks_text is not None:
            attempt.tasks = answer.tasks_text
            try:
                tasks = task_gate.parse_task_text(answer.tasks_text, trusted=False, source="the Worker's answer")
            except task_gate.TaskParseError as exc:
                return self._refuse(attempt, "the Worker's tasks are not valid YAML: %s" % exc)
        else:
            tasks = answer.tasks
        attempt.tasks = tasks
        try:
            text = yaml.safe_dump(tasks, default_flow_style=False, sort_keys=False)
        except yaml.YAMLError as exc:
            return self._refuse(attempt, "the Worker's tasks cannot be read as data: %s" % exc)
        for pattern in item.banned:
            if len(pattern) >= MIN_BANNED_CHARS and pattern in text:
                return self._refuse(attempt, "the tasks repeat %r, which the Reflector banned for this rule" % pattern)
        found = task_review.review(item.short_id, tasks, task_review.check_patterns(item.evidence))
        if found:  # it would make the check pass without fixing the rule
            self.ctx.events.emit("review", rule=item.short_id, attempt=attempt.number,
                                 findings=[f.to_dict() for f in found])
            return self._refuse(attempt, "refused by the review: these tasks would make the check pass without "
                                "fixing what the rule protects: %s" % "; ".join(f.message for f in found))
        return tasks

    def _run_probes(self, item: A.WorkItem, attempt: A.Attempt, specs: t.Sequence[t.Any]) -> list[str]:
        """Run the Worker's read-only probes (within the budget) through the executor; return
        their formatted, capped outputs. Each probe is an event and counts toward the budget."""
        ctx = self.ctx
        outputs = []
        for spec in list(specs)[:max(0, self.budget.probes - item.probes) if self.budget.probes else len(specs)]:
            item.probes += 1
            label = _probe_label(spec)
            attempt.probes.append(label)
            try:
                task = probes.probe_task(spec)
            except (probes.ProbeRefused, TypeError, ValueError) as exc:
                outputs.append("probe %s refused: %s" % (label, exc))
                attempt.probe_results.append(outputs[-1])
                ctx.events.emit("probe", rule=item.short_id, attempt=attempt.number, probe=label, refused=str(exc)[:300])
                continue
            executor = TaskListExecutor(ctx.session, ctx.task_vars, trusted=False, policy=ctx.gate_policy)
            report = executor.run([task], keep_results=True)
            raw = report.results[0] if report.results else {"failed": True, "msg": report.refused or report.error}
            text = probes.format_probe_result(spec, raw)
            outputs.append("probe %s:\n%s" % (label, text))
            attempt.probe_results.append(outputs[-1])
            ctx.events.emit("probe", rule=item.short_id, attempt=attempt.number, probe=label, ok=report.ok,
                            chars=len(text), refused=report.refused)
        return outputs


def _probe_label(spec: t.Any) -> str:
    try:
        return probes.probe_key(spec)
    except Exception:
        return str(spec)[:120]
