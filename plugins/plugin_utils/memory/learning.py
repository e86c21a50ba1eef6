"""What the loop learns from having shown lessons: usage rows, reinforcement, the dream pass,
and merging two stores.

- Usage (seed 002's ``rsi_lesson_usage``): one row per lesson per attempt that selected it,
  with the mode (``shadow``: selected and logged, not shown; ``inject``: shown in the prompt;
  ``act``: the loop acted on it without a model) and whether the attempt FOLLOWED it
  (:func:`followed`), later stamped with the rule's outcome (:func:`reinforce`).
- Reinforcement (seed 000 fix 1: "Lesson weights never changed ... Nobody called it"):
  a lesson shown for a work item that then succeeded +0.1 (cap 1.0), failed -0.05 (floor
  0), once per work item (run, host, rule), never for shadow rows (they were not shown) nor
  for a rule decided from memory with no attempt (the outcome is the lesson's own
  prediction, not new evidence). Weights only rank; evidence is never changed or deleted.
- The dream pass (seed 004, DEF-03 and the DEF-27 tuning): per category, the follow-aware
  signal ``2 x AVG(outcome x confidence x follow modifier) - 1`` when at least 5 of the
  category's retrievals have follow data, else the legacy ``2 x success rate - 1``; the
  signal scales the confidence of the category's lessons; lessons with >= 3 counted outcomes
  and utility < 0.3 are retired (marked, never deleted).
- :func:`merge`: two stores become one: union of lessons by dedupe key, of evidence by
  (lesson, source kind, source id) and of usage by row key; derived fields recomputed.

Terms, exactly:

- scope of a retrieval (seed 004 follow-aware credit, issue 19 item 5): a usage row counts
  only for a lesson it is relevant to (:func:`in_scope`): the lesson's rule (``scope.rule``)
  or a rule its evidence names (``rules``); for a category lesson (no rule) a rule of that
  category; for a skill-wide lesson (a task-shape cause, a gate refusal) any rule of the skill
  (every attempt could have followed it); for a caution only the rules its evidence names. A
  row outside the scope has no success value: being shown elsewhere (selection fills a
  prompt with same-category lessons) neither rewards, penalises, credits nor retires.
- success of a retrieval (the "outcome" term): for positive and negative lessons 1 when the
  rule ended ``remediated``, 0 when ``escalated``, none otherwise (skipped, deferred, and the
  escalations that judge no fix: ``llm_error``, ``needs_human``, :data:`NO_FIX_JUDGED`). For a
  caution lesson (a prediction that the rule cannot pass here) 1 when the rule ended with
  the caution's own reason, 0 when it was remediated (the prediction was wrong), none
  otherwise, and none for a rule the caution's evidence does not name.
- confidence (seed 004: 1.0 for a verified oscap result, 0.5 otherwise): 1.0 when the rule's
  reason was read from an OpenSCAP rule-result after an attempt (:data:`OSCAP_VERIFIED`),
  else 0.5 (a task error, a classification, a budget).
- follow modifier (seed 004 DEF-27 after tuning): 1.0 followed, 0.3 not followed, 0.5
  unknown; 1.0 for caution lessons, which predict rather than advise.
- utility of a lesson: AVG(success x confidence x follow modifier) over its retrievals that
  have a success value (the same per-retrieval term as the follow-aware category signal,
  before the ``2x - 1`` mapping; seed 004 R8 retired 587 tips "using the follow-aware utility
  formula"). Retired when the lesson has >= 3 counted outcomes (``outcomes`` = work items
  with a success value) and utility < 0.3: a lesson only shown and ignored while its rules
  passed scores exactly 0.3 and is kept (the reason for the 0.0 -> 0.3 tuning).
"""

from __future__ import annotations

import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps, outcomes, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import lessons as L

try:
    from tinydb import Query
except ImportError:
    deps.missing("tinydb")

