#!/usr/bin/python
# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# The action plugin plugins/action/ralph.py does all the work, on the controller; this file
# documents it and declares its options (plugins/module_utils/ralph_options.py, the one
# definition), so that ansible-test's validate-modules checks the documentation against them.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ralph
short_description: Remediate a host against a SCAP profile with a verified closed loop
version_added: 0.1.0
description:
  - Scans the host with M(scapforge.remediation.oscap_eval), then works every failing XCCDF
    rule to an outcome - C(remediated), C(escalated), C(skipped) or C(deferred) - each with a
    reason code from a closed list (see the collection README).
  - One run per host at a time - before its first look at the host the run takes the host's run
    lock (M(scapforge.remediation.run_lock), C(/var/lib/scapforge/run.lock)) naming its run id,
    controller and process, and holds it to the end; while another run holds it, the host is
    refused before any change with reason C(host_busy), the message naming the holder. A lock
    whose holder's process is gone (on this controller), or one taken more than a day ago from
    another controller, is taken over.
  - Per rule, attempt 1 is the SCAP content's own Ansible fix (the C(urn:xccdf:fix:script:ansible)
    fix of the rule in the datastream, with the profile's XCCDF Values substituted), run on the
    task's own connection under a checkpoint of every file its tasks touch (module
    M(scapforge.remediation.checkpoint)); then a fresh login with privilege escalation is
    checked and the rule is re-evaluated with OpenSCAP. A rule is reported remediated only when
    OpenSCAP says C(pass); an attempt that does not pass is rolled back and the restore verified.
  - With an OpenAI-compatible endpoint (O(llm_base_url), O(llm_model)), the rules the vendor
    fix left failing, and those without one, go to three agents - an Architect (a plan, and a
    CONTINUE / PIVOT / ESCALATE verdict after every O(llm_review_every) failed attempts or a
    plateau), a Worker (Ansible tasks, after read-only probes if it asks) and a Reflector (a
    diagnosis and a lesson after each failure) - attempt after attempt within the budgets.
    Model-written tasks are never rendered as templates and pass a stricter gate (module
    allowlist, banned patterns) before anything runs.
  - Rules whose fix can cut the controller off (sudo NOPASSWD removal, noexec, requiretty,
    AllowUsers, sshd crypto, root login when connecting as root) are skipped with reason
    C(access_impacting) unless listed in O(allow_access_impacting).
  - A rescan after the loop picks up rules that became applicable (for example once a
    package was installed) and works them too. The final scan gives the C(after) counts.
  - Writes C(events.jsonl) and C(hosts/<host>.json) under O(run_dir).
  - The datastream is parsed once on the controller. Its fixes run (rendered as templates)
    only when it is trusted, that is read from O(datastream_src) on the controller (the host's
    file must then have the same sha256) or fetched from the host with a sha256 listed in
    O(trusted_sha256); other content is refused with reason C(untrusted_content).
author:
  - scapforge maintainers (@scapforge)
