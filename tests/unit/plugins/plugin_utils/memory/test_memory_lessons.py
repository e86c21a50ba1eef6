"""Lesson extraction and recording (memory/lessons.py) on a hand-made host report and attempt
records shaped as loop.RemediationLoop._report() and attempts.Attempt write them.

Seed 002: a lesson exists only with cue, action and evidence; extraction is idempotent.
Case llm-pipefail-under-dash: the pipefail lesson is recorded once, with evidence from every
rule it happened on.
"""

import copy

import pytest
from tinydb import Query, TinyDB
from tinydb.storages import MemoryStorage

from ansible_collections.scapforge.remediation.plugins.plugin_utils import task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import lessons as L
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import selection as S

P = "xccdf_org.ssgproject.content_rule_"
SKILL = "anssi-debian12"
FACTS = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.7",
         "virtualization_role": "guest", "virtualization_type": "systemd-nspawn"}
FP = L.fingerprint(FACTS, "0.1.76", SKILL)
UMASK_TASKS = [{"name": "Set UMASK", "ansible.builtin.lineinfile": {
    "path": "/etc/login.defs", "regexp": "^UMASK", "line": "UMASK 027", "backup": True}},
    {"name": "facts", "ansible.builtin.package_facts": {"manager": "auto"}}]
PIPE_VENDOR = [{"name": "Get rules groups", "ansible.builtin.shell":
                "set -o pipefail && grep -n '^OwnerMode' /etc/aide/aide.conf | head -1"}]
PIPE_WORKER = [{"name": "Count watches", "ansible.builtin.shell":
                "set -o pipefail && grep -c passwd /etc/audit/rules.d/audit.rules | head -1"}]
SSHD_TASKS = [{"ansible.builtin.lineinfile": {"path": "/etc/ssh/sshd_config", "regexp": "^ClientAliveInterval",
                                              "line": "ClientAliveInterval 300"}}]
GOOD_AUDIT = [{"ansible.builtin.lineinfile": {"path": "/etc/audit/rules.d/audit.rules", "create": True,
                                              "line": "-w /etc/passwd -p wa -k audit_rules_usergroup_modification"}}]


def rec(number, source, verdict, reason, tasks=None, error=None, gate=None, detail="", reflection=None,
        refusals=None):
    """An Attempt.__dict__-like record (the fields extract reads); refusals: its gate_refusals."""
    report = None if gate else {"ok": error is None, "changed": True, "error": error, "modules": [],
                                "task_results": []}
    return {"number": number, "source": source, "tasks": tasks or [], "gate": gate, "report": report,
            "verdict": verdict, "reason": reason, "detail": detail or (error or gate or ""),
            "reflection": reflection, "result": "pass" if verdict == "passed" else "fail",
            "gate_refusals": refusals or []}


def outcome(outcome_, reason, category, attempts=0, detail=""):
    return {"rule": "", "outcome": outcome_, "reason": reason, "attempts": attempts, "category": category,
            "detail": detail, "modules": [], "changed_tasks": [], "attempt_log": []}