SHADOW, INJECT, ACT = "shadow", "inject", "act"
MODES = (SHADOW, INJECT, ACT)
#: modes in which the lesson reached the loop (shadow rows are for comparison only).
SHOWN_MODES = (INJECT, ACT)
#: seed 000 fix 1 with issue 6's numbers.
REWARD, PENALTY, WEIGHT_CAP, WEIGHT_FLOOR = 0.1, 0.05, 1.0, 0.0
#: seed 004 DEF-27 (not followed: 0.3 since the tuning, was 0.0).
FOLLOW_MODIFIER = {True: 1.0, False: 0.3, None: 0.5}
#: reasons read from an OpenSCAP rule-result after an attempt (confidence 1.0, seed 004).
OSCAP_VERIFIED = frozenset({"verified", "fix_ineffective", "no_effect", "regressed"})
#: remediated reasons whose pass is not the fix's doing (issue 17 item 5): a lesson shown for
#: the rule gets no reward or penalty from them and is never confirmed by them.
NOT_BY_ITS_FIX = frozenset({"passes_after_other_fixes", "passes_without_fix"})
#: escalated reasons that judge no fix (issue 18): the LLM endpoint went down, or an agent
#: answered cannot_fix for a person to decide. A lesson shown for the rule gets no penalty.
NO_FIX_JUDGED = frozenset({"llm_error", "needs_human"})
#: seed 004: the follow-aware signal needs >= 5 retrievals with follow data in the category.
MIN_FOLLOW_RETRIEVALS = 5
#: issue 6 / seed 004: retire at >= 3 outcomes and utility < 0.3.
RETIRE_MIN_OUTCOMES, RETIRE_BELOW = 3, 0.3


# ----------------------------------------------------------------------------- following
def followed(lesson: t.Mapping, executed_tasks: t.Any = None, directive: bool | None = None) -> bool | None:
    """Whether an attempt followed a lesson it was shown; None when it cannot be told.

    directive: for a decision from memory (``selection.decide``), whether its directive was
    applied (classified as said, the content's fix skipped, the proven tasks tried): returned
    as is. executed_tasks: the task list the attempt ran (None when nothing ran). Else:
    a caution is followed when no fix ran, not followed when one did; a lesson with a
    :data:`lessons.PATTERNS` cause is followed when the tasks do not repeat it; a positive
    lesson with tasks is followed when the executed tasks contain each of its changes (same
    module FQCN and the same :data:`lessons.KEY_ARGS` values: path/dest/name/key/regexp/line/
    value/state/... -- how a change is made, e.g. ``backup`` or ``insertafter``, does not
    matter); a negative lesson with tasks is followed when the executed tasks do NOT contain
    all of its changes (the failed approach was not repeated). A text-only lesson (a
    Reflector candidate) gives None: no model judges it here (seed 004's 0.5 case).
    """
    if directive is not None:
        return bool(directive)
    if executed_tasks is None:
        return None
    if lesson.get("kind") == L.CAUTION:
        return not L.task_signature(executed_tasks)
    pattern = L.PATTERNS_BY_SLUG.get(lesson.get("pattern") or "")
    if pattern is not None and pattern.violates is not None:
        return not pattern.violates(executed_tasks)
    wanted = set(L.task_signature(lesson.get("tasks") or []))
    if not wanted:
        return None
    contained = wanted <= set(L.task_signature(executed_tasks))
    return contained if lesson.get("kind") == L.POSITIVE else not contained


def usage_key(run_id: str, host: str, rule: str, attempt: int, lesson: str, mode: str) -> str:
    """The unique key of a usage row: ``<run_id>/<host>/<rule>/<attempt>/<lesson>/<mode>``."""
    return "%s/%s/%s/%s/%s/%s" % (run_id, host, rule, attempt, lesson, mode)