options:
  datastream:
    description: Path of the SCAP source datastream on the host.
    type: str
    required: true
  profile:
    description:
      - XCCDF profile id, full or short (C(anssi_bp28_high)).
      - With O(tailoring_src), one of the tailoring file's own profiles
        (C(xccdf_org.ssgproject.content_profile_anssi_bp28_high_customized)); any other id is refused
        with reason C(profile), the message listing the file's profile ids.
    type: str
    required: true
  datastream_src:
    description:
      - Controller path of the same datastream; parsed on the controller and trusted.
      - Without it the datastream is fetched from the host and must match O(trusted_sha256).
    type: path
  tailoring_src:
    description:
      - Controller path of an XCCDF 1.2 tailoring file (for example from SCAP Workbench or
        C(autotailor)) for the datastream's benchmark; read and checked on the controller (a
        select or refine-value naming no rule or Value of the benchmark is refused with reason
        C(tailoring), naming the file and the id).
      - Its profile O(profile) decides which rules are scanned and worked and the XCCDF Values
        the vendor fixes are rendered with. Every scan passes it inline to
        M(scapforge.remediation.oscap_eval); when O(rules) name rules outside that profile, a
        generated tailoring extending the profile's benchmark ancestor carries its selections and
        Values plus those rules.
      - The host report and the C(run_start) event record it under C(tailoring) (file name,
        sha256, profile, scan_profile).
    type: path
  trusted_sha256:
    description: sha256 digests of datastreams whose fixes may be rendered as templates.
    type: list
    elements: str
    default: []
  rules:
    description:
      - Limit the scans and the work to these rules (full or short ids) and the rules they
        require. Rules outside the profile are selected with a generated tailoring file.
      - Empty means the whole profile.
    type: list
    elements: str
    default: []
  skip_rules:
    description: Rules never attempted (reported C(skipped), reason C(waived)).
    type: list
    elements: str
    default: []
  waivers:
    description:
      - Waived rules, each a mapping with C(rule) (short or full id), C(reason) (the
        justification an auditor reads) and C(expires) (the last day it holds, C(YYYY-MM-DD), UTC).
      - Until it expires the rule is not attempted and is reported C(skipped), reason C(waived),
        with the justification and expiry, in every output (host report, report.html, junit.xml,
        the STIG checklist). An expired waiver is listed in the host report's C(expired_waivers)
        and the rule is worked as usual.
      - A malformed entry or an unknown rule stops the host before any change (reason C(waiver))
        with the entry named.
    type: list
    elements: dict
    default: []
  rescan:
    description: Work the rules that fail in the rescan and were not failing at baseline.
    type: bool
    default: true
  run_dir:
    description: Controller directory for events and reports; default C(<playbook_dir>/scapforge-runs/<run_id>).
    type: path
  run_id:
    description: Identifier shared by every host of one playbook run (set once by the role).
    type: str
  time_budget:
    description: Seconds after which remaining rules are skipped with reason C(budget); 0 means none.
    type: float
    default: 0
  verify_batch:
    description:
      - How many applied rules are re-evaluated in one oscap call. Each rule is judged by its
        own rule-result; 1 verifies every rule on its own (slower, about 1.8 s per call on the lab).
    type: int
    default: 8
  scan_timeout:
    description:
      - Seconds one oscap scan (or re-check) may run before it is killed. V(0) means it follows
        the host's own baseline scan - ten times the seconds the baseline took, never under 120
        (the baseline itself gets 900).
      - A scan that hung past it or crashed is killed and run once more. When a scan after
        changes (the rescan or the final scan) fails again, the host is not stopped - the rules
        already worked keep their verified results, the rules not worked yet end with the
        scanner's reason (C(scanner_crash)), and the host report's C(scan_failed) says which
        scan failed and why.
    type: int
    default: 0
  skill:
    description:
      - Skill under the collection's C(skills/), loaded by name and validated (V(anssi-debian12), V(stig-rhel9)).
      - It gives the agents' prompts, the rules' categories, the order of rules that must run last, the
        access-impacting and reboot-required rules, the gate's extra modules, extra health checks, its own
        fixes for some rules and optional hooks. An unknown or malformed skill fails with reason C(skill).
    type: str
    default: anssi-debian12
  skill_description:
    description: One line naming the benchmark and platform, shown to the agents; empty means the skill's description.
    type: str
    default: ""
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - scapforge.remediation.attributes
  - scapforge.remediation.llm
  - scapforge.remediation.memory
  - scapforge.remediation.safety
attributes:
  check_mode:
    details: Scans and reports the plan (which rules, which tasks of their fixes); changes nothing.
notes:
  - Requires ansible-core 2.19 or later, whose templating does not render untrusted strings.
  - The host needs Python 3.9+ and the C(oscap) command (package openscap-scanner).
seealso:
  - module: scapforge.remediation.oscap_eval
  - module: scapforge.remediation.checkpoint
  - module: scapforge.remediation.run_summary
"""

EXAMPLES = r"""
- name: Remediate against ANSSI BP-028 high, with a controller copy of the content
  scapforge.remediation.ralph:
    datastream: /usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml
    datastream_src: /var/lib/scapforge-lab/content/ssg-debian12-ds.xml
    profile: anssi_bp28_high
    run_id: "{{ scapforge_run_id }}"

- name: With the agents on a local vLLM server
  scapforge.remediation.ralph:
    datastream: /usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml
    datastream_src: /var/lib/scapforge-lab/content/ssg-debian12-ds.xml
    profile: anssi_bp28_high
    llm_base_url: http://127.0.0.1:8000/v1
    llm_model: Qwen/Qwen2.5-Coder-32B-Instruct
    llm_max_attempts: 4

- name: With the site's own tailoring of ANSSI BP-028 high (Values and selections)
  scapforge.remediation.ralph:
    datastream: /usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml
    datastream_src: /var/lib/scapforge-lab/content/ssg-debian12-ds.xml
    tailoring_src: files/anssi-high-tailoring.xml
    profile: xccdf_org.ssgproject.content_profile_anssi_bp28_high_customized

