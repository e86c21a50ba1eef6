#!/usr/bin/env python3
"""Write a DISA STIG Viewer checklist from your own scan results: one VULN per V- id of the
profile, its rules' results merged (plugins/plugin_utils/stig_groups.py).

    tools/checklist.py DATASTREAM PROFILE RESULTS.json OUT [--host NAME] [--scanner "OpenSCAP 1.3.7"]

RESULTS.json is a JSON object {rule id: result}: short (``sshd_disable_root_login``) or full
(``xccdf_org.ssgproject.content_rule_sshd_disable_root_login``) ids, results as oscap names
them (pass, fail, notapplicable, notchecked, notselected, error, unknown, informational,
fixed). OUT ending in ``.cklb`` writes STIG Viewer 3's JSON checklist, else a ``.ckl`` (STIG
Viewer 2.x XML). Exits 1 with the reason, and writes nothing, when the checklist would be
empty (no result for any rule with STIG ids) or incomplete, or the input cannot be read;
prints the VULN count by status otherwise.
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog, CatalogError  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils import report_ckl  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils import stig_groups  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datastream")
    parser.add_argument("profile", help="XCCDF profile id, full or short (stig)")
    parser.add_argument("results", help="JSON object {rule id: oscap result}")
    parser.add_argument("out", help="the checklist to write: NAME.ckl or NAME.cklb")
    parser.add_argument("--host", default="", help="the asset's host name")
    parser.add_argument("--scanner", default="", help='what produced the results, e.g. "OpenSCAP 1.3.7"')
    args = parser.parse_args(argv)
    try:
        catalog = Catalog.from_path(args.datastream)
        stig_map = stig_groups.from_catalog(catalog, args.profile)
    except CatalogError as exc:
        print("checklist.py: %s" % exc, file=sys.stderr)
        return 1
    try:
        with open(args.results, encoding="utf-8") as handle:
            results = json.load(handle)
    except (OSError, ValueError) as exc:
        print("checklist.py: cannot read the results %s: %s" % (args.results, exc), file=sys.stderr)
        return 1
    if not isinstance(results, dict) or not all(isinstance(v, str) for v in results.values()):
        print("checklist.py: %s must be a JSON object {rule id: result}" % args.results, file=sys.stderr)
        return 1
    unknown = sorted(r for r in map(report_ckl.short_id, results)
                     if catalog.id_namespace + "rule_" + r not in catalog.rules)
    if unknown:
        print("checklist.py: %d result(s) name rules the datastream lacks: %s" % (
            len(unknown), ", ".join(unknown[:10])), file=sys.stderr)
        return 1
    try:
        checklist = report_ckl.build(stig_map, results, host=args.host, scanner=args.scanner)
    except report_ckl.ChecklistError as exc:
        print("checklist.py: refused: %s" % exc, file=sys.stderr)
        return 1
    try:
        report_ckl.write_file(checklist, args.out)
    except OSError as exc:
        print("checklist.py: cannot write %s: %s" % (args.out, exc), file=sys.stderr)
        return 1
    counts = checklist.counts()
    print("%s: %d VULNs (%s)" % (os.path.abspath(args.out), len(checklist.vulns),
                                 ", ".join("%s %d" % (k, counts[k]) for k in sorted(counts))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