def usage_rows(lessons: t.Iterable[t.Mapping], run_id: str, host: str, rule: str, category: str | None,
               attempt: int, mode: str, executed_tasks: t.Any = None, directive: bool | None = None,
               now: str | None = None) -> list[dict]:
    """Usage rows for the lessons an attempt saw (or that a decision used).

    attempt: the attempt number (0 for a decision before any attempt); mode: shadow, inject
    or act; executed_tasks/directive: see :func:`followed`. Row fields: key, lesson, run_id,
    host, rule (short id), category, attempt, mode, followed, time, and outcome, reason,
    from_memory, outcome_time (None until :func:`reinforce`). Raises ValueError for an
    unknown mode.
    """
    if mode not in MODES:
        raise ValueError("usage mode must be one of %s, got %r" % (MODES, mode))
    rule = safety.short_rule_id(rule)
    now = now or L.now_iso()
    return [{"key": usage_key(run_id, host, rule, attempt, lesson["id"], mode), "lesson": lesson["id"],
             "run_id": run_id, "host": host, "rule": rule, "category": category, "attempt": attempt, "mode": mode,
             "followed": followed(lesson, executed_tasks, directive), "time": now, "outcome": None, "reason": None,
             "from_memory": None, "outcome_time": None} for lesson in lessons]


def log_usage(usage_table, rows: t.Iterable[t.Mapping]) -> int:
    """Insert the rows whose key is not stored yet (logging twice adds nothing); returns how
    many were inserted."""
    rows = list(rows)
    if not rows:
        return 0
    keys = {row["key"] for row in rows}
    present = {doc["key"] for doc in usage_table.search(Query().key.one_of(sorted(keys)))}
    fresh, seen = [], set(present)
    for row in rows:
        if row["key"] not in seen:
            seen.add(row["key"])
            fresh.append(dict(row))
    if fresh:
        usage_table.insert_multiple(fresh)
    return len(fresh)


# ----------------------------------------------------------------------------- the terms
def in_scope(lesson: t.Mapping, row: t.Mapping) -> bool:
    """Whether a usage row's rule is one the lesson is about (module docstring, "scope of a
    retrieval"): only there could the attempt have followed it, so only there does its
    outcome say anything about the lesson."""
    scope = lesson.get("scope") or {}
    rule = row.get("rule")
    if scope.get("rule") == rule or rule in (lesson.get("rules") or {}):
        return True
    if lesson.get("kind") == L.CAUTION or scope.get("rule"):
        return False
    return not scope.get("category") or scope.get("category") == row.get("category")


def success(lesson: t.Mapping, row: t.Mapping) -> int | None:
    """The retrieval's outcome term (module docstring): 1, 0 or None."""
    if row.get("mode") not in SHOWN_MODES or row.get("outcome") is None or row.get("from_memory"):
        return None
    if not in_scope(lesson, row):
        return None
    if row.get("reason") in NOT_BY_ITS_FIX or row.get("reason") in NO_FIX_JUDGED:
        return None
    if lesson.get("kind") != L.CAUTION and str(row.get("reason") or "").startswith(outcomes.ENVIRONMENT_PREFIX):
        return None  # the environment stopped the rule: no advice could have fixed it, none failed
    if lesson.get("kind") == L.CAUTION:
        if row.get("reason") == lesson.get("reason"):
            return 1
        return 0 if row.get("outcome") == outcomes.REMEDIATED else None
    if row.get("outcome") == outcomes.REMEDIATED:
        return 1
    return 0 if row.get("outcome") == outcomes.ESCALATED else None


def confidence(row: t.Mapping) -> float:
    """1.0 when the rule's reason came from an OpenSCAP rule-result, else 0.5 (seed 004)."""
    return 1.0 if row.get("reason") in OSCAP_VERIFIED else 0.5


def modifier(lesson: t.Mapping, row: t.Mapping) -> float:
    """Seed 004's follow modifier (1.0 / 0.3 / 0.5); 1.0 for caution lessons."""
    if lesson.get("kind") == L.CAUTION:
        return 1.0
    return FOLLOW_MODIFIER[row.get("followed") if row.get("followed") in (True, False) else None]


