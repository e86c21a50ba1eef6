"""Merge the per-host reports of a run into one ``summary.json`` (DESIGN decision 7)."""

from __future__ import annotations

import glob
import json
import os
import typing as t


def error_report(host: str, run_id: str, reason: str, message: str) -> dict:
    """The host report of a host whose run could not start or go on (bad content, unknown
    profile or rule, failed baseline scan, unhealthy before any change): no counts, no rules,
    and the reason and message the user saw."""
    return {"host": host, "run_id": run_id, "error": {"reason": reason, "msg": message},
            "before": None, "after": None, "outcomes": {}, "regressions": [], "rules": {}}


def merge_host_reports(run_dir: str, expected_hosts: t.Iterable[str] = ()) -> dict:
    """Read ``<run_dir>/hosts/*.json`` and return the run summary.

    Shape: ``{"run_id", "hosts": {host: report}, "totals": {"before": {...}, "after": {...},
    "outcomes": {...}, "memory": {"shown", "created", "reinforced", "retired"}}, "regressions":
    {host: [rules]}, "not_judged": {host: [rules OpenSCAP left unjudged at the end]}, "without_report": [hosts]}``.
    ``expected_hosts`` are the play's hosts: those with no report (unreachable, failed in
    preflight) are listed under ``without_report`` so no host silently drops out. A report
    that is not valid JSON is listed under ``"unreadable"`` with its error.
    """
    hosts: dict[str, dict] = {}
    unreadable: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "hosts", "*.json"))):
        try:
            with open(path, encoding="utf-8") as handle:
                report = json.load(handle)
            hosts[report["host"]] = report
        except (OSError, ValueError, KeyError) as exc:
            unreadable[os.path.basename(path)] = str(exc)
    totals: dict[str, dict[str, int]] = {"before": {}, "after": {}, "outcomes": {}, "memory": {}}
    for report in hosts.values():
        for key in totals:
            for name, count in (report.get(key) or {}).items():
                if isinstance(count, int):  # memory also carries an error text when it failed
                    totals[key][name] = totals[key].get(name, 0) + count
    summary = {
        "run_id": next((r.get("run_id") for r in hosts.values()), os.path.basename(run_dir.rstrip("/"))),
        "hosts": hosts,
        "totals": {k: dict(sorted(v.items())) for k, v in totals.items()},
        "regressions": {h: r.get("regressions", []) for h, r in hosts.items() if r.get("regressions")},
        "errors": {h: r["error"] for h, r in hosts.items() if r.get("error")},
        "not_judged": {h: sorted(r["not_judged"]) for h, r in hosts.items() if r.get("not_judged")},
        "without_report": sorted(set(expected_hosts) - set(hosts)),
    }
    if unreadable:
        summary["unreadable"] = unreadable
    return summary


def write_summary(run_dir: str, expected_hosts: t.Iterable[str] = ()) -> tuple[str, dict]:
    """Write ``summary.json`` atomically and point ``<run_dir>/../latest`` at the run.

    Returns (path, summary). Raises OSError if the run directory cannot be created or written.
    """
    os.makedirs(run_dir, exist_ok=True)
    summary = merge_host_reports(run_dir, expected_hosts)
    path = os.path.join(run_dir, "summary.json")
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)
    latest = os.path.join(os.path.dirname(os.path.abspath(run_dir)), "latest")
    tmp_link = "%s.tmp.%d" % (latest, os.getpid())
    os.symlink(os.path.basename(os.path.abspath(run_dir)), tmp_link)
    os.replace(tmp_link, latest)
    return path, summary


def write_host_report(run_dir: str, host: str, report: dict) -> str:
    """Write ``<run_dir>/hosts/<host>.json`` atomically (temp file + rename); return its path."""
    folder = os.path.join(run_dir, "hosts")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "%s.json" % host)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


def summary_unchanged(run_dir: str, summary: dict) -> bool:
    """True when ``<run_dir>/summary.json`` already holds exactly ``summary`` (as
    :func:`write_summary` writes it): no host report changed since the run's reports were
    written, e.g. after a start that was refused and kept the old report (issue 17 item 4)."""
    try:
        with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
            return handle.read() == json.dumps(summary, indent=1, sort_keys=True)
    except OSError:
        return False