def report_and_attempts(host="lab1", run_id="r1", pipefail_line="1"):
    """One host's run: 10 rules covering every extraction path."""
    err = "non-zero return code: /bin/sh: %s: set: Illegal option -o pipefail" % pipefail_line
    attempts = {
        P + "accounts_umask_etc_login_defs": [rec(1, "vendor", "passed", "verified", UMASK_TASKS)],
        P + "aide_verify_acls": [rec(1, "vendor", "failed", "fix_failed", PIPE_VENDOR, error=err)],
        P + "aide_check_audit_tools": [rec(1, "vendor", "failed", "fix_failed", PIPE_VENDOR, error=err)],
        P + "sysctl_kernel_dmesg_restrict": [rec(1, "vendor", "failed", "environment:read_only_proc_sys", [],
                                                 error="sysctl: permission denied on key 'kernel.dmesg_restrict'")],
        P + "sysctl_net_ipv4_ip_forward": [rec(1, "vendor", "failed", "environment:read_only_proc_sys", [],
                                               error="sysctl: permission denied on key 'net.ipv4.ip_forward'")],
        P + "sshd_set_idle_timeout": [rec(1, "vendor", "ineffective", "fix_ineffective", SSHD_TASKS)],
        P + "audit_rules_usergroup_modification_passwd": [
            rec(1, "vendor", "no_effect", "no_effect", GOOD_AUDIT[:0] + [{"ansible.builtin.lineinfile": {
                "path": "/etc/audit/rules.d/audit.rules", "regexp": "^-w /etc/passwd.*$", "backrefs": True,
                "line": "-w /etc/passwd -p wa -k audit_rules_usergroup_modification"}}],
                reflection={"diagnosis": "backrefs with no matching line writes nothing (pid 4242)",
                            "lesson": {"cue": "lineinfile with backrefs: true and no line matching the regexp "
                                              "(seen 2026-11-30T12:00:01Z)",
                                       "action": "drop backrefs so the line is added"}}),
            rec(2, "worker", "failed", "fix_failed", PIPE_WORKER, error=err,
                reflection={"diagnosis": "dash has no pipefail",
                            "lesson": {"cue": "Illegal option -o pipefail", "action": "use executable: /bin/bash"}}),
            rec(3, "worker", "passed", "verified", GOOD_AUDIT),
        ],
        P + "sysctl_kernel_kptr_restrict": [rec(1, "vendor", "ineffective", "reboot_required", [])],
        P + "package_telnet_removed": [
            rec(1, "worker", "refused", "fix_refused", gate="task 1 'Remove': no module named 'ansible.builtin.apt_remove' "
                "in this Ansible installation; did you mean ansible.builtin.apt?",
                refusals=[{"code": "unknown_module", "problem": "no module named 'ansible.builtin.apt_remove' in this "
                           "Ansible installation; did you mean ansible.builtin.apt?", "task": "task 1 'Remove'",
                           "subject": ["ansible.builtin.apt_remove", "ansible.builtin.apt"]}]),
            rec(2, "worker", "failed", "fix_failed", [{"ansible.builtin.shell": "systemctl mask telnet"}],
                error="Failed to mask unit: Unit file telnet.service does not exist (took 12 ms)",
                reflection={"diagnosis": "no telnet unit", "lesson": {"cue": "\x1b[31m\n\t", "action": "x"}}),
        ],
    }
    rules = {
        "accounts_umask_etc_login_defs": outcome("remediated", "verified", "accounts", 1),
        "aide_verify_acls": outcome("escalated", "fix_failed", "integrity", 1, err),
        "aide_check_audit_tools": outcome("escalated", "fix_failed", "integrity", 1, err),
        "sysctl_kernel_dmesg_restrict": outcome("escalated", "environment:read_only_proc_sys", "kernel", 1),
        "sysctl_net_ipv4_ip_forward": outcome("escalated", "environment:read_only_proc_sys", "kernel", 1),
        "kernel_config_x86_vsyscall": outcome("escalated", "environment:kernel_config", "kernel_config", 0,
                                              "no fix on a running host can pass this rule"),
        "sshd_set_idle_timeout": outcome("escalated", "fix_ineffective", "ssh", 1),
        "audit_rules_usergroup_modification_passwd": outcome("remediated", "verified", "audit", 3),
        "sysctl_kernel_kptr_restrict": outcome("deferred", "reboot_required", "kernel", 1),
        "package_telnet_removed": outcome("escalated", "attempt_budget", "services", 2),
        "sudo_remove_nopasswd": outcome("skipped", "access_impacting", "sudo", 0),
        "banner_etc_issue": outcome("escalated", "llm_unavailable", "banner", 0),
    }
    for short, entry in rules.items():
        entry["rule"] = short
    return {"host": host, "run_id": run_id, "check_mode": False, "rules": rules}, attempts


def tables():
    db = TinyDB(storage=MemoryStorage)
    return db.table("lessons"), db.table("evidence")


def by_cue(lessons_table, text):
    found = [d for d in lessons_table.all() if text in d["cue"]]
    assert len(found) == 1, [d["cue"] for d in lessons_table.all()]
    return found[0]


# ----------------------------------------------------------------------------- fingerprint, text
def test_fingerprint_names_os_major_version_virtualization_content_and_skill():
    assert FP == {"os": "debian", "os_version": "12", "virtualization": "systemd-nspawn",
                  "content_version": "0.1.76", "skill": SKILL}
    bare = L.fingerprint({"ansible_distribution": "RedHat", "ansible_distribution_version": "9.4",
                          "ansible_virtualization_role": "host", "ansible_virtualization_type": "kvm"}, "0.1.76", "stig")
    assert bare == {"os": "redhat", "os_version": "9", "virtualization": "none", "content_version": "0.1.76",
                    "skill": "stig"}
    assert L.fingerprint({}, "", "")["os"] == "unknown"


def test_clean_text_is_one_capped_line_without_controls_or_escapes():
    hostile = "a\nb\r\n\tc\x00\x07\x1b[31mRED\x1b[0m\u202eevil\u2028d" + "x" * 10000
    out = L.clean_text(hostile, 40)
    assert len(out) == 40 and out.endswith("\u2026")
    assert out.startswith("a b c RED evil d")
    assert not any(ord(ch) < 32 or 0x7f <= ord(ch) <= 0x9f for ch in out)


def test_stable_text_removes_what_differs_between_runs_and_keeps_values():
    one = L.stable_text("failed at 2026-11-30T12:00:01Z, pid 1234, line 12 of /tmp/ansible-tmp-17.2-99/x.py: UMASK 027", 200)
    two = L.stable_text("failed at 2026-12-01T08:10:59Z, pid 77, line 40 of /tmp/ansible-tmp-18.9-12/x.py: UMASK 027", 200)
    assert one == two == "failed at <time>, pid <n>, line <n> of <ansible-tmp>: UMASK 027"


def test_summary_names_changes_with_canonical_modules_and_key_arguments():
    text = L.summarise_tasks([{"lineinfile": {"path": "/etc/login.defs", "regexp": "^UMASK", "line": "UMASK 027",
                                              "backup": True}},
                              {"ansible.builtin.sysctl": {"name": "kernel.dmesg_restrict", "value": "1"}},
                              {"ansible.builtin.package_facts": {}}])
    assert text == ("ansible.builtin.lineinfile(path=/etc/login.defs, regexp=^UMASK, line=UMASK 027); "
                    "ansible.posix.sysctl(name=kernel.dmesg_restrict, value=1)")


