"""The per-rule attempt state machine: records and the functions that decide (pure logic).

A failing rule is a :class:`WorkItem`; every try at it is an :class:`Attempt`. Attempt 1 is
the vendor fix from the SCAP content (when it has one); what it leaves failing goes to the
Worker, one attempt after another, until OpenSCAP says pass or a budget or a verdict stops
it. The Architect writes a plan before the Worker starts and is re-engaged after every
``review_every`` failed attempts or on a plateau (the same failure signature twice); it
answers CONTINUE, PIVOT (a new plan) or ESCALATE, and a second re-engagement that repeats a
plan already tried is a meta-plateau (seed 001, "Architect Re-engagement After N Failures").

Nothing here touches a host or a model: :func:`judge` turns what an attempt did into its
verdict and reason code, :func:`next_step` says what the loop does next for an item, and
:func:`apply_review` folds an Architect verdict into the item. ``plugin_utils.agent_loop``
carries the steps out.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import typing as t

import yaml

from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes, safety

#: Attempt verdicts (a closed list; the host report's ``attempt_log`` uses these words).
#: ``cannot_fix``: the Worker answered that the rule cannot be fixed here; nothing ran.
REFUSED, FAILED, NO_EFFECT, INEFFECTIVE, UNHEALTHY, PASSED, CANNOT_FIX = (
    "refused", "failed", "no_effect", "ineffective", "unhealthy", "passed", "cannot_fix")
VERDICTS = (REFUSED, FAILED, NO_EFFECT, INEFFECTIVE, UNHEALTHY, PASSED, CANNOT_FIX)
VENDOR, WORKER = "vendor", "worker"

#: reasons after which no further attempt can help: the host's environment, the scanner,
#: a pending reboot, a stopped host. The Worker is never asked about these (case
#: scanner-crash: "never ask the LLM to fix the host for it").
_TERMINAL_REASONS = frozenset({"verified", "passes_without_fix", "reboot_required", "scanner_crash", "verify_error", "unhealthy",
                               "unhealthy_rolled_back", "needs_human"})

#: plans whose normalised texts are at least this similar count as the same plan.
SAME_PLAN_RATIO = 0.9


@dataclasses.dataclass
class Budget:
    """Per-rule limits of the Worker phase (0 means no limit), and the review cadence.

    attempts: Worker attempts per rule; probes: read-only probes per rule; seconds: wall
    time per rule from its first Worker step; tokens: prompt + completion tokens per rule;
    review_every: failed attempts between Architect reviews (seed 001 proposes N = 3).
    """

    attempts: int = 5
    probes: int = 6
    seconds: float = 900.0
    tokens: int = 60000
    review_every: int = 3


#: the most characters of an attempt's task list kept as YAML in the host report.
TASKS_LIMIT = 20000


def tasks_yaml(tasks: t.Any) -> str:
    """A task list as block YAML for humans (keys in their order), at most TASKS_LIMIT
    characters; "" for none. Strings Ansible tagged (trusted/untrusted) dump as plain text."""
    if not tasks:
        return ""
    plain = json.loads(json.dumps(tasks, default=str))  # tagged str subclasses -> str
    text = yaml.safe_dump(plain, sort_keys=False, default_flow_style=False, width=110, allow_unicode=True)
    return text if len(text) <= TASKS_LIMIT else text[:TASKS_LIMIT] + "\n# [cut at %d characters]\n" % TASKS_LIMIT


@dataclasses.dataclass
class Attempt:
    """One try at a rule: what was proposed, what the gate said, what ran, what OpenSCAP saw.

    number: 1-based within the rule; source: ``vendor`` or ``worker``; tasks: the task list
    (data, as proposed); rationale: the Worker's one line; gate: the refusal reason, None when
    the list passed the gate; gate_refusals: the gate's refusals behind it, each a dict with
    its machine-readable code (``Refusal.to_dict()``: code, task, problem, subject), [] when
    the refusal did not come from the gate (or from a record older than the codes); report: ``ExecutionReport.to_dict()`` or None when nothing ran;
    checkpoint: the checkpoint's ``to_dict()`` with not_covered, deadman and changing (the files
    of the tasks that ran to change something); restore: the restore's ``to_dict()``;
    health: the health check's dict; result: the rule's OpenSCAP result after the attempt;
    evidence: the failing OVAL evidence for the rule after the attempt; reflection: the
    Reflector's answer as a dict; probes: probe labels asked during the attempt; probe_results:
    each probe's label and formatted output (``probe <label>:\n<text>``), in order; tokens:
    prompt + completion tokens spent on it (Worker and Reflector); seconds: wall time;
    plan: the Architect plan in force; verdict/reason: from :func:`judge`; rolled_back: True
    when a verified restore undid it, False when a restore was due and failed or was unsafe,
    None when none was due; detail: one line for humans; origin: where the tasks came from
    when not from this attempt's own agent (a lesson of the memory), kept at the head of the
    detail; side_effects: what the attempt changed beyond its rule (``health`` findings: login
    shells, sensitive files, modes the umask decided).
    """

    number: int
    source: str
    tasks: list = dataclasses.field(default_factory=list)
    rationale: str = ""
    gate: str | None = None
    gate_refusals: list = dataclasses.field(default_factory=list)
    report: dict | None = None
    checkpoint: dict | None = None
    restore: dict | None = None
    health: dict | None = None
    result: str | None = None
    evidence: dict | None = None
    reflection: dict | None = None
    probes: list = dataclasses.field(default_factory=list)
    probe_results: list = dataclasses.field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    plan: str = ""
    verdict: str = ""
    reason: str = ""
    rolled_back: bool | None = None
    detail: str = ""
    origin: str = ""
    side_effects: list = dataclasses.field(default_factory=list)
    warnings: list = dataclasses.field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when a task of the attempt reported a change on the host."""
        return bool(self.report and self.report.get("changed"))

    @property
    def modules(self) -> list:
        return list((self.report or {}).get("modules") or [])

    def say(self, text: str) -> None:
        """Set ``detail`` to ``text``, after the attempt's ``origin`` when it has one."""
        self.detail = ""
        if self.origin:
            self.detail = self.origin
            if text:
                self.add_note(text)
        else:
            self.detail = text[:800]

    def add_note(self, note: str, limit: int = 800) -> None:
        """Append ``note`` to ``detail``, cutting the earlier text (a long error), never the
        note, so the detail stays within ``limit`` characters."""
        room = max(0, limit - len(note) - 2)
        base = self.detail if len(self.detail) <= room else self.detail[:max(0, room - 4)] + " ..."
        self.detail = ("%s; %s" % (base, note) if base else note)[:limit]

    def log_entry(self) -> dict:
        """The host report's ``attempt_log`` entry: source, verdict, reason, tokens,
        rolled_back, seconds, modules, changed, detail (at most 300 characters), tasks (the
        task list as YAML text, at most TASKS_LIMIT characters; "" when none was proposed) and
        diffs (the executor's ``diffs``: {task, module, diff} of the tasks that changed a file,
        from Ansible's diff mode; a rolled-back attempt's diffs say what was undone)."""
        return {
            "attempt": self.number,
            "source": self.source,
            "verdict": self.verdict,
            "reason": self.reason,
            "tokens": self.tokens,
            "rolled_back": self.rolled_back,
            "seconds": round(self.seconds, 1),
            "modules": self.modules,
            "changed": self.changed,
            "detail": self.detail[:300],
            "side_effects": list(self.side_effects),
            "tasks": tasks_yaml(self.tasks),
            "diffs": list((self.report or {}).get("diffs") or []),
        }

    def signature(self) -> str:
        """A failure signature for plateau detection: the verdict, then for an attempt that ran
        and still fails what OpenSCAP collected (the same values twice: no progress), else the
        error message with numbers, hex and quoted values blanked (line numbers and pids
        differ between two runs of the same failure)."""
        if self.verdict in (INEFFECTIVE, NO_EFFECT):
            seen = " ".join(("%s %s" % (self.result, _evidence_digest(self.evidence))).split())
            return "%s|%s" % (self.verdict, seen[:300])
        message = self.gate or (self.report or {}).get("error") or ""
        return "%s|%s" % (self.verdict, normalise(message)[:200])


