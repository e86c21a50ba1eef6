"""The loop's memory session over a real store: learn, decide, select, and never cost a run."""

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog, read_events
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.session import MemorySession

FACTS = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.8",
         "virtualization_role": "guest", "virtualization_type": "systemd-nspawn", "os_family": "Debian"}
RULE = "xccdf_org.ssgproject.content_rule_sysctl_kernel_kptr_restrict"
ENTRY = {"rule": "sysctl_kernel_kptr_restrict", "outcome": "escalated", "reason": "environment:read_only_proc_sys",
         "attempts": 1, "category": "kernel", "detail": "sysctl: permission denied on key 'kernel.kptr_restrict'",
         "attempt_log": [{"attempt": 1, "source": "vendor", "verdict": "failed",
                          "reason": "environment:read_only_proc_sys", "tokens": 0, "rolled_back": True,
                          "seconds": 2.0, "modules": ["ansible.posix.sysctl"], "changed": True,
                          "detail": "sysctl: permission denied on key 'kernel.kptr_restrict'", "side_effects": []}],
         "modules": ["ansible.posix.sysctl"], "changed_tasks": [], "lessons_shown": [], "from_memory": None,
         "side_effects": []}


def session(tmp_path, run_id, mode="inject"):
    events = EventLog(str(tmp_path / run_id / "events.jsonl"), "lab1")
    return MemorySession.open(str(tmp_path / "store"), mode, False, FACTS, "0.1.76", "anssi-debian12", run_id,
                              "lab1", events), events


def test_off_and_unknown_modes(tmp_path):
    assert session(tmp_path, "R0", "off")[0] is None
    with pytest.raises(ValueError, match="off, shadow, inject"):
        session(tmp_path, "R0", "on")


def test_a_caution_learnt_in_one_run_decides_the_next(tmp_path):
    first, _events = session(tmp_path, "R1")
    made = first.learn(ENTRY, [], from_memory=False)
    assert made["created"] and first.counts["created"] == len(made["created"])
    second, events = session(tmp_path, "R2")
    decision = second.decide(RULE, "kernel", llm=False)
    assert (decision.action, decision.reason) == ("classify", "environment:read_only_proc_sys")
    assert decision.lesson in made["created"]
    assert second.counts["shown"] == 1
    shadow, _events = session(tmp_path, "R3", "shadow")
    assert shadow.decide(RULE, "kernel", llm=False) is None  # shadow: logged, never acted on
    logged = [e for e in read_events(events.path) if e["event"] == "memory_decision"]
    assert logged and logged[0]["data"]["applied"] is True


def test_a_corrupt_store_turns_memory_off_and_the_run_goes_on(tmp_path):
    first, _events = session(tmp_path, "R1")
    first.learn(ENTRY, [], from_memory=False)
    (tmp_path / "store" / "lessons.json").write_text('{"lessons": {"1": {"id": "L')
    second, events = session(tmp_path, "R2")
    assert second.decide(RULE, "kernel", llm=False) is None
    assert second.broken and "lessons" in second.broken
    assert second.learn(ENTRY, [], from_memory=False) == {}
    assert second.close()["error"] == second.broken
    errors = [e["data"] for e in read_events(events.path) if e["event"] == "memory_error"]
    assert len(errors) == 1 and errors[0]["table"] == "lessons" and errors[0]["moved_to"] is None