# ----------------------------------------------------------------------------- extraction
def test_extract_makes_one_candidate_per_fact_and_nothing_for_skips_deferrals_and_no_attempts():
    report, attempts = report_and_attempts()
    cands = L.extract(report, attempts, FP, SKILL)
    kinds = sorted((c.kind, c.status, c.scope["rule"] or "") for c in cands)
    assert kinds == sorted((k, s, r or "") for k, s, r in [
        ("positive", "confirmed", "accounts_umask_etc_login_defs"),
        ("negative", "confirmed", None),  # pipefail, aide_verify_acls vendor
        ("negative", "confirmed", None),  # pipefail, aide_check_audit_tools vendor
        ("caution", "confirmed", None),   # read_only_proc_sys, dmesg_restrict
        ("caution", "confirmed", None),   # read_only_proc_sys, ip_forward
        ("caution", "confirmed", None),   # kernel_config
        ("negative", "confirmed", "sshd_set_idle_timeout"),
        ("positive", "confirmed", "audit_rules_usergroup_modification_passwd"),
        ("negative", "confirmed", "audit_rules_usergroup_modification_passwd"),  # vendor no_effect
        ("negative", "confirmed", None),  # pipefail, worker attempt 2
        ("negative", "confirmed", "audit_rules_usergroup_modification_passwd"),  # reflection 1, confirmed by attempt 3
        ("negative", "confirmed", None),  # reflection 2 folded into pipefail
        ("negative", "confirmed", None),  # gate refusal: unknown module (skill-wide)
        ("negative", "confirmed", "package_telnet_removed"),  # unrecognised task error: rule-specific
    ])
    # the reflection whose cue was only an escape sequence and whitespace is refused, not stored empty
    assert all(c.cue.strip() and c.action.strip() for c in cands)
    assert not [c for c in cands if c.scope["rule"] in ("sysctl_kernel_kptr_restrict", "sudo_remove_nopasswd",
                                                        "banner_etc_issue")]


def test_check_mode_report_teaches_nothing():
    report, attempts = report_and_attempts()
    report["check_mode"] = True
    assert L.extract(report, attempts, FP, SKILL) == []


def test_pipefail_is_one_lesson_with_evidence_from_every_rule_it_happened_on():
    lessons_t, evidence_t = tables()
    report, attempts = report_and_attempts()
    L.record(lessons_t, evidence_t, L.extract(report, attempts, FP, SKILL), now="2026-11-30T12:00:00Z")
    pipe = [d for d in lessons_t.all() if d.get("pattern") == "dash_pipefail"]
    assert len(pipe) == 1
    pipe = pipe[0]
    # skill-wide, with the family of rules its evidence came from
    assert pipe["scope"] == {"skill": SKILL, "rule": None, "category": None, "kind": "skill",
                             "ids": ["aide_check_audit_tools", "aide_verify_acls", "audit_rules_usergroup_modification_passwd"]}
    assert pipe["kind"] == "negative" and pipe["status"] == "confirmed"
    assert "executable: /bin/bash" in pipe["action"]
    # 2 vendor attempts + 1 worker attempt + the Reflector's answer after it = 4 rows
    assert pipe["support"] == 4
    rows = evidence_t.search(Query().lesson == pipe["id"])
    assert sorted(r["source_id"] for r in rows) == [
        "r1/lab1/aide_check_audit_tools/1", "r1/lab1/aide_verify_acls/1",
        "r1/lab1/audit_rules_usergroup_modification_passwd/2", "r1/lab1/audit_rules_usergroup_modification_passwd/2"]
    assert sorted(r["source_kind"] for r in rows) == ["attempt", "attempt", "attempt", "reflection"]
    assert pipe["rules"] == {
        "aide_check_audit_tools": {"reason": "fix_failed", "vendor": "fix_failed",
                                   "vendor_tasks_sha": L.tasks_sha(PIPE_VENDOR), "vendor_checks": None},
        "aide_verify_acls": {"reason": "fix_failed", "vendor": "fix_failed", "vendor_tasks_sha": L.tasks_sha(PIPE_VENDOR),
                             "vendor_checks": None},
        "audit_rules_usergroup_modification_passwd": {"reason": "fix_failed", "vendor": None, "vendor_tasks_sha": None,
                                                      "vendor_checks": None},
    }
    # the newest failure is its cause (a task error: no OVAL evidence, nothing missing); every row listed
    assert pipe["cause"] == {"rule": "audit_rules_usergroup_modification_passwd", "run": "r1", "host": "lab1",
                             "attempt": 2, "reason": "fix_failed", "checks": None, "missing": []}
    assert [(e["kind"], e["rule"], e["attempt"]) for e in pipe["evidence"]] == [
        ("attempt", "aide_check_audit_tools", 1), ("attempt", "aide_verify_acls", 1),
        ("attempt", "audit_rules_usergroup_modification_passwd", 2),
        ("reflection", "audit_rules_usergroup_modification_passwd", 2)]
    # a Reflector lesson about it is not a second pipefail lesson
    assert not [d for d in lessons_t.all() if "Illegal option" in d["cue"] and d.get("pattern") is None]


