"""The Worker phase's story driven by fakes: a fake loop (host) and fake agents (model).

The real thing runs in tests/integration/test_agents.py on a lab host with a scripted
OpenAI-compatible server; here the order of steps and the decisions are checked alone.
"""

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import answers, skills
from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils.agent_loop import WorkerPhase
from ansible_collections.scapforge.remediation.plugins.plugin_utils.agents import Reply
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog, read_events
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import ParentWatch
from ansible_collections.scapforge.remediation.plugins.plugin_utils.llm import LLMError

PROFILE = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
RULE = "xccdf_org.ssgproject.content_rule_aide_verify_acls"
INVENTED = [{"ansible.builtin.aide_rule": {"name": "OwnerMode", "add": "acl"}}]
PIPEFAIL = [{"ansible.builtin.shell": "set -o pipefail && grep OwnerMode /etc/aide/aide.conf | head -1"}]
GOOD = [{"ansible.builtin.replace": {"path": "/etc/aide/aide.conf", "regexp": "^(OwnerMode\\s*=\\s*)(.*)$",
                                     "replace": "\\1\\2+acl"}}]


def _phase(loop, agents, budget):
    """The FakeLoop plays the run's context (with its runner) and state at once."""
    loop.agents, loop.token_ledger = agents, None
    return WorkerPhase(loop, loop, budget)


class FakeProfile:
    id = PROFILE


class FakeLoop:
    """What WorkerPhase uses of RemediationLoop and its AttemptRunner (the same object here),
    with the host replaced by rules of thumb: an invented module is refused, a pipefail shell
    fails, a replace on aide.conf passes."""

    def __init__(self, catalog, tmp_path, results=("fail",)):
        self.catalog = catalog
        self.profile = FakeProfile()
        self.events = EventLog(str(tmp_path / "events.jsonl"), "fake")
        self.stopped = None
        self.finished = {}
        self.results = list(results)
        self.rollbacks = []
        self.runner = self
        self.memory = None
        self.parent = ParentWatch()
        self.skill = skills.load_skill("anssi-debian12")

    def out_of_budget(self):
        return False

    def evaluate(self, rule, evidence=False, label="verify"):
        return self.results.pop(0) if self.results else "fail", {"tests": []}

    def run(self, item, attempt, tasks, trusted):
        assert trusted is False
        attempt.tasks = tasks
        module = next(iter(tasks[0]))
        attempt.checkpoint = {"covered": ["/etc/aide/aide.conf"]}
        if module == "ansible.builtin.aide_rule":
            attempt.gate = "task 1: no module named 'ansible.builtin.aide_rule'"
            attempt.verdict, attempt.reason = A.judge(attempt.gate, None, None, None)
            attempt.checkpoint = {"covered": []}
        elif module == "ansible.builtin.shell":
            attempt.report = {"ok": False, "changed": True, "error": "/bin/sh: 1: set: Illegal option -o pipefail",
                              "failed_task": "shell"}
        else:
            attempt.report = {"ok": True, "changed": True}
        attempt.health = {"healthy": True}

    def verify_one(self, item, attempt):
        value = "pass" if next(iter(attempt.tasks[0])) == "ansible.builtin.replace" else "fail"
        attempt.result = value
        attempt.verdict, attempt.reason = A.judge(None, attempt.report, True, value)

    def close(self, item, attempt):
        self.closed = getattr(self, "closed", []) + [attempt.number]

    def roll_back(self, item, attempt):
        self.rollbacks.append(attempt.number)
        attempt.rolled_back = True
        return True

    def finish_item(self, item, reason, detail=""):
        self.finished[item.rule] = (reason, detail, [a.verdict for a in item.attempts])


class FakeAgents:
    """Scripted answers per agent, recorded in ``calls`` as (agent, mode)."""

    def __init__(self, script):
        self.script = {k: list(v) for k, v in script.items()}
        self.calls = []
        self.variables = []  # the template variables of each call
        self.base = {"host": {"os": "Debian 12", "virtualization": "guest container", "user": "scapforge"}}

    def ask(self, agent, rule, attempt, sections, skipped=(), variables=None):
        key = agent if agent != "architect" else "architect_" + variables["mode"]
        self.calls.append(key)
        self.variables.append(variables)
        answer = self.script[key].pop(0)
        if isinstance(answer, Exception):
            raise answer
        parse = {"worker": answers.parse_worker, "reflector": answers.parse_reflector}.get(agent, answers.parse_architect)
        try:
            return Reply(answer=parse(answer), tokens=100, mode="json_schema")
        except answers.AnswerError as exc:
            return Reply(error=str(exc), tokens=100, mode="json_schema")


