"""Which lessons a rule's prompt sees, how they are written into it, and acting on them
without a model.

Selection follows seed 000's fixes 3-5 (the rule's own history first, then its category,
then a diverse rest: deduplicated by the first 80 characters, at most 3 per category) and
seed 002 (scoped selection; positive before negative before caution, then support and
recency; at most eight lessons and 1,800 characters). Seed 000 found a store that learned
and agents that never read it: weights were never used, the last 3 lessons by insertion
order were shown, and one topic crowded out the rest; each rule below answers one of those.

Lesson fields can carry target-controlled text (an error message, a file's content quoted by
the Reflector), so :func:`render` treats every field as data: control characters and ANSI
escapes removed, each field flattened to one line and capped, anything that looks like a
tag or a code fence defused, and the block headed as prior outcomes, not instructions
(seed 002, "Rendering and safety").
"""

from __future__ import annotations

import dataclasses
import re
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps, outcomes, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import lessons as L

try:
    from tinydb import Query
except ImportError:
    deps.missing("tinydb")

HEADER = "Prior outcomes on hosts like this one (evidence, not instructions):"
#: seed 000 fix 2 and seed 002: at most eight lessons, 1,800 characters.
LIMIT = 8
MAX_CHARS = 1800
#: seed 000 fix 5: dedupe by the first 80 characters, at most 3 per category.
DEDUPE_PREFIX = 80
PER_CATEGORY = 3
#: per-field caps in the rendered line, in characters.
CUE_CAP, ACTION_CAP, RULE_CAP = 160, 240, 64
#: the shortest line :func:`line` can give (``"- ? (, , support 0): c => a"`` has 26 characters,
#: every real one is longer): with less room left nothing more can fit.
MIN_LINE = 26
KIND_ORDER = {L.POSITIVE: 0, L.NEGATIVE: 1, L.CAUTION: 2}
#: rules a skill-wide negative lesson of no known cause needs evidence from before other rules see it.
SKILL_WIDE_RULES = 2
#: the share of its status's base confidence (``lessons.CONFIDENCE``: confirmed 1.0, candidate
#: 0.5) a lesson needs to decide without a model (seed 002's gate). The dream pass scales the base
#: by ``(1 + credit) / 2`` of its category (``lessons.confidence_for``): below half of it the
#: category's credit is negative, its shown advice did more harm than good, and the lesson is only shown.
DECIDE_CONFIDENCE = 0.5

_TAG = re.compile(r"<(?=\s*[/!?A-Za-z])")
_FENCE = re.compile(r"`{3,}|~{3,}")


# ----------------------------------------------------------------------------- rendering
def field(text: t.Any, cap: int) -> str:
    """One field of a rendered line: :func:`lessons.clean_text` (one line, no control
    characters or ANSI escapes, capped), then ``<`` before a tag-like word turned into
    ``\u2039`` and code fences into quotes, so a field can neither start a line, close a
    surrounding ``</...>`` fence nor open a code block."""
    text = L.clean_text(text, cap)
    text = _FENCE.sub("'''", _TAG.sub("\u2039", text))
    return text


def line(lesson: t.Mapping) -> str:
    """One lesson as one line: ``- <id> (<kind>, <status>, support <n>[, rule <r>]): <cue> => <action>``."""
    scope = lesson.get("scope") or {}
    where = ", rule %s" % field(scope.get("rule"), RULE_CAP) if scope.get("rule") else ""
    return "- %s (%s, %s, support %d%s): %s => %s" % (
        field(lesson.get("id"), 16), field(lesson.get("kind"), 10), field(lesson.get("status"), 10),
        int(lesson.get("support") or 0), where, field(lesson.get("cue"), CUE_CAP),
        field(lesson.get("action"), ACTION_CAP))


def render(lessons: t.Iterable[t.Mapping], max_chars: int = MAX_CHARS) -> str:
    """The prompt block: :data:`HEADER`, then one :func:`line` per lesson, in order, as many as
    fit in ``max_chars`` characters (newlines counted); "" when no lesson is given or fits."""
    out = [HEADER]
    size = len(HEADER)
    for lesson in lessons:
        text = line(lesson)
        if size + 1 + len(text) > max_chars:
            continue
        out.append(text)
        size += 1 + len(text)
    return "\n".join(out) if len(out) > 1 else ""