def test_recording_the_same_report_twice_adds_no_evidence_and_keeps_support():
    lessons_t, evidence_t = tables()
    report, attempts = report_and_attempts()
    first = L.record(lessons_t, evidence_t, L.extract(report, attempts, FP, SKILL), now="2026-11-30T12:00:00Z")
    assert len(first["created"]) == len(lessons_t) == 10 and first["supported"] == []
    before_l = sorted((d["id"], d["support"], d["updated"]) for d in lessons_t.all())
    before_e = len(evidence_t)
    assert before_e == 15
    again = L.record(lessons_t, evidence_t, L.extract(report, attempts, FP, SKILL), now="2026-12-01T00:00:00Z")
    assert again == {"created": [], "supported": []}
    assert len(evidence_t) == before_e
    assert sorted((d["id"], d["support"], d["updated"]) for d in lessons_t.all()) == before_l


def test_a_second_host_supports_the_same_lessons_and_line_numbers_do_not_split_them():
    lessons_t, evidence_t = tables()
    r1, a1 = report_and_attempts("lab1", "r1", pipefail_line="1")
    r2, a2 = report_and_attempts("lab2", "r1", pipefail_line="3")
    L.record(lessons_t, evidence_t, L.extract(r1, a1, FP, SKILL), now="2026-11-30T12:00:00Z")
    second = L.record(lessons_t, evidence_t, L.extract(r2, a2, FP, SKILL), now="2026-11-30T13:00:00Z")
    assert second["created"] == []
    assert len(second["supported"]) == 10 == len(lessons_t)
    assert len(evidence_t) == 2 * 15
    assert by_cue(lessons_t, "set -o pipefail")["support"] == 8
    caution = by_cue(lessons_t, "kernel parameters")
    assert caution["support"] == 4 and caution["updated"] == "2026-11-30T13:00:00Z"
    assert caution["created"] == "2026-11-30T12:00:00Z"


def test_caution_carries_the_reason_to_reuse_and_names_every_rule():
    lessons_t, evidence_t = tables()
    report, attempts = report_and_attempts()
    L.record(lessons_t, evidence_t, L.extract(report, attempts, FP, SKILL))
    caution = by_cue(lessons_t, "kernel parameters")
    assert caution["cue"] == "a fix sets kernel parameters (sysctl) on this systemd-nspawn host"
    assert caution["reason"] == "environment:read_only_proc_sys" and caution["status"] == "confirmed"
    assert sorted(caution["rules"]) == ["sysctl_kernel_dmesg_restrict", "sysctl_net_ipv4_ip_forward"]
    assert caution["scope"]["rule"] is None
    kconf = by_cue(lessons_t, "kernel_config_*")
    assert kconf["reason"] == "environment:kernel_config" and list(kconf["rules"]) == ["kernel_config_x86_vsyscall"]


@pytest.mark.parametrize("kind", ["package_manager_locked", "disk_full", "no_package_network"])
def test_a_condition_of_the_moment_is_not_learned(kind):
    # another apt holding the dpkg lock, a full /tmp, a repository outage: a caution would
    # skip the rule in the next run, after the condition cleared (fault suite, dpkg lock held)
    report = {"host": "lab1", "run_id": "r1", "check_mode": False, "rules": {
        "package_audit_installed": dict(outcome("escalated", "environment:" + kind, "audit", 1), rule="x")}}
    attempts = {P + "package_audit_installed": [rec(1, "vendor", "failed", "environment:" + kind, [],
                                                    error="E: Unable to acquire the dpkg frontend lock")]}
    assert [c.kind for c in L.extract(report, attempts, FP, SKILL)] == []


def test_positive_lesson_keeps_the_tasks_that_verified():
    lessons_t, evidence_t = tables()
    report, attempts = report_and_attempts()
    L.record(lessons_t, evidence_t, L.extract(report, attempts, FP, SKILL))
    umask = [d for d in lessons_t.all() if d["kind"] == "positive"
             and d["scope"]["rule"] == "accounts_umask_etc_login_defs"][0]
    assert umask["tasks"] == UMASK_TASKS
    assert umask["action"] == ("the content's own fix verified (OpenSCAP pass): ansible.builtin.lineinfile("
                               "path=/etc/login.defs, regexp=^UMASK, line=UMASK 027)")
    assert umask["scope"] == {"skill": SKILL, "rule": "accounts_umask_etc_login_defs", "category": "accounts",
                              "kind": "rule", "ids": ["accounts_umask_etc_login_defs"]}
    assert umask["confidence"] == 1.0 and umask["weight"] == 0.5
    assert umask["id"] == "L" + umask["dedupe_key"][:12]


def test_reflector_lesson_is_confirmed_only_by_a_later_pass_and_is_stable_text():
    lessons_t, evidence_t = tables()
    report, attempts = report_and_attempts()
    L.record(lessons_t, evidence_t, L.extract(report, attempts, FP, SKILL))
    refl = by_cue(lessons_t, "backrefs: true")
    assert refl["cue"] == "lineinfile with backrefs: true and no line matching the regexp (seen <time>)"
    assert refl["status"] == "confirmed" and refl["support"] == 2
    assert sorted(r["source_kind"] for r in evidence_t.search(Query().lesson == refl["id"])) == ["outcome", "reflection"]
    # the same reflection on a rule that was never remediated stays a candidate
    report2, attempts2 = report_and_attempts("lab2")
    report2["rules"]["audit_rules_usergroup_modification_passwd"] = outcome("escalated", "attempt_budget", "audit", 2)
    attempts2[P + "audit_rules_usergroup_modification_passwd"] = attempts2[
        P + "audit_rules_usergroup_modification_passwd"][:2]
    lessons2, evidence2 = tables()
    L.record(lessons2, evidence2, L.extract(report2, attempts2, FP, SKILL))
    cand = by_cue(lessons2, "backrefs: true")
    assert cand["status"] == "candidate" and cand["confidence"] == 0.5 and cand["support"] == 1
    # recording the confirming run later upgrades it (same dedupe key)
    L.record(lessons2, evidence2, L.extract(report, attempts, FP, SKILL))
    assert by_cue(lessons2, "backrefs: true")["status"] == "confirmed"


