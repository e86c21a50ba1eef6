"""The host report: one typed shape that the loop writes (``hosts/<host>.json``) and every
report writer reads (report.html, junit.xml, the STIG checklists), issue 10 item 3.

The shapes below are ``TypedDict``s of the JSON the loop writes (``loop.RemediationLoop._report``);
a report written by an older run lacks the newer keys, so readers use ``.get``. The helpers
build the per-rule metadata (title, severity, CCE, STIG ids) from the catalog and derive what
the writers share: categories' pass/fail counts, the STIG Vuln id of a rule, the status of a
rule in a checklist.
"""

from __future__ import annotations

import gzip
import os
import shutil
import typing as t

#: DISA's category of a finding from the XCCDF severity (DISA STIG Viewer: CAT I = high).
CAT_BY_SEVERITY = {"high": "CAT I", "medium": "CAT II", "low": "CAT III"}
#: the identifier kinds a rule carries (catalog.Rule.identifiers' keys).
ID_KINDS = ("cce", "stig_id", "stig_rule", "srg", "cci")


class Identifiers(t.TypedDict, total=False):
    """A rule's identifiers from the datastream, each a list (possibly empty): ``cce``
    (CCE-80000-0), ``stig_id`` (RHEL-09-211010), ``stig_rule`` (SV-257777r1044860_rule), ``srg``,
    ``cci``."""

    cce: list[str]
    stig_id: list[str]
    stig_rule: list[str]
    srg: list[str]
    cci: list[str]


class RuleMeta(t.TypedDict):
    """What a reader needs to name a rule: title, severity (high/medium/low/info/unknown, the
    profile's refine-rule first), identifiers."""

    title: str
    severity: str
    identifiers: Identifiers


class ScanResult(RuleMeta):
    """One rule of the scans: its OpenSCAP result ``before`` (baseline) and ``after`` (the
    final scan; None when there was none: check mode, a stopped host), and its skill
    ``category``."""

    before: str | None
    after: str | None
    category: str


class Waiver(t.TypedDict):
    """A ``scapforge_waivers`` entry as reported: rule (short id), reason, expires (YYYY-MM-DD)."""

    rule: str
    reason: str
    expires: str


class AttemptEntry(t.TypedDict, total=False):
    """One entry of a rule's ``attempt_log`` (``attempts.Attempt.log_entry``): attempt,
    source (vendor/worker), verdict, reason, tokens, rolled_back, seconds, modules, changed,
    detail, side_effects, tasks (YAML text), diffs ([{task, module, diff}])."""

    attempt: int
    source: str
    verdict: str
    reason: str
    tokens: int
    rolled_back: bool | None
    seconds: float
    modules: list[str]
    changed: bool
    detail: str
    side_effects: list[dict]
    tasks: str
    diffs: list[dict]


class LedgerEntry(t.TypedDict, total=False):
    """One change an attempt made (``ledger.entries_for``): rule (short id), attempt, kind
    (file, package, service, cron, user, group), target, change, state (kept, undone, left),
    verified (undone: its restore was verified; kept: OpenSCAP verified the rule), and for
    some the task that made it and a file's diff."""

    rule: str
    attempt: int
    kind: str
    target: str
    change: str
    state: str
    verified: bool
    task: str
    diff: str


class RuleReport(RuleMeta, total=False):
    """A rule that failed at baseline (``outcomes.RuleOutcome.to_dict`` plus :class:`RuleMeta`):
    rule (short id), outcome, reason, attempts, modules, detail, category, changed_tasks,
    attempt_log, lessons_shown, from_memory, side_effects, waiver, warnings (scope warnings in
    words: ``scope.warnings_for``)."""

    rule: str
    outcome: str
    reason: str
    attempts: int
    modules: list[str]
    detail: str
    category: str
    changed_tasks: list[str]
    attempt_log: list[AttemptEntry]
    lessons_shown: list[str]
    from_memory: str | None
    side_effects: list[dict]
    waiver: Waiver | None
    warnings: list[str]


class NotJudged(t.TypedDict):
    """A rule OpenSCAP left unjudged at the end (``not_judged``): its ``before`` (baseline)
    and last ``result`` (notchecked, error, unknown, or notapplicable after a judged
    baseline), ``why`` in words and oscap's ``message`` (None without one)."""

    before: str | None
    result: str
    why: str
    message: str | None