def value(lesson: t.Mapping, row: t.Mapping) -> float | None:
    """success x confidence x follow modifier for one retrieval; None without a success value."""
    s = success(lesson, row)
    if s is None:
        return None
    return s * confidence(row) * modifier(lesson, row)


def step_weight(weight: float, s: int) -> float:
    """One reinforcement step: +0.1 (cap 1.0) on success, -0.05 (floor 0) on failure."""
    if s:
        return round(min(WEIGHT_CAP, weight + REWARD), 4)
    return round(max(WEIGHT_FLOOR, weight - PENALTY), 4)


# ----------------------------------------------------------------------------- reinforcement
def reinforce(lessons_table, usage_table, evidence_table, run_id: str, host: str, rule: str, outcome: str,
              reason: str, from_memory: bool = False, now: str | None = None) -> dict:
    """Stamp a finished rule's outcome on its usage rows and reinforce the lessons shown.

    rule: short or full id; outcome/reason: the rule's (``outcomes``); from_memory: the rule
    was decided from memory with zero attempts. Only rows not stamped before are used, so a
    second call changes nothing. Per lesson shown (inject/act) with a success value: weight
    stepped once (:func:`step_weight`), ``outcomes`` counted. A Reflector candidate written
    for this very rule, shown, and the rule remediated after attempts -> confirmed, with an
    ``outcome`` evidence row for the work item (lessons docstring, confirmation rule 2).
    Returns {"reinforced": [ids], "confirmed": [ids]}.
    """
    rule = safety.short_rule_id(rule)
    now = now or L.now_iso()
    q = Query()
    rows = usage_table.search((q.run_id == run_id) & (q.host == host) & (q.rule == rule)
                              & (q.outcome == None))  # noqa: E711 (TinyDB's query, not a comparison)  # pylint: disable=singleton-comparison
    if not rows:
        return {"reinforced": [], "confirmed": []}
    stamp = {"outcome": outcome, "reason": reason, "from_memory": bool(from_memory), "outcome_time": now}
    usage_table.update(stamp, doc_ids=[row.doc_id for row in rows])
    shown: dict[str, dict] = {}
    for row in rows:
        if row.get("mode") in SHOWN_MODES:
            shown.setdefault(row["lesson"], dict(row, **stamp))
    docs = {doc["id"]: doc for doc in lessons_table.search(q.id.one_of(sorted(shown)))} if shown else {}
    changes: dict[int, dict] = {}
    reinforced, confirmed = [], []
    for lesson_id, row in shown.items():
        doc = docs.get(lesson_id)
        if doc is None:
            continue
        new = dict(doc)
        s = success(doc, row)
        if s is not None:
            new["weight"] = step_weight(float(doc.get("weight", L.DEFAULT_WEIGHT)), s)
            counts = dict(doc.get("outcomes") or {"remediated": 0, "escalated": 0})
            counts[outcome] = counts.get(outcome, 0) + 1
            new["outcomes"] = counts
            reinforced.append(lesson_id)
        if (doc.get("status") == L.CANDIDATE and doc.get("kind") != L.CAUTION
                and (doc.get("scope") or {}).get("rule") == rule
                and outcome == outcomes.REMEDIATED and reason not in NOT_BY_ITS_FIX and not from_memory):
            ev = L.Evidence(lesson=lesson_id, source_kind=L.OUTCOME, source_id="%s/%s/%s" % (run_id, host, rule),
                            run_id=run_id, host=host, time=now, rule=rule, reason=reason,
                            detail="shown (%s) for %s, which was then remediated" % (row.get("mode"), rule))
            if not evidence_table.contains((q.lesson == lesson_id) & (q.source_kind == ev.source_kind)
                                           & (q.source_id == ev.source_id)):
                evidence_table.insert(ev.to_doc())
            new["status"] = L.CONFIRMED
            new["confidence"] = L.confidence_for(L.CONFIRMED, doc.get("credit"))
            new["updated"] = now
            L.derive(new, evidence_table.search(q.lesson == lesson_id))
            confirmed.append(lesson_id)
        if new != dict(doc):
            changes[doc.doc_id] = new
    L.update_lessons(lessons_table, changes)
    return {"reinforced": reinforced, "confirmed": confirmed}


