"""One host's use of the memory store during a run: what the loop asks of memory.

The loop calls, in order: :meth:`MemorySession.decide` before a rule's first attempt (act
without a model: classify from a caution, skip a vendor fix known to fail here, try tasks
that verified before), :meth:`lessons_for` when it builds an agent prompt (the block of
selected lessons, seed 000 fixes 2-5), :meth:`saw` after each attempt (usage rows, with
whether the attempt followed what it was shown), :meth:`learn` when a rule finishes
(deterministic lessons from its outcome and attempts, written at once so the other hosts
of the run select them from their next rule on, and reinforcement of the lessons shown,
seed 000 fix 1), and :meth:`close` at the end (the dream pass, seed 004).

One write transaction per finished rule (issue 19 item 7): the usage rows of ``decide`` and
``saw`` are kept by the session and written in the rule's ``learn`` transaction, before its
outcome is stamped on them (rows of a rule that never reached ``learn`` are written by
``close``). Every transaction takes the store's lock and reads and rewrites whole table files:
with 10,000 lessons a rule's learn holds the lock about 2 s, and the 32 hosts of a run queue
for that one lock (bench/memory_fleet.py: 2.7 transactions a rule before, 1 now). An unstamped
usage row counts for nothing (``learning.success``), so nothing is lost by writing it at the
rule's end; a host killed in the middle of a rule loses that rule's unstamped rows.

Modes (``scapforge_memory_mode``, seed 002): ``off`` (no session), ``shadow`` (select and
log what would have been shown or decided; the prompts and the run do not change),
``inject`` (the block goes into the Architect's and the Worker's prompts and decisions act).

Memory must never cost a run, and must not fail in silence (issue 19 item 6). A corrupt
table is moved aside once (``<file>.corrupt-<UTC>``, bytes kept for ``tools/lessons.py
repair``), a fresh table is started and the operation is tried again: the session is
``degraded`` (a ``memory_degraded`` event, a console line, the host report's reason), and new
lessons are kept. Any other store error (a lock timeout, a corrupt meta.json, which leaves the
schema unknown, a table corrupt again at once), and any other exception of the memory code, is
a ``memory_error`` event and turns the session ``off`` for the rest of the run.
"""

from __future__ import annotations

import dataclasses
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import learning, lessons, selection
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.errors import MemoryCorrupt, MemoryLockBusy
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.store import MemoryStore, aside_files, table_file

MODES = ("off", "shadow", "inject")
#: what a busy lock gives :meth:`MemorySession._write` (nothing is wrong with the store).
BUSY = "busy"
BUSY_NOTE = ("the store's lock was busy (other hosts held it past the lock timeout): "
             "this host's lessons are kept and written at its next chance")
BUSY_DONE = "the store's lock was busy for a while (other hosts held it): every lesson was written later"
#: close waits this many lock timeouts for the lock (the last chance to write the backlog): at
#: 10,000 lessons 32 hosts need about 10 minutes of the lock between them (bench/memory_fleet.py),
#: and a host that waits loses nothing, while one that gives up loses its run's lessons.
CLOSE_WAIT = 10
#: seconds a finished rule waits for the lock at most (the lock timeout when shorter): a busy
#: lock loses nothing (the rule waits in the backlog), so a host must not stall on it rule after rule.
LEARN_WAIT = 10.0
#: the host report's ``memory.state``: on (working), degraded (working, after a corrupt table was moved aside
#: and a fresh one started: ``reason`` says which and where to), off (mode off, or the store cannot be used).
STATES = ("on", "degraded", "off")


def disabled(reason: str = "scapforge_memory_mode is off") -> dict:
    """The host report's ``memory`` block of a host that ran without a session."""
    return {"state": "off", "reason": reason, "shown": 0, "created": 0, "reinforced": 0, "retired": 0}