class HostReport(t.TypedDict, total=False):
    """``hosts/<host>.json``. Keys beyond those of the loop's docstring used by the writers:
    ``rules`` {short id: RuleReport}, ``scan_results`` {short id: ScanResult} (every rule
    the scans evaluated, notselected excluded), ``not_judged`` {short id: NotJudged} (the
    rules OpenSCAP left unjudged at the end, with why), ``waivers`` (active) and ``expired_waivers``
    ([Waiver]), ``ledger`` ([LedgerEntry]: every change of every attempt and what became of
    it, issue 17), ``arf`` ({before, after}: paths relative to the run dir, ``error`` when one
    could not be fetched; None without ARF), ``error`` ({reason, msg}) for a host whose run
    could not start or go on."""

    host: str
    run_id: str
    profile: str
    content: dict
    check_mode: bool
    before: dict | None
    after: dict | None
    outcomes: dict
    regressions: list[str]
    still_failing: list[str]
    not_judged: dict[str, NotJudged]
    stopped: str | None
    rules: dict[str, RuleReport]
    scan_results: dict[str, ScanResult]
    waivers: list[Waiver]
    expired_waivers: list[Waiver]
    arf: dict | None
    error: dict | None
    ledger: list[LedgerEntry]


def rule_meta(rule: t.Any, profile: t.Any = None) -> RuleMeta:
    """Title, severity and identifiers of a catalog ``Rule`` (lists, JSON-ready). With the
    ``Profile`` the run used, its refine-rule severity wins over the rule's own (XCCDF 1.2
    section 6.5.3, as OpenSCAP reports it)."""
    severity = rule.severity
    if profile is not None:
        severity = (profile.refine_rules.get(rule.id) or {}).get("severity") or severity
    ids = rule.identifiers or {}
    return {"title": rule.title, "severity": severity,
            "identifiers": {kind: list(ids.get(kind) or ()) for kind in ID_KINDS}}


def scan_results(catalog: t.Any, skill: t.Any, before: dict, after: dict | None,
                 profile: t.Any = None) -> dict[str, ScanResult]:
    """{short id: ScanResult} for every rule the baseline or final scan evaluated (full ids in
    ``before``/``after`` as oscap_eval returns them; ``notselected`` left out). A rule the
    catalog lacks (it cannot happen with the same datastream) keeps its result, with its id as
    title."""
    rows: dict[str, ScanResult] = {}
    for rule_id in sorted(set(before) | set(after or {})):
        b, a = before.get(rule_id), (after or {}).get(rule_id) if after is not None else None
        if b in (None, "notselected") and a in (None, "notselected"):
            continue
        try:
            rule = catalog.rule(rule_id)
        except Exception:  # noqa: BLE001 - the report must not fail for one unknown id
            short = rule_id.split("_rule_", 1)[-1]
            rows[short] = {"title": short, "severity": "unknown", "identifiers": {k: [] for k in ID_KINDS},
                           "before": b, "after": a, "category": "uncategorized"}
            continue
        row = dict(rule_meta(rule, profile), before=b, after=a, category=skill.category_of(rule))
        rows[rule.short_id] = t.cast(ScanResult, row)
    return rows


def category_counts(report: HostReport, when: str) -> dict[str, dict[str, int]]:
    """{category: {"pass": n, "fail": n}} of one scan (``when``: ``before`` or ``after``),
    from ``scan_results``; only pass and fail count, every category of the scans is present
    (zeros included), sorted by name."""
    counts: dict[str, dict[str, int]] = {}
    for row in (report.get("scan_results") or {}).values():
        cell = counts.setdefault(row.get("category") or "uncategorized", {"pass": 0, "fail": 0})
        value = row.get(when)
        if value in ("pass", "fail"):
            cell[value] += 1
    return dict(sorted(counts.items()))


def first(ids: t.Mapping[str, t.Sequence[str]] | None, kind: str) -> str | None:
    """The first identifier of a kind, or None."""
    values = (ids or {}).get(kind) or ()
    return values[0] if values else None


def vuln_id(ids: t.Mapping[str, t.Sequence[str]] | None) -> str | None:
    """The STIG vulnerability id (``V-257777``) of a rule: the number of DISA's rule version
    id (``SV-257777r1044860_rule``), which is how DISA numbers both; None when the content
    carries no SV- id (the datastream has no V- ids of its own)."""
    sv = first(ids, "stig_rule")
    if not sv or not sv.startswith("SV-"):
        return None
    number = sv[3:].split("r", 1)[0]
    return "V-" + number if number.isdigit() else None


def final_result(row: t.Mapping[str, t.Any]) -> str | None:
    """The rule's last OpenSCAP result: the final scan's, else the baseline's."""
    return row.get("after") if row.get("after") is not None else row.get("before")


def load_run(run_dir: str) -> dict[str, HostReport]:
    """{host: HostReport} of ``<run_dir>/hosts/*.json`` (via summary.merge_host_reports'
    rules: unreadable files are left out)."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import merge_host_reports
    return merge_host_reports(run_dir)["hosts"]


def gunzip(src: str, dest: str) -> str:
    """Unpack the gzip file ``src`` to ``dest`` (written atomically) and remove ``src``;
    returns dest. Raises OSError (gzip.BadGzipFile included) when it cannot."""
    tmp = "%s.tmp.%d" % (dest, os.getpid())
    with gzip.open(src, "rb") as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    os.replace(tmp, dest)
    os.unlink(src)
    return dest