def test_rule_specific_and_skill_wide_failures():
    lessons_t, evidence_t = tables()
    report, attempts = report_and_attempts()
    L.record(lessons_t, evidence_t, L.extract(report, attempts, FP, SKILL))
    ineffective = by_cue(lessons_t, "sshd_set_idle_timeout")
    assert ineffective["scope"]["rule"] == "sshd_set_idle_timeout" and ineffective["scope"]["category"] == "ssh"
    assert ineffective["cue"] == "the content's own fix for rule sshd_set_idle_timeout"
    assert ineffective["reason"] == "fix_ineffective" and ineffective["tasks"] == SSHD_TASKS
    unknown_module = by_cue(lessons_t, "apt_remove")
    assert unknown_module["scope"]["rule"] is None and unknown_module["pattern"] == "unknown_module"
    assert unknown_module["action"].endswith("the module that exists: ansible.builtin.apt")
    # an error we cannot recognise stays with its rule; its text is built from fields, the message
    # is in the evidence (issue 19 item 1: never a mangled message as lesson text)
    telnet = by_cue(lessons_t, "telnet")
    assert telnet["scope"]["rule"] == "package_telnet_removed"
    assert telnet["cue"] == ("for rule package_telnet_removed the tasks ansible.builtin.shell(_raw_params=systemctl mask "
                             "telnet): a task failed: fix_failed")
    [row] = [r for r in evidence_t.all() if r["lesson"] == telnet["id"]]
    assert "Unit file telnet.service does not exist (took 12 ms)" in row["detail"]


def test_a_task_failure_is_named_by_its_module_and_target_never_by_its_message():
    tasks = [{"name": "Read", "ansible.builtin.stat": {"path": "/etc/aide/aide.conf"}},
             {"name": "Set the database", "ansible.builtin.lineinfile": {"path": "/etc/aide/aide.conf", "line": "x"}}]
    record = dict(rec(1, "vendor", "failed", "fix_failed", tasks, error="Destination /etc/aide/aide.conf does not exist !"))
    record["report"]["task_results"] = [{"name": "Read", "module": "ansible.builtin.stat", "failed": False},
                                        {"name": "Set the database", "module": "ansible.builtin.lineinfile", "failed": True}]
    assert L.failed_step(record) == "module ansible.builtin.lineinfile on /etc/aide/aide.conf"
    record["report"]["task_results"][1]["ignored"] = True
    assert L.failed_step(record) == "fix_failed"


def test_admission_rule_refuses_empty_lessons():
    ev = L.Evidence(lesson="", source_kind="outcome", source_id="r/h/x")
    with pytest.raises(L.LessonError, match="cue and an action"):
        L.Candidate(kind="negative", status="candidate", scope={"skill": SKILL}, cue=" \x1b[0m\n", action="x",
                    fingerprint=FP, evidence=[ev])
    with pytest.raises(L.LessonError, match="evidence"):
        L.Candidate(kind="negative", status="candidate", scope={"skill": SKILL}, cue="c", action="a",
                    fingerprint=FP, evidence=[])
    with pytest.raises(L.LessonError, match="kind"):
        L.Candidate(kind="tip", status="candidate", scope={}, cue="c", action="a", fingerprint=FP, evidence=[ev])
    good = L.Candidate(kind="negative", status="candidate", scope={"skill": SKILL}, cue="c", action="a",
                       fingerprint=FP, evidence=[copy.copy(ev)])
    good.evidence = []
    lessons_t, evidence_t = tables()
    with pytest.raises(L.LessonError):
        L.record(lessons_t, evidence_t, [good])
    with pytest.raises(L.LessonError):
        L.record(lessons_t, evidence_t, [{"cue": "c"}])
    assert len(lessons_t) == 0 and len(evidence_t) == 0


def test_dedupe_key_covers_kind_scope_text_and_fingerprint():
    scope = {"skill": SKILL, "rule": "r", "category": "c"}
    key = L.dedupe_key("negative", scope, "Cue  text", "Action", FP)
    assert key == L.dedupe_key("negative", dict(scope), "cue text", "action", dict(FP))
    assert key != L.dedupe_key("positive", scope, "cue text", "action", FP)
    assert key != L.dedupe_key("negative", dict(scope, rule=None), "cue text", "action", FP)
    assert key != L.dedupe_key("negative", scope, "cue text", "action", dict(FP, virtualization="kvm"))
    assert key != L.dedupe_key("negative", scope, "cue text 2", "action", FP)


