"""How a rule ends when the agents say it cannot be fixed, or the endpoint is broken (issue 18
items 1 and 7), on a real lab host with the scripted server and a real memory store.

Run 1: the Architect's first answer is ESCALATE or cannot_fix (needs_human), and no Worker
call follows; the Worker answers cannot_fix (chronyd needs a capability the container lacks):
the rule ends environment:<kind> with the evidence, and memory keeps no failure lesson for it.
Run 2, the same host (run 1 changed nothing) and store: the chrony rule ends from memory with
no model call. Run 3, the same host, a fresh store: an endpoint that
answers HTTP 200 with an HTML page is asked 3 times, then marked down; every rule ends
llm_error and memory learns nothing.
"""

from __future__ import annotations

import pytest
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.store import MemoryStore
from llm_server import Raw, ScriptedLLM
from test_agents import PLAN_MARK, agent, events_of, run_job, verdicts

CHRONY, FAILLOCK, RSYSLOG = "service_chronyd_or_ntpd_enabled", "accounts_passwords_pam_faillock_deny", "rsyslog_remote_loghost"
CHRONY_WHY = "chronyd: adjtimex(0x8001) failed: Operation not permitted: the container lacks CAP_SYS_TIME"
LOCKOUT = "how many failed logins lock an account is the site's policy: a person must choose it"
LOGHOST = "the site must name its remote log host; no default is right"
JUNK_RULES = ["set_password_hashing_algorithm_logindefs", "accounts_password_set_max_life_root", "accounts_password_pam_retry"]
HTML = Raw(200, "<html><body><h1>502 Bad Gateway</h1></body></html>", {"content-type": "text/html"})


def _store(path) -> dict:
    with MemoryStore(str(path)).snapshot() as tx:
        return {"lessons": tx.lessons.all(), "evidence": tx.evidence.all(), "usage": tx.usage.all()}


@pytest.fixture(scope="module")
def ends(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    host = lab.reset([lab_host.name])[0]
    store = tmp_path_factory.mktemp("memory")
    with ScriptedLLM() as llm:
        llm.script(agent("Architect", FAILLOCK, PLAN_MARK), {"verdict": "ESCALATE", "plan": LOCKOUT})
        llm.script(agent("Architect", RSYSLOG, PLAN_MARK),
                   {"cannot_fix": {"reason": "needs_human", "evidence": LOGHOST}})
        llm.script(agent("Architect", CHRONY, PLAN_MARK), {"verdict": "PLAN", "plan": "Enable and start chronyd."})
        llm.script(agent("Worker", CHRONY), {"cannot_fix": {"reason": "environment", "evidence": CHRONY_WHY},
                                             "rationale": "chronyd cannot run in this container"})
        runs = tmp_path_factory.mktemp("runs")
        declined = run_job(remediate, lab_inventory, host, runs, llm, [CHRONY, RSYSLOG, FAILLOCK],
                           scapforge_memory_path=str(store))
        requests, unused = list(llm.requests), llm.unused_scripts
    with ScriptedLLM() as llm:  # run 1 changed nothing: the same host, the same store, no script at all
        again_runs = tmp_path_factory.mktemp("runs")
        again = run_job(remediate, lab_inventory, host, again_runs, llm, [CHRONY], scapforge_memory_path=str(store))
        again_requests = list(llm.requests)
    junk_store = tmp_path_factory.mktemp("memory")
    with ScriptedLLM() as llm:
        llm.script(lambda body: True, HTML, times=None)
        junk_runs = tmp_path_factory.mktemp("runs")
        junk = run_job(remediate, lab_inventory, host, junk_runs, llm, JUNK_RULES, scapforge_memory_path=str(junk_store))
        junk_requests = list(llm.requests)
    return {"declined": declined, "runs": runs, "requests": requests, "unused": unused, "store": _store(store),
            "again": again, "again_requests": again_requests,
            "junk": junk, "junk_runs": junk_runs, "junk_requests": junk_requests, "junk_store": _store(junk_store)}


def test_a_plan_time_escalation_asks_no_worker(ends):
    rules = ends["declined"]["rules"]
    for rule, reason, said in ((FAILLOCK, "architect_escalate", LOCKOUT), (RSYSLOG, "needs_human", LOGHOST)):
        assert [b for b in ends["requests"] if agent("Worker", rule)(b)] == []
        assert (rules[rule]["outcome"], rules[rule]["reason"], rules[rule]["attempts"]) == ("escalated", reason, 0)
        assert said in rules[rule]["detail"]
    plans = [(e["rule"], e["data"]["verdict"], e["data"].get("outcome")) for e in events_of(ends["runs"])
             if e["event"] == "architect"]
    assert (FAILLOCK, "ESCALATE", "architect_escalate") in plans and (RSYSLOG, "ESCALATE", "needs_human") in plans
    assert not [p for p in plans if p[0] in (FAILLOCK, RSYSLOG) and p[1] == "PLAN"]
    assert ends["unused"] == []
    assert not [e for e in ends["store"]["evidence"] if e.get("rule") in (FAILLOCK, RSYSLOG)]  # nothing learnt


def test_a_worker_cannot_fix_ends_with_the_environment_and_teaches_no_failure(ends):
    outcome = ends["declined"]["rules"][CHRONY]
    assert (outcome["outcome"], outcome["reason"]) == ("escalated", "environment:no_sys_time")
    assert verdicts(outcome) == [("worker", "cannot_fix")]
    assert CHRONY_WHY in outcome["detail"] and outcome["attempt_log"][0]["modules"] == []
    assert len([b for b in ends["requests"] if agent("Worker", CHRONY)(b)]) == 1
    assert [b for b in ends["requests"] if agent("Reflector", CHRONY)(b)] == []
    store = ends["store"]
    named = {e["lesson"] for e in store["evidence"] if e.get("rule") == CHRONY}
    lessons = [d for d in store["lessons"] if d["id"] in named]
    assert [(d["kind"], d["status"], d["reason"]) for d in lessons] == [
        ("caution", "candidate", "environment:no_sys_time")]  # an agent's word: never a negative lesson
    assert not [d for d in store["lessons"] if d["kind"] == "negative"]


def test_the_next_run_ends_the_rule_from_the_agents_environment_verdict_with_zero_model_calls(ends):
    """Issue 19 item 1: the caution an agent's environment verdict left acts for its rule on a
    host like this one after one work item (selection.RULE_CAUTION_SUPPORT)."""
    assert ends["again_requests"] == []
    outcome = ends["again"]["rules"][CHRONY]
    assert (outcome["outcome"], outcome["reason"], outcome["attempts"]) == ("escalated", "environment:no_sys_time", 0)
    caution = [d for d in ends["store"]["lessons"] if d["kind"] == "caution"]
    assert outcome["from_memory"] == caution[0]["id"] and caution[0]["id"] in outcome["detail"]


def test_a_junk_endpoint_is_asked_three_times_then_every_rule_ends_llm_error(ends):
    assert len(ends["junk_requests"]) == 3
    rules = ends["junk"]["rules"]
    assert {r: (o["reason"], o["attempts"]) for r, o in rules.items()} == {r: ("llm_error", 0) for r in JUNK_RULES}
    assert "3 times in a row" in ends["junk"]["llm"]["down"]
    assert "marked down for the rest of this host's run" in ends["junk"]["llm"]["down"]
    assert [e["data"]["error_kind"] for e in events_of(ends["junk_runs"]) if e["event"] == "llm_down"] == ["bad_response"]
    store = ends["junk_store"]
    assert store["lessons"] == [] and store["evidence"] == []
    assert all(row.get("outcome") is None for row in store["usage"])