def vendor_failed(rule=RULE):
    item = A.WorkItem(rule, category="aide")
    attempt = item.new_attempt(A.VENDOR)
    attempt.verdict, attempt.reason = A.FAILED, "fix_failed"
    attempt.report = {"ok": False, "error": "set: Illegal option -o pipefail"}
    return item


REFLECTION = {"diagnosis": "dash has no pipefail", "lesson": {"cue": "Illegal option -o pipefail",
                                                              "action": "use executable: /bin/bash"}}


def test_vendor_refused_failed_pivot_remediated(catalog, tmp_path):
    loop = FakeLoop(catalog, tmp_path)
    agents = FakeAgents({
        "architect_plan": [{"verdict": "PLAN", "plan": "add acl with a shell pipeline"}],
        "worker": [{"tasks": INVENTED, "rationale": "r"}, {"tasks": PIPEFAIL, "rationale": "r"},
                   {"tasks": GOOD, "rationale": "OwnerMode gets +acl"}],
        "reflector": [REFLECTION, dict(REFLECTION, banned=["set -o pipefail &&"])],
        "architect_review": [{"verdict": "PIVOT", "plan": "use ansible.builtin.replace on OwnerMode"}],
    })
    item = vendor_failed()
    _phase(loop, agents, A.Budget(attempts=5, review_every=3)).run(item)
    assert agents.calls == ["architect_plan", "worker", "reflector", "worker", "reflector", "architect_review", "worker"]
    assert loop.finished[RULE] == ("verified", "", ["failed", "refused", "failed", "passed"])
    assert loop.rollbacks == [3]  # the refused attempt ran nothing; the failed one was undone
    assert loop.closed == [2, 3, 4]  # every attempt that reached the host is settled
    assert item.plans == ["add acl with a shell pipeline", "use ansible.builtin.replace on OwnerMode"]
    assert item.attempts[2].reflection["lesson"]["action"] == "use executable: /bin/bash"
    assert item.banned == ["set -o pipefail &&"]
    assert item.tokens == 7 * 100
    kinds = [(e["event"], e["data"].get("verdict")) for e in read_events(str(tmp_path / "events.jsonl"))
             if e["event"] == "architect"]
    assert kinds == [("architect", "PLAN"), ("architect", "PIVOT")]


def test_a_banned_pattern_is_refused_before_the_host_sees_it(catalog, tmp_path):
    loop = FakeLoop(catalog, tmp_path)
    agents = FakeAgents({
        "architect_plan": [{"verdict": "PLAN", "plan": "p"}],
        "worker": [{"tasks": PIPEFAIL}, {"tasks": PIPEFAIL}],
        "reflector": [dict(REFLECTION, banned=["set -o pipefail"]), REFLECTION],
        "architect_review": [{"verdict": "ESCALATE", "plan": "needs a human"}],
    })
    item = vendor_failed()
    _phase(loop, agents, A.Budget(attempts=2)).run(item)
    assert item.attempts[2].verdict == "refused"
    assert "which the Reflector banned" in item.attempts[2].gate
    assert loop.finished[RULE][0] == "attempt_budget"