def test_documents_round_trip():
    lessons_t, evidence_t = tables()
    report, attempts = report_and_attempts()
    L.record(lessons_t, evidence_t, L.extract(report, attempts, FP, SKILL))
    for doc in lessons_t.all():
        assert L.Lesson.from_doc(doc).to_doc() == dict(doc)
    for doc in evidence_t.all():
        assert L.Evidence.from_doc(doc).to_doc() == dict(doc)


@pytest.mark.parametrize("message, slug, cue", [
    # case llm-command-warn-arg, as the gate words it
    ("Unsupported parameters for (ansible.builtin.command) module: warn, foo. Supported parameters include: argv",
     "unsupported_parameters", "module ansible.builtin.command refuses the argument(s) warn, foo"),
    # case llm-invented-module
    ("no module named 'ansible.builtin.sysctl_setting' in this Ansible installation; did you mean ansible.posix.sysctl?",
     "unknown_module", "a task names module ansible.builtin.sysctl_setting, which does not exist"),
    ("non-zero return code: /bin/sh: 7: set: Illegal option -o pipefail", "dash_pipefail",
     'a shell task runs "set -o pipefail" and fails with "Illegal option -o pipefail"'),
    ("/bin/sh: 1: aide: not found", "command_not_found",
     "a shell or command task calls aide, which is not installed on this host"),
    ("Destination /etc/audit/rules.d/x.rules does not exist !", "destination_missing",
     'lineinfile/replace fails with "Destination ... does not exist"'),
    ("No package matching 'auditd-plugins' is available", "no_package",
     "installing package auditd-plugins fails: no package matching auditd-plugins is available"),
])
def test_known_task_shape_causes(message, slug, cue):
    pattern, match = L.match_pattern(message)
    assert pattern.slug == slug and pattern.texts(match)[0] == cue


def test_unrecognised_messages_match_no_pattern():
    assert L.match_pattern("Failed to mask unit: Unit file telnet.service does not exist") is None
    assert L.match_pattern("") is None


def test_every_pattern_text_formats_over_its_groups():
    # the cue and action are str.format templates over the regex's groups: a literal brace
    # in them (Jinja's {{ }} or {% %}) must be doubled, or a real run dies with a KeyError
    for pattern in L.PATTERNS:
        groups = ["g%d" % i for i in range(pattern.regex.groups)]
        cue, action = pattern.cue.format(*groups), pattern.action.format(*groups)
        assert cue and action, pattern.slug
    for pattern in L.GATE_PATTERNS:  # read from the gate's codes: formatted over the refusal's subject
        cue, action = pattern.texts_of(["g0", "g1"])
        assert cue and action, pattern.slug
    jinja = L.PATTERNS_BY_SLUG["jinja_untrusted"]
    assert jinja.texts_of(())[0] == "a model-written task contains Jinja ({{ }} or {% %})"


# ----------------------------------------------------------------------------- gate refusal codes
def _refused_by_the_gate(tasks, **gate):
    """The lessons of one Worker attempt the gate refused, recorded as attempt_runner records it
    (the message in ``gate``, the codes in ``gate_refusals``)."""
    found = task_gate.refusals(tasks, trusted=False, policy=task_gate.GatePolicy(remote_user="ansible"))
    assert found
    record = dict(rec(1, "worker", "refused", "fix_refused", tasks, gate="; ".join(r.message for r in found)),
                  gate_refusals=[r.to_dict() for r in found], **gate)
    entry = dict(outcome("escalated", "attempt_budget", "banner", 1), rule="banner_etc_issue")
    report = {"host": "lab1", "run_id": "r1", "check_mode": False, "rules": {"banner_etc_issue": entry}}
    return L.extract(report, {P + "banner_etc_issue": [record]}, FP, SKILL)


@pytest.mark.parametrize("tasks, slug, cue", [
    ([{"name": "Get", "ansible.builtin.uri": {"url": "http://x"}}], "not_allowlisted",
     "a model-written task uses module ansible.builtin.uri"),
    ([{"ansible.builtin.lineinfile": {"path": "/etc/issue", "line": "{{ banner }}"}}], "jinja_untrusted",
     "a model-written task contains Jinja ({{ }} or {% %})"),
    ([{"name": "Set", "ansible.builtin.sysctl_setting": {"name": "x"}}], "unknown_module",
     "a task names module ansible.builtin.sysctl_setting, which does not exist"),
    ([{"ansible.builtin.command": {"cmd": "true", "warn": True}}], "unsupported_parameters",
     "module ansible.builtin.command refuses the argument(s) warn"),
    ([{"name": "Stop", "ansible.builtin.shell": "systemctl stop ssh"}], None,
     "the gate refuses model-written tasks: `systemctl stop ssh` stops ssh: no new ssh login (the health check, "
     "the next run) would get in"),
])
def test_gate_refusals_teach_from_their_codes_with_the_cues_of_before(tasks, slug, cue):
    # the store is shared across runs: the cue of a refusal is the one the gate's words gave
    # before the codes (task_gate's message, its task label stripped)
    (cand,) = _refused_by_the_gate(tasks)
    assert (cand.pattern, cand.cue, cand.scope["rule"]) == (slug, cue, None)


def test_the_code_not_the_words_decides():
    (cand,) = _refused_by_the_gate([{"ansible.builtin.uri": {"url": "http://x"}}], gate="reworded by a later gate")
    assert cand.pattern == "not_allowlisted" and cand.cue == "a model-written task uses module ansible.builtin.uri"


