"""Memory across runs and hosts, for real: two fresh lab hosts in turn, one lesson store.

Run 1 works a fixed rule set on a fresh host and records what it proved; run 2 works the
same rules on another fresh host (the same lab host reset to baseline) with the same store.
No model in the first test: the caution and negative lessons act by themselves (issue 6,
"acting on lessons without a model"). With the scripted model in the second: a fix the
Worker wrote on host 1 is tried first on host 2 without asking any model, and a lesson
learnt from one rule reaches the Worker's prompt for another rule, fenced as data.
"""

from __future__ import annotations

import pytest
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.store import MemoryStore
from llm_server import ScriptedLLM
from test_agents import PLAN_MARK, REFLECTION, agent, own_oscap, run_job, verdicts

# The outcomes run 1 gives in a booted lab container (see the demo): /proc/sys is read-only
# (the kernel is this machine's: kptr_restrict and protected_fifos are 0 on it, so their rules
# fail and cannot be fixed from inside), the mount options cannot change, the umask fix verifies.
RULES = {
    "sysctl_kernel_kptr_restrict": "environment:read_only_proc_sys",
    "sysctl_fs_protected_fifos": "environment:read_only_proc_sys",
    "mount_option_tmp_noexec": "no_effect",
    "mount_option_nodev_nonroot_local_partitions": "no_effect",
    "accounts_umask_etc_login_defs": "verified",
}


def wasted(report: dict) -> int:
    """Attempts spent on rules that did not end remediated (issue 6's measure)."""
    return sum(o["attempts"] for o in report["rules"].values() if o["outcome"] != "remediated")