def test_escalate_and_meta_plateau(catalog, tmp_path):
    noop = {"tasks": [{"ansible.builtin.lineinfile": {"path": "/etc/login.defs", "regexp": "^NOPE", "line": "x",
                                                      "backrefs": True}}]}

    class NoEffectLoop(FakeLoop):
        def run(self, item, attempt, tasks, trusted):
            attempt.tasks, attempt.report, attempt.health = tasks, {"ok": True, "changed": False}, {"healthy": True}

        def verify_one(self, item, attempt):
            attempt.result = "fail"
            attempt.verdict, attempt.reason = A.judge(None, attempt.report, True, "fail")

    loop = NoEffectLoop(catalog, tmp_path)
    agents = FakeAgents({
        "architect_plan": [{"verdict": "PLAN", "plan": "Plan A"}],
        "worker": [noop] * 4,
        "reflector": [REFLECTION] * 4,
        "architect_review": [{"verdict": "PIVOT", "plan": "Plan B, quite another idea"}, {"verdict": "PIVOT", "plan": "plan a"}],
    })
    item = A.WorkItem(RULE)
    _phase(loop, agents, A.Budget(attempts=9)).run(item)
    # no_effect twice is a plateau: review after attempts 2 and 4; the second goes back to plan A
    assert agents.calls.count("architect_review") == 2
    reason, detail, verdicts = loop.finished[RULE]
    assert reason == "meta_plateau" and verdicts == ["no_effect"] * 4
    assert "plan a" in detail

    loop = NoEffectLoop(catalog, tmp_path)
    agents = FakeAgents({"architect_plan": [{"verdict": "PLAN", "plan": "A"}], "worker": [noop] * 2,
                         "reflector": [REFLECTION] * 2,
                         "architect_review": [{"verdict": "ESCALATE", "plan": "the container has no auditd"}]})
    _phase(loop, agents, A.Budget()).run(A.WorkItem(RULE))
    assert loop.finished[RULE][0] == "architect_escalate"
    assert "the container has no auditd" in loop.finished[RULE][1]


def test_a_rule_that_passes_now_is_not_worked(catalog, tmp_path):
    loop = FakeLoop(catalog, tmp_path, results=["pass"])
    agents = FakeAgents({})
    _phase(loop, agents, A.Budget()).run(vendor_failed())
    assert agents.calls == []
    # issue 17 item 5: no fix of its own made it pass, so it is not "verified"
    assert loop.finished[RULE][:2] == ("passes_after_other_fixes", "passes in the Worker's precheck after other "
                                       "rules' fixes; it was fix_failed; no fix of its own stays applied")


def test_junk_answers_are_refused_attempts_until_the_budget(catalog, tmp_path):
    loop = FakeLoop(catalog, tmp_path)
    agents = FakeAgents({"architect_plan": ["not json at all"], "worker": ["", "x" * 70000],
                         "reflector": [REFLECTION, REFLECTION]})
    item = A.WorkItem(RULE)
    _phase(loop, agents, A.Budget(attempts=2)).run(item)
    assert [a.verdict for a in item.attempts] == ["refused", "refused"]
    assert "unusable" in item.attempts[0].gate and "too large" in item.attempts[1].gate
    assert loop.finished[RULE][0] == "attempt_budget"
    assert item.plan.startswith("Make the OVAL check")  # an unusable plan does not stop the Worker


def test_an_endpoint_that_fails_ends_this_rule_and_the_next_without_calls(catalog, tmp_path):
    loop = FakeLoop(catalog, tmp_path)
    agents = FakeAgents({"architect_plan": [LLMError("connection", "connection refused")]})
    phase = _phase(loop, agents, A.Budget())
    phase.run(A.WorkItem(RULE))
    other = "xccdf_org.ssgproject.content_rule_set_password_hashing_algorithm_logindefs"
    phase.run(A.WorkItem(other))
    assert loop.finished[RULE][0] == "llm_error" and loop.finished[other][0] == "llm_error"
    assert agents.calls == ["architect_plan"]


def test_without_agents_nothing_is_asked(catalog, tmp_path):
    loop = FakeLoop(catalog, tmp_path)
    phase = _phase(loop, None, A.Budget())
    phase.run(A.WorkItem(RULE))
    phase.run(vendor_failed("xccdf_org.ssgproject.content_rule_aide_verify_ext_attributes"))
    assert loop.finished[RULE][0] == "llm_unavailable"
    assert loop.finished["xccdf_org.ssgproject.content_rule_aide_verify_ext_attributes"][0] == "fix_failed"


# ============================================================================ issue 18: cannot_fix, plan-time ESCALATE
NETLINK = "auditctl -s: Cannot open netlink audit socket: the container has no audit netlink"


def _architect_events(tmp_path):
    return [(e["data"]["mode"], e["data"]["verdict"], e["data"].get("outcome"))
            for e in read_events(str(tmp_path / "events.jsonl")) if e["event"] == "architect"]


