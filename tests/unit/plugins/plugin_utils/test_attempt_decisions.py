"""The attempt state machine (plugins/plugin_utils/attempts.py) pinned value by value: the
records' defaults, what an attempt says about itself (detail, notes, log entry, failure
signature), judging and the reboot's verdict, rollback, plateau and review cadence, the
Architect's review and the next step. tests/unit/plugins/plugin_utils/test_attempts.py tells the stories; these
tests fix the edges ``make mutation`` found unguarded."""

import dataclasses

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes

RULE = "xccdf_org.ssgproject.content_rule_sshd_set_idle_timeout"


def failed(item, verdict=A.FAILED, reason="fix_failed", **fields):
    a = item.new_attempt(A.WORKER if item.attempts else A.VENDOR)
    a.verdict, a.reason = verdict, reason
    for key, value in fields.items():
        setattr(a, key, value)
    return a


# ---------------------------------------------------------------- records

def test_the_report_words_and_budget_defaults():
    assert (A.VENDOR, A.WORKER) == ("vendor", "worker")
    assert A.Budget() == A.Budget(attempts=5, probes=6, seconds=900.0, tokens=60000, review_every=3)
    assert A.TASKS_LIMIT == 20000 and A.SAME_PLAN_RATIO == 0.9


def test_a_fresh_attempt_and_work_item_hold_nothing():
    assert dataclasses.asdict(A.Attempt(1, A.VENDOR)) == {
        "number": 1, "source": "vendor", "tasks": [], "rationale": "", "gate": None, "report": None,
        "checkpoint": None, "restore": None, "health": None, "result": None, "evidence": None, "reflection": None,
        "probes": [], "probe_results": [], "tokens": 0, "seconds": 0.0, "plan": "", "verdict": "", "reason": "", "rolled_back": None,
        "detail": "", "origin": "", "side_effects": [], "gate_refusals": [], "warnings": []}
    item = A.WorkItem(RULE)
    assert dataclasses.asdict(item) == {
        "rule": RULE, "category": "", "attempts": [], "plan": None, "plans": [], "reviews": 0, "reviewed_at": 0,
        "probes": 0, "tokens": 0, "started": None, "banned": [], "preferred": [], "evidence": None,
        "lessons_shown": [], "declared_by": None}
    assert item.short_id == "sshd_set_idle_timeout" and item.last is None and item.worker_attempts == 0
    assert A.Step("plan") == A.Step("plan", "", "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        A.Step("work").kind = "finish"


def test_new_attempts_are_numbered_and_carry_the_plan():
    item = A.WorkItem(RULE)
    assert item.new_attempt(A.VENDOR).plan == ""
    item.plan = "set ClientAliveInterval in sshd_config.d"
    second = item.new_attempt(A.WORKER)
    assert (second.number, second.source, second.plan) == (2, "worker", "set ClientAliveInterval in sshd_config.d")
    assert item.last is second and item.worker_attempts == 1


def test_changed_and_modules_come_from_the_report():
    assert A.Attempt(1, A.VENDOR).changed is False and A.Attempt(1, A.VENDOR).modules == []
    a = A.Attempt(1, A.VENDOR, report={"changed": True, "modules": ["ansible.builtin.lineinfile"]})
    assert a.changed is True and a.modules == ["ansible.builtin.lineinfile"]
    assert A.Attempt(1, A.VENDOR, report={"changed": False}).changed is False


# ---------------------------------------------------------------- tasks as YAML

def test_tasks_yaml_is_block_yaml_in_the_keys_order():
    tasks = [{"name": "Set the timeout é", "ansible.builtin.lineinfile": {"path": "/etc/ssh/sshd_config",
                                                                          "line": "ClientAliveInterval 300"}}]
    assert A.tasks_yaml(tasks) == ("- name: Set the timeout é\n"
                                   "  ansible.builtin.lineinfile:\n"
                                   "    path: /etc/ssh/sshd_config\n"
                                   "    line: ClientAliveInterval 300\n")
    assert A.tasks_yaml([]) == "" and A.tasks_yaml(None) == ""


def test_tasks_yaml_wraps_at_110_columns_and_dumps_tagged_strings_plain():
    class Tagged(str):
        pass

    assert A.tasks_yaml([{"name": Tagged("w" * 98 + " tail end")}]) == "- name: %s tail\n    end\n" % ("w" * 98)


def test_tasks_yaml_is_cut_past_the_limit():
    exact = [{"name": "x" * (A.TASKS_LIMIT - 9)}]          # "- name: " + name + "\n"
    assert len(A.tasks_yaml(exact)) == A.TASKS_LIMIT and A.tasks_yaml(exact).endswith("x\n")
    over = A.tasks_yaml([{"name": "x" * (A.TASKS_LIMIT - 8)}])
    assert over == "- name: " + "x" * (A.TASKS_LIMIT - 8) + "\n# [cut at 20000 characters]\n"


# ---------------------------------------------------------------- detail and notes

def test_say_replaces_the_detail_after_the_origin():
    a = A.Attempt(1, A.WORKER, detail="old")
    a.say("")
    assert a.detail == ""
    a.say("y" * 900)
    assert a.detail == "y" * 800
    b = A.Attempt(1, A.WORKER, detail="old", origin="from lesson L-3")
    b.say("")
    assert b.detail == "from lesson L-3"
    b.say("ran 2 tasks")
    assert b.detail == "from lesson L-3; ran 2 tasks"


def test_add_note_edges():
    a = A.Attempt(1, A.WORKER, detail="d" * 10)
    a.add_note("n" * 8, limit=20)                     # room exactly 10: kept whole
    assert a.detail == "d" * 10 + "; " + "n" * 8
    b = A.Attempt(1, A.WORKER, detail="d" * 11)
    b.add_note("n" * 8, limit=20)                     # one over: cut with " ..."
    assert b.detail == "dddddd ...; nnnnnnnn"[:20]
    c = A.Attempt(1, A.WORKER, detail="a")
    c.add_note("n" * 9, limit=10)                     # no room at all
    assert c.detail == " ...; nnnn"
    d = A.Attempt(1, A.WORKER, detail="abcdef")
    d.add_note("n" * 8, limit=12)                     # room 2: nothing of the detail fits
    assert d.detail == " ...; nnnnnn"
    e = A.Attempt(1, A.WORKER)
    e.add_note("first")
    assert e.detail == "first"


def test_log_entry_keeps_the_diffs():
    diffs = [{"task": "edit", "module": "ansible.builtin.lineinfile", "diff": "-a\n+b\n"}]
    a = A.Attempt(1, A.VENDOR, report={"diffs": diffs, "changed": True})
    assert a.log_entry()["diffs"] == diffs and a.log_entry()["changed"] is True
    assert A.Attempt(1, A.VENDOR).log_entry()["diffs"] == []


# ---------------------------------------------------------------- failure signatures

def test_normalise_blanks_what_differs_between_runs():
    text = 'Error  "x y" at 0x1F, \'z\' line 12 pid deadbeef00\n  tail'
    assert A.normalise(text) == "error '_' at #, '_' line # pid # tail"
    assert A.normalise("") == "" and A.normalise(None) == ""


def test_signature_of_an_attempt_that_ran_is_what_oscap_saw():
    evidence = {"tests": [{"items": [{"fields": {"b": "2", "a": "1  1"}}]},
                          {"items": [], "object": {"flag": "does not exist"}},
                          {"items": [], "object": {"flag": "complete"}},
                          {"object": {}}]}
    a = A.Attempt(1, A.WORKER, verdict=A.INEFFECTIVE, result="fail", evidence=evidence)
    assert A._evidence_digest(evidence) == "('a', '1  1') ('b', '2') object:does not exist"
    assert a.signature() == "ineffective|fail ('a', '1 1') ('b', '2') object:does not exist"
    assert A.Attempt(1, A.WORKER, verdict=A.NO_EFFECT, result="fail").signature() == "no_effect|fail"
    assert A._evidence_digest(None) == "" and A._evidence_digest({}) == ""
    long = {"tests": [{"items": [{"fields": {"k%03d" % i: "v" for i in range(40)}}]}]}
    assert len(A._evidence_digest(long)) == 300
    sig = A.Attempt(1, A.WORKER, verdict=A.INEFFECTIVE, result="fail", evidence=long).signature()
    assert len(sig) == len("ineffective|") + 300 and sig.startswith("ineffective|fail ('k000', 'v')")


def test_signature_of_an_attempt_that_failed_is_its_message():
    assert A.Attempt(1, A.WORKER, verdict=A.FAILED).signature() == "failed|"
    assert A.Attempt(1, A.WORKER, verdict=A.REFUSED, gate="module 'x' at line 3").signature() == \
        "refused|module '_' at line #"
    ran = A.Attempt(1, A.WORKER, verdict=A.FAILED, gate=None, report={"error": "rc=2 in task 7"})
    assert ran.signature() == "failed|rc=# in task #"
    assert A.Attempt(1, A.WORKER, verdict=A.FAILED, gate="gate says no", report={"error": "e"}).signature() == \
        "failed|gate says no"
    long = A.Attempt(1, A.WORKER, verdict=A.FAILED, gate="w" * 500).signature()
    assert long == "failed|" + "w" * 200


# ---------------------------------------------------------------- judging

def test_judge_defaults_no_reboot_and_a_report_without_ok_ran_fine():
    assert A.judge(None, {"ok": True, "changed": True}, None, "fail") == (A.INEFFECTIVE, "fix_ineffective")
    assert A.judge(None, {}, None, "fail") == (A.NO_EFFECT, "no_effect")
    assert A.judge(None, None, None, "fail") == (A.NO_EFFECT, "no_effect")
    assert A.judge(None, {"ok": False}, None, "fail") == (A.FAILED, "fix_failed")


def test_judge_a_failed_verification_scan():
    assert A.judge(None, {"ok": True, "changed": True}, True, "scan_failed") == (A.FAILED, "verify_error")
    assert A.judge(None, {"ok": True, "changed": True}, True, "scanner_crash") == (A.FAILED, "scanner_crash")
    assert A.judge(None, {"ok": True}, None, "error") == (A.FAILED, "verify_error")


@pytest.mark.parametrize("result, reason", [
    ("pass", "verified_after_reboot"), ("fail", "fix_ineffective_after_reboot"), ("scanner_crash", "scanner_crash"),
    ("scan_failed", "verify_error"), ("missing", "verify_error"), ("notapplicable", "verify_error"),
    (None, "verify_error"),
])
def test_after_reboot_reason(result, reason):
    assert A.after_reboot_reason(result) == reason


# ---------------------------------------------------------------- rollback, plateau, review

@pytest.mark.parametrize("fields, due", [
    (dict(verdict=A.PASSED, reason="verified"), False),
    (dict(verdict=A.REFUSED, reason="fix_refused"), False),
    (dict(verdict=A.INEFFECTIVE, reason="reboot_required"), False),
    (dict(verdict=A.UNHEALTHY, reason="unhealthy", rolled_back=True), False),
    (dict(verdict=A.FAILED, reason="fix_failed", rolled_back=False), False),
    (dict(verdict=A.FAILED, reason="fix_failed"), True),
    (dict(verdict=A.NO_EFFECT, reason="no_effect"), True),
])
def test_needs_rollback(fields, due):
    a = A.Attempt(1, A.WORKER, checkpoint={"covered": ["/etc/a"]}, **fields)
    assert A.needs_rollback(a) is due
    assert A.needs_rollback(dataclasses.replace(a, checkpoint={"covered": []})) is False
    assert A.needs_rollback(dataclasses.replace(a, checkpoint=None)) is False


def test_plateau_needs_two_failures_alike():
    item = A.WorkItem(RULE)
    assert A.plateau(item) is False
    failed(item, gate=None, report={"error": "line 3: boom"})
    assert A.plateau(item) is False
    failed(item, verdict=A.PASSED, reason="verified")
    assert A.plateau(item) is False
    item = A.WorkItem(RULE)
    failed(item, verdict=A.PASSED, reason="verified", report={"error": "x"})
    failed(item, verdict=A.PASSED, reason="verified", report={"error": "x"})
    assert A.plateau(item) is False                       # two passes are no plateau
    failed(item, report={"error": "x"})
    failed(item, report={"error": "x"})
    assert A.plateau(item) is True


def test_review_cadence_edges():
    item = A.WorkItem(RULE)
    failed(item, report={"error": "one"})
    assert A.review_due(item, 1) is True
    assert A.review_due(item, 0) is False and A.review_due(item, 2) is False
    failed(item, report={"error": "one"})                 # a plateau, both after the last review
    assert A.review_due(item, 0) is True and A.review_due(item, 5) is True
    item.reviewed_at = 1                                  # one of the two came before the review
    assert A.review_due(item, 0) is False


def test_same_plan_at_exactly_the_ratio():
    assert A.same_plan("klmnopqrst", "klmnopqrsz") is True          # ratio 18/20 = 0.9
    assert A.same_plan("klmnopqrst", "klmnopqrzz") is False         # 0.8
    assert A.same_plan("", "") is True and A.same_plan("", "plan") is False and A.same_plan("plan", "") is False


# ---------------------------------------------------------------- the Architect's review

def test_escalate_detail():
    item = A.WorkItem(RULE)
    assert A.apply_review(item, "ESCALATE", None) == A.Step("finish", "architect_escalate", "the Architect escalated: ")
    step = A.apply_review(item, "ESCALATE", "p" * 400)
    assert step.detail == "the Architect escalated: " + "p" * 300
    assert (item.reviews, item.reviewed_at) == (2, 0)


def test_continue_keeps_the_plan_whatever_text_comes_with_it():
    item = A.WorkItem(RULE)
    assert A.apply_review(item, "CONTINUE", "ignored text") is None
    assert (item.plan, item.plans) == ("", [""])
    item = A.WorkItem(RULE, plan="use a drop-in", plans=["use a drop-in"])
    assert A.apply_review(item, "CONTINUE", "rewrite sshd_config wholesale") is None
    assert (item.plan, item.plans) == ("use a drop-in", ["use a drop-in"])
    item = A.WorkItem(RULE, plan="use a drop-in", plans=["use a drop-in"])
    assert A.apply_review(item, "PIVOT", "") is None                # a PIVOT without a plan keeps it
    assert (item.plan, item.plans) == ("use a drop-in", ["use a drop-in"])


def test_meta_plateau_detail():
    item = A.WorkItem(RULE, plan="q" * 300, plans=["q" * 300], reviews=1)
    step = A.apply_review(item, "CONTINUE", "")
    assert step == A.Step("finish", "meta_plateau", "review 2 repeated a plan already tried (CONTINUE): " + "q" * 200)


# ---------------------------------------------------------------- next step

def test_next_step_details_without_a_model():
    item = A.WorkItem(RULE)
    assert A.next_step(item, A.Budget(), False, 0.0) == A.Step(
        "finish", "llm_unavailable", "the content has no Ansible fix for this rule and no LLM endpoint is configured")
    failed(item, detail="task failed")
    assert A.next_step(item, A.Budget(), False, 0.0) == A.Step(
        "finish", "fix_failed", "task failed (no LLM endpoint: no Worker attempt)")
    assert A.next_step(item, A.Budget(), True, 0.0, llm_down="HTTP 503") == A.Step("finish", "llm_error", "HTTP 503")


def test_next_step_budget_edges():
    item = A.WorkItem(RULE, plan="p", plans=["p"], started=100.0, tokens=10)
    budget = A.Budget(attempts=2, tokens=11, seconds=50.0, review_every=0)
    assert A.next_step(item, budget, True, 149.0, run_tokens_left=1) == A.Step("work")
    assert A.next_step(item, budget, True, 149.0, run_tokens_left=0) == A.Step(
        "finish", "run_token_budget", "the run's token budget is spent")
    item.tokens = 11
    assert A.next_step(item, budget, True, 149.0) == A.Step(
        "finish", "rule_token_budget", "11 tokens spent on this rule (budget 11)")
    item.tokens = 0
    assert A.next_step(item, budget, True, 150.0) == A.Step(
        "finish", "rule_time_budget", "50 s spent on this rule (budget 50 s)")
    failed(item, verdict=A.NO_EFFECT, reason="no_effect", detail="changed nothing")
    failed(item, verdict=A.NO_EFFECT, reason="no_effect", detail="changed nothing again")
    assert item.worker_attempts == 1
    assert A.next_step(item, budget, True, 120.0) == A.Step("review")   # the two failed alike
    failed(item, verdict=A.NO_EFFECT, reason="no_effect", detail="third")
    assert A.next_step(item, budget, True, 120.0) == A.Step(
        "finish", "attempt_budget", "2 Worker attempts made (budget 2); last: no_effect: third")


def test_needs_rollback_when_the_fix_changed_what_no_file_checkpoint_saved():
    """Issue 17: aide_periodic_cron_checking's fix (a package and a crontab entry) saved no
    file, changed the host and was judged ineffective: it must be rolled back all the same."""
    a = A.Attempt(1, A.VENDOR, verdict=A.INEFFECTIVE, reason="fix_ineffective", checkpoint={"covered": []},
                  report={"changed": True, "changes": [{"kind": "cron", "target": "root: aide", "change": "set"}]})
    assert A.needs_rollback(a) is True
    # a failed read-only grep pipeline says changed and changed nothing: no rollback to claim
    assert A.needs_rollback(dataclasses.replace(a, report={"changed": True, "changes": []})) is False
    saved = A.Attempt(1, A.VENDOR, verdict=A.FAILED, reason="fix_failed",
                      checkpoint={"covered": [], "state": {"packages": True, "services": []}})
    assert A.needs_rollback(saved) is True
    assert A.needs_rollback(dataclasses.replace(a, verdict=A.PASSED, reason="verified")) is False


# ============================================================================ issue 18: cannot_fix reasons
@pytest.mark.parametrize("reason, evidence, code", [
    ("environment", "auditctl -s: Cannot open netlink audit socket", "environment:no_audit_netlink"),
    ("environment", "chronyd: adjtimex(0x8001) failed: Operation not permitted (no CAP_SYS_TIME)", "environment:no_sys_time"),
    ("environment", "sysctl: permission denied on key \"kernel.dmesg_restrict\"", "environment:read_only_proc_sys"),
    ("environment", "it is environment:no_kernel_modules here; the Read-only file system too", "environment:no_kernel_modules"),
    ("environment", "the container cannot do this", "environment:unspecified"),
    ("content", "the OVAL check reads /etc/sysconfig, which Debian has not", "needs_human"),
    ("needs_human", "the site must choose its remote log host", "needs_human"),
])
def test_a_cannot_fix_answer_maps_to_one_reason_code(reason, evidence, code):
    assert A.cannot_fix_reason(reason, evidence) == code
    assert outcomes.outcome_for(code) == "escalated"
    step = A.declined("Worker", reason, evidence)
    assert (step.kind, step.reason, step.detail) == ("finish", code, "the Worker says the rule cannot be fixed here "
                                                                     "(%s): %s" % (reason, evidence))


def test_the_environment_an_agent_names():
    assert A.environment_named("Environment:NO_AUDIT_netlink") == "no_audit_netlink"  # explicit, case folded
    assert A.environment_named("environment: a container") is None  # no slug, no known message
    assert A.environment_named("Missing privilege separation directory: /run/sshd") == "sshd_privsep_dir_missing"
    assert A.environment_named(None) is None and A.environment_named("") is None


def test_an_escalation_names_the_environment_only_when_its_texts_do():
    assert A.escalation_reason(["a human must look"]) == "architect_escalate"
    assert A.escalation_reason(["a human must look", "the tasks wrote /proc/sys, read-only here"]) == \
        "environment:read_only_proc_sys"
    assert A.escalation_reason(["environment:no_sys_time", "environment:no_audit_netlink"]) == "environment:no_sys_time"
    assert A.plan_escalation("no chronyd in a container") == A.Step(
        "finish", "architect_escalate", "the Architect escalated before any Worker attempt: no chronyd in a container")
    item = A.WorkItem(RULE)
    failed(item, verdict=A.FAILED, reason="fix_failed", detail="auditd did not start")
    item.attempts[-1].reflection = {"diagnosis": "environment:no_audit_netlink, not the tasks"}
    assert A.apply_review(item, "ESCALATE", "stuck").reason == "environment:no_audit_netlink"


def test_a_cannot_fix_attempt_ends_its_rule():
    for code in ("environment:no_audit_netlink", "needs_human"):
        item = A.WorkItem(RULE, plan="P", plans=["P"])
        failed(item, verdict=A.CANNOT_FIX, reason=code, detail="the Worker says ...")
        assert A.next_step(item, A.Budget(), llm=True, now=0) == A.Step("finish", code, "the Worker says ...")


def test_a_plan_time_escalation_takes_the_environment_its_plan_names():
    """Issue 18 item 1 (a mutant survived here): the plan text of an ESCALATE at plan time
    decides the reason; the detail keeps 600 characters of it."""
    named = A.plan_escalation("cannot run here: environment:read_only_proc_sys, sysctl -w is refused")
    assert (named.kind, named.reason) == ("finish", "environment:read_only_proc_sys")
    assert named.detail == ("the Architect escalated before any Worker attempt: cannot run here: "
                            "environment:read_only_proc_sys, sysctl -w is refused")
    plain = A.plan_escalation("x" * 700)
    assert plain.reason == "architect_escalate"
    assert plain.detail == "the Architect escalated before any Worker attempt: " + "x" * 600