def cause_gone(lessons_table, evidence_table, lesson_id: str, run_id: str, host: str, rule: str, outcome: str,
               reason: str, why: str, now: str | None = None) -> dict:
    """Update a negative lesson whose cause was gone when the rule came up again (issue 19 item
    3: ``selection.cause_stands`` said so, and the fix was tried again instead of skipped).

    rule: short id; outcome/reason: how the rule ended after that try; why: the comparison's
    line. A lesson scoped to this rule whose fix then verified is ``retired`` (it no longer
    holds where it decided); any other is weakened one step (:func:`step_weight` with 0). An
    ``outcome`` evidence row names the work item either way (the second call adds nothing).
    Returns {"retired": [id]} or {"weakened": [id]}, empty lists when the lesson is gone.
    """
    rule = safety.short_rule_id(rule)
    now = now or L.now_iso()
    q = Query()
    found = lessons_table.search(q.id == lesson_id)
    if not found:
        return {"retired": [], "weakened": []}
    doc = found[0]
    passed = outcome == outcomes.REMEDIATED and reason == "verified"
    retire = passed and (doc.get("scope") or {}).get("rule") == rule
    ev = L.Evidence(lesson=lesson_id, source_kind=L.OUTCOME, source_id="%s/%s/%s" % (run_id, host, rule),
                    run_id=run_id, host=host, time=now, rule=rule, reason=reason,
                    detail=L.clean_text("the cause was gone (%s), so the fix was tried again: %s %s" % (
                        why, outcome, reason), L.DETAIL_CHARS))
    if evidence_table.contains((q.lesson == lesson_id) & (q.source_kind == ev.source_kind) & (q.source_id == ev.source_id)):
        return {"retired": [], "weakened": []}
    evidence_table.insert(ev.to_doc())
    new = dict(doc)
    if retire:
        new["status"] = L.RETIRED
    else:
        new["weight"] = step_weight(float(doc.get("weight", L.DEFAULT_WEIGHT)), 0)
    new["updated"] = now
    L.derive(new, evidence_table.search(q.lesson == lesson_id))
    L.update_lessons(lessons_table, {doc.doc_id: new})
    return {"retired": [lesson_id] if retire else [], "weakened": [] if retire else [lesson_id]}


def replay(lesson: t.Mapping, rows: t.Iterable[t.Mapping]) -> tuple[float, dict]:
    """(weight, outcomes) of a lesson recomputed from its usage rows: one step per work item
    (run, host, rule) with a success value, in the order the outcomes were stamped
    (``outcome_time``), from 0.5. Equals what :func:`reinforce` built step by step."""
    items: dict[tuple, tuple] = {}
    for row in rows:
        s = success(lesson, row)
        if s is None:
            continue
        key = (row.get("run_id"), row.get("host"), row.get("rule"))
        when = (row.get("outcome_time") or "",) + key
        if key not in items or when < items[key][0]:
            items[key] = (when, s, row.get("outcome"))
    weight = L.DEFAULT_WEIGHT
    counts = {"remediated": 0, "escalated": 0}
    for _when, s, outcome in sorted(items.values()):
        weight = step_weight(weight, s)
        counts[outcome] = counts.get(outcome, 0) + 1
    return weight, counts


