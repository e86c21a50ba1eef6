"""tools/llm_relay.py and tools/llm_replay.py over real HTTP on 127.0.0.1, with the real openai
client inside plugins/plugin_utils/llm.py, as the controller would call them."""

import json
import threading
import time

import llm_wire
import pytest
from llm_relay import Relay
from llm_replay import Replay

from ansible_collections.scapforge.remediation.plugins.plugin_utils.answers import SCHEMAS
from ansible_collections.scapforge.remediation.plugins.plugin_utils.llm import LLMClient, LLMConfig, LLMError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.transcript import Transcript

SECRET = "s3cr3t-" + "Qw9Zx7"


def messages(agent, rule, extra=""):
    return [{"role": "system", "content": "You are the %s of scapforge." % agent},
            {"role": "user", "content": "Rule: %s (medium severity, category pam)\n%s" % (rule, extra)}]


def ask(url, agent, rule, extra="", **config):
    fields = {"base_url": url, "model": "stand-in", "max_retries": 0, "timeout": 10.0}
    fields.update(config)
    with LLMClient(LLMConfig(**fields)) as client:
        return client.complete(messages(agent.capitalize(), rule, extra), SCHEMAS[agent], agent).text


def wait_for(path, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, "%s never appeared" % path
        time.sleep(0.02)


def test_who_asks_from_the_schema_name_or_the_prompt():
    assert llm_wire.who_asks({"messages": messages("Worker", "rule_a"),
                              "response_format": {"type": "json_schema", "json_schema": {"name": "worker"}}}) \
        == ("worker", "rule_a")
    assert llm_wire.who_asks({"messages": messages("Reflector", "rule_b")}) == ("reflector", "rule_b")
    assert llm_wire.who_asks({"messages": [{"role": "user", "content": "hello"}]}) == (None, None)


def test_the_relay_writes_the_request_and_serves_the_answer_a_person_writes(tmp_path):
    relay = Relay(str(tmp_path), wait=20, poll=0.02, settle=0.05)
    result = {}
    with llm_wire.Endpoint(relay.answer) as endpoint:
        caller = threading.Thread(target=lambda: result.update(text=ask(
            endpoint.url, "worker", "accounts_password_pam_retry", "password=" + SECRET)))
        caller.start()
        request = tmp_path / "0001-worker-accounts_password_pam_retry.json"
        wait_for(request)
        written = json.loads(request.read_text())
        assert (written["seq"], written["agent"], written["rule"]) == (1, "worker", "accounts_password_pam_retry")
        assert written["request"]["response_format"]["json_schema"]["name"] == "worker"
        assert SECRET not in request.read_text() and "password=[REDACTED:password]" in request.read_text()
        assert "=== system ===\nYou are the Worker" in (tmp_path / "0001-worker-accounts_password_pam_retry.txt").read_text()
        (tmp_path / "0001-worker-accounts_password_pam_retry.answer").write_text('{"probes": [], "rationale": "r"}')
        caller.join(15)
    assert result["text"] == '{"probes": [], "rationale": "r"}'


def test_a_retried_request_waits_for_the_same_answer_file(tmp_path):
    relay = Relay(str(tmp_path), wait=20, poll=0.02, settle=0.05)
    result = {}
    with llm_wire.Endpoint(relay.answer) as endpoint:
        # the client gives up after 1 s and sends the same request again
        caller = threading.Thread(target=lambda: result.update(text=ask(
            endpoint.url, "architect", "rule_a", timeout=1.0, max_retries=3)))
        caller.start()
        time.sleep(2.5)
        (tmp_path / "0001-architect-rule_a.answer").write_text('{"verdict": "PLAN", "plan": "p"}')
        caller.join(15)
    assert result["text"] == '{"verdict": "PLAN", "plan": "p"}'
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["0001-architect-rule_a.json"]


def test_no_answer_in_time_is_a_504_the_client_does_not_retry(tmp_path):
    relay = Relay(str(tmp_path), wait=0.3, poll=0.02)
    with llm_wire.Endpoint(relay.answer) as endpoint:
        with pytest.raises(LLMError) as caught:
            ask(endpoint.url, "worker", "rule_a", max_retries=2)
    assert (caught.value.kind, caught.value.status) == ("http", 504)
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_the_replay_serves_by_agent_rule_and_order(tmp_path):
    record = Transcript(str(tmp_path), "lab6")
    for agent, rule, answer in [("architect", "rule_a", "P1"), ("worker", "rule_a", "A1"), ("worker", "rule_b", "B1"),
                                ("worker", "rule_a", None), ("worker", "rule_a", "A2"), ("reflector", "rule_a", "R1")]:
        record.record(agent, rule, 1, {"messages": messages(agent.capitalize(), rule)}, answer, {},
                      error=None if answer else "connection: refused")
    replay = Replay(str(tmp_path / "llm"))
    with llm_wire.Endpoint(replay.answer) as endpoint:
        # another order than recorded: each (agent, rule) keeps its own order
        got = [ask(endpoint.url, a, r) for a, r in [("worker", "rule_b"), ("worker", "rule_a"), ("architect", "rule_a"),
                                                    ("worker", "rule_a")]]
        assert replay.left() == {"reflector/rule_a": [6]}
        with pytest.raises(LLMError) as caught:
            ask(endpoint.url, "worker", "rule_a", max_retries=2)
        assert ask(endpoint.url, "reflector", "rule_a", "a prompt that changed") == "R1"
    assert got == ["B1", "A1", "P1", "A2"]
    assert (caught.value.kind, caught.value.status) == ("http", 404)
    assert "no recorded answer left for worker/rule_a" in str(caught.value)
    assert [(s["seq"], s["same_prompt"]) for s in replay.served] == [
        (3, True), (2, True), (1, True), (5, True), (None, False), (6, False)]
    assert replay.left() == {}
