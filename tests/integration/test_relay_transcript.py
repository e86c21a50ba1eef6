"""A session played by a capable model, kept as a regression test (issue 18 item 9).

tests/fixtures/transcripts/relay-anssi-2026-12-02 is the ``llm/`` folder of a real run: the
main job on a fresh lab host, four residue rules of anssi_bp28_high, every request answered
through tools/llm_relay.py by a frontier-class model that saw nothing but the request
(``bench/agents.py --endpoint``; figures in bench/results/agents-relay-2026-12-02.json). It
remediated accounts_password_pam_retry and set_password_hashing_algorithm_logindefs at the
first Worker attempt and aide_verify_acls at the second (the Reflector found aide-common
missing), and ended service_chronyd_or_ntpd_enabled as environment:no_cap_sys_time after a
probe showed ConditionResult=no. Served back by tools/llm_replay.py on a fresh host, the same
answers must give the same outcomes, and an independent oscap scan must pass the three rules.
"""

from __future__ import annotations

import json
from pathlib import Path

import llm_wire
import pytest
from llm_replay import Replay
from test_agents import own_oscap, run_job

TRANSCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "relay-anssi-2026-12-02"
FIXED = ["accounts_password_pam_retry", "set_password_hashing_algorithm_logindefs", "aide_verify_acls"]
CHRONY = "service_chronyd_or_ntpd_enabled"


@pytest.fixture(scope="module")
def replayed(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    host = lab.reset([lab_host.name])[0]
    before = own_oscap(host, FIXED)
    replay = Replay(str(TRANSCRIPT))
    runs, memory = tmp_path_factory.mktemp("runs"), tmp_path_factory.mktemp("memory")
    with llm_wire.Endpoint(replay.answer) as endpoint:  # a fresh memory, as the recording had
        report = run_job(remediate, lab_inventory, host, runs, endpoint, FIXED + [CHRONY], scapforge_memory_path=str(memory))
    return {"report": report, "replay": replay, "before": before, "after": own_oscap(host, FIXED)}


def test_the_transcript_is_a_whole_recorded_session():
    calls = [json.loads(p.read_text()) for p in sorted(TRANSCRIPT.glob("*.json"))]
    assert len(calls) == 14 and all(isinstance(c["answer"], str) and c["usage"]["prompt_tokens"] > 0 for c in calls)
    assert {c["rule"] for c in calls} == set(FIXED + [CHRONY])


def test_the_replayed_answers_remediate_the_rules_again_on_a_fresh_host(replayed):
    assert replayed["before"] == {rule: "fail" for rule in FIXED}
    rules = replayed["report"]["rules"]
    assert {r: (rules[r]["outcome"], rules[r]["reason"]) for r in FIXED} == {r: ("remediated", "verified") for r in FIXED}
    assert [a["source"] for a in rules["aide_verify_acls"]["attempt_log"]][-2:] == ["worker", "worker"]
    assert replayed["after"] == {rule: "pass" for rule in FIXED}  # OpenSCAP, run by the test itself


def test_the_environment_the_model_proved_ends_the_rule_again(replayed):
    outcome = replayed["report"]["rules"][CHRONY]
    assert (outcome["outcome"], outcome["reason"]) == ("escalated", "environment:no_cap_sys_time")
    assert "ConditionResult=no" in outcome["detail"]


def test_every_recorded_answer_was_served_and_none_was_missing(replayed):
    served = replayed["replay"].served
    assert None not in [s["seq"] for s in served]
    assert sorted(s["seq"] for s in served) == list(range(1, 15))
    assert replayed["replay"].left() == {}
