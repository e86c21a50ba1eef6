#!/usr/bin/python
# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This file documents the action plugin plugins/action/run_summary.py.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_summary
short_description: Merge the per-host reports of a remediation run into summary.json
version_added: 0.1.0
description:
  - Runs on the controller. Reads C(<run_dir>/hosts/*.json) written by M(scapforge.remediation.ralph)
    and writes C(<run_dir>/summary.json) (per host C(before) and C(after) counts by result and
    per rule outcome, reason, attempts and modules; run totals) and a C(latest) symlink beside the run.
  - Writes the run's reports from the same host reports, every host in each (C(report.html), C(junit.xml)
    and C(checklists/<host>.ckl) and C(checklists/<host>.cklb) (DISA STIG Viewer 2.x and 3 checklists, for
    content whose profile carries STIG ids; one VULN per V- id, the statuses of its rules merged)).
  - Prints the path of C(report.html) and three lines per host (before and after, what was done, what is left
    for a human) at the end of the play.
  - Writes C(oscal/assessment-results.json), OSCAL assessment results built and validated with compliance-trestle
    (one observation per rule, a finding per failing rule, the change ledger as tasks).
  - Bundles the run directory into C(evidence-<run id>.tar.gz) with a manifest of sha256 digests, signed with
    OpenSSH (C(ssh-keygen -Y sign)) when O(evidence_key) is given; C(tools/verify_evidence.py BUNDLE --public-key
    KEY.pub) checks it.
  - A checklist with no result for any rule of the profile, or with fewer VULNs than the profile's rules have
    V- ids, is not written; the task warns and C(reports.checklists_refused) says why.
author:
  - scapforge maintainers (@scapforge)
options:
  run_dir:
    description: The run's directory on the controller.
    type: path
    required: true
  hosts:
    description: The play's hosts; those without a report (unreachable, failed before the loop) are listed as such.
    type: list
    elements: str
    default: []
  datastream_src:
    description:
      - Controller copy of the datastream the hosts were scanned with (the role passes C(scapforge_datastream_src)).
      - The checklists list every V- id of the profile from it; without it, from the catalog the run parsed
        (the controller's catalog cache); a host whose content is in neither gets no checklist, and a warning.
    type: path
  evidence_key:
    description:
      - Controller path of an OpenSSH private key that signs the evidence bundle's manifest
        (C(ssh-keygen -Y sign -n scapforge-evidence)); the signature is C(evidence-<run id>.tar.gz.sig).
      - Without it the bundle is written unsigned and its manifest says so.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - scapforge.remediation.attributes
"""

EXAMPLES = r"""
- name: Merge the run's host reports
  scapforge.remediation.run_summary:
    run_dir: "{{ playbook_dir }}/scapforge-runs/{{ scapforge_run_id }}"
    hosts: "{{ ansible_play_hosts_all }}"
  run_once: true
"""

RETURN = r"""
summary_path:
  description: Path of the summary file written.
  returned: always
  type: str
totals:
  description: Counts summed over hosts (before, after, outcomes).
  returned: always
  type: dict
regressions:
  description: Per host, rules that passed at baseline and not after.
  returned: always
  type: dict
hosts:
  description: Hosts whose reports were merged.
  returned: always
  type: list
  elements: str
without_report:
  description: Hosts of the play with no report (unreachable, or failed before the loop started).
  returned: always
  type: list
  elements: str
errors:
  description: Per host, the reason and message of a run that could not start or go on.
  returned: always
  type: dict
reports:
  description:
    - The reports written next to the summary, every host in each, once per run.
    - C(html) report.html (self-contained, for people), C(junit) junit.xml (one test case per
      rule per host), C(checklists) (per host, the paths of its ckl and cklb) of the STIG checklists of hosts whose
      content carries DISA SV- ids, C(checklists_refused) (per host, why no checklist was written),
      C(ledger) ledger.json (what the run left changed on each host), C(oscal) the OSCAL assessment results
      (oscal/assessment-results.json, built with compliance-trestle), C(evidence) the evidence bundle
      (C(path), C(signature) (the .sig beside it, or null), C(signed), C(files)).
  returned: always
  type: dict
report_html:
  description: Path of report.html.
  returned: always
  type: str
summary_lines:
  description: The lines printed at the end of the play (report path, three per host).
  returned: always
  type: list
  elements: str
"""

from ansible_collections.scapforge.remediation.plugins.module_utils.action_only import fail_without_action  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.module_utils.run_summary_options import ARGUMENT_SPEC  # noqa: E402


def main():
    fail_without_action(ARGUMENT_SPEC, "scapforge.remediation.run_summary")


if __name__ == "__main__":
    main()
