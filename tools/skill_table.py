#!/usr/bin/env python3
"""Print a skill's rule table against a datastream: per category and per CAT level, the rules
the profile selects, those with an Ansible fix, access-impacting ones and reboot-required ones.

    .venv/bin/python tools/skill_table.py stig-rhel9 /var/lib/scapforge-lab/content/ssg-rhel9-ds.xml
    .venv/bin/python tools/skill_table.py stig-rhel9 DS.xml --rules     # one line per rule (STIG ids)
    .venv/bin/python tools/skill_table.py stig-rhel9 DS.xml --json
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils import skills  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("skill")
    parser.add_argument("datastream")
    parser.add_argument("--profile", help="default: the skill's profile")
    parser.add_argument("--rules", action="store_true", help="one line per rule")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    skill = skills.load_skill(args.skill)
    rows = skills.rule_table(skill, Catalog.from_path(args.datastream), args.profile)
    counts = skills.table_counts(rows)
    if args.json:
        print(json.dumps({"counts": counts, "rules": rows} if args.rules else counts, indent=1))
        return 0
    if args.rules:
        for r in rows:
            print("%-15s %-8s %-24s %-8s %-22s %s%s" % (r["stig_id"] or "-", r["vuln_id"] or "-", r["stig_rule"] or "-",
                                                      r["cat"] or "-", r["category"], r["rule"],
                                                      " (no Ansible fix)" if not r["ansible_fix"] else ""))
        return 0
    line = "| %-22s | %5s | %9s | %16s | %15s |"
    print(line % ("", "rules", "Ansible fix", "access-impacting", "reboot-required"))
    print("|" + "|".join("-" * n for n in (24, 7, 11, 18, 17)) + "|")
    for title, table in (("category", counts["by_category"]), ("CAT level", counts["by_cat"])):
        for name, c in table.items():
            print(line % (name, c["rules"], c["ansible_fix"], c["access_impacting"], c["reboot"]))
        print(line % ("**all (by %s)**" % title, counts["rules"], counts["ansible_fix"], counts["access_impacting"],
                      counts["reboot"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