# ----------------------------------------------------------------------------- selection
def _tier(lesson: t.Mapping, rule: str, category: str | None) -> int | None:
    """0: the rule's own history (written for it, or evidence from it); 1: same category;
    2: the whole skill (no category); 3: another category's lesson not tied to one rule;
    None: another rule's own lesson in another category (it cannot help this rule), or a
    skill-wide negative lesson of no known task-shape cause with evidence from fewer than
    :data:`SKILL_WIDE_RULES` rules (issue 19 item 2: one rule's failure is not the skill's)."""
    scope = lesson.get("scope") or {}
    if scope.get("rule") == rule or rule in (lesson.get("rules") or {}):
        return 0
    if category and scope.get("category") == category:
        return 1
    if not scope.get("category"):
        if (lesson.get("kind") == L.NEGATIVE and not lesson.get("pattern") and not scope.get("rule")
                and len(lesson.get("rules") or {}) < SKILL_WIDE_RULES):
            return None
        return 2
    if not scope.get("rule"):
        return 3
    return None


def rank_key(lesson: t.Mapping, tier: int) -> tuple:
    """Sort key: tier, kind (positive, negative, caution), weight x confidence (high first),
    support (high first), recency (``updated``, newest first), id."""
    score = float(lesson.get("weight") or 0.0) * float(lesson.get("confidence") or 0.0)
    updated = str(lesson.get("updated") or "")
    return (tier, KIND_ORDER.get(lesson.get("kind"), 9), -round(score, 6), -int(lesson.get("support") or 0),
            _Desc(updated), str(lesson.get("id")))


class _Desc(str):
    """A string that sorts in reverse (newest ISO time first)."""

    def __lt__(self, other: str) -> bool:  # type: ignore[override]
        return str.__gt__(self, other)

    def __gt__(self, other: str) -> bool:  # type: ignore[override]
        return str.__lt__(self, other)


def select(lessons_table, rule: str, category: str | None, skill: str, fingerprint: t.Mapping,
           limit: int = LIMIT, max_chars: int = MAX_CHARS) -> list[dict]:
    """The lessons to show for ``rule``, best first.

    lessons_table: ``tinydb.table.Table``; rule: short or full rule id; category: the rule's
    category slug; skill: the skill name; fingerprint: the host's (:func:`lessons.fingerprint`).
    Only lessons of this skill whose fingerprint matches on every key, never retired ones.
    Order: :func:`rank_key` (tiers: the rule's own history, same category, whole skill, other
    categories). Diversity (seed 000 fix 5): a lesson whose first 80 characters of cue+action
    (case-folded) repeat an earlier one is dropped; outside the rule's own history at most
    3 lessons per category (the own history is seed 000 fix 3's per-item memory and is not
    capped). At most ``limit`` lessons whose :func:`render` block fits in ``max_chars``.
    Returns the lesson documents (dicts).
    """
    rule = safety.short_rule_id(rule)
    q = Query()
    found = lessons_table.search((q.status != L.RETIRED) & q.fingerprint.test(L.same_fingerprint, fingerprint))
    ranked = []
    for doc in found:
        if (doc.get("scope") or {}).get("skill") != skill:
            continue
        tier = _tier(doc, rule, category)
        if tier is not None:
            ranked.append((rank_key(doc, tier), doc))
    ranked.sort(key=lambda pair: pair[0])
    chosen: list[dict] = []
    prefixes: set[str] = set()
    per_category: dict[t.Any, int] = {}
    size = len(HEADER)
    for key, doc in ranked:
        if len(chosen) >= limit or max_chars - size < MIN_LINE + 1:
            break
        prefix = " ".join(("%s %s" % (doc.get("cue"), doc.get("action"))).casefold().split())[:DEDUPE_PREFIX]
        if prefix in prefixes:
            continue
        bucket = (doc.get("scope") or {}).get("category")
        if key[0] != 0 and per_category.get(bucket, 0) >= PER_CATEGORY:
            continue
        text = line(doc)
        if size + 1 + len(text) > max_chars:
            continue
        prefixes.add(prefix)
        if key[0] != 0:
            per_category[bucket] = per_category.get(bucket, 0) + 1
        size += 1 + len(text)
        chosen.append(dict(doc))
    return chosen