@dataclasses.dataclass
class WorkItem:
    """A rule that failed, worked to an outcome.

    rule: full XCCDF rule id; category: the catalog's category slug; attempts: every
    Attempt, vendor first; plan: the Architect plan in force (None before the first);
    plans: every plan used, in order (for meta-plateau detection); reviews: Architect
    re-engagements so far; reviewed_at: number of attempts at the last review; probes:
    probes spent; tokens: tokens spent on this rule (all agents); started: monotonic
    seconds of the first Worker step (None before); banned/preferred: the Reflector's
    patterns for the next attempts; evidence: the latest failing OVAL evidence of the rule;
    lessons_shown: ids of the memory lessons its attempts were shown; declared_by: the agent
    (``worker`` or ``architect``) whose answer gave its reason (a ``cannot_fix``, or an
    ESCALATE that named the environment), None otherwise (its word, not an observation:
    memory keeps an environment it names as a candidate, never as confirmed).
    """

    rule: str
    category: str = ""
    attempts: list = dataclasses.field(default_factory=list)
    plan: str | None = None
    plans: list = dataclasses.field(default_factory=list)
    reviews: int = 0
    reviewed_at: int = 0
    probes: int = 0
    tokens: int = 0
    started: float | None = None
    banned: list = dataclasses.field(default_factory=list)
    preferred: list = dataclasses.field(default_factory=list)
    evidence: dict | None = None
    lessons_shown: list = dataclasses.field(default_factory=list)
    declared_by: str | None = None

    @property
    def short_id(self) -> str:
        return safety.short_rule_id(self.rule)

    @property
    def last(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def worker_attempts(self) -> int:
        return sum(1 for a in self.attempts if a.source == WORKER)

    def new_attempt(self, source: str) -> Attempt:
        """Append and return a fresh Attempt numbered after the last one."""
        attempt = Attempt(number=len(self.attempts) + 1, source=source, plan=self.plan or "")
        self.attempts.append(attempt)
        return attempt


@dataclasses.dataclass(frozen=True)
class Step:
    """What the loop does next for an item: ``kind`` is ``finish`` (with ``reason`` and
    ``detail``), ``plan`` (ask the Architect for a first plan), ``review`` (re-engage the
    Architect) or ``work`` (one Worker attempt)."""

    kind: str
    reason: str = ""
    detail: str = ""


def normalise(text: str) -> str:
    """Lower-case, numbers/hex/quoted values blanked, whitespace collapsed."""
    text = str(text or "").lower()
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", text)
    text = re.sub(r"\b0x[0-9a-f]+\b|\b[0-9a-f]{8,}\b|\d+", "#", text)
    return re.sub(r"\s+", " ", text).strip()


def _evidence_digest(evidence: dict | None) -> str:
    """The collected item values of the evidence, as one short string (what oscap saw)."""
    if not evidence:
        return ""
    seen = []
    for test in evidence.get("tests") or []:
        for item in test.get("items") or []:
            seen.extend(str(v) for v in sorted((item.get("fields") or {}).items()))
        if test.get("object", {}).get("flag") not in (None, "complete"):
            seen.append("object:%s" % test["object"]["flag"])
    return " ".join(seen)[:300]


def judge(refused: str | None, report: dict | None, healthy: bool | None, result: str | None,
          reboot: bool = False) -> tuple[str, str]:
    """An attempt's (verdict, reason code) from what happened to it.

    refused: the gate's reason (nothing ran); report: ``ExecutionReport.to_dict()``;
    healthy: the health check after it (None when not run); result: the rule's OpenSCAP
    result after it (None when not verified); reboot: the fix's metadata says reboot
    (DESIGN decision 4: defer only a fix that ran cleanly and still fails).
    Order: refused, unhealthy, pass (a failed task does not hide a pass, but a pass after a
    failed task is ``passes_without_fix``, never ``verified``: issue 17 item 5), the
    environment named by the failure message (decision 16), a failed task, a result that is
    not pass or fail, then fail with or without a change.
    """
    if refused:
        return REFUSED, "fix_refused"
    if healthy is False:
        return UNHEALTHY, "unhealthy"
    report = report or {}
    if result == "pass":
        return PASSED, "verified" if report.get("ok", True) else "passes_without_fix"
    if not report.get("ok", True):
        kind = safety.environment_kind(report.get("error") or "")
        if kind:
            return FAILED, outcomes.environment_reason(kind)
        return FAILED, "fix_failed"
    if result in ("scan_failed", "scanner_crash"):
        return FAILED, "scanner_crash" if result == "scanner_crash" else "verify_error"
    if result != "fail":
        return FAILED, "verify_error"
    if reboot:
        return INEFFECTIVE, "reboot_required"
    if report.get("changed"):
        return INEFFECTIVE, "fix_ineffective"
    return NO_EFFECT, "no_effect"


def after_reboot_reason(result: str | None) -> str:
    """The final reason code of a rule deferred for a reboot, from its OpenSCAP result after
    the host rebooted (``result``: oscap's value, or ``missing``, ``scan_failed``,
    ``scanner_crash``, None): ``verified_after_reboot`` for pass, ``fix_ineffective_after_reboot``
    for fail, ``scanner_crash`` when oscap died, else ``verify_error``."""
    if result == "pass":
        return "verified_after_reboot"
    if result == "fail":
        return "fix_ineffective_after_reboot"
    return "scanner_crash" if result == "scanner_crash" else "verify_error"


def needs_rollback(attempt: Attempt) -> bool:
    """True when the attempt must be undone: it did not pass, is not waiting for a reboot,
    was not undone already (an unhealthy one is, at once), and its checkpoint holds
    something or the ledger has a change of it (a refused attempt ran nothing). Issue 17: a fix
    whose checkpoint saved no file (a package and a crontab entry) changed the host all the
    same; its rollback undoes what it can and the ledger names the rest as left. A task that
    only says ``changed`` (a command the effects table knows writes nothing, such as a failed
    grep pipeline) is no change: there is nothing to undo, and no rollback is claimed."""
    if attempt.verdict in (PASSED, REFUSED) or attempt.reason == "reboot_required" or attempt.rolled_back is not None:
        return False
    checkpoint = attempt.checkpoint or {}
    saved = checkpoint.get("state") or {}
    changes = (attempt.report or {}).get("changes")
    return bool(checkpoint.get("covered") or saved.get("packages") or saved.get("services") or changes)


def plateau(item: WorkItem) -> bool:
    """The last two attempts failed the same way (seed 001's plateau detector)."""
    if len(item.attempts) < 2:
        return False
    one, two = item.attempts[-2], item.attempts[-1]
    if PASSED in (one.verdict, two.verdict):
        return False
    return one.signature() == two.signature()


def review_due(item: WorkItem, every: int) -> bool:
    """Re-engage the Architect: after every ``every`` failed attempts since the last review
    (the vendor attempt counts: the first review comes after the third failure of the rule),
    or on a plateau whose two attempts both came after the last review (seed 001)."""
    since = len(item.attempts) - item.reviewed_at
    if every > 0 and since >= every:
        return True
    return since >= 2 and plateau(item)


def same_plan(one: str, two: str) -> bool:
    """Two plans are the same when their normalised texts are at least 90 % alike."""
    a, b = normalise(one), normalise(two)
    if not a or not b:
        return a == b
    return a == b or difflib.SequenceMatcher(None, a, b).ratio() >= SAME_PLAN_RATIO


def apply_review(item: WorkItem, verdict: str, plan: str) -> Step | None:
    """Fold an Architect re-engagement into ``item``; return a finish Step or None (go on).

    ESCALATE finishes with ``architect_escalate``, or ``environment:<kind>`` when the
    Architect's text or a Reflector diagnosis names the environment (:func:`escalation_reason`). CONTINUE keeps the plan in force, PIVOT
    replaces it. From the second re-engagement on, a plan (kept or new) that repeats one
    already tried is a meta-plateau and finishes with ``meta_plateau`` (seed 001:
    "re-engages again with the same verdict, we need a meta-plateau detector").
    """
    item.reviews += 1
    item.reviewed_at = len(item.attempts)
    if verdict == "ESCALATE":
        diagnoses = [(a.reflection or {}).get("diagnosis") or "" for a in reversed(item.attempts)]
        return Step("finish", escalation_reason([plan or ""] + diagnoses), "the Architect escalated: %s" % (plan or "")[:300])
    new_plan = plan if verdict == "PIVOT" and plan else (item.plan or "")
    if item.reviews >= 2 and any(same_plan(new_plan, old) for old in item.plans):
        return Step("finish", "meta_plateau",
                    "review %d repeated a plan already tried (%s): %s" % (item.reviews, verdict, new_plan[:200]))
    if new_plan != item.plan:
        item.plan = new_plan
        item.plans.append(new_plan)
    return None


#: ``environment:<kind>`` written in an agent's text: its own slug for what stops the rule.
_NAMED_KIND = re.compile(r"\benvironment:([a-z][a-z0-9_]{1,47})\b")
#: what an agent's evidence says about the host that no failed task's message does (issue 18's
#: trial: auditd in a container, chronyd without the clock capability).
AGENT_ENVIRONMENT_SIGNATURES = (
    ("netlink audit socket", "no_audit_netlink"),
    ("cap_sys_time", "no_sys_time"),
)
#: the kind of an environment the agent did not name.
GENERIC_ENVIRONMENT = "unspecified"


def environment_named(text: str | None) -> str | None:
    """The environment kind an agent's ``text`` names: an explicit ``environment:<kind>``
    first, then a failure message :func:`safety.environment_kind` knows, then
    :data:`AGENT_ENVIRONMENT_SIGNATURES` (case-insensitive); None when it names none."""
    text = str(text or "")
    named = _NAMED_KIND.search(text.lower())
    if named:
        return named.group(1)
    kind = safety.environment_kind(text)
    if kind:
        return kind
    lowered = text.lower()
    return next((kind for needle, kind in AGENT_ENVIRONMENT_SIGNATURES if needle in lowered), None)


def cannot_fix_reason(reason: str, evidence: str) -> str:
    """The reason code a ``cannot_fix`` answer ends its rule with: for ``environment`` the
    kind its evidence names (:func:`environment_named`), else ``environment:unspecified``;
    ``needs_human`` for ``needs_human`` and for ``content`` (the SCAP content's check or fix
    does not fit this host: a person decides, on the evidence, to waive or tailor it)."""
    if reason == "environment":
        return outcomes.environment_reason(environment_named(evidence) or GENERIC_ENVIRONMENT)
    return "needs_human"


def declined(agent: str, reason: str, evidence: str) -> Step:
    """The finish Step of ``agent``'s ``cannot_fix`` answer: its reason code
    (:func:`cannot_fix_reason`) and a detail that carries the evidence."""
    return Step("finish", cannot_fix_reason(reason, evidence),
                "the %s says the rule cannot be fixed here (%s): %s" % (agent, reason, (evidence or "")[:600]))


def escalation_reason(texts: t.Sequence[str]) -> str:
    """The reason an Architect's ESCALATE ends its rule with: ``environment:<kind>`` for the
    first of ``texts`` (its own text, then the Reflector's diagnoses, newest first) that
    names an environment (:func:`environment_named`), else ``architect_escalate``."""
    for text in texts:
        kind = environment_named(text)
        if kind:
            return outcomes.environment_reason(kind)
    return "architect_escalate"


def plan_escalation(plan: str) -> Step:
    """The finish Step of an ESCALATE answered to the first plan request: no Worker attempt
    follows (issue 18 item 1)."""
    return Step("finish", escalation_reason([plan or ""]),
                "the Architect escalated before any Worker attempt: %s" % (plan or "")[:600])


def next_step(item: WorkItem, budget: Budget, llm: bool, now: float,
              run_tokens_left: float = float("inf"), llm_down: str | None = None) -> Step:
    """What to do next for ``item`` (pure; ``now`` is monotonic seconds).

    1. the last attempt passed, or ended in a reason no attempt can change -> finish with it;
    2. no model (``llm`` False) -> finish: ``llm_unavailable`` when nothing was tried, else
       the last attempt's reason; ``llm_down`` (why the endpoint failed earlier) -> ``llm_error``;
    3. budgets, in order: run tokens, rule tokens, rule seconds, Worker attempts;
    4. no plan yet -> ``plan``; a review due -> ``review``; else ``work``.
    """
    last = item.last
    if last is not None and (last.reason in _TERMINAL_REASONS or last.reason.startswith(outcomes.ENVIRONMENT_PREFIX)):
        return Step("finish", last.reason, last.detail)
    if not llm:
        if last is None:
            return Step("finish", "llm_unavailable",
                        "the content has no Ansible fix for this rule and no LLM endpoint is configured")
        return Step("finish", last.reason, last.detail + " (no LLM endpoint: no Worker attempt)")
    if llm_down:
        return Step("finish", "llm_error", llm_down)
    if run_tokens_left <= 0:
        return Step("finish", "run_token_budget", "the run's token budget is spent")
    if budget.tokens and item.tokens >= budget.tokens:
        return Step("finish", "rule_token_budget", "%d tokens spent on this rule (budget %d)" % (item.tokens, budget.tokens))
    if budget.seconds and item.started is not None and now - item.started >= budget.seconds:
        return Step("finish", "rule_time_budget", "%.0f s spent on this rule (budget %.0f s)"
                    % (now - item.started, budget.seconds))
    if budget.attempts and item.worker_attempts >= budget.attempts:
        return Step("finish", "attempt_budget", "%d Worker attempts made (budget %d); last: %s: %s"
                    % (item.worker_attempts, budget.attempts, last.verdict if last else "", last.detail if last else ""))
    if item.plan is None:
        return Step("plan")
    if review_due(item, budget.review_every):
        return Step("review")
    return Step("work")
