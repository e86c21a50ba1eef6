"""``report.html``: one self-contained page for the people who read a run (issue 10 item 3,
issue 20 item 1).

Rendered with jinja2 from ``report_templates/report.html.j2`` (shipped in the collection),
autoescaped: everything from hosts and models (rule details, task YAML, diffs) is text. The
page loads nothing (inline CSS, inline SVG, no script) and fits 1,400 px.

In reading order: the summary (``id="summary"``, the first screen at 1,400 x 900: per host
before -> after, outcome counts by kind as ``data-outcome="<outcome/reason>"`` /
``data-count`` elements, regressions, rescan pick-ups, resumed, waivers, memory, and the
rules that still fail reconciled into buckets, :mod:`host_summary`); warnings; the change
ledger (what the run left changed on each host, with diffs); pass and fail by category
before and after (SVG bars with ``data-*`` attributes; rules that became applicable during
the run are counted apart; check mode draws the baseline only and lists the plan); every
rule that failed at baseline, grouped by outcome and reason, environment reasons collapsed to
one line each, the attempts folded; the outputs (ARF, checklists, junit, OSCAL, bundle).
Severity words are the content's; CAT I/II/III only where the content carries DISA ids.
"""

from __future__ import annotations

import os
import typing as t

import jinja2

from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_summary as HS
from ansible_collections.scapforge.remediation.plugins.plugin_utils.outcomes import ENVIRONMENT_PREFIX, OUTCOMES

FILE_NAME = "report.html"
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report_templates")
#: chart geometry (SVG user units = CSS pixels): the widest bar, one bar's height, the label column.
CHART_WIDTH = 420
BAR_HEIGHT = 12
LABEL_WIDTH = 190
#: the order of the outcome groups of the rule list: what needs a person first.
OUTCOME_ORDER = ("escalated", "deferred", "skipped", "remediated")
#: identifier kinds shown in the rule list.
SHOWN_IDS = ("cce", "stig_id", "stig_rule")


def chart(report: HR.HostReport) -> dict:
    """The chart's data: {scale (pixels per rule), widest (rules in the longest bar), width,
    height, scans (before, and after unless check mode or no final scan), rows: [{category,
    y, became (rules of the category that became applicable), bars: [{when, kind, count, x,
    y, width}]}]}. Per category and scan one bar, a pass segment followed by a fail segment;
    a segment's width is count * scale."""
    scans = ("before", "after") if report.get("after") is not None else ("before",)
    counts = {when: HR.category_counts(report, when) for when in scans}
    became: dict[str, int] = {}
    rows_by_rule = report.get("scan_results") or {}
    for short in HS.became_applicable(report):
        cat = rows_by_rule[short].get("category") or "uncategorized"
        became[cat] = became.get(cat, 0) + 1
    cats = sorted(set().union(*(set(c) for c in counts.values())))
    widest = max([sum(counts[w].get(c, {}).values()) for w in scans for c in cats] + [1])
    scale = CHART_WIDTH / widest
    rows, y = [], 20
    for cat in cats:
        bars = []
        for offset, when in enumerate(scans):
            x = LABEL_WIDTH + 50
            for kind in ("pass", "fail"):
                count = counts[when].get(cat, {}).get(kind, 0)
                bars.append({"when": when, "kind": kind, "count": count, "x": round(x, 2),
                             "y": y + offset * (BAR_HEIGHT + 2), "width": round(count * scale, 2)})
                x += count * scale
        rows.append({"category": cat, "y": y, "bars": bars, "became": became.get(cat, 0)})
        y += len(scans) * (BAR_HEIGHT + 2) + 8
    return {"scale": round(scale, 4), "widest": widest, "width": LABEL_WIDTH + 50 + CHART_WIDTH + 190,
            "height": y + 10, "rows": rows, "scans": scans}


def rule_groups(report: HR.HostReport) -> list[dict]:
    """The rule list: [{outcome, count, reasons: [{reason, meaning, collapsed (an environment
    reason: one line), rules: [(short, RuleReport)]}]}] in :data:`OUTCOME_ORDER`, the biggest
    reason first."""
    by: dict[str, dict[str, list]] = {}
    for short, rule in sorted((report.get("rules") or {}).items()):
        by.setdefault(rule.get("outcome") or "?", {}).setdefault(rule.get("reason") or "?", []).append((short, rule))
    out = []
    for outcome in [o for o in OUTCOME_ORDER if o in by] + sorted(set(by) - set(OUTCOMES)):
        reasons = [{"reason": reason, "meaning": HS.reason_meaning(reason), "rules": rules,
                    "collapsed": reason.startswith(ENVIRONMENT_PREFIX) and len(rules) > 1}
                   for reason, rules in sorted(by[outcome].items(), key=lambda kv: (-len(kv[1]), kv[0]))]
        out.append({"outcome": outcome, "count": sum(len(r["rules"]) for r in reasons), "reasons": reasons})
    return out


