#!/usr/bin/env python3
"""Where a run's time goes, per host and phase, from its events (events.jsonl).

Each event's time minus the previous event's time (same host) is charged to the phase of the
event that ends the gap: a scan to its label (baseline, rescan, final), ``fix_applied`` to
fixes, ``health`` to health checks, ``verify`` to verification scans, ``restore`` to
rollbacks, the agents' events to agents, ``run_end`` to reports. The setup before
``run_start`` is split by its ``timing`` (catalog, facts, health baseline). Prints a table
and writes bench/results/profile.json.

Usage:
    .venv/bin/python bench/profile.py [RUN_DIR]     # default playbooks/scapforge-runs/latest
"""

import argparse
import datetime
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = {
    "fix_applied": "fixes", "health": "health checks", "verify": "verification scans", "restore": "rollbacks",
    "reboot": "reboot", "run_end": "reports", "llm_call": "agents", "architect": "agents", "reflection": "agents",
    "attempt_start": "agents", "attempt_end": "agents", "probe": "agents",
}
ORDER = ["catalog", "facts", "health baseline", "other setup", "baseline scan", "fixes", "health checks",
         "verification scans", "rollbacks", "rescan scan", "agents", "reboot", "final scan", "reports", "bookkeeping"]


def _time(event):
    return datetime.datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp()


def profile(events):
    """{host: {phase: seconds}} and {host: {"wall_s", "fixes", "package_facts"}} from events."""
    phases, extra, last = {}, {}, {}
    for event in events:
        host, kind, data = event["host"], event["event"], event.get("data") or {}
        table = phases.setdefault(host, {})
        info = extra.setdefault(host, {"fixes": 0})
        now = _time(event)
        if kind == "run_start":
            timing = data.get("timing") or {}
            setup = float(data.get("seconds") or 0.0)
            for key, name in (("catalog_s", "catalog"), ("facts_s", "facts"), ("health_baseline_s", "health baseline")):
                table[name] = table.get(name, 0.0) + float(timing.get(key) or 0.0)
                setup -= float(timing.get(key) or 0.0)
            table["other setup"] = table.get("other setup", 0.0) + max(setup, 0.0)
            info["start"] = now - float(data.get("seconds") or 0.0)
        elif host in last:
            if kind == "scan":
                phase = "%s scan" % data.get("label", "?")
            else:
                phase = PHASES.get(kind, "bookkeeping")
            table[phase] = table.get(phase, 0.0) + (now - last[host])
        if kind == "fix_applied":
            info["fixes"] += 1
        if kind == "run_end":
            info["wall_s"] = round(now - info.get("start", now), 1)
            info["package_facts"] = data.get("package_facts")
        last[host] = now
    return phases, extra


def inside_fixes(events):
    """{host: {part: seconds}} of the fixes' own time: each task's seconds by module (the
    executor's ``task_results``, which leave out the checkpoint's save before each change), the
    checkpoint's calls to the target, and the rest (rendering the content's fix, the gate, the
    checkpoint's bookkeeping) as ``other``: the fix phase minus both."""
    parts = {}
    for event in events:
        if event["event"] != "fix_applied":
            continue
        data, table = event.get("data") or {}, parts.setdefault(event["host"], {})
        for task in data.get("tasks") or []:
            name = "task %s" % task.get("module", "?").replace("ansible.builtin.", "")
            table[name] = table.get(name, 0.0) + float(task.get("seconds") or 0.0)
        for call in (data.get("checkpoint") or {}).get("calls") or []:
            name = "checkpoint %s" % call.get("state", "?")
            table[name] = table.get(name, 0.0) + float(call.get("seconds") or 0.0)
    return parts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", default=os.path.join(ROOT, "playbooks", "scapforge-runs", "latest"))
    args = parser.parse_args(argv)
    with open(os.path.join(args.run_dir, "events.jsonl")) as handle:
        events = [json.loads(line) for line in handle if line.strip()]
    phases, extra = profile(events)
    out = {}
    for host in sorted(phases):
        table, info = phases[host], extra[host]
        total = sum(table.values()) or 1.0
        print("%s: %s s, %d fixes applied, package facts %s" % (
            host, info.get("wall_s", "?"), info["fixes"], info.get("package_facts")))
        print("| phase | seconds | share |\n|---|---|---|")
        for name in ORDER + sorted(set(table) - set(ORDER)):
            if table.get(name):
                print("| %s | %.1f | %.0f%% |" % (name, table[name], 100.0 * table[name] / total))
        parts = inside_fixes(events).get(host, {})
        if parts:
            parts["other"] = max(0.0, table.get("fixes", 0.0) - sum(parts.values()))
            print("\nInside the fixes (%.1f s):\n| part | seconds | share |\n|---|---|---|" % table.get("fixes", 0.0))
            for name, seconds in sorted(parts.items(), key=lambda kv: -kv[1]):
                if seconds >= 0.05:
                    print("| %s | %.1f | %.0f%% |" % (name, seconds, 100.0 * seconds / (table.get("fixes") or 1.0)))
        out[host] = dict(info, phases={k: round(v, 2) for k, v in table.items()},
                         inside_fixes={k: round(v, 2) for k, v in parts.items()})
        out[host].pop("start", None)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "profile.json"), "w") as handle:
        json.dump({"run_dir": os.path.realpath(args.run_dir), "hosts": out}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
