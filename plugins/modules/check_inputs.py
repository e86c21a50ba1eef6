#!/usr/bin/python
# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This file documents the action plugin plugins/action/check_inputs.py.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: check_inputs
short_description: Check a remediation run's inputs on the controller before anything reaches the host
version_added: 0.1.0
description:
  - Runs on the controller and never contacts the host. The remediate role runs it first, before preflight
    installs, creates or copies anything.
  - With O(datastream_src), the file must be well-formed XML whose root is a SCAP source datastream
    (C(ds:data-stream-collection)) holding an XCCDF 1.2 Benchmark; O(tailoring_src) an XCCDF 1.2 Tailoring
    of that benchmark; O(profile) one of its profiles (a tailoring's own with O(tailoring_src)); every id
    of O(rules), O(skip_rules), O(allow_access_impacting) and O(waivers) a rule of it; O(waivers) well formed.
    Without O(datastream_src) only what does not need the content is checked (the tailoring file's shape,
    the waivers' shape); the loop checks the rest, read-only, before its first change.
  - An agents' endpoint (O(llm_base_url) and O(llm_model)) outside loopback and private addresses is
    refused (reason C(llm_remote)) unless O(llm_allow_remote); names are resolved, nothing connects.
  - A bad input fails the task with the file and the problem (reason C(content), C(tailoring),
    C(profile), C(rule), C(waiver) or C(llm_remote)) and writes the host's error report under O(run_dir) when it has none.
  - Returns C(host_path), the path of our own on the host the datastream is to be copied to
    (C(<content_dir>/<sha256>.xml)); a distribution package's file is never overwritten.
author:
  - scapforge maintainers (@scapforge)
options:
  datastream_src:
    description: Controller path of the SCAP source datastream the run's fixes come from.
    type: path
  tailoring_src:
    description: Controller path of an XCCDF 1.2 tailoring file of that datastream's benchmark.
    type: path
  profile:
    description: The run's profile id, full or short; empty skips this check.
    type: str
    default: ""
  rules:
    description: Rules the run is limited to.
    type: list
    elements: str
    default: []
  skip_rules:
    description: Rules never attempted.
    type: list
    elements: str
    default: []
  allow_access_impacting:
    description: Access-impacting rules the user allows; C(all) allows every one.
    type: list
    elements: str
    default: []
  waivers:
    description: The run's waivers, C({rule, reason, expires}) each.
    type: list
    elements: dict
    default: []
  llm_base_url:
    description: The agents' OpenAI-compatible endpoint; with O(llm_model), checked as the loop checks it.
    type: str
  llm_model:
    description: The model the endpoint serves; without it no endpoint is configured.
    type: str
  llm_allow_remote:
    description: Allow an endpoint outside loopback and private addresses.
    type: bool
    default: false
  content_dir:
    description:
      - Host directory of our own the datastream is copied to, one file per sha256.
      - A directory under a tree the distribution's packages own (C(/usr), C(/etc), ...) is refused.
    type: str
    default: /var/lib/scapforge/content
  run_dir:
    description: The run's directory on the controller, for the host's error report; none without it.
    type: path
  run_id:
    description: The run's id, for the host's error report.
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - scapforge.remediation.attributes
"""

EXAMPLES = r"""
- name: Check the run's inputs on the controller
  scapforge.remediation.check_inputs:
    datastream_src: /srv/scap/ssg-debian12-ds.xml
    tailoring_src: /srv/scap/tailoring.xml
    profile: anssi_bp28_high_customized
  register: scapforge_inputs
"""

RETURN = r"""
sha256:
  description: sha256 of O(datastream_src); null without it.
  returned: always
  type: str
host_path:
  description: Where the role copies O(datastream_src) on the host (C(<content_dir>/<sha256>.xml)); null without it.
  returned: always
  type: str
benchmark:
  description: The datastream's XCCDF Benchmark id and version; null without O(datastream_src).
  returned: always
  type: str
profile:
  description: The profile's full id; null when it was not checked.
  returned: always
  type: str
tailoring:
  description: sha256 of O(tailoring_src) when it was checked against the benchmark; else null.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.module_utils.check_inputs_options import ARGUMENT_SPEC  # noqa: E402


def main():
    """Only reached when the action plugin is missing: the inputs are checked on the controller."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="scapforge.remediation.check_inputs runs as an action plugin on the controller; "
                         "its action plugin was not found")


if __name__ == "__main__":
    main()