class MemorySession:
    """The memory of one host's run.

    store: a ``MemoryStore``; mode: ``shadow`` or ``inject``; retry: work rules memory would
    classify (``scapforge_memory_retry``); fingerprint: ``lessons.fingerprint`` of the host;
    skill, run_id, host: where lessons and usage rows come from; events: the run's EventLog.
    ``counts``: shown, created, reinforced, retired; :meth:`close` adds ``state`` and ``reason``
    (``STATES``) for the host report's ``memory`` block.
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
        self.degraded: list[str] = []
        self._shown: set[str] = set()
        self._cause_gone: dict[str, tuple[str, str]] = {}
        self._pending: list[dict] = []  # usage rows not written yet: the next learn (or close) writes them
        self._backlog: list[tuple] = []  # finished rules a busy lock kept out: the next learn (or close) writes them
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

    @property
    def state(self) -> str:
        return "off" if self.broken else "degraded" if self.degraded else "on"

    @property
    def reason(self) -> str | None:
        return self.broken or "; ".join(self.degraded) or None

    def _guarded(self, what: str, work: t.Callable[[], t.Any]) -> tuple[bool, t.Any]:
        """(True, work()) or (False, None) with the session turned off. A corrupt table is
        healed once (:meth:`_heal`) and ``work`` run again: the store only moves a table
        aside, it never empties one, so a retry cannot lose what was there."""
        try:
            try:
                return True, work()
            except MemoryCorrupt as exc:
                self._heal(what, exc)
            return True, work()
        except Exception as exc:  # memory must never cost a run: a bug here turns it off
            self._fail(what, exc)
            return False, None

    def _heal(self, what: str, exc: MemoryCorrupt) -> None:
        """Have the corrupt tables of ``exc`` moved aside (a snapshot moves nothing, so under
        the lock now) and note each in ``degraded``; raises when the store cannot go on (a
        corrupt meta.json, moved aside too: the schema is unknown until a person restores it or
        ``tools/lessons.py repair`` rebuilds it)."""
        moved = [(exc.table, exc.moved_to, exc.reason)] + [(n, m, "corrupt") for n, m in exc.others]
        if exc.moved_to is None:
            moved = [row for row in self.store.move_corrupt_aside() if row[1]]
        for table, to, why in moved:
            if table == "meta":
                raise MemoryCorrupt(table, to, why)
        if not moved:  # another host's process of this run moved it first
            copies = [c for c in aside_files(self.store.path) if c.startswith(table_file(exc.table) + ".corrupt-")]
            moved = [(exc.table, ("%s/%s" % (self.store.path, copies[-1])) if copies else "by another process", exc.reason)]
        for table, to, why in moved:
            text = "%s is corrupt (%s); moved to %s; a fresh table was started" % (table_file(table), why, to)
            self.degraded.append(text)
            self.events.emit("memory_degraded", during=what, table=table, moved_to=to, reason=text[:500])

    def _fail(self, what: str, exc: Exception) -> None:
        self.broken = "%s: %s" % (what, exc)
        self.events.emit("memory_error", during=what, msg=str(exc)[:500], error=type(exc).__name__,
                         table=getattr(exc, "table", None), moved_to=getattr(exc, "moved_to", None))

    def _read(self, what: str, look: t.Callable[[t.Any], t.Any]) -> tuple[bool, t.Any]:
        """``look(tables)`` on a read-only snapshot, through :meth:`_guarded`."""
        def work():
            with self.store.snapshot() as tx:
                return look(tx)
        return self._guarded(what, work)

    def _write(self, what: str, change: t.Callable[[t.Any], t.Any], busy: bool = False,
               timeout: float | None = None) -> tuple[bool, t.Any]:
        """``change(tables)`` inside a transaction (the lock), through :meth:`_guarded`. With
        ``busy``, a lock other hosts held past the timeout gives (False, :data:`BUSY`) and the
        session stays on: the caller keeps what it would have written."""
        def work():
            with self.store.transaction(timeout) as tx:
                return change(tx)
        if not busy:
            return self._guarded(what, work)
        try:
            return True, work()
        except MemoryLockBusy as exc:
            self.events.emit("memory_busy", during=what, msg=str(exc)[:300], kept=len(self._backlog))
            return False, BUSY
        except MemoryCorrupt as exc:
            try:  # healed once, as _guarded does; a second failure turns the session off
                self._heal(what, exc)
                return True, work()
            except Exception as again:
                self._fail(what, again)
                return False, None
        except Exception as exc:  # memory must never cost a run: a bug here turns it off
            self._fail(what, exc)
            return False, None

    # ------------------------------------------------------------------ before a rule
    def decide(self, rule_id: str, category: str, llm: bool, tasks_sha: str | None = None,
               look: t.Callable[[], tuple[str | None, t.Any]] | None = None,
               missing: t.Callable[[t.Sequence[dict]], list] | None = None) -> selection.Decision | None:
        """What memory alone says about the rule (``selection.decide``), logged as usage rows
        of mode ``act``; None in shadow mode (the would-be decision is only an event).

        look: a one-rule check of the rule as the host is now, ``(result, OVAL evidence)``. A
        decision from a failed fix with the checks it left failing stands only when
        ``selection.cause_stands`` on what ``look`` gives (issue 19 item 3: an earlier fix of
        this run, or the host itself, may have removed the cause); when the cause is gone the
        rule is worked as if nothing were known, and :meth:`learn` updates the lesson.
        missing: which of a proven fix's preconditions the host lacks now (issue 19 item 4); a
        replay with one missing is not made: the rule is worked as usual (the content's fix,
        then the Worker, who is shown the lesson), and the lesson is not judged by it."""
        if self.broken:
            return None

        def decide(tx):
            return selection.decide(tx.lessons, rule_id, self.fingerprint, retry=self.retry, llm=llm, tasks_sha=tasks_sha)
        ok, decision = self._read("decide", decide)
        if not ok or decision is None:
            return None
        short = safety.short_rule_id(rule_id)
        if decision.checks and look is not None and self.acting:
            result, evidence = look()
            stands, why = selection.cause_stands(decision.checks, result, evidence)
            self.events.emit("memory_cause", rule=short, lesson=decision.lesson, stands=stands, result=result, why=why)
            if not stands:
                self._cause_gone[short] = (decision.lesson, why)
                return None
            decision = dataclasses.replace(decision, detail="%s; %s" % (decision.detail, why))
        # the content's own fix is re-rendered and run as usual, never replayed: nothing to check
        if decision.preconditions and decision.source != "vendor" and missing is not None and self.acting:
            lacking = missing(list(decision.preconditions))
            if lacking:
                self.events.emit("memory_precondition", rule=short, lesson=decision.lesson, missing=lacking)
                return None
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
        ok, chosen = self._read("select", lambda tx: selection.select(tx.lessons, rule_id, category, self.skill,
                                                                      self.fingerprint))
        if not ok or not chosen:
            return None, []
        ids = [doc["id"] for doc in chosen]
        self.events.emit("memory_selected", rule=safety.short_rule_id(rule_id), lessons=ids, mode=self.mode)
        return (selection.render(chosen) if self.mode == "inject" else None), ids

    # ------------------------------------------------------------------ after an attempt
    def saw(self, rule_id: str, category: str, attempt: int, lesson_ids: t.Sequence[str], executed_tasks: t.Any) -> None:
        """Usage rows for the lessons an attempt was shown (or, in shadow, would have been),
        with ``followed`` judged from the tasks it ran (None when nothing ran)."""
        if self.broken or not lesson_ids:
            return
        wanted = set(lesson_ids)
        ok, docs = self._read("usage", lambda tx: [doc for doc in tx.lessons.all() if doc.get("id") in wanted])
        if not ok:
            return
        self._log(docs, safety.short_rule_id(rule_id), category, attempt,
                  "inject" if self.mode == "inject" else "shadow", executed_tasks=executed_tasks)

    def _log(self, docs: list, short: str, category: str, attempt: int, mode: str, executed_tasks: t.Any = None,
             directive: bool | None = None) -> None:
        self._pending.extend(learning.usage_rows(docs, self.run_id, self.host, short, category, attempt, mode,
                                                 executed_tasks=executed_tasks, directive=directive))
        if mode in ("inject", "act"):
            self._shown.update(doc["id"] for doc in docs)
            self.counts["shown"] = len(self._shown)

    # ------------------------------------------------------------------ when a rule ends
    def learn(self, rule_entry: dict, attempt_records: list, from_memory: bool) -> dict:
        """Record what a finished rule proved and reinforce what it was shown.

        rule_entry: the host report's entry of the rule (RuleOutcome dict, short ``rule``);
        attempt_records: its attempts as dicts (``Attempt`` fields, tasks included).
        Returns {"created": [...], "supported": [...], "reinforced": [...], "confirmed": [...]},
        with "retired" or "weakened" for a lesson whose cause :meth:`decide` found gone.
        """
        if self.broken:
            return {}
        self._backlog.append((rule_entry, attempt_records, from_memory, self._cause_gone.pop(rule_entry["rule"], None)))
        results, _none = self._flush("learn", timeout=min(self.store.lock_timeout, LEARN_WAIT))
        return results[-1] if results else {}

    def _flush(self, what: str, timeout: float | None = None,
               then: t.Callable[[t.Any], t.Any] | None = None) -> tuple[list, t.Any]:
        """Write the backlog of finished rules (oldest first) and the usage rows kept, in ONE
        transaction, then ``then(tx)``; returns (each rule's result, what ``then`` returned):
        ({} each, None) when the lock was busy (they stay in the backlog, and the session says
        so, ``degraded``)."""
        backlog, pending = list(self._backlog), list(self._pending)

        def change(tx):
            learning.log_usage(tx.usage, pending)  # the rules' usage rows first: reinforce stamps them
            out = []
            for rule_entry, attempt_records, from_memory, gone in backlog:
                short = rule_entry["rule"]
                report = {"host": self.host, "run_id": self.run_id, "rules": {short: rule_entry}}
                candidates = lessons.extract(report, {short: attempt_records}, self.fingerprint, self.skill,
                                             run_id=self.run_id, host=self.host)
                made = lessons.record(tx.lessons, tx.evidence, candidates)
                done = learning.reinforce(tx.lessons, tx.usage, tx.evidence, self.run_id, self.host, short,
                                          rule_entry["outcome"], rule_entry["reason"], from_memory=from_memory)
                if gone is not None:
                    done.update(learning.cause_gone(tx.lessons, tx.evidence, gone[0], self.run_id, self.host, short,
                                                    rule_entry["outcome"], rule_entry["reason"], gone[1]))
                out.append((short, dict(made, **done)))
            return out, (then(tx) if then is not None else None)
        ok, got = self._write(what, change, busy=True, timeout=timeout)
        if not ok:
            if got is BUSY and BUSY_NOTE not in self.degraded:
                self.degraded.append(BUSY_NOTE)
            return ([{} for _entry in backlog] if got is BUSY else []), None
        del self._backlog[:len(backlog)]
        del self._pending[:len(pending)]
        out, after = got
        for short, result in out:
            self.counts["created"] += len(result.get("created") or [])
            self.counts["reinforced"] += len(result.get("reinforced") or [])
            if any(result.values()):
                self.events.emit("memory_learned", rule=short, **{k: v for k, v in result.items() if v})
        return [result for _short, result in out], after

    def close(self) -> dict:
        """The dream pass over the store (category credit, retirement); returns the host
        report's ``memory`` block: ``counts`` with ``state`` and ``reason`` (and ``error``, the
        same text as ``reason``, when the session is off)."""
        if not self.broken:
            # the backlog a busy lock kept, and rows of rules that never reached learn: written
            # with the dream pass, waiting longer for the lock than a rule does
            _results, dreamt = self._flush("dream", timeout=self.store.lock_timeout * CLOSE_WAIT,
                                           then=lambda tx: learning.dream(tx.lessons, tx.usage))
            if self._backlog or self._pending:
                self._fail("dream", MemoryLockBusy("the store's lock stayed busy: the lessons of %d finished rules "
                                                   "were not written" % len(self._backlog)))
            elif dreamt is not None:
                if BUSY_NOTE in self.degraded:
                    self.degraded.remove(BUSY_NOTE)
                    self.degraded.append(BUSY_DONE)
                self.counts["retired"] = len(dreamt.get("retired") or [])
                self.events.emit("memory_dream", categories=dreamt.get("categories"), retired=dreamt.get("retired"))
        block = dict(self.counts, state=self.state, reason=self.reason)
        if self.broken:
            block["error"] = self.broken
        return block
