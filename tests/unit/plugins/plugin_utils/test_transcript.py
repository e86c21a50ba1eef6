"""The run's ``llm/`` transcript: Agents with the real LLMClient against tests/llm_server.py write
one JSON file per call, the request as sent (redacted), the answer, the usage."""

import json

import pytest

from llm_server import Raw, ScriptedLLM

from ansible_collections.scapforge.remediation.plugins.plugin_utils.agents import Agents, TokenLedger
from ansible_collections.scapforge.remediation.plugins.plugin_utils.llm import LLMClient, LLMConfig, LLMError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.transcript import Transcript, load

SECRET = "hunter2-" + "Zq9xK7"
PLAN = {"verdict": "PLAN", "plan": "set ENCRYPT_METHOD YESCRYPT"}
TASKS = {"tasks": [{"name": "x", "ansible.builtin.lineinfile": {"path": "/etc/login.defs", "line": "A B"}}]}


class Prompts:
    """Renders the two messages the skill's templates start with (who asks, the rule)."""

    def render(self, agent, data):
        return [{"role": "system", "content": "You are the %s of scapforge." % agent.capitalize()},
                {"role": "user", "content": "Rule: %s (medium severity)\nprobe: password=%s" % (data["rule"], SECRET)}]


class Events:
    def __init__(self):
        self.emitted = []

    def emit(self, event, **data):
        self.emitted.append((event, data))


def test_each_call_is_one_file_with_the_request_as_sent(tmp_path):
    with ScriptedLLM() as llm:
        llm.script("You are the Architect", PLAN)
        llm.script("You are the Worker", TASKS)
        llm.script("You are the Worker", Raw(200, "not json"), times=None)  # the client sends it again
        client = LLMClient(LLMConfig(base_url=llm.url, model="scripted", max_retries=0))
        agents = Agents(client, Prompts(), Events(), TokenLedger(str(tmp_path)), {},
                        transcript=Transcript(str(tmp_path), "lab6"))
        for agent in ("architect", "worker"):
            agents.ask(agent, "rule_a", 1, [], variables={"rule": "rule_a"})
        with pytest.raises(LLMError) as junk_raised:  # bodies that are no chat completion: a transport failure
            agents.ask("worker", "rule_a", 1, [], variables={"rule": "rule_a"})
        assert junk_raised.value.kind == "bad_response"
        sent = list(llm.requests)
    names = sorted(p.name for p in (tmp_path / "llm").glob("*.json"))
    assert names == ["0001-architect-rule_a.json", "0002-worker-rule_a.json", "0003-worker-rule_a.json"]
    calls = load(str(tmp_path / "llm"))
    assert len(calls) == 3 and len(sent) == 2 + 3  # the junk call was sent three times, recorded once
    first, second, junk = calls
    assert {"agent", "rule", "request", "answer", "usage"} <= set(first)
    assert (first["agent"], first["rule"], first["host"], first["attempt"]) == ("architect", "rule_a", "lab6", 1)
    assert first["request"]["messages"] == sent[0]["messages"]
    assert "password=[REDACTED:password]" in first["request"]["messages"][1]["content"]
    assert json.loads(first["answer"]) == PLAN and json.loads(second["answer"]) == TASKS
    assert first["usage"]["prompt_tokens"] > 0 and first["usage"]["mode"] == "json_schema"
    assert (junk["answer"], junk["error"].split(":")[0]) == (None, "bad_response")
    assert SECRET not in (tmp_path / "llm").joinpath(names[0]).read_text()


def test_sequence_numbers_continue_across_writers_of_one_run(tmp_path):
    one, two = Transcript(str(tmp_path), "h1"), Transcript(str(tmp_path), "h2")
    one.record("worker", "r", 1, {}, "a", {})
    two.record("worker", "r", 1, {}, "b", {})
    one.record("reflector", "r/x y", 1, {}, None, {}, error="http: 500")
    assert [(c["seq"], c["host"], c["answer"]) for c in load(str(tmp_path / "llm"))] == [
        (1, "h1", "a"), (2, "h2", "b"), (3, "h1", None)]
    assert (tmp_path / "llm" / "0003-reflector-r_x_y.json").is_file()