@pytest.mark.parametrize("answer, reason", [
    ({"verdict": "ESCALATE", "plan": "a human must decide the remote log host"}, "architect_escalate"),
    ({"verdict": "ESCALATE", "plan": "chronyd needs CAP_SYS_TIME, which this container lacks"}, "environment:no_sys_time"),
    ({"cannot_fix": {"reason": "needs_human", "evidence": "the site must name its log host"}}, "needs_human"),
    ({"cannot_fix": {"reason": "environment", "evidence": NETLINK}}, "environment:no_audit_netlink"),
])
def test_a_plan_time_escalation_ends_the_rule_before_any_worker_call(catalog, tmp_path, answer, reason):
    loop = FakeLoop(catalog, tmp_path)
    agents = FakeAgents({"architect_plan": [answer]})
    item = A.WorkItem(RULE)
    _phase(loop, agents, A.Budget()).run(item)
    assert agents.calls == ["architect_plan"]  # no Worker, no Reflector
    finished_reason, detail, verdicts = loop.finished[RULE]
    assert (finished_reason, verdicts, item.plan) == (reason, [], None)
    said = answer.get("plan") or answer["cannot_fix"]["evidence"]
    assert said in detail
    assert _architect_events(tmp_path) == [("plan", "ESCALATE", reason)]  # not PLAN
    assert item.declared_by == (None if reason == "architect_escalate" else "architect")  # its word, not observed


def test_a_worker_cannot_fix_ends_the_rule_with_its_evidence_and_no_reflection(catalog, tmp_path):
    loop = FakeLoop(catalog, tmp_path)
    agents = FakeAgents({"architect_plan": [{"verdict": "PLAN", "plan": "load the watch with auditctl"}],
                         "worker": [{"cannot_fix": {"reason": "environment", "evidence": NETLINK}, "rationale": "r"}]})
    item = vendor_failed()
    _phase(loop, agents, A.Budget()).run(item)
    assert agents.calls == ["architect_plan", "worker"]
    reason, detail, verdicts = loop.finished[RULE]
    assert (reason, verdicts) == ("environment:no_audit_netlink", ["failed", "cannot_fix"])
    assert detail == "the Worker says the rule cannot be fixed here (environment): " + NETLINK
    last = item.attempts[-1]
    assert (last.gate, last.report, last.reason, item.declared_by) == (None, None, "environment:no_audit_netlink", "worker")
    assert loop.rollbacks == [] and getattr(loop, "closed", []) == []  # nothing ran, nothing to settle


def test_a_worker_content_answer_is_needs_human(catalog, tmp_path):
    loop = FakeLoop(catalog, tmp_path)
    agents = FakeAgents({"architect_plan": [{"verdict": "PLAN", "plan": "p"}],
                         "worker": [{"cannot_fix": {"reason": "content", "evidence": "the check wants a file Debian lacks"}}]})
    _phase(loop, agents, A.Budget()).run(A.WorkItem(RULE))
    assert loop.finished[RULE][:2] == ("needs_human", "the Worker says the rule cannot be fixed here (content): "
                                                      "the check wants a file Debian lacks")


def test_a_review_escalation_takes_the_environment_the_reflector_named(catalog, tmp_path):
    loop = FakeLoop(catalog, tmp_path)
    agents = FakeAgents({
        "architect_plan": [{"verdict": "PLAN", "plan": "p"}],
        "worker": [{"tasks": PIPEFAIL}, {"tasks": PIPEFAIL}],
        "reflector": [dict(REFLECTION, diagnosis="environment:no_audit_netlink: auditd cannot start here")] * 2,
        "architect_review": [{"verdict": "ESCALATE", "plan": "it keeps failing"}]})
    item = A.WorkItem(RULE)
    _phase(loop, agents, A.Budget()).run(item)
    assert loop.finished[RULE][0] == "environment:no_audit_netlink"
    assert _architect_events(tmp_path) == [("plan", "PLAN", None), ("review", "ESCALATE", "environment:no_audit_netlink")]

    (tmp_path / "second").mkdir()
    loop = FakeLoop(catalog, tmp_path / "second")
    agents = FakeAgents({
        "architect_plan": [{"verdict": "PLAN", "plan": "p"}], "worker": [{"tasks": PIPEFAIL}, {"tasks": PIPEFAIL}],
        "reflector": [REFLECTION] * 2,
        "architect_review": [{"cannot_fix": {"reason": "content", "evidence": "the OVAL reads a path Debian lacks"}}]})
    item = A.WorkItem(RULE)
    _phase(loop, agents, A.Budget()).run(item)
    assert loop.finished[RULE][0] == "needs_human" and item.reviews == 1 and item.declared_by == "architect"


