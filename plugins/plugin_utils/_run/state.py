"""What a host's run decides as it goes: work items, outcomes, the Worker queue, the stop.

Every outcome is recorded through :meth:`RunState.finish` (first time) or
:meth:`RunState.reclassify` (a later phase changes its reason: regressed, after a reboot, the
skill's hook), so every path gives the same fields and the same events, console line,
progress record and memory lesson.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes, safety


@dataclasses.dataclass(frozen=True)
class Sinks:
    """Where a finished outcome goes: the run's ``EventLog``, the ``ConsoleProgress``, the
    host's ``Progress`` file (None: not recorded, as in check mode) and the ``MemorySession``
    (None: memory off or check mode)."""

    events: t.Any
    console: t.Any
    progress: t.Any = None
    memory: t.Any = None


class RunState:
    """One host's decisions. ``category_of(rule_id)``: the skill's category of a rule;
    ``time_budget``: the run's seconds (0: none), counted from ``started`` (monotonic)."""

    def __init__(self, sinks: Sinks, category_of: t.Callable[[str], str], time_budget: float = 0.0,
                 started: float | None = None) -> None:
        self.sinks = sinks
        self.category_of = category_of
        self.time_budget = time_budget
        self.started = time.monotonic() if started is None else started
        self.items: dict[str, A.WorkItem] = {}
        self.outcomes: dict[str, outcomes.RuleOutcome] = {}
        self.queue: list[str] = []  # rules waiting for the Worker phase, in order
        self.stopped: str | None = None  # why the host stopped, once it did
        self.rebooted: dict | None = None  # the reboot of deferred fixes: rules, seconds, ok, detail
        self.interrupted: list[dict] = []  # attempts a crashed start left open, as settled
        self.arf: dict = {}  # before/after ARF paths relative to the run dir, or an "error"
        self.scan_failed: dict | None = None  # a scan after changes that failed twice (ScanError.record)

    # -- work items ------------------------------------------------------------------------
    def item(self, rule_id: str) -> A.WorkItem:
        """The rule's work item, made on first use."""
        if rule_id not in self.items:
            self.items[rule_id] = A.WorkItem(rule_id, category=self.category_of(rule_id))
        return self.items[rule_id]

    def out_of_budget(self, now: float | None = None) -> bool:
        """True once the run's time budget is spent."""
        now = time.monotonic() if now is None else now
        return bool(self.time_budget) and now - self.started > self.time_budget

    # -- outcomes --------------------------------------------------------------------------
    def finish(self, rule_id: str, reason: str, **fields: t.Any) -> outcomes.RuleOutcome:
        """Record the rule's outcome from its reason code and emit it everywhere it goes."""
        outcome = outcomes.RuleOutcome.of(rule_id, reason, category=self.category_of(rule_id), **fields)
        self.outcomes[rule_id] = outcome
        short = safety.short_rule_id(rule_id)
        data = outcome.to_dict()
        del data["rule"], data["attempts"], data["attempt_log"]
        self.sinks.events.emit("rule_complete", rule=short, attempt=outcome.attempts or None, **data)
        self.sinks.console.rule_done(short, outcome.to_dict())
        if self.sinks.progress is not None:
            self.sinks.progress.append("outcome", rule=rule_id, outcome=outcome.to_dict())
        if self.sinks.memory is not None:
            item = self.items.get(rule_id)
            records = [dataclasses.asdict(a) for a in item.attempts] if item else []
            entry = dict(outcome.to_dict(), rule=short)
            if item is not None and item.declared_by:  # an agent's cannot_fix: its word, not an observation
                entry["declared_by"] = item.declared_by
            self.sinks.memory.learn(entry, records, from_memory=outcome.from_memory is not None)
        return outcome

    def finish_item(self, item: A.WorkItem, reason: str, detail: str = "") -> outcomes.RuleOutcome:
        """The rule's outcome from its work item: every attempt in ``attempt_log``, the
        modules of all of them, the changed tasks of the last one that ran, and what the fix
        that stays changed beyond its rule."""
        ran = [a for a in item.attempts if a.report]
        modules: list[str] = []
        for a in ran:
            modules.extend(m for m in a.modules if m not in modules)
        last = ran[-1] if ran else None
        changed = ["%s (%s)" % (r.get("name"), r.get("module")) for r in (last.report.get("task_results") or [])
                   if r.get("changed") and not r.get("check_mode")] if last else []
        stands = last if last is not None and last.verdict == A.PASSED else None
        kept = stands.side_effects if stands is not None else []
        return self.finish(item.rule, reason, attempts=len(item.attempts), modules=modules, changed_tasks=changed,
                           detail=detail[:800], attempt_log=[a.log_entry() for a in item.attempts],
                           lessons_shown=list(item.lessons_shown), side_effects=list(kept),
                           warnings=list(stands.warnings) if stands is not None else [])

    def reclassify(self, rule_id: str, reason: str, detail: str) -> outcomes.RuleOutcome:
        """Give a finished rule a new reason: every other field of its outcome stays."""
        old = self.outcomes[rule_id]
        fields = {f.name: getattr(old, f.name) for f in dataclasses.fields(old)
                  if f.name not in ("rule", "outcome", "reason", "detail", "category")}
        return self.finish(rule_id, reason, detail=detail, **fields)

    # -- the stop --------------------------------------------------------------------------
    def stop(self, detail: str, rules: t.Iterable[str] = (), reason: str = "unhealthy") -> None:
        """Stop working this host; ``rules`` still without an outcome get ``reason``. Later
        rules get ``host_stopped``. The first stop's detail is the one kept."""
        self.stopped = self.stopped or detail
        self.sinks.events.emit("host_stopped", detail=detail)
        self.finish_unworked(rules, reason, detail)

    def finish_unworked(self, rules: t.Iterable[str], reason: str, detail: str) -> None:
        """Give ``rules`` still without an outcome ``reason``: from their work item (its
        attempts kept) when they have one with attempts, else as never attempted."""
        for rule in rules:
            if rule in self.outcomes:
                continue
            item = self.items.get(rule)
            if item is not None and item.attempts:
                self.finish_item(item, reason, detail)
            else:
                self.finish(rule, reason, detail=detail)