def warnings(report: HR.HostReport, checklist_refused: str | None = None) -> list[str]:
    """What a reader must not miss about one host, as sentences."""
    out = []
    if report.get("error"):
        out.append("The run could not start or go on: %s: %s" % (report["error"].get("reason"), report["error"].get("msg")))
    if report.get("stopped"):
        out.append("Host stopped: %s" % report["stopped"])
    if report.get("scan_failed"):
        failed = report["scan_failed"]
        out.append("The %s scan failed even when run again (%s): %s. The rules worked before it keep their verified "
                   "results; the rules not worked yet end %s" % (failed.get("label"), failed.get("error_kind"),
                                                                 str(failed.get("msg")).rstrip("."), failed.get("reason")))
    if report.get("regressions"):
        out.append("Regressions (passed before, not after): %s" % ", ".join(report["regressions"]))
    for waiver in report.get("expired_waivers") or ():
        out.append("Waiver of %s expired on %s: the rule was worked as usual" % (waiver.get("rule"), waiver.get("expires")))
    failing = ((report.get("health_baseline") or {}).get("failing")) or {}
    if failing:
        out.append("Health checks failing before any change (not held against a fix): %s" % ", ".join(sorted(failing)))
    arf = report.get("arf") or {}
    if arf.get("error"):
        out.append("ARF results not fetched: %s" % arf["error"])
    llm = report.get("llm") or {}
    if llm.get("down"):
        out.append("The LLM endpoint went down during the run: %s" % llm["down"])
    memory = report.get("memory") or {}
    if memory.get("state") == "degraded":
        out.append("Memory degraded: %s" % memory.get("reason"))
    elif memory.get("error"):
        out.append("Memory off, the lesson store failed: %s" % memory["error"])
    resumed = report.get("resumed") or {}
    if resumed.get("interrupted"):
        out.append("Resumed after an interruption: %d attempt(s) were cut off and undone" % len(resumed["interrupted"]))
    no_outcome = HS.reconcile(report).get("no_outcome")
    if no_outcome:
        out.append("%d rule(s) fail at the end without an outcome in this report: %s" % (
            len(no_outcome), ", ".join(no_outcome)))
    unjudged = HS.not_judged(report)
    if unjudged:
        out.append("%d rule(s) OpenSCAP did not judge pass or fail at the end, to check by hand: %s" % (
            len(unjudged), ", ".join("%s (%s)" % (e["rule"], e["result"]) for e in unjudged)))
    unreliable = sorted(r for r, row in (report.get("rules") or {}).items() if row.get("reason") == "check_unreliable")
    if unreliable:
        out.append("%d rule(s) pass only because a package name this host's sources do not have is not installed: "
                   "the check proves nothing, a person checks by hand (check_unreliable): %s" % (
                       len(unreliable), ", ".join(unreliable)))
    if checklist_refused:
        out.append("No STIG checklist: %s" % checklist_refused)
    return out


def rule_warnings(report: HR.HostReport) -> list[dict]:
    """Every rule's scope warnings (``rules.<rule>.warnings``), rules sorted: {rule, outcome,
    reason, warning}, one entry per warning."""
    return [{"rule": rule, "outcome": row.get("outcome"), "reason": row.get("reason"), "warning": w}
            for rule, row in sorted((report.get("rules") or {}).items()) for w in row.get("warnings") or ()]


def _severity(report: HR.HostReport) -> t.Callable[[str], str]:
    stig = any(HR.vuln_id(row.get("identifiers")) for row in (report.get("scan_results") or {}).values())

    def word(severity: str) -> str:
        cat = HR.CAT_BY_SEVERITY.get(severity or "") if stig else None
        return "%s (%s)" % (severity, cat) if cat else (severity or "")
    return word


def has_ids(report: HR.HostReport) -> bool:
    """True when a rule of the list carries an identifier the list shows (CCE, STIG ids)."""
    return any((rule.get("identifiers") or {}).get(kind) for rule in (report.get("rules") or {}).values()
               for kind in SHOWN_IDS)


def render(hosts: t.Mapping[str, HR.HostReport], run_id: str, generated: str,
           checklists: t.Mapping[str, t.Any] | None = None, without_report: t.Sequence[str] = (),
           outputs: t.Mapping[str, str] | None = None, refused: t.Mapping[str, str] | None = None) -> str:
    """The page's HTML for a run: {host: HostReport}, the run id, when it was generated (an
    ISO time), {host: checklist path relative to the run dir, or {kind: path}}, hosts without a
    report, run-level outputs {label: relative path}, {host: why it has no checklist}."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["vuln_id"] = HR.vuln_id
    env.filters["short_profile"] = lambda p: (p or "?").split("_profile_", 1)[-1]
    hosts = dict(sorted(hosts.items()))
    refused = refused or {}
    lists = {}
    for host, value in (checklists or {}).items():
        lists[host] = value if isinstance(value, dict) else {"ckl": value}
    return env.get_template("report.html.j2").render(
        run_id=run_id, generated=generated, hosts=hosts, checklists=lists,
        charts={h: chart(r) for h, r in hosts.items()}, glances={h: HS.glance(r) for h, r in hosts.items()},
        groups={h: rule_groups(r) for h, r in hosts.items()}, ledgers={h: HS.changes(r) for h, r in hosts.items()},
        warnings={h: warnings(r, refused.get(h)) for h, r in hosts.items()},
        rule_warnings={h: rule_warnings(r) for h, r in hosts.items()},
        severity={h: _severity(r) for h, r in hosts.items()}, show_ids={h: has_ids(r) for h, r in hosts.items()},
        buckets=HS.BUCKETS, human=HS.HUMAN, without_report=list(without_report), outputs=dict(outputs or {}))


def write(run_dir: str, hosts: t.Mapping[str, HR.HostReport], run_id: str, generated: str,
          checklists: t.Mapping[str, t.Any] | None = None, without_report: t.Sequence[str] = (),
          outputs: t.Mapping[str, str] | None = None, refused: t.Mapping[str, str] | None = None) -> str:
    """Write ``<run_dir>/report.html`` atomically; returns its path. Raises OSError."""
    path = os.path.join(run_dir, FILE_NAME)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(render(hosts, run_id, generated, checklists, without_report, outputs, refused))
    os.replace(tmp, path)
    return path
