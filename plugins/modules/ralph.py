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
  allow_access_impacting:
    description: Access-impacting rules the user allows to run; C(all) allows every one.
    type: list
    elements: str
    default: []
  health_check:
    description: After every applied fix, log in afresh and escalate; stop the host if that fails.
    type: bool
    default: true
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
  llm_base_url:
    description:
      - Base URL of an OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp server, OpenAI), for
        example C(http://127.0.0.1:8000/v1). Unset means no agents - rules the vendor fix does
        not remediate end with its reason, rules without one with C(llm_unavailable).
      - An endpoint that is not loopback or a private address is refused unless O(llm_allow_remote).
    type: str
  llm_model:
    description: Model name the endpoint serves.
    type: str
  llm_api_key:
    description:
      - API key (never logged); unset means the environment variable C(SCAPFORGE_LLM_API_KEY), then C(OPENAI_API_KEY).
    type: str
  llm_timeout:
    description: Seconds one model call may take; 429, 5xx and connection errors are retried with backoff.
    type: float
    default: 120
  llm_allow_remote:
    description: Allow an endpoint outside loopback and private addresses (data leaves the network).
    type: bool
    default: false
  llm_prompts:
    description: Controller paths of Jinja2 templates replacing the skill's, keyed C(architect), C(worker), C(reflector).
    type: dict
    default: {}
  llm_max_attempts:
    description: Worker attempts per rule (reason C(attempt_budget)); 0 means no limit.
    type: int
    default: 5
  llm_max_probes:
    description: Read-only probes per rule (reason C(probe_budget)).
    type: int
    default: 6
  llm_rule_seconds:
    description: Seconds per rule in the Worker phase (reason C(rule_time_budget)).
    type: float
    default: 900
  llm_rule_tokens:
    description: Tokens per rule, all agents (reason C(rule_token_budget)).
    type: int
    default: 60000
  llm_run_tokens:
    description: Tokens per run over all hosts, counted in C(llm_usage.json) of the run directory (reason C(run_token_budget)); 0 means none.
    type: int
    default: 2000000
  llm_max_tokens:
    description:
      - The most tokens one answer may take (C(max_tokens) of each call). A small model left
        unbounded can repeat itself to the end of its context, minutes per call.
    type: int
    default: 2000
  memory_path:
    description:
      - Controller directory of the lesson store (one TinyDB JSON file per table, written atomically
        under a file lock, shared by the forks of a run and by runs that follow).
      - Under AWX / Automation Controller each job runs in a container that is thrown away - give
        a path on a persistent volume mounted into the execution environment, or memory starts
        empty every job.
    type: path
    default: ~/.scapforge/memory
  memory_mode:
    description:
      - One of C(off), C(shadow), C(inject) (checked by the action plugin, since the type is raw).
      - C(off) - no memory; C(shadow) - select lessons and log what would have been shown or decided,
        change nothing; C(inject) - show the selected lessons to the Architect and the Worker and act
        on proven ones (classify a rule from a caution, skip a vendor fix known to fail on hosts
        like this one, try tasks that verified before).
      - An unquoted C(off) in YAML is the boolean false, which means C(off) too.
    type: raw
    default: inject
  memory_retry:
    description: Work rules again that memory would decide at once (tasks that verified are still tried first).
    type: bool
    default: false
  health_commands:
    description:
      - Shell commands (run as root on the host) that must exit 0 after every attempt, on top of the
        built-in checks (a fresh login with become, C(sshd -t), C(visudo -c), the package database,
        systemd units that were active before the run and failed since, login shells, owner and mode
        of the account and sudoers files). A check that already failed before the run is reported,
        not held against an attempt.
    type: list
    elements: str
    default: []
  deadman_seconds:
    description:
      - Before an attempt first changes something the controller's access depends on (sshd, PAM,
        sudoers, accounts, network, firewall), a timer on the host restores its checkpoint by itself
        after this many seconds unless the controller, logged in afresh, confirms the host healthy
        and cancels it. 0 turns the switch off.
    type: int
    default: 600
  allow_reboot:
    description:
      - A vendor fix whose XCCDF metadata says C(reboot) and whose rule still fails once it ran
        cleanly ends C(deferred) with reason C(reboot_required) (it is not rolled back).
      - With V(true), after the Worker phase and before the final scan, the host is rebooted once
        (C(ansible.builtin.reboot), up to 600 seconds to come back) and exactly those rules are
        verified again in one OpenSCAP call, C(remediated)/C(verified_after_reboot) when they pass,
        C(escalated)/C(fix_ineffective_after_reboot) when they still fail. A host that does not
        come back is stopped. Never in check mode.
      - With V(false) they stay deferred, and the host report's C(reboot_required) lists them.
    type: bool
    default: false
  checkpoint_provider:
    description:
      - How an attempt is saved and undone. C(files) (default) saves on the host every file its tasks
        can touch, with owner, mode, ACLs, extended attributes and SELinux context, and verifies the
        restore byte for byte; its dead-man switch protects access-touching attempts. C(command) runs
        your snapshot / restore / verify commands on the host (LVM, a cloud API); C(lab) resets a
        lab host's overlay (undoing every earlier fix too).
    type: str
    choices: [files, command, lab]
    default: files
  checkpoint_options:
    description:
      - Options of the provider. C(files) - C(root) (default C(/var/lib/scapforge/checkpoints)),
        C(max_file_bytes), C(max_total_bytes), C(max_entries). C(command) - C(snapshot), C(restore),
        C(verify) (required; C({id}) and C({host}) are replaced), C(discard), C(timeout), C(become).
        C(lab) - C(restore_command), C(snapshot_command), C(cwd), C(timeout).
    type: dict
    default: {}
  allow_controller:
    description:
      - Work on a host that is the controller itself (a C(local) connection, or the same machine id).
        Refused by default with reason C(controller), before anything runs.
    type: bool
    default: false
  llm_review_every:
    description: Failed attempts between two Architect reviews (a plateau, the same failure twice, also triggers one).
    type: int
    default: 3
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Scans and reports the plan (which rules, which tasks of their fixes); changes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
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
    - Null in check mode and when the host was stopped before a final scan.
  returned: always
  type: dict
  sample: {"pass": 240, "fail": 40, "notapplicable": 110}
outcomes:
  description: Number of rules per C(outcome/reason).
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
  description: Why the host was stopped (failed health check, lost connection, failed scan after changes), or null.
  returned: always
  type: str
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
      C(attempt_log) - one entry per attempt with source, verdict, reason, tokens, rolled_back).
  returned: always
  type: str
run_dir:
  description: Controller directory of the run (events.jsonl, hosts/, summary.json).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.module_utils.ralph_options import ARGUMENT_SPEC  # noqa: E402


def main():
    """Only reached when the action plugin is missing: the loop runs on the controller."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="scapforge.remediation.ralph runs as an action plugin on the controller; "
                         "its action plugin was not found")


if __name__ == "__main__":
    main()
