#!/usr/bin/env python3
"""Print a run's summary.json for a human: per host before/after counts, outcomes by
reason, regressions, rules picked up by the rescan, what is left for a human (every rule
failing at the end in one bucket, plugins/plugin_utils/host_summary.py), and wall time
(seconds).

Usage: tools/print_summary.py [RUN_DIR or summary.json]   (default: playbooks/scapforge-runs/latest)
Exits 1 with a message if the file is missing or not JSON.
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_summary  # noqa: E402


def main(argv):
    path = argv[1] if len(argv) > 1 else "playbooks/scapforge-runs/latest"
    if os.path.isdir(path):
        path = os.path.join(path, "summary.json")
    try:
        with open(path, encoding="utf-8") as handle:
            summary = json.load(handle)
    except (OSError, ValueError) as exc:
        print("cannot read the run summary %s: %s" % (path, exc), file=sys.stderr)
        return 1
    print("run %s  (%s)" % (summary.get("run_id"), path))
    for host, report in sorted(summary.get("hosts", {}).items()):
        if report.get("error"):
            print("\n%s  NOT RUN (%s): %s" % (host, report["error"]["reason"], report["error"]["msg"]))
            continue
        print("\n%s  profile %s  %.0f s" % (host, report.get("profile"), report.get("seconds", 0)))
        print("  before: %s" % report.get("before"))
        print("  after:  %s" % report.get("after"))
        for reason, count in sorted(report.get("outcomes", {}).items(), key=lambda kv: (-kv[1], kv[0])):
            print("  %4d  %s" % (count, reason))
        print("  regressions: %s" % (report.get("regressions") or "none"))
        print("  picked up by the rescan: %d" % len(report.get("picked_up_by_rescan", [])))
        glance = host_summary.glance(report)
        print("  left for a human: %d of the %d rules failing at the end" % (glance["left_for_human"], glance["final_fail"]))
        for bucket, rules in glance["buckets"].items():
            print("  %4d  %s" % (len(rules), bucket.replace("_", " ")))
        memory = report.get("memory")
        if memory:
            print("  memory%s: %d lessons shown or acted on, %d created, %d reinforced, %d retired%s" % (
                " " + memory["state"] if memory.get("state", "on") != "on" else "",
                memory.get("shown", 0), memory.get("created", 0), memory.get("reinforced", 0),
                memory.get("retired", 0), ("; " + (memory.get("reason") or memory.get("error") or ""))
                if memory.get("state", "on") != "on" or memory.get("error") else ""))
            decided = sum(1 for o in report.get("rules", {}).values() if o.get("from_memory"))
            if decided:
                print("  decided from memory (zero attempts): %d rules" % decided)
        if report.get("llm"):
            llm = report["llm"]
            print("  llm: %s (%s), %d tokens" % (llm.get("model"), llm.get("endpoint"), llm.get("tokens", 0)))
        if report.get("stopped"):
            print("  STOPPED: %s" % report["stopped"])
    for host in summary.get("without_report", []):
        print("\n%s  NO REPORT: unreachable or failed before the loop (see the play output)" % host)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
