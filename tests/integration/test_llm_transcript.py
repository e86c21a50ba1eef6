"""What the model saw, kept: a run with the scripted server leaves one ``llm/`` file per call,
redacted as sent; the same transcript served back by tools/llm_replay.py remediates the rule
again on a reset host (issue 18 item 9).

The Worker probes a planted file that holds secrets (a shadow line, a password assignment, an
API token, generated at test time), so the probe's result enters the second Worker prompt:
none of them may reach the transcript, and the redaction marks must.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import llm_wire
import pytest
from llm_replay import Replay
from llm_server import ScriptedLLM
from test_agents import agent, own_oscap, run_job

RULE = "set_password_hashing_algorithm_logindefs"
PLANTED = "/etc/scapforge-app.conf"
KEYS = {"agent", "rule", "request", "answer", "usage"}


def planted_secrets() -> dict:
    alphabet = "abcdefghijkLMNOP0123456789./"
    hashed = "$6$" + secrets.token_hex(8) + "$" + "".join(secrets.choice(alphabet) for _char in range(86))
    return {"password": "pw-" + secrets.token_hex(10), "hash": hashed,
            "token": "sk-" + "proj-" + secrets.token_urlsafe(24).replace("-", "x").replace("_", "y")}


def plant(host, found: dict) -> None:
    text = ("# app settings\ndb_password=%s\nroot:%s:19700:0:99999:7:::\nOPENAI_API_KEY=%s\n"
            % (found["password"], found["hash"], found["token"]))
    host.ssh("printf '%%s' '%s' | sudo tee %s >/dev/null" % (text, PLANTED))


def script(llm: ScriptedLLM) -> None:
    llm.script(agent("Architect", RULE), {"verdict": "PLAN", "plan": "Set ENCRYPT_METHOD in /etc/login.defs."})
    llm.script(agent("Worker", RULE), {"probes": [{"command": ["cat", PLANTED]}],
                                       "rationale": "see what the application file sets"})
    llm.script(agent("Worker", RULE), {"tasks": [
        {"name": "Hash passwords with yescrypt", "ansible.builtin.lineinfile": {
            "path": "/etc/login.defs", "regexp": "^\\s*ENCRYPT_METHOD\\s", "line": "ENCRYPT_METHOD YESCRYPT"}}],
        "rationale": "ENCRYPT_METHOD YESCRYPT"})


@pytest.fixture(scope="module")
def recorded(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    host = lab.reset([lab_host.name])[0]
    found = planted_secrets()
    plant(host, found)
    runs = tmp_path_factory.mktemp("runs")
    with ScriptedLLM() as llm:
        script(llm)
        report = run_job(remediate, lab_inventory, host, runs, llm, [RULE])
        requests, unused = list(llm.requests), llm.unused_scripts
    folder = (runs / "latest" / "llm").resolve()
    return {"host": host, "report": report, "folder": folder, "requests": requests, "unused": unused,
            "secrets": found, "inventory": lab_inventory, "remediate": remediate, "lab": lab}


def test_one_file_per_call_with_the_keys_and_no_secret(recorded):
    outcome = recorded["report"]["rules"][RULE]
    assert (outcome["outcome"], outcome["reason"]) == ("remediated", "verified")
    assert recorded["unused"] == []
    files = sorted(recorded["folder"].glob("*.json"))
    assert len(files) == len(recorded["requests"]) == 3
    calls = [json.loads(f.read_text()) for f in files]
    assert all(KEYS <= set(c) for c in calls)
    assert [(c["agent"], c["rule"]) for c in calls] == [("architect", RULE), ("worker", RULE), ("worker", RULE)]
    assert [c["request"]["messages"] for c in calls] == [r["messages"] for r in recorded["requests"]]
    text = "".join(f.read_text() for f in files)
    for value in recorded["secrets"].values():
        assert value not in text
    probe_prompt = calls[2]["request"]["messages"][1]["content"]
    assert "db_password=[REDACTED:password]" in probe_prompt
    assert "root:[REDACTED:password_hash]:19700" in probe_prompt
    assert "OPENAI_API_KEY=[REDACTED:api_token]" in probe_prompt
    assert all(c["usage"]["prompt_tokens"] > 0 and c["answer"] for c in calls)


def test_the_transcript_replayed_remediates_the_rule_again_on_a_reset_host(recorded, tmp_path):
    host = recorded["lab"].reset([recorded["host"].name])[0]
    plant(host, recorded["secrets"])
    assert own_oscap(host, [RULE]) == {RULE: "fail"}
    replay = Replay(str(recorded["folder"]))
    with llm_wire.Endpoint(replay.answer) as endpoint:
        report = run_job(recorded["remediate"], recorded["inventory"], host, Path(tmp_path), endpoint, [RULE])
    outcome = report["rules"][RULE]
    assert (outcome["outcome"], outcome["reason"]) == ("remediated", "verified")
    assert [s["seq"] for s in replay.served] == [1, 2, 3]
    assert replay.left() == {}
    assert own_oscap(host, [RULE]) == {RULE: "pass"}
