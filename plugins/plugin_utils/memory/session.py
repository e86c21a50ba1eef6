"""One host's use of the memory store during a run: what the loop asks of memory.

The loop calls, in order: :meth:`MemorySession.decide` before a rule's first attempt (act
without a model: classify from a caution, skip a vendor fix known to fail here, try tasks
that verified before), :meth:`lessons_for` when it builds an agent prompt (the block of
selected lessons, seed 000 fixes 2-5), :meth:`saw` after each attempt (usage rows, with
whether the attempt followed what it was shown), :meth:`learn` when a rule finishes
(deterministic lessons from its outcome and attempts, written at once so the other hosts
of the run select them from their next rule on, and reinforcement of the lessons shown,
seed 000 fix 1), and :meth:`close` at the end (the dream pass, seed 004).

Modes (``scapforge_memory_mode``, seed 002): ``off`` (no session), ``shadow`` (select and
log what would have been shown or decided; the prompts and the run do not change),
``inject`` (the block goes into the Architect's and the Worker's prompts and decisions act).

Memory must never cost a run: every store error (a corrupt table moved aside, a lock
timeout), and any other exception of the memory code, is a ``memory_error`` event and turns
the session off for the rest of the run.
"""

from __future__ import annotations

import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import learning, lessons, selection
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.store import MemoryStore

MODES = ("off", "shadow", "inject")