def test_a_transport_failure_marks_the_endpoint_down_and_leaves_no_attempt(catalog, tmp_path):
    loop = FakeLoop(catalog, tmp_path)
    junk = LLMError("bad_response", "answered 3 times in a row with a body that is not JSON", transport=True)
    agents = FakeAgents({"architect_plan": [{"verdict": "PLAN", "plan": "p"}], "worker": [junk]})
    phase = _phase(loop, agents, A.Budget())
    item = vendor_failed()
    phase.run(item)
    other = "xccdf_org.ssgproject.content_rule_set_password_hashing_algorithm_logindefs"
    phase.run(A.WorkItem(other))
    assert agents.calls == ["architect_plan", "worker"]  # nothing after the endpoint went down
    assert loop.finished[RULE][0] == "llm_error" and loop.finished[other][:3] == ("llm_error", phase.llm_down, [])
    assert [a.verdict for a in item.attempts] == ["failed"]  # the cut-off Worker attempt is not counted
    assert phase.llm_down.startswith("the LLM endpoint is marked down for the rest of this host's run")
    assert "3 times in a row" in phase.llm_down


class SeeingAgents(FakeAgents):
    """FakeAgents that keep the sections of each call."""

    def __init__(self, script):
        super().__init__(script)
        self.sections = []

    def ask(self, agent, rule, attempt, sections, skipped=(), variables=None):
        self.sections.append((agent, {s.name: s.text for s in sections}))
        return super().ask(agent, rule, attempt, sections, skipped, variables)


def test_tasks_that_game_the_check_are_refused_and_the_worker_is_told_why(catalog, tmp_path):
    """Issue 18 item 8: a masked unit for a rule that wants the service is refused before the
    host sees it, the next Worker call reads the reason, the rule is never remediated."""
    masked = [{"name": "Quiet aide", "ansible.builtin.systemd": {"name": "dailyaidecheck.timer", "masked": True}}]
    loop = FakeLoop(catalog, tmp_path)
    agents = SeeingAgents({
        "architect_plan": [{"verdict": "PLAN", "plan": "p"}],
        "worker": [{"tasks": masked, "rationale": "r"}, {"tasks": masked, "rationale": "r"}],
        "reflector": [REFLECTION, REFLECTION],
    })
    item = vendor_failed()
    _phase(loop, agents, A.Budget(attempts=2)).run(item)
    assert [a.verdict for a in item.attempts] == ["failed", "refused", "refused"]
    assert item.attempts[1].gate.startswith("refused by the review: these tasks would make the check pass without "
                                            "fixing what the rule protects: task 1 'Quiet aide': masks dailyaidecheck.timer")
    assert loop.rollbacks == [] and loop.finished[RULE][0] == "attempt_budget"
    second_worker = [s for agent, s in agents.sections if agent == "worker"][1]
    assert "refused by the review" in second_worker["history"]
    review = [e["data"] for e in read_events(str(tmp_path / "events.jsonl")) if e["event"] == "review"]
    assert [[f["code"] for f in r["findings"]] for r in review] == [["masks_unit"], ["masks_unit"]]


def test_the_worker_is_told_the_environment_limits_other_rules_ended_on(catalog, tmp_path):
    """Issue 18 item 5: the environment reasons seen so far this run reach the Worker's variables."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes

    loop = FakeLoop(catalog, tmp_path)
    loop.outcomes = {"a": outcomes.RuleOutcome.of("a", "environment:no_sys_time"),
                     "b": outcomes.RuleOutcome.of("b", "verified"),
                     "c": outcomes.RuleOutcome.of("c", "environment:no_audit_netlink"),
                     "d": outcomes.RuleOutcome.of("d", "environment:no_sys_time")}
    agents = FakeAgents({"architect_plan": [{"verdict": "PLAN", "plan": "p"}], "worker": [{"tasks": GOOD}]})
    _phase(loop, agents, A.Budget(attempts=1)).run(vendor_failed())
    worker = [v for call, v in zip(agents.calls, agents.variables) if call == "worker"][0]
    assert worker["seen_environment"] == ["environment:no_audit_netlink", "environment:no_sys_time"]