# ----------------------------------------------------------------------------- issue 18: cannot_fix
NETLINK = "auditctl -s: Cannot open netlink audit socket"


def test_a_cannot_fix_is_no_failure_of_the_fix_and_its_environment_only_a_candidate():
    """The Worker's cannot_fix gives no negative lesson (nothing ran, nothing was refused), and
    the environment it names is a candidate caution (an agent's word), which
    ``selection.decide`` never acts on (it takes confirmed lessons only)."""
    short, code = "audit_rules_usergroup_modification_passwd", "environment:no_audit_netlink"
    detail = "the Worker says the rule cannot be fixed here (environment): " + NETLINK
    entry = dict(outcome("escalated", code, "audit", 1, detail), rule=short, declared_by="worker")
    report = {"host": "lab1", "run_id": "r1", "check_mode": False, "rules": {short: entry}}
    attempts = {P + short: [rec(1, "worker", "cannot_fix", code, [], detail=detail)]}
    found = L.extract(report, attempts, FP, SKILL)
    assert [(c.kind, c.status, c.reason) for c in found] == [("caution", "candidate", code)]
    assert NETLINK in found[0].evidence[0].detail
    # the same outcome judged from a failed task's message (no declared_by) is confirmed at once
    del entry["declared_by"]
    attempts = {P + short: [rec(1, "worker", "failed", code, [], error=NETLINK)]}
    assert [(c.kind, c.status) for c in L.extract(report, attempts, FP, SKILL)] == [("caution", "confirmed")]


def test_needs_human_and_llm_error_teach_nothing():
    for code, verdict in (("needs_human", "cannot_fix"), ("llm_error", "")):
        entry = dict(outcome("escalated", code, "logging", 1, "the Worker says ..."), rule="rsyslog_remote_loghost",
                     declared_by="worker" if verdict else None)
        report = {"host": "lab1", "run_id": "r1", "check_mode": False, "rules": {"rsyslog_remote_loghost": entry}}
        attempts = {P + "rsyslog_remote_loghost": [rec(1, "worker", verdict, code, [], detail="the Worker says ...")]}
        assert L.extract(report, attempts, FP, SKILL) == []


# ----------------------------------------------------------------------------- events (issue 19 item 1)
JUNK = "the Worker's answer is not JSON: 'utf-8' codec can't decode byte 0x89 in position 0"
EMPTY = "the Worker's answer holds neither tasks nor probes"


@pytest.mark.parametrize("record, expected", [
    (rec(1, "worker", "refused", "fix_refused", gate=JUNK), True),  # the loop refused its form: no code
    (rec(1, "worker", "refused", "fix_refused", gate=EMPTY), True),
    (rec(1, "worker", "refused", "fix_refused", gate="not a task list",
         refusals=[{"code": "bad_structure", "problem": "not a task list"}]), True),  # protocol code only
    (rec(1, "worker", "refused", "fix_refused", gate="x", refusals=[
        {"code": "bad_structure", "problem": "x"}, {"code": "unknown_module", "problem": "y"}]), False),
    (rec(1, "worker", "failed", "llm_error", error="HTTP 502"), True),
    (rec(1, "worker", "refused", "probe_budget", gate="probes past the budget"), True),
    (rec(1, "worker", "failed", "environment:package_manager_locked", error="dpkg lock"), True),  # of the moment
    (dict(rec(1, "worker", "failed", "fix_failed"), verdict=None), True),  # nothing judged
    (rec(1, "vendor", "refused", "fix_refused", gate="the content's fix uses a refused module"), False),
    (rec(1, "worker", "failed", "fix_failed", error="No package matching 'libpam-pwquality2'"), False),
    (rec(1, "worker", "failed", "environment:read_only_proc_sys", error="sysctl: permission denied"), False),
])
def test_is_event_tells_what_happened_to_the_loop_from_evidence_about_the_rule(record, expected):
    assert L.is_event(record) is expected


def test_junk_answers_an_outage_and_a_budget_stop_teach_nothing():
    rules = {"accounts_password_pam_minlen": outcome("escalated", "attempt_budget", "accounts", 3),
             "banner_etc_issue": outcome("escalated", "llm_error", "banner", 1)}
    for short, entry in rules.items():
        entry["rule"] = short
    refused = [rec(1, "worker", "refused", "fix_refused", gate=JUNK), rec(2, "worker", "refused", "fix_refused", gate=EMPTY),
               rec(3, "worker", "refused", "fix_refused", gate=EMPTY)]
    attempts = {P + "accounts_password_pam_minlen": refused,
                P + "banner_etc_issue": [rec(1, "worker", "failed", "llm_error", error="HTTP 200, a non-JSON body")]}
    report = {"host": "lab1", "run_id": "r9", "check_mode": False, "rules": rules}
    assert L.extract(report, attempts, FP, SKILL) == []