- name: Only two rules, one of them outside the profile
  scapforge.remediation.ralph:
    datastream: /usr/share/xml/scap/ssg/content/ssg-rhel9-ds.xml
    profile: stig
    trusted_sha256: ["{{ stig_content_sha256 }}"]
    rules: [accounts_umask_etc_login_defs, sshd_set_idle_timeout]
"""

RETURN = r"""
before:
  description: Rule counts by result at baseline (notselected excluded).
  returned: success
  type: dict
  sample: {"pass": 109, "fail": 165, "notapplicable": 116}
after:
  description:
    - Rule counts by result in the final scan.
    - Null in check mode, when the host was stopped before a final scan, and when the first scan after changes failed (C(scan_failed)).
  returned: always
  type: dict
  sample: {"pass": 240, "fail": 40, "notapplicable": 110}
outcomes:
  description:
    - Number of rules per C(outcome/reason); the reason codes are the collection README's table.
    - Outcomes agree with the final scan - a rule escalated or skipped (not waived) during the run that passes in
      the final scan is C(remediated/passes_after_other_fixes); a fix whose task failed while the rule passes is
      C(remediated/passes_without_fix), never C(remediated/verified).
  returned: always
  type: dict
  sample: {"remediated/verified": 120, "skipped/access_impacting": 4, "escalated/fix_failed": 9}
regressions:
  description: Short ids of rules that passed at baseline and do not pass in the final scan.
  returned: always
  type: list
  elements: str
picked_up_by_rescan:
  description: Rules that were not failing at baseline, failed in the rescan and were worked.
  returned: always
  type: list
  elements: str
stopped:
  description: Why the host was stopped (failed health check, lost connection), or null.
  returned: always
  type: str
scan_failed:
  description:
    - A scan after changes (the rescan or the final scan) that failed, even when run once more
      after it hung or crashed, or null. The host was not stopped for it (see O(scan_timeout)).
    - "Keys: C(label) (rescan or final), C(reason) (C(scanner_crash), C(scan_failed),
      C(environment:<kind>)), C(error_kind) (oscap_eval's), C(tries), C(msg)."
  returned: always
  type: dict
  sample: {"label": "rescan", "reason": "scanner_crash", "error_kind": "timeout", "tries": 2,
           "msg": "rescan scan failed (timeout, twice): oscap did not finish within 120 seconds and was killed."}
reason:
  description:
    - When the run could not start or go on, its reason code - C(content), C(content_mismatch),
      C(untrusted_content), C(tailoring) (O(tailoring_src) unreadable or not a tailoring of the
      benchmark), C(profile), C(rule), C(facts), C(unhealthy_before), C(scan_failed),
      C(scanner_crash), C(llm_remote) (an endpoint outside the network without O(llm_allow_remote)),
      C(prompts) (a prompt template missing or broken), C(memory) (an unknown memory mode),
      C(controller) (the host is the controller itself), C(checkpoint) (an unknown checkpoint provider
      or option) - with C(msg); the host's report then
      carries the same under C(error).
  returned: failure
  type: str
report:
  description:
    - Controller path of this host's full JSON report (per-rule outcome, reason, attempts, modules, and
      C(attempt_log) - one entry per attempt with source, verdict, reason, tokens, rolled_back (true only
      when every change of the attempt was undone and the restore verified)), and C(ledger) - one entry
      per change an attempt made (rule, attempt, kind file/package/service/cron/user/group, target,
      change, state kept/undone/left, verified).
    - Its C(not_judged) names the rules OpenSCAP left unjudged at the end (notchecked, error, unknown, or
      notapplicable after a judged baseline) with C(before), C(result), C(why) and oscap's C(message).
    - Each rule's C(warnings) (a list of sentences) says what a fix that passes reaches beyond its check -
      remote endpoints (time servers, log hosts, package repositories, DNS servers) it added where the host
      named its own, or a main file it wrote while the host configures that service in a drop-in too; its
      result stands. A rule that passes only because a package name the host's sources do not have is not
      installed ends escalated with reason C(check_unreliable).
  returned: always
  type: str
run_dir:
  description: Controller directory of the run (events.jsonl, hosts/, summary.json).
  returned: always
  type: str
"""

from ansible_collections.scapforge.remediation.plugins.module_utils.action_only import fail_without_action  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.module_utils.ralph_options import ARGUMENT_SPEC  # noqa: E402


def main():
    fail_without_action(ARGUMENT_SPEC, "scapforge.remediation.ralph")


if __name__ == "__main__":
    main()