# ----------------------------------------------------------------------------- the dream pass
def signal(values: t.Sequence[float], successes: t.Sequence[int], with_follow: int) -> tuple[float, str]:
    """A category's credit in [-1, 1] and the formula used (seed 004 DEF-03): follow-aware
    ``2 x AVG(values) - 1`` when ``with_follow`` >= 5, else legacy ``2 x success rate - 1``."""
    if with_follow >= MIN_FOLLOW_RETRIEVALS:
        return round(2.0 * sum(values) / len(values) - 1.0, 4), "follow_aware"
    return round(2.0 * sum(successes) / len(successes) - 1.0, 4), "legacy"


def dream(lessons_table, usage_table, now: str | None = None) -> dict:
    """The end-of-run pass over the whole store (seed 004).

    1. Category credit: per category of the work items (usage rows' ``category``), over the
       retrievals with a success value: :func:`signal` (follow data: ``followed`` is not
       None, or the lesson is a caution whose modifier is fixed).
    2. Each lesson not retired: ``credit`` = its category's signal (None for skill-wide
       lessons or a category without retrievals), ``confidence`` = ``confidence_for(status,
       credit)``, ``utility`` = AVG of its retrievals' values (None without any).
    3. Retirement: a lesson with >= 3 counted outcomes and utility < 0.3 becomes ``retired``
       (kept with its evidence; selection never shows it; nothing is deleted).

    Returns {"categories": {category: {"retrievals", "with_follow", "signal", "formula"}},
    "utility": {lesson id: utility}, "retired": [ids]}.
    """
    now = now or L.now_iso()
    docs = {doc["id"]: doc for doc in lessons_table.all()}
    per_category: dict[str, dict] = {}
    per_lesson: dict[str, list] = {}
    for row in usage_table.all():
        doc = docs.get(row.get("lesson"))
        if doc is None:
            continue
        v = value(doc, row)
        if v is None:
            continue
        per_lesson.setdefault(doc["id"], []).append(v)
        bucket = per_category.setdefault(row.get("category") or "", {"values": [], "successes": [], "with_follow": 0})
        bucket["values"].append(v)
        bucket["successes"].append(success(doc, row))
        if row.get("followed") in (True, False) or doc.get("kind") == L.CAUTION:
            bucket["with_follow"] += 1
    categories = {}
    for name, bucket in per_category.items():
        sig, formula = signal(bucket["values"], bucket["successes"], bucket["with_follow"])
        categories[name] = {"retrievals": len(bucket["values"]), "with_follow": bucket["with_follow"],
                            "signal": sig, "formula": formula}
    utility, retired, changes = {}, [], {}
    for lesson_id, doc in docs.items():
        if doc.get("status") == L.RETIRED:
            continue
        new = dict(doc)
        cat = (doc.get("scope") or {}).get("category")
        new["credit"] = categories[cat]["signal"] if cat and cat in categories else None
        vals = per_lesson.get(lesson_id)
        new["utility"] = round(sum(vals) / len(vals), 4) if vals else None
        if vals:
            utility[lesson_id] = new["utility"]
        counted = sum((doc.get("outcomes") or {}).values())
        if counted >= RETIRE_MIN_OUTCOMES and new["utility"] is not None and new["utility"] < RETIRE_BELOW:
            new["status"] = L.RETIRED
            new["updated"] = now
            retired.append(lesson_id)
        new["confidence"] = L.confidence_for(new["status"], new["credit"])
        if new != dict(doc):
            changes[doc.doc_id] = new
    L.update_lessons(lessons_table, changes)
    return {"categories": categories, "utility": utility, "retired": retired}


# ----------------------------------------------------------------------------- merge
_STATUS_RANK = {L.CANDIDATE: 0, L.CONFIRMED: 1, L.RETIRED: 2}


