"""``report.html``: one self-contained page for the people who read a run (issue 10 item 3).

Rendered with jinja2 from ``report_templates/report.html.j2`` (shipped in the collection),
autoescaped: everything from hosts and models (rule details, task YAML, diffs) is text. The
page loads nothing (inline CSS, inline SVG, no script). Per host: before/after counts, a chart
of pass/fail by category before and after (SVG bars, one per category and scan, with
``data-*`` attributes naming what they show), escalations grouped by reason, waivers, every
rule's outcome, reason and attempts with the tasks each attempt ran (YAML) and the diff of
every file they changed, and links to the ARF results and the STIG checklist.
"""

from __future__ import annotations

import os
import typing as t

import jinja2

from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils.outcomes import REASONS, ENVIRONMENT_PREFIX

FILE_NAME = "report.html"
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report_templates")
#: chart geometry (SVG user units = CSS pixels): the widest bar, one bar's height, the label column.
CHART_WIDTH = 420
BAR_HEIGHT = 12
LABEL_WIDTH = 190


def chart(report: HR.HostReport) -> dict:
    """The chart's data: {scale (pixels per rule), width, height, rows: [{category, y,
    bars: [{when, kind, count, x, y, width}]}]}. Per category two bars, before and after, each
    a pass segment followed by a fail segment; a segment's width is count * scale."""
    before, after = HR.category_counts(report, "before"), HR.category_counts(report, "after")
    cats = sorted(set(before) | set(after))
    widest = max([sum(before.get(c, {}).values()) for c in cats] + [sum(after.get(c, {}).values()) for c in cats]
                 + [1])
    scale = CHART_WIDTH / widest
    rows, y = [], 20
    for cat in cats:
        bars = []
        for offset, (when, counts) in enumerate((("before", before), ("after", after))):
            x = LABEL_WIDTH + 50
            for kind in ("pass", "fail"):
                count = counts.get(cat, {}).get(kind, 0)
                bars.append({"when": when, "kind": kind, "count": count, "x": round(x, 2),
                             "y": y + offset * (BAR_HEIGHT + 2), "width": round(count * scale, 2)})
                x += count * scale
        rows.append({"category": cat, "y": y, "bars": bars})
        y += 2 * (BAR_HEIGHT + 2) + 8
    return {"scale": round(scale, 4), "width": LABEL_WIDTH + 50 + CHART_WIDTH + 60, "height": y + 10, "rows": rows}


def escalations(hosts: t.Mapping[str, HR.HostReport]) -> list[dict]:
    """What is left for a human, grouped by reason over all hosts: [{reason, meaning, rules:
    [{host, rule, title, severity, detail}]}], the biggest group first. Escalated and deferred
    outcomes count."""
    groups: dict[str, list[dict]] = {}
    for host, report in sorted(hosts.items()):
        for short, rule in sorted((report.get("rules") or {}).items()):
            if rule.get("outcome") in ("escalated", "deferred"):
                groups.setdefault(rule.get("reason") or "?", []).append(
                    {"host": host, "rule": short, "title": rule.get("title", ""), "severity": rule.get("severity", ""),
                     "detail": rule.get("detail", "")})
    out = []
    for reason, rules in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        meaning = REASONS.get(reason, (None, ""))[1]
        if not meaning and reason.startswith(ENVIRONMENT_PREFIX):
            meaning = "the host's environment, not the rule, stops the fix"
        out.append({"reason": reason, "meaning": meaning, "rules": rules})
    return out


def render(hosts: t.Mapping[str, HR.HostReport], run_id: str, generated: str,
           checklists: t.Mapping[str, str] | None = None, without_report: t.Sequence[str] = ()) -> str:
    """The page's HTML for a run: {host: HostReport}, the run id, when it was generated (an
    ISO time), {host: checklist path relative to the run dir}, hosts without a report."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["vuln_id"] = HR.vuln_id
    env.filters["cat"] = lambda severity: HR.CAT_BY_SEVERITY.get(severity or "", "")
    return env.get_template("report.html.j2").render(
        run_id=run_id, generated=generated, hosts=dict(sorted(hosts.items())), checklists=checklists or {},
        charts={h: chart(r) for h, r in hosts.items()}, escalations=escalations(hosts),
        without_report=list(without_report))


def write(run_dir: str, hosts: t.Mapping[str, HR.HostReport], run_id: str, generated: str,
          checklists: t.Mapping[str, str] | None = None, without_report: t.Sequence[str] = ()) -> str:
    """Write ``<run_dir>/report.html`` atomically; returns its path. Raises OSError."""
    path = os.path.join(run_dir, FILE_NAME)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(render(hosts, run_id, generated, checklists, without_report))
    os.replace(tmp, path)
    return path