class MemorySession:
    """The memory of one host's run.

    store: a ``MemoryStore``; mode: ``shadow`` or ``inject``; retry: work rules memory would
    classify (``scapforge_memory_retry``); fingerprint: ``lessons.fingerprint`` of the host;
    skill, run_id, host: where lessons and usage rows come from; events: the run's EventLog.
    ``counts`` is the host report's ``memory``: shown, created, reinforced, retired.
    """

    def __init__(self, store: MemoryStore, mode: str, retry: bool, fingerprint: dict, skill: str, run_id: str,
                 host: str, events) -> None:
        self.store = store
        self.mode = mode
        self.retry = retry
        self.fingerprint = fingerprint
        self.skill = skill
        self.run_id = run_id
        self.host = host
        self.events = events
        self.broken: str | None = None
        self._shown: set[str] = set()
        self.counts = {"shown": 0, "created": 0, "reinforced": 0, "retired": 0}

    @classmethod
    def open(cls, path: str, mode: str, retry: bool, facts: dict, content_version: str, skill: str, run_id: str,
             host: str, events) -> "MemorySession | None":
        """A session, or None when the mode is ``off``. Raises ValueError for an unknown mode."""
        if mode not in MODES:
            raise ValueError("scapforge_memory_mode must be one of %s, got %r" % (", ".join(MODES), mode))
        if mode == "off":
            return None
        fingerprint = lessons.fingerprint(facts, content_version, skill)
        session = cls(MemoryStore(path), mode, retry, fingerprint, skill, run_id, host, events)
        events.emit("memory", mode=mode, path=path, fingerprint=fingerprint, retry=retry)
        return session

    @property
    def acting(self) -> bool:
        return self.mode == "inject" and self.broken is None

    def _fail(self, what: str, exc: Exception) -> None:
        self.broken = "%s: %s" % (what, exc)
        self.events.emit("memory_error", during=what, msg=str(exc)[:500], error=type(exc).__name__,
                         table=getattr(exc, "table", None), moved_to=getattr(exc, "moved_to", None))

    # ------------------------------------------------------------------ before a rule
    def decide(self, rule_id: str, category: str, llm: bool, tasks_sha: str | None = None) -> selection.Decision | None:
        """What memory alone says about the rule (``selection.decide``), logged as usage rows
        of mode ``act``; None in shadow mode (the would-be decision is only an event)."""
        if self.broken:
            return None
        try:
            with self.store.snapshot() as tx:
                decision = selection.decide(tx.lessons, rule_id, self.fingerprint, retry=self.retry, llm=llm,
                                            tasks_sha=tasks_sha)
        except Exception as exc:  # memory must never cost a run: a bug here turns it off
            self._fail("decide", exc)
            return None
        if decision is None:
            return None
        short = safety.short_rule_id(rule_id)
        self.events.emit("memory_decision", rule=short, action=decision.action, lesson=decision.lesson,
                         reason=decision.reason, detail=decision.detail, applied=self.acting)
        if not self.acting:
            return None
        self._log([{"id": decision.lesson}], short, category, 0, "act", directive=True)
        return decision

    def lessons_for(self, rule_id: str, category: str) -> tuple[str | None, list[str]]:
        """(the block to show, the lesson ids) for an agent prompt; the block is None in
        shadow mode (the selection is still logged) or when nothing is selected."""
        if self.broken:
            return None, []
        try:
            with self.store.snapshot() as tx:
                chosen = selection.select(tx.lessons, rule_id, category, self.skill, self.fingerprint)
        except Exception as exc:  # memory must never cost a run: a bug here turns it off
            self._fail("select", exc)
            return None, []
        ids = [doc["id"] for doc in chosen]
        if not chosen:
            return None, []
        self.events.emit("memory_selected", rule=safety.short_rule_id(rule_id), lessons=ids, mode=self.mode)
        return (selection.render(chosen) if self.mode == "inject" else None), ids

    # ------------------------------------------------------------------ after an attempt
    def saw(self, rule_id: str, category: str, attempt: int, lesson_ids: t.Sequence[str], executed_tasks: t.Any) -> None:
        """Usage rows for the lessons an attempt was shown (or, in shadow, would have been),
        with ``followed`` judged from the tasks it ran (None when nothing ran)."""
        if self.broken or not lesson_ids:
            return
        try:
            with self.store.snapshot() as tx:
                docs = [doc for doc in tx.lessons.all() if doc.get("id") in set(lesson_ids)]
        except Exception as exc:  # memory must never cost a run: a bug here turns it off
            self._fail("usage", exc)
            return
        self._log(docs, safety.short_rule_id(rule_id), category, attempt,
                  "inject" if self.mode == "inject" else "shadow", executed_tasks=executed_tasks)

    def _log(self, docs: list, short: str, category: str, attempt: int, mode: str, executed_tasks: t.Any = None,
             directive: bool | None = None) -> None:
        rows = learning.usage_rows(docs, self.run_id, self.host, short, category, attempt, mode,
                                   executed_tasks=executed_tasks, directive=directive)
        try:
            with self.store.transaction() as tx:
                learning.log_usage(tx.usage, rows)
        except Exception as exc:  # memory must never cost a run: a bug here turns it off
            self._fail("usage", exc)
            return
        if mode in ("inject", "act"):
            self._shown.update(doc["id"] for doc in docs)
            self.counts["shown"] = len(self._shown)

    # ------------------------------------------------------------------ when a rule ends
    def learn(self, rule_entry: dict, attempt_records: list, from_memory: bool) -> dict:
        """Record what a finished rule proved and reinforce what it was shown.

        rule_entry: the host report's entry of the rule (RuleOutcome dict, short ``rule``);
        attempt_records: its attempts as dicts (``Attempt`` fields, tasks included).
        Returns {"created": [...], "supported": [...], "reinforced": [...], "confirmed": [...]}.
        """
        if self.broken:
            return {}
        short = rule_entry["rule"]
        report = {"host": self.host, "run_id": self.run_id, "rules": {short: rule_entry}}
        try:
            candidates = lessons.extract(report, {short: attempt_records}, self.fingerprint, self.skill,
                                         run_id=self.run_id, host=self.host)
            with self.store.transaction() as tx:
                made = lessons.record(tx.lessons, tx.evidence, candidates)
                done = learning.reinforce(tx.lessons, tx.usage, tx.evidence, self.run_id, self.host, short,
                                          rule_entry["outcome"], rule_entry["reason"], from_memory=from_memory)
        except Exception as exc:  # memory must never cost a run: a bug here turns it off
            self._fail("learn", exc)
            return {}
        self.counts["created"] += len(made.get("created") or [])
        self.counts["reinforced"] += len(done.get("reinforced") or [])
        result = dict(made, **done)
        if any(result.values()):
            self.events.emit("memory_learned", rule=short, **{k: v for k, v in result.items() if v})
        return result

    def close(self) -> dict:
        """The dream pass over the store (category credit, retirement); returns ``counts``."""
        if self.broken:
            return dict(self.counts, error=self.broken)
        try:
            with self.store.transaction() as tx:
                dreamt = learning.dream(tx.lessons, tx.usage)
        except Exception as exc:  # memory must never cost a run: a bug here turns it off
            self._fail("dream", exc)
            return dict(self.counts, error=self.broken)
        self.counts["retired"] = len(dreamt.get("retired") or [])
        self.events.emit("memory_dream", categories=dreamt.get("categories"), retired=dreamt.get("retired"))
        return dict(self.counts)