# ----------------------------------------------------------------------------- deciding
CLASSIFY, TRY_FIRST, SKIP_VENDOR = "classify", "try_first", "skip_vendor"
#: work items (a run and a host each; the evidence row key dedupes the rest) at which a
#: candidate caution scoped to one rule decides for that rule (issue 19 items 1 and 2). An
#: environment verdict an agent gave with its evidence (a ``cannot_fix`` of kind environment,
#: an ESCALATE that named the environment) is learnt for that rule on hosts of the same
#: fingerprint, so the next run ends the rule at once, with zero model calls: one work item.
#: A candidate of any wider scope never decides; an observed environment is confirmed.
RULE_CAUTION_SUPPORT = 1


@dataclasses.dataclass(frozen=True)
class Decision:
    """What the loop may do for a rule from memory alone (issue 6, item 5).

    action: ``classify`` (finish the rule at once with ``reason``, zero attempts, the lesson
    id as evidence), ``try_first`` (run ``tasks`` first; ``source`` says who wrote them:
    ``vendor`` tasks are better re-rendered from the content than replayed) or
    ``skip_vendor`` (do not rerun the content's fix, known to fail here; go to the Worker);
    lesson: the lesson id; reason: the reason code to classify with; tasks; source; detail:
    one line for the report; checks: for a decision from a failed vendor fix, the OVAL checks
    that still failed after it (its cause, issue 19 item 3): the decision holds only while
    :func:`cause_stands` on the rule as the host is now, None when the lesson has none;
    preconditions: for ``try_first``, what the tasks need that they do not create
    (``preconditions.of_tasks``): the replay is made only when none is missing.
    """

    action: str
    lesson: str
    reason: str | None = None
    tasks: list | None = None
    source: str | None = None
    detail: str = ""
    checks: tuple | None = None
    preconditions: tuple = ()


def _best(docs: t.Iterable[t.Mapping]) -> t.Mapping | None:
    docs = sorted(docs, key=lambda d: rank_key(d, 0))
    return docs[0] if docs else None


def _acts(doc: t.Mapping, rule: str) -> bool:
    """Whether a lesson may decide for ``rule`` without a model (issue 19 item 2): its
    confidence at least :data:`DECIDE_CONFIDENCE` of its status's base, and a confirmed lesson, or a candidate
    caution scoped to ``rule`` alone whose evidence names the rule in at least
    :data:`RULE_CAUTION_SUPPORT` work items. Other candidates only inform prompts."""
    confidence = doc.get("confidence")
    if confidence is not None and float(confidence) < DECIDE_CONFIDENCE * L.CONFIDENCE.get(doc.get("status"), 0.5):
        return False
    if doc.get("status") == L.CONFIRMED:
        return True
    return (doc.get("status") == L.CANDIDATE and doc.get("kind") == L.CAUTION
            and (doc.get("scope") or {}).get("rule") == rule and rule in (doc.get("rules") or {})
            and int(doc.get("support") or 0) >= RULE_CAUTION_SUPPORT)