def test_an_agents_environment_verdict_is_a_caution_for_its_rule_and_no_failure_of_a_fix():
    entry = outcome("escalated", "environment:no_apparmor", "apparmor", 2,
                    "the Worker says the rule cannot be fixed here (environment): /sys/kernel/security/apparmor "
                    "does not exist")
    entry.update(rule="apparmor_configured", declared_by="worker")
    attempts = {P + "apparmor_configured": [
        rec(1, "vendor", "ineffective", "fix_ineffective", [{"ansible.builtin.apt": {"name": "apparmor"}}]),
        rec(2, "worker", "cannot_fix", "environment:no_apparmor", detail=entry["detail"])]}
    report = {"host": "lab1", "run_id": "r9", "check_mode": False, "rules": {"apparmor_configured": entry}}
    cands = L.extract(report, attempts, FP, SKILL)
    got = sorted((c.kind, c.status, c.scope["rule"], c.reason) for c in cands)
    # the content's fix was judged (ineffective): that stays a negative lesson; the Worker's word is a
    # candidate caution scoped to the rule, and no lesson says a fix failed because of it
    assert got == [("caution", "candidate", "apparmor_configured", "environment:no_apparmor"),
                   ("negative", "confirmed", "apparmor_configured", "fix_ineffective")]
    lessons_t, evidence_t = tables()
    L.record(lessons_t, evidence_t, cands, now="2026-12-03T08:00:00Z")
    decided = S.decide(lessons_t, "apparmor_configured", FP, llm=True)
    assert (decided.action, decided.reason) == ("classify", "environment:no_apparmor")  # run 2: zero model calls
    assert S.decide(lessons_t, "apparmor_configured", dict(FP, virtualization="kvm"), llm=True) is None


def test_a_rule_ended_from_memory_proves_nothing_new():
    # run 2 ended the rule with the run 1 caution and no attempt: learning it would turn the agent's
    # word (a candidate) into a confirmed observation of the environment on its own say-so
    entry = outcome("escalated", "environment:no_sys_time", "chrony", 0, "from memory: no CAP_SYS_TIME")
    entry.update(rule="chronyd_run_as_chrony_user", from_memory="L00000007")
    report = {"host": "lab1", "run_id": "r10", "check_mode": False, "rules": {"chronyd_run_as_chrony_user": entry}}
    assert L.extract(report, {}, FP, SKILL) == []
    entry.pop("from_memory")
    assert [(c.kind, c.status) for c in L.extract(report, {}, FP, SKILL)] == [("caution", "confirmed")]


def test_failing_checks_are_the_culprit_tests_as_lines_whatever_the_items_say():
    evidence = {"tests": [
        {"id": "oval:t:tst:2", "result": "false", "object": {"flag": "complete"}, "items": [{"fields": {"mtime": "1"}}]},
        {"id": "oval:t:tst:1", "result": "false", "object": {"flag": "does not exist"}, "items": []},
        {"id": "oval:t:tst:2", "result": "false", "object": {"flag": "complete"}, "items": [{"fields": {"mtime": "2"}}]}]}
    assert L.failing_checks(evidence) == ["oval:t:tst:1 false does not exist", "oval:t:tst:2 false complete"]
    assert L.failing_checks({"tests": [], "error": "no OVAL results"}) is None
    assert L.failing_checks(None) is None


@pytest.mark.parametrize("message, missing", [
    ("No package matching 'libpam-pwquality2' is available", [{"kind": "package", "name": "libpam-pwquality2"}]),
    ("Destination /etc/aide/aide.conf does not exist !", [{"kind": "file", "name": "/etc/aide/aide.conf"}]),
    ("Could not find the requested service auditd: host", [{"kind": "service", "name": "auditd"}]),
    ("/bin/sh: 1: aide: not found", [{"kind": "command", "name": "aide"}]),
    ("/bin/sh: 1: set: Illegal option -o pipefail", []),
    ("", []),
])
def test_missing_of_names_what_a_task_found_missing(message, missing):
    assert L.missing_of(message) == missing


def test_an_ineffective_fix_keeps_the_checks_it_left_failing_as_its_cause():
    lessons_t, evidence_t = tables()
    entry = outcome("escalated", "fix_ineffective", "accounts", 1)
    entry["rule"] = "accounts_password_pam_minlen"
    record = dict(rec(1, "vendor", "ineffective", "fix_ineffective", [{"ansible.builtin.lineinfile": {
        "path": "/etc/security/pwquality.conf", "line": "minlen = 14"}}]), evidence={"tests": [
            {"id": "oval:ssg-test_pam_pwquality:tst:1", "result": "false", "object": {"flag": "does not exist"}}]})
    report = {"host": "lab1", "run_id": "r4", "check_mode": False, "rules": {"accounts_password_pam_minlen": entry}}
    L.record(lessons_t, evidence_t, L.extract(report, {P + "accounts_password_pam_minlen": [record]}, FP, SKILL),
             now="2026-12-03T12:00:00Z")
    [doc] = lessons_t.all()
    checks = ["oval:ssg-test_pam_pwquality:tst:1 false does not exist"]
    assert doc["cause"] == {"rule": "accounts_password_pam_minlen", "run": "r4", "host": "lab1", "attempt": 1,
                            "reason": "fix_ineffective", "checks": checks, "missing": []}
    assert doc["rules"]["accounts_password_pam_minlen"]["vendor_checks"] == checks
    assert doc["scope"]["kind"] == "rule" and doc["evidence"] == [
        {"kind": "attempt", "run": "r4", "host": "lab1", "rule": "accounts_password_pam_minlen", "attempt": 1}]
    decided = S.decide(lessons_t, "accounts_password_pam_minlen", FP, llm=True)
    assert (decided.action, decided.checks) == ("skip_vendor", tuple(checks))