def merge(src_tables, dst_tables) -> dict:
    """Merge one store into another (issue 6, item 8): ``src_tables``/``dst_tables`` have
    ``lessons``, ``evidence`` and ``usage`` attributes (``tinydb.table.Table``; a store
    transaction gives them). ``src`` is only read.

    Lessons: union by dedupe key (a lesson id is a function of the key, so both stores name
    it alike); for a lesson in both, status is the stronger of the two (candidate <
    confirmed < retired: a retirement judged on one store's usage stands), tasks and
    credit kept from dst when it has them, created the earlier, updated the later.
    Evidence: union by (lesson, source_kind, source_id), no duplicates. Usage: union by row
    key; a dst row without an outcome takes src's. Then, for every lesson either store
    holds, ``support`` and ``rules`` are recomputed from the merged evidence, ``weight`` and
    ``outcomes`` by :func:`replay` of the merged usage, and ``confidence`` from status and
    credit. Merging twice changes nothing the second time.
    Returns {"lessons_added", "lessons_updated", "evidence_added", "usage_added"} (counts).
    """
    dst_lessons = {doc["dedupe_key"]: doc for doc in dst_tables.lessons.all()}
    added, merged = [], {}
    for src in src_tables.lessons.all():
        mine = dst_lessons.get(src["dedupe_key"])
        if mine is None:
            added.append(dict(src))
            continue
        new = dict(mine)
        if _STATUS_RANK.get(src.get("status"), 0) > _STATUS_RANK.get(mine.get("status"), 0):
            new["status"] = src["status"]
        new["tasks"] = mine.get("tasks") or src.get("tasks")
        new["credit"] = mine.get("credit") if mine.get("credit") is not None else src.get("credit")
        new["created"] = min(filter(None, [mine.get("created"), src.get("created")]), default="")
        new["updated"] = max(filter(None, [mine.get("updated"), src.get("updated")]), default="")
        merged[mine.doc_id] = new
    if added:
        dst_tables.lessons.insert_multiple(added)

    have = {L.evidence_key(doc) for doc in dst_tables.evidence.all()}
    fresh_evidence = []
    for doc in src_tables.evidence.all():
        if L.evidence_key(doc) not in have:
            have.add(L.evidence_key(doc))
            fresh_evidence.append(dict(doc))
    if fresh_evidence:
        dst_tables.evidence.insert_multiple(fresh_evidence)

    dst_usage = {doc["key"]: doc for doc in dst_tables.usage.all()}
    fresh_usage, stamped, mine_ids, added_keys = [], {}, {}, set()
    for doc in src_tables.usage.all():
        mine = dst_usage.get(doc["key"])
        if mine is None:
            if doc["key"] not in added_keys:
                added_keys.add(doc["key"])
                fresh_usage.append(dict(doc))
        elif mine.get("outcome") is None and doc.get("outcome") is not None and doc["key"] not in stamped:
            stamped[doc["key"]] = {k: doc.get(k) for k in ("outcome", "reason", "from_memory", "outcome_time")}
            mine_ids[doc["key"]] = mine.doc_id
    if fresh_usage:
        dst_tables.usage.insert_multiple(fresh_usage)
    if stamped:
        def stamp(row: t.MutableMapping) -> None:
            row.update(stamped[row["key"]])
        dst_tables.usage.update(stamp, doc_ids=[mine_ids[k] for k in stamped])

    # recompute what each lesson derives from the merged rows
    evidence_by: dict[str, list] = {}
    for row in dst_tables.evidence.all():
        evidence_by.setdefault(row.get("lesson"), []).append(row)
    usage_by: dict[str, list] = {}
    for row in dst_tables.usage.all():
        usage_by.setdefault(row.get("lesson"), []).append(row)
    changes = {}
    for doc in dst_tables.lessons.all():
        new = dict(merged.get(doc.doc_id, doc))
        L.derive(new, evidence_by.get(new["id"], []))
        new["weight"], new["outcomes"] = replay(new, usage_by.get(new["id"], []))
        new["confidence"] = L.confidence_for(new["status"], new.get("credit"))
        if new != dict(doc):
            changes[doc.doc_id] = new
    L.update_lessons(dst_tables.lessons, changes)
    return {"lessons_added": len(added), "lessons_updated": len(merged), "evidence_added": len(fresh_evidence),
            "usage_added": len(fresh_usage)}
