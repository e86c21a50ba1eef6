"""The attempt state machine's deciding functions, with hand-made records (no lab, no model)."""

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A

RULE = "xccdf_org.ssgproject.content_rule_aide_verify_acls"
PIPEFAIL = {"ok": False, "changed": False, "error": "/bin/sh: 1: set: Illegal option -o pipefail",
            "failed_task": "Get rules groups", "modules": ["ansible.builtin.shell"]}


def attempt(item, source, verdict, reason, **kw):
    a = item.new_attempt(source)
    a.verdict, a.reason = verdict, reason
    for k, v in kw.items():
        setattr(a, k, v)
    return a


# ------------------------------------------------------------------------ judge
@pytest.mark.parametrize("refused, report, healthy, result, reboot, expected", [
    ("task 1: no module named 'x'", None, None, None, False, ("refused", "fix_refused")),
    (None, {"ok": True, "changed": True}, False, None, False, ("unhealthy", "unhealthy")),
    (None, {"ok": True, "changed": True}, True, "pass", False, ("passed", "verified")),
    # issue 17 item 5: a pass after a failed task is kept, but is never "verified"
    (None, {"ok": False, "error": "boom"}, True, "pass", False, ("passed", "passes_without_fix")),
    (None, {"ok": False, "error": "sysctl: permission denied on key 'kernel.dmesg_restrict'"}, True, "pass", False,
     ("passed", "passes_without_fix")),
    (None, PIPEFAIL, True, "fail", False, ("failed", "fix_failed")),
    (None, {"ok": False, "error": "sysctl: permission denied on key 'net.ipv4.x'"}, True, "fail", False,
     ("failed", "environment:read_only_proc_sys")),
    (None, {"ok": True, "changed": True}, True, "fail", True, ("ineffective", "reboot_required")),
    (None, {"ok": True, "changed": True}, True, "fail", False, ("ineffective", "fix_ineffective")),
    # case llm-backrefs-noop: lineinfile with backrefs and no match reports ok, changes nothing
    (None, {"ok": True, "changed": False}, True, "fail", False, ("no_effect", "no_effect")),
    (None, {"ok": True, "changed": True}, True, "notapplicable", False, ("failed", "verify_error")),
    (None, {"ok": True, "changed": True}, True, "scanner_crash", False, ("failed", "scanner_crash")),
    (None, {"ok": True, "changed": True}, True, None, False, ("failed", "verify_error")),
])
def test_judge(refused, report, healthy, result, reboot, expected):
    assert A.judge(refused, report, healthy, result, reboot) == expected


def test_rollback_is_due_for_failures_with_a_checkpoint_only():
    item = A.WorkItem(RULE)
    failed = attempt(item, "worker", "failed", "fix_failed", checkpoint={"covered": ["/etc/aide/aide.conf"]})
    assert A.needs_rollback(failed)
    refused = attempt(item, "worker", "refused", "fix_refused", checkpoint={"covered": []})
    assert not A.needs_rollback(refused)
    deferred = attempt(item, "vendor", "ineffective", "reboot_required", checkpoint={"covered": ["/etc/sysctl.conf"]})
    assert not A.needs_rollback(deferred)
    nothing = attempt(item, "worker", "ineffective", "fix_ineffective", checkpoint={"covered": []})
    assert not A.needs_rollback(nothing)
    healed = attempt(item, "worker", "unhealthy", "unhealthy_rolled_back", checkpoint={"covered": ["/etc/pam.d/x"]},
                     rolled_back=True)
    assert not A.needs_rollback(healed)  # undone at once when found unhealthy: never twice


# ------------------------------------------------------------------------ signatures, plateau
def test_same_failure_twice_is_a_plateau_whatever_the_numbers():
    item = A.WorkItem(RULE)
    attempt(item, "vendor", "failed", "fix_failed", report=dict(PIPEFAIL, error="/bin/sh: 1: set: Illegal option -o pipefail"))
    attempt(item, "worker", "failed", "fix_failed", report=dict(PIPEFAIL, error="/bin/sh: 3: set: Illegal option -o pipefail"))
    assert A.plateau(item)
    attempt(item, "worker", "refused", "fix_refused", gate="task 1: no module named 'ansible.builtin.aide'")
    assert not A.plateau(item)