@pytest.fixture(scope="module")
def two_runs(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    assert open("/proc/sys/kernel/kptr_restrict").read().strip() == "0"  # the premise of RULES
    store = tmp_path_factory.mktemp("memory")
    host = lab.reset([lab_host.name])[0]
    first = run_job(remediate, lab_inventory, host, tmp_path_factory.mktemp("runs"), None, list(RULES),
                    scapforge_memory_path=str(store))
    after_first = own_oscap(host, list(RULES))
    host = lab.reset([lab_host.name])[0]  # another fresh host
    second = run_job(remediate, lab_inventory, host, tmp_path_factory.mktemp("runs"), None, list(RULES),
                     scapforge_memory_path=str(store))
    after_second = own_oscap(host, list(RULES))
    return {"first": first, "second": second, "after_first": after_first, "after_second": after_second,
            "store": store}


def test_run_one_ends_as_the_lab_dictates_and_learns(two_runs):
    first = two_runs["first"]
    assert {r: o["reason"] for r, o in first["rules"].items()} == RULES
    assert all(o["attempts"] == 1 and o["from_memory"] is None for o in first["rules"].values())
    assert first["memory"]["created"] >= 4 and first["memory"]["shown"] == 0
    assert (two_runs["store"] / "lessons.json").is_file() and (two_runs["store"] / "evidence.json").is_file()


def test_run_two_wastes_no_attempt_and_names_its_lessons(two_runs):
    first, second = two_runs["first"], two_runs["second"]
    assert wasted(first) == 4
    assert wasted(second) <= 0.1 * wasted(first)
    for rule, reason in RULES.items():
        outcome = second["rules"][rule]
        assert outcome["reason"] == reason, (rule, outcome)
        if reason == "verified":
            continue
        assert outcome["attempts"] == 0 and outcome["attempt_log"] == []
        assert outcome["from_memory"] and outcome["from_memory"] in outcome["lessons_shown"]
        assert outcome["from_memory"] in outcome["detail"]
    assert second["memory"]["shown"] == 4


def test_nothing_lost_and_the_store_holds_the_evidence(two_runs):
    first, second = two_runs["first"], two_runs["second"]
    assert second["rules"]["accounts_umask_etc_login_defs"]["outcome"] == "remediated"
    passing = [r for r, v in two_runs["after_first"].items() if v == "pass"]
    assert passing and all(two_runs["after_second"][r] == "pass" for r in passing)
    assert second["regressions"] == [] and first["regressions"] == []
    with MemoryStore(str(two_runs["store"])).snapshot() as tx:
        by_id = {doc["id"]: doc for doc in tx.lessons.all()}
        evidence = tx.evidence.all()
    decided = {o["from_memory"] for o in second["rules"].values() if o["from_memory"]}
    for lesson in decided:
        assert by_id[lesson]["status"] == "confirmed"
        assert [e for e in evidence if e["lesson"] == lesson], lesson
    caution = by_id[second["rules"]["sysctl_kernel_kptr_restrict"]["from_memory"]]
    assert caution["kind"] == "caution" and caution["reason"] == "environment:read_only_proc_sys"


# ============================================================================ with a model
PIPEFAIL_TASKS = {"tasks": [{"name": "Read ENCRYPT_METHOD", "ansible.builtin.shell":
                             "set -o pipefail && grep '^ENCRYPT_METHOD' /etc/login.defs | head -1"}]}
YESCRYPT_TASKS = {"tasks": [{"name": "Hash passwords with yescrypt", "ansible.builtin.lineinfile": {
    "path": "/etc/login.defs", "regexp": "^\\s*ENCRYPT_METHOD\\s", "line": "ENCRYPT_METHOD YESCRYPT"}}]}


#: a second Worker fix (the relay's, 2026-12-02: libpam-pwquality's pam-auth-update adds
#: pam_pwquality.so retry=3) and an environment escalation (chronyd needs CAP_SYS_TIME)
PAM_RETRY, CHRONY = "accounts_password_pam_retry", "service_chronyd_or_ntpd_enabled"
PWQUALITY_TASKS = {"tasks": [{"name": "Install libpam-pwquality", "ansible.builtin.apt": {
    "name": "libpam-pwquality", "state": "present"}}]}
CHRONY_WHY = "chronyd: adjtimex(0x8001) failed: Operation not permitted: the container lacks CAP_SYS_TIME"


@pytest.fixture(scope="module")
def fleet(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    """Host 1 with the model: the Worker fails once with pipefail under dash, then fixes
    set_password_hashing_algorithm_logindefs; it fixes accounts_password_pam_retry; it says
    chronyd cannot run here (environment). Host 2 (fresh), same store: the two fixes are
    replayed and chrony ends the same way, with no model call for any of the three; another
    rule's Worker prompt carries the pipefail lesson."""
    store = tmp_path_factory.mktemp("memory")
    host = lab.reset([lab_host.name])[0]
    rule = "set_password_hashing_algorithm_logindefs"
    with ScriptedLLM() as llm:
        llm.script(lambda b: b["messages"][0]["content"].startswith("You are the Reflector"), REFLECTION, times=None)
        llm.script(agent("Architect", rule, PLAN_MARK), {"verdict": "PLAN", "plan": "Set ENCRYPT_METHOD."})
        llm.script(agent("Worker", rule), PIPEFAIL_TASKS)
        llm.script(agent("Worker", rule), YESCRYPT_TASKS)
        llm.script(agent("Architect", PAM_RETRY, PLAN_MARK), {"verdict": "PLAN", "plan": "Install libpam-pwquality."})
        llm.script(agent("Worker", PAM_RETRY), PWQUALITY_TASKS)
        llm.script(agent("Architect", CHRONY, PLAN_MARK), {"verdict": "PLAN", "plan": "Enable and start chronyd."})
        llm.script(agent("Worker", CHRONY), {"cannot_fix": {"reason": "environment", "evidence": CHRONY_WHY},
                                             "rationale": "chronyd cannot run in this container"})
        first = run_job(remediate, lab_inventory, host, tmp_path_factory.mktemp("runs"), llm, [rule, PAM_RETRY, CHRONY],
                        scapforge_memory_path=str(store))
    host = lab.reset([lab_host.name])[0]
    other = "accounts_password_set_max_life_root"
    with ScriptedLLM() as llm:
        llm.script(lambda b: b["messages"][0]["content"].startswith("You are the Reflector"), REFLECTION, times=None)
        llm.script(agent("Architect", other, PLAN_MARK), {"verdict": "PLAN", "plan": "Age root's password."})
        llm.script(agent("Worker", other), {"tasks": [{"ansible.builtin.command": {"argv": ["chage", "-M", "365", "root"]}}]})
        second = run_job(remediate, lab_inventory, host, tmp_path_factory.mktemp("runs"), llm,
                         [rule, PAM_RETRY, CHRONY, other], scapforge_memory_path=str(store))
        requests = list(llm.requests)
    after = own_oscap(host, [rule, PAM_RETRY, CHRONY, other])
    with MemoryStore(str(store)).snapshot() as tx:
        lessons, usage = [dict(d) for d in tx.lessons.all()], [dict(u) for u in tx.usage.all()]
    return {"first": first, "second": second, "requests": requests, "after": after, "rule": rule, "other": other,
            "lessons": lessons, "usage": usage}


def test_a_fix_proven_on_one_host_is_tried_first_on_the_next_without_a_model(fleet):
    rule = fleet["rule"]
    assert verdicts(fleet["first"]["rules"][rule]) == [("worker", "failed"), ("worker", "passed")]
    outcome = fleet["second"]["rules"][rule]
    assert (outcome["outcome"], outcome["reason"]) == ("remediated", "verified")
    assert verdicts(outcome) == [("worker", "passed")] and outcome["attempt_log"][0]["tokens"] == 0
    assert "verified on a host like this one" in outcome["attempt_log"][0]["detail"]
    assert outcome["lessons_shown"]
    asked = [b for b in fleet["requests"] if ("Rule: %s (" % rule) in b["messages"][1]["content"]]
    assert asked == []  # the model was never asked about it
    assert fleet["after"][rule] == "pass"


def test_a_lesson_from_one_rule_reaches_the_worker_on_another(fleet):
    other = fleet["other"]
    worker = [b["messages"][1]["content"] for b in fleet["requests"] if agent("Worker", other)(b)]
    assert worker
    block = worker[0][worker[0].index('<data source="memory" name="lessons">'):].split("</data>")[0]
    assert "pipefail" in block and "Prior outcomes" in block
    outcome = fleet["second"]["rules"][other]
    assert outcome["lessons_shown"] and fleet["second"]["memory"]["shown"] >= 1


def test_two_proven_fixes_and_an_environment_verdict_cost_no_model_call_on_a_fresh_host(fleet):
    first, second = fleet["first"]["rules"], fleet["second"]["rules"]
    ends = {r: (first[r]["outcome"], first[r]["reason"]) for r in (fleet["rule"], PAM_RETRY, CHRONY)}
    assert ends == {fleet["rule"]: ("remediated", "verified"), PAM_RETRY: ("remediated", "verified"),
                    CHRONY: ("escalated", "environment:no_sys_time")}
    for rule, end in ends.items():
        assert (second[rule]["outcome"], second[rule]["reason"]) == end, (rule, second[rule])
        assert [b for b in fleet["requests"] if ("Rule: %s (" % rule) in b["messages"][1]["content"]] == [], rule
    assert second[CHRONY]["attempts"] == 0 and second[CHRONY]["from_memory"]
    assert verdicts(second[PAM_RETRY]) == [("worker", "passed")]
    assert fleet["after"][fleet["rule"]] == fleet["after"][PAM_RETRY] == "pass"  # an independent scan
    assert fleet["after"][CHRONY] == "fail"


def test_a_verified_lesson_shown_for_an_unrelated_rule_keeps_its_weight_after_the_dream_pass(fleet):
    """Issue 19 item 2's case (package_audit_installed's fix retired for being shown in audit
    prompts): a proven fix shown in another rule's Worker prompt is judged only by its own rule."""
    positives = {d["id"]: d for d in fleet["lessons"] if d["kind"] == "positive" and d["scope"].get("rule")}
    elsewhere = {u["lesson"] for u in fleet["usage"] if u["lesson"] in positives and u["mode"] == "inject"
                 and u["rule"] != positives[u["lesson"]]["scope"]["rule"]}
    assert elsewhere, "premise: a proven fix was shown in another rule's prompt"
    for lesson in elsewhere:
        doc = positives[lesson]
        own = [u for u in fleet["usage"] if u["lesson"] == lesson and u["rule"] == doc["scope"]["rule"]]
        # run 1 created it at 0.5; each replay of its own rule that passed added 0.1; being shown
        # elsewhere added nothing and took nothing away
        passed = {(u["run_id"], u["rule"]) for u in own if u["outcome"] == "remediated"}
        assert doc["weight"] == round(0.5 + 0.1 * len(passed), 4), (doc["weight"], own)
        assert doc["status"] == "confirmed"
