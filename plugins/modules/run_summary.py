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
    and C(checklists/<host>.ckl) (DISA STIG Viewer checklists, for content that carries STIG ids)).
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
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
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
      rule per host), C(checklists) {host, path} of the STIG checklists (CKL) of hosts whose
      content carries DISA SV- ids.
  returned: always
  type: dict
"""