def test_ineffective_attempts_compare_by_what_oscap_collected():
    item = A.WorkItem(RULE)
    ev = {"tests": [{"items": [{"fields": {"text": "UMASK 022"}}], "object": {"flag": "complete"}}]}
    attempt(item, "worker", "ineffective", "fix_ineffective", result="fail", evidence=ev)
    attempt(item, "worker", "ineffective", "fix_ineffective", result="fail",
            evidence={"tests": [{"items": [{"fields": {"text": "UMASK 027"}}], "object": {"flag": "complete"}}]})
    assert not A.plateau(item)  # the file changed between attempts: progress, not a plateau
    attempt(item, "worker", "ineffective", "fix_ineffective", result="fail",
            evidence={"tests": [{"items": [{"fields": {"text": "UMASK 027"}}], "object": {"flag": "complete"}}]})
    assert A.plateau(item)


# ------------------------------------------------------------------------ reviews (seed 001)
def test_review_after_every_n_failed_attempts():
    item = A.WorkItem(RULE)
    attempt(item, "vendor", "failed", "fix_failed", report=PIPEFAIL)
    attempt(item, "worker", "refused", "fix_refused", gate="bad module")
    assert not A.review_due(item, 3)
    attempt(item, "worker", "no_effect", "no_effect", result="fail")
    assert A.review_due(item, 3)
    assert A.apply_review(item, "CONTINUE", "") is None
    assert (item.reviews, item.reviewed_at) == (1, 3)
    assert not A.review_due(item, 3)


def test_pivot_replaces_the_plan_and_escalate_finishes():
    item = A.WorkItem(RULE, plan="edit /etc/aide.conf", plans=["edit /etc/aide.conf"])
    attempt(item, "worker", "failed", "fix_failed", report=PIPEFAIL)
    assert A.apply_review(item, "PIVOT", "add acl to OwnerMode in /etc/aide/aide.conf with replace") is None
    assert item.plan == "add acl to OwnerMode in /etc/aide/aide.conf with replace"
    assert item.plans == ["edit /etc/aide.conf", "add acl to OwnerMode in /etc/aide/aide.conf with replace"]
    step = A.apply_review(item, "ESCALATE", "auditd cannot start in a container")
    assert (step.kind, step.reason) == ("finish", "architect_escalate")
    assert "auditd cannot start" in step.detail


def test_second_review_repeating_a_tried_plan_is_a_meta_plateau():
    item = A.WorkItem(RULE, plan="Plan A: set ENCRYPT_METHOD", plans=["Plan A: set ENCRYPT_METHOD"])
    assert A.apply_review(item, "PIVOT", "Plan B: edit pam_unix options") is None
    # the second re-engagement goes back to plan A (only case and spacing differ)
    step = A.apply_review(item, "PIVOT", "plan a:  SET encrypt_method")
    assert (step.kind, step.reason) == ("finish", "meta_plateau")
    assert item.reviews == 2


def test_second_review_that_continues_the_same_plan_is_a_meta_plateau():
    item = A.WorkItem(RULE, plan="Plan A", plans=["Plan A"])
    assert A.apply_review(item, "CONTINUE", "") is None  # the first CONTINUE is allowed
    step = A.apply_review(item, "CONTINUE", "")
    assert step.reason == "meta_plateau"


def test_a_new_plan_on_the_second_review_goes_on():
    item = A.WorkItem(RULE, plan="Plan A", plans=["Plan A"])
    assert A.apply_review(item, "PIVOT", "Plan B: remove the drop-in file") is None
    assert A.apply_review(item, "PIVOT", "Plan C: install the package first, then configure it") is None
    assert item.reviews == 2 and item.plan.startswith("Plan C")


@pytest.mark.parametrize("one, two, same", [
    ("Set UMASK 077 in /etc/login.defs", "set umask 077 in /etc/login.defs.", True),
    ("Set UMASK 077 in /etc/login.defs", "Remove the UMASK override from /etc/profile.d/umask.sh", False),
    ("", "", True),
    ("", "x", False),
])
def test_same_plan(one, two, same):
    assert A.same_plan(one, two) is same


# ------------------------------------------------------------------------ next_step
def test_without_a_model_the_vendor_verdict_stands_and_fixless_rules_say_so():
    budget = A.Budget()
    item = A.WorkItem(RULE)
    step = A.next_step(item, budget, llm=False, now=0)
    assert (step.kind, step.reason) == ("finish", "llm_unavailable")
    attempt(item, "vendor", "ineffective", "fix_ineffective", detail="the fix ran; oscap still reports fail")
    step = A.next_step(item, budget, llm=False, now=0)
    assert (step.kind, step.reason) == ("finish", "fix_ineffective")
    assert "no LLM endpoint" in step.detail