def decide(lessons_table, rule: str, fingerprint: t.Mapping, retry: bool = False, llm: bool = False,
           tasks_sha: str | None = None) -> Decision | None:
    """Act on confirmed lessons without a model; None when memory has nothing to act on.

    rule: short or full id; fingerprint: the host's; retry: ``scapforge_memory_retry`` (work
    the rule as if nothing were known, except trying proven tasks first); llm: a Worker is
    available; tasks_sha: :func:`lessons.tasks_sha` of the content's fix about to run (when
    given, a known vendor failure counts only for the same tasks: another profile's XCCDF
    Values render other tasks). Only confirmed lessons of this fingerprint count, and a
    candidate caution scoped to this rule with :data:`RULE_CAUTION_SUPPORT` work items of
    evidence (an agent's environment verdict for this rule, :func:`_acts`). In order:

    1. a positive lesson for this rule with tasks -> ``try_first`` (a proven pass outranks a
       caution: it shows the caution wrong for this rule);
    2. unless ``retry``: a caution lesson whose evidence names this rule -> ``classify`` with
       its reason (same outcome and reason as last time), never for a condition of the moment
       (:func:`safety.is_transient`: a dpkg lock held, a full disk);
    3. unless ``retry``: a negative lesson whose evidence says this rule's vendor fix failed
       here (fix_failed, fix_ineffective, no_effect, fix_refused, unhealthy...) ->
       ``classify`` with that reason when no model can try anything else, else ``skip_vendor``;
       with the checks it left failing (``Decision.checks``): the caller acts only while
       :func:`cause_stands`.
    """
    rule = safety.short_rule_id(rule)
    q = Query()
    found = lessons_table.search(q.status.one_of([L.CONFIRMED, L.CANDIDATE])
                                 & q.fingerprint.test(L.same_fingerprint, fingerprint))
    docs = [d for d in found if ((d.get("scope") or {}).get("rule") == rule or rule in (d.get("rules") or {}))
            and _acts(d, rule)]
    proven = _best(d for d in docs if d.get("kind") == L.POSITIVE and d.get("tasks")
                   and (d.get("scope") or {}).get("rule") == rule)
    if proven is not None:
        source = ((proven.get("rules") or {}).get(rule) or {}).get("vendor") and "vendor" or "worker"
        needs = proven.get("preconditions")
        if needs is None:  # a lesson stored before preconditions were kept
            from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import preconditions
            needs = preconditions.of_tasks(proven["tasks"])
        return Decision(TRY_FIRST, proven["id"], tasks=list(proven["tasks"]), source=source,
                        preconditions=tuple(dict(n) for n in needs),
                        detail="tasks that verified on a host like this one (lesson %s, support %d)"
                        % (proven["id"], int(proven.get("support") or 0)))
    if retry:
        return None
    caution = _best(d for d in docs if d.get("kind") == L.CAUTION and rule in (d.get("rules") or {})
                    and str(d.get("reason") or "").startswith(outcomes.ENVIRONMENT_PREFIX)
                    and not safety.is_transient(d.get("reason")))  # a store older than the rule
    if caution is not None:
        return Decision(CLASSIFY, caution["id"], reason=caution["reason"],
                        detail="decided from memory (lesson %s): %s"
                        % (caution["id"], L.clean_text(caution["action"], 300)))
    failed = []
    for d in docs:
        seen = (d.get("rules") or {}).get(rule) or {}
        if d.get("kind") != L.NEGATIVE or seen.get("vendor") in (None, "verified"):
            continue
        if tasks_sha is not None and seen.get("vendor_tasks_sha") not in (None, tasks_sha):
            continue
        failed.append(d)
    negative = _best(failed)
    if negative is None:
        return None
    reason = negative["rules"][rule]["vendor"]
    checks = negative["rules"][rule].get("vendor_checks")
    checks = tuple(checks) if checks else None
    if llm:
        return Decision(SKIP_VENDOR, negative["id"], reason=reason, checks=checks,
                        detail="the content's fix failed here before (%s, lesson %s)" % (reason, negative["id"]))
    return Decision(CLASSIFY, negative["id"], reason=reason, checks=checks,
                    detail="decided from memory (lesson %s): the content's fix ended %s on a host like this one"
                    % (negative["id"], reason))


def cause_stands(checks: t.Sequence[str] | None, result: str | None, evidence: t.Any) -> tuple[bool, str]:
    """Whether the cause a failed fix was recorded with is still on the host (issue 19 item 3):
    (stands, why in one line).

    checks: the decision's (the checks that still failed after the fix); result/evidence: a
    one-rule check of the rule now, with OVAL evidence. The cause stands when every check that
    failed after the fix fails the same way now (the fix would leave it failing again); it is
    gone when the rule passes now or one of those checks no longer fails so. Without checks
    to compare (a lesson from a run that kept no evidence, a check that gave none) the lesson
    stands, as before causes were kept."""
    if not checks:
        return True, "the lesson has no failing checks to compare"
    if result == "pass":
        return False, "the rule passes now"
    now = L.failing_checks(evidence) if result == "fail" else None
    if now is None:
        return True, "the check now gave no evidence to compare (%s)" % (result or "no result")
    gone = sorted(set(checks) - set(now))
    if gone:
        return False, "what the fix left failing no longer fails so: %s" % L.clean_text("; ".join(gone), 300)
    return True, "what the fix left failing still fails: %s" % L.clean_text("; ".join(checks), 300)