@pytest.mark.parametrize("reason", ["environment:read_only_proc_sys", "reboot_required", "scanner_crash",
                                    "verify_error", "unhealthy", "unhealthy_rolled_back", "verified"])
def test_terminal_reasons_never_reach_the_worker(reason):
    item = A.WorkItem(RULE)
    attempt(item, "vendor", "failed", reason)
    step = A.next_step(item, A.Budget(), llm=True, now=0)
    assert (step.kind, step.reason) == ("finish", reason)


def test_the_story_plan_work_review():
    budget = A.Budget(attempts=5, review_every=3)
    item = A.WorkItem(RULE)
    attempt(item, "vendor", "failed", "fix_failed", report=PIPEFAIL)
    assert A.next_step(item, budget, llm=True, now=0).kind == "plan"
    item.plan, item.plans, item.started = "P1", ["P1"], 0.0
    assert A.next_step(item, budget, llm=True, now=1).kind == "work"
    attempt(item, "worker", "refused", "fix_refused", gate="no module")
    assert A.next_step(item, budget, llm=True, now=2).kind == "work"
    attempt(item, "worker", "failed", "fix_failed", report=PIPEFAIL)
    assert A.next_step(item, budget, llm=True, now=3).kind == "review"


@pytest.mark.parametrize("field, value, reason", [
    ("tokens", 60000, "rule_token_budget"),
    ("started", -901.0, "rule_time_budget"),
])
def test_rule_budgets(field, value, reason):
    item = A.WorkItem(RULE, plan="P", plans=["P"], started=0.0)
    setattr(item, field, value)
    step = A.next_step(item, A.Budget(), llm=True, now=0.0)
    assert (step.kind, step.reason) == ("finish", reason)


def test_attempt_budget_counts_worker_attempts_only():
    budget = A.Budget(attempts=2)
    item = A.WorkItem(RULE, plan="P", plans=["P"], started=0.0)
    attempt(item, "vendor", "failed", "fix_failed", report=PIPEFAIL)
    attempt(item, "worker", "refused", "fix_refused", gate="junk")
    assert A.next_step(item, budget, llm=True, now=0).kind == "work"
    attempt(item, "worker", "refused", "fix_refused", gate="junk", detail="answer too large")
    step = A.next_step(item, budget, llm=True, now=0)
    assert (step.kind, step.reason) == ("finish", "attempt_budget")
    assert "2 Worker attempts" in step.detail and "answer too large" in step.detail


def test_run_budget_and_a_dead_endpoint_stop_before_any_call():
    item = A.WorkItem(RULE, plan="P", plans=["P"], started=0.0)
    assert A.next_step(item, A.Budget(), llm=True, now=0, run_tokens_left=0).reason == "run_token_budget"
    assert A.next_step(item, A.Budget(), llm=True, now=0, llm_down="connection refused").reason == "llm_error"


def test_log_entry_shape():
    item = A.WorkItem(RULE)
    a = attempt(item, "worker", "failed", "fix_failed", report=PIPEFAIL, tokens=812, rolled_back=True,
                detail="x" * 400, seconds=3.14159)
    entry = a.log_entry()
    assert entry == {"attempt": 1, "source": "worker", "verdict": "failed", "reason": "fix_failed", "tokens": 812,
                     "rolled_back": True, "seconds": 3.1, "modules": ["ansible.builtin.shell"], "changed": False,
                     "detail": "x" * 300, "side_effects": [], "tasks": A.tasks_yaml(a.tasks), "diffs": []}
    assert set(A.VERDICTS) == {"refused", "failed", "no_effect", "ineffective", "unhealthy", "passed", "cannot_fix"}


def test_a_note_survives_a_long_detail():
    a = A.Attempt(number=1, source="vendor", detail="sysctl: " + "x" * 2000)
    a.add_note("not rolled back: shares files with sysctl_kernel_sysrq, applied after it in the same batch")
    assert len(a.detail) == 800
    assert a.detail.endswith("; not rolled back: shares files with sysctl_kernel_sysrq, applied after it in the same batch")
    assert a.detail.startswith("sysctl: xxx")
    b = A.Attempt(number=1, source="vendor")
    b.add_note("rolled back")
    assert b.detail == "rolled back"
