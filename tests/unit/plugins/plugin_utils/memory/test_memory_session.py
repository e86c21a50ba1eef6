"""The loop's memory session over a real store: learn, decide, select, and never cost a run."""

import os
import re

import pytest
from tinydb import Query

from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog, read_events
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.session import MemorySession, disabled

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


TRUNCATED = '{"lessons": {"1": {"id": "L'
CUT = "invalid JSON: Unterminated string starting at: line 1 column 26 (char 25)"


def aside(store):
    return sorted(n for n in os.listdir(store) if ".corrupt-" in n)


def test_a_truncated_lessons_table_is_moved_aside_once_and_memory_goes_on_degraded(tmp_path):
    """Issue 19 item 6: a truncated lessons.json during a run is moved aside once, a fresh table
    keeps the new lessons, the session says degraded with the file and where it went, and a
    second run finds nothing to move."""
    store = tmp_path / "store"
    first, _events = session(tmp_path, "R1")
    assert first.learn(ENTRY, [], from_memory=False)["created"]
    (store / "lessons.json").write_text(TRUNCATED)
    second, events = session(tmp_path, "R2")
    assert second.decide(RULE, "kernel", llm=False) is None  # the lesson went aside with its table
    (moved,) = aside(store)
    assert re.fullmatch(r"lessons\.json\.corrupt-\d{8}T\d{6}\.\d{6}Z", moved)
    assert (store / moved).read_text() == TRUNCATED  # bytes kept for tools/lessons.py repair
    reason = "lessons.json is corrupt (%s); moved to %s; a fresh table was started" % (CUT, store / moved)
    assert (second.state, second.reason, second.broken) == ("degraded", reason, None)
    made = second.learn(ENTRY, [], from_memory=False)
    assert made["created"] and made["created"][0] in (store / "lessons.json").read_text()  # new lessons kept
    block = second.close()
    assert block == {"shown": 0, "created": 1, "reinforced": 0, "retired": 0, "state": "degraded", "reason": reason}
    logged = [e["data"] for e in read_events(events.path) if e["event"] in ("memory_degraded", "memory_error")]
    assert logged == [{"during": "decide", "table": "lessons", "moved_to": str(store / moved), "reason": reason}]
    third, events = session(tmp_path, "R3")
    assert third.decide(RULE, "kernel", llm=False).lesson == made["created"][0]
    assert (third.close()["state"], third.reason, aside(store)) == ("on", None, [moved])  # nothing more to move
    assert not [e for e in read_events(events.path) if e["event"] in ("memory_degraded", "memory_error")]


def test_a_table_a_transaction_finds_corrupt_is_named_with_its_moved_to_path(tmp_path):
    store = tmp_path / "store"
    first, _events = session(tmp_path, "R1")
    first.learn(ENTRY, [], from_memory=False)
    (store / "evidence.json").write_text("[1, 2")
    second, _events = session(tmp_path, "R2")
    assert second.learn(ENTRY, [], from_memory=False)["supported"]  # the lesson stays, its evidence starts anew
    (moved,) = aside(store)
    assert second.state == "degraded"
    assert second.reason == ("evidence.json is corrupt (invalid JSON: Expecting ',' delimiter: line 1 column 6 (char 5)); "
                             "moved to %s; a fresh table was started" % (store / moved))


def test_a_corrupt_meta_turns_memory_off_and_the_run_goes_on(tmp_path):
    """The store cannot be used at all (its schema is unknown): off, with the reason."""
    first, _events = session(tmp_path, "R1")
    first.learn(ENTRY, [], from_memory=False)
    (tmp_path / "store" / "meta.json").write_text("{")
    second, events = session(tmp_path, "R2")
    assert second.decide(RULE, "kernel", llm=False) is None
    assert second.state == "off" and second.broken.startswith("decide: memory table 'meta' is corrupt")
    assert second.learn(ENTRY, [], from_memory=False) == {}
    block = second.close()
    assert (block["state"], block["reason"], block["error"]) == ("off", second.broken, second.broken)
    errors = [e["data"] for e in read_events(events.path) if e["event"] == "memory_error"]
    assert len(errors) == 1 and errors[0]["table"] == "meta" and errors[0]["moved_to"].startswith(str(tmp_path / "store"))
    assert aside(tmp_path / "store") == [os.path.basename(errors[0]["moved_to"])]


def test_a_host_without_a_session_reports_memory_off():
    assert disabled() == {"state": "off", "reason": "scapforge_memory_mode is off", "shown": 0, "created": 0,
                          "reinforced": 0, "retired": 0}


# ----------------------------------------------------------------------------- a cause that is gone (issue 19 item 3)
MINLEN = "xccdf_org.ssgproject.content_rule_accounts_password_pam_minlen"
PAM_TEST = {"id": "oval:ssg-test_password_pam_pwquality:tst:1", "result": "false",
            "object": {"id": "oval:ssg-object_password_pam_pwquality:obj:1", "flag": "does not exist"}}
MINLEN_TEST = {"id": "oval:ssg-test_password_pam_minlen:tst:1", "result": "false",
               "object": {"id": "oval:ssg-object_password_pam_minlen:obj:1", "flag": "does not exist"}}
VENDOR_TASKS = [{"ansible.builtin.lineinfile": {"path": "/etc/security/pwquality.conf", "regexp": "^minlen",
                                                "line": "minlen = 14"}}]


def ineffective_run(tmp_path):
    """Run 1, libpam-pwquality missing: the content's fix set minlen, pam_pwquality still not in PAM."""
    first, _events = session(tmp_path, "R1")
    entry = {"rule": "accounts_password_pam_minlen", "outcome": "escalated", "reason": "fix_ineffective",
             "attempts": 1, "category": "accounts", "detail": "OpenSCAP still reports fail", "attempt_log": [],
             "from_memory": None}
    record = {"number": 1, "source": "vendor", "tasks": VENDOR_TASKS, "gate": None, "gate_refusals": [],
              "report": {"ok": True, "changed": True, "error": None, "modules": [], "task_results": []},
              "verdict": "ineffective", "reason": "fix_ineffective", "detail": "OpenSCAP still reports fail",
              "result": "fail", "reflection": None,
              "evidence": {"definition": "oval:ssg-accounts_password_pam_minlen:def:1", "result": "false",
                           "tests": [PAM_TEST]}}
    made = first.learn(entry, [record], from_memory=False)
    return made["created"][0]


def looked(result, *tests):
    calls = []

    def look():
        calls.append(result)
        return result, ({"tests": list(tests), "result": "false"} if tests else None)
    return look, calls


def test_a_failed_fix_whose_cause_is_still_there_is_skipped_after_one_check(tmp_path):
    lesson = ineffective_run(tmp_path)
    second, events = session(tmp_path, "R2")
    look, calls = looked("fail", PAM_TEST, MINLEN_TEST)  # the same host: pam_pwquality still missing
    decision = second.decide(MINLEN, "accounts", llm=False, look=look)
    assert (decision.action, decision.lesson, decision.reason) == ("classify", lesson, "fix_ineffective")
    assert decision.checks == ("oval:ssg-test_password_pam_pwquality:tst:1 false does not exist",)
    assert calls == ["fail"] and "still fails" in decision.detail
    [cause] = [e["data"] for e in read_events(events.path) if e["event"] == "memory_cause"]
    assert (cause["lesson"], cause["stands"]) == (lesson, True)


def test_a_failed_fix_whose_cause_is_gone_is_tried_again_and_retired_when_it_passes(tmp_path):
    lesson = ineffective_run(tmp_path)
    second, events = session(tmp_path, "R2")
    look, calls = looked("fail", MINLEN_TEST)  # libpam-pwquality is installed here: only minlen fails
    assert second.decide(MINLEN, "accounts", llm=False, look=look) is None  # worked as if nothing were known
    [cause] = [e["data"] for e in read_events(events.path) if e["event"] == "memory_cause"]
    assert cause["stands"] is False and "pam_pwquality" in cause["why"]
    assert second.counts["shown"] == 0  # no act row: memory did not decide
    done = second.learn({"rule": "accounts_password_pam_minlen", "outcome": "remediated", "reason": "verified",
                         "attempts": 1, "category": "accounts", "detail": "", "attempt_log": [], "from_memory": None},
                        [], from_memory=False)
    assert done["retired"] == [lesson]
    third, _events = session(tmp_path, "R3")
    assert third.decide(MINLEN, "accounts", llm=False, look=looked("fail", PAM_TEST)[0]) is None  # retired: nothing decides


def test_a_cause_gone_but_the_fix_still_failing_weakens_the_lesson(tmp_path):
    lesson = ineffective_run(tmp_path)
    second, _events = session(tmp_path, "R2")
    assert second.decide(MINLEN, "accounts", llm=True, look=looked("pass")[0]) is None  # passes now: nothing to skip
    done = second.learn({"rule": "accounts_password_pam_minlen", "outcome": "escalated", "reason": "fix_ineffective",
                         "attempts": 1, "category": "accounts", "detail": "", "attempt_log": [], "from_memory": None},
                        [], from_memory=False)
    assert done["weakened"] == [lesson]
    with second.store.snapshot() as tx:
        [doc] = tx.lessons.search(Query().id == lesson)
    assert (doc["status"], doc["weight"]) == ("confirmed", 0.45)  # 0.5 - 0.05, one step


# ----------------------------------------------------------------------------- preconditions (issue 19 item 4)
AIDE = "xccdf_org.ssgproject.content_rule_aide_build_database"
AIDE_TASKS = [{"ansible.builtin.lineinfile": {"path": "/etc/aide/aide.conf", "line": "database_out=file:/var/lib/aide"}},
              {"ansible.builtin.command": {"cmd": "aideinit -y -f"}}]


def proven_aide(tmp_path):
    first, _events = session(tmp_path, "R1")
    entry = {"rule": "aide_build_database", "outcome": "remediated", "reason": "verified", "attempts": 1,
             "category": "aide", "detail": "", "attempt_log": [], "from_memory": None}
    record = {"number": 1, "source": "worker", "tasks": AIDE_TASKS, "gate": None, "gate_refusals": [],
              "report": {"ok": True, "changed": True, "error": None, "modules": [], "task_results": []},
              "verdict": "passed", "reason": "verified", "detail": "", "result": "pass", "reflection": None}
    return first.learn(entry, [record], from_memory=False)["created"][0]


def test_a_proven_fix_is_not_replayed_while_a_precondition_is_missing(tmp_path):
    lesson = proven_aide(tmp_path)
    second, events = session(tmp_path, "R2")
    asked = []

    def missing(needs):
        asked.append(needs)
        return [n for n in needs if n["kind"] == "command"]  # aide is not installed here
    assert second.decide(AIDE, "aide", llm=True, missing=missing) is None
    assert asked == [[{"kind": "file", "name": "/etc/aide/aide.conf"}, {"kind": "command", "name": "aideinit"}]]
    [event] = [e["data"] for e in read_events(events.path) if e["event"] == "memory_precondition"]
    assert (event["lesson"], event["missing"]) == (lesson, [{"kind": "command", "name": "aideinit"}])
    assert second.counts["shown"] == 0  # no act row: a replay that was not made judges nothing
    third, _events = session(tmp_path, "R3")
    decision = third.decide(AIDE, "aide", llm=True, missing=lambda needs: [])
    assert (decision.action, decision.lesson, decision.tasks) == ("try_first", lesson, AIDE_TASKS)


def test_one_write_transaction_per_finished_rule(tmp_path):
    """Issue 19 item 7: the usage rows of decide and saw are written with the rule's learn, in
    its one transaction, before its outcome is stamped on them; a rule that never reached
    learn has its rows written by close."""
    first, _events = session(tmp_path, "R1")
    lesson = first.learn(ENTRY, [], from_memory=False)["created"][0]
    second, _events = session(tmp_path, "R2")
    transactions = []
    real = second.store.transaction

    def counted(*args, **kwargs):
        transactions.append(1)
        return real(*args, **kwargs)
    second.store.transaction = counted
    assert second.decide(RULE, "kernel", llm=False).lesson == lesson
    second.saw(RULE, "kernel", 1, [lesson], None)
    assert transactions == [] and second.counts["shown"] == 1
    assert second.learn(dict(ENTRY, from_memory=lesson), [], from_memory=True) == {
        "created": [], "supported": [], "reinforced": [], "confirmed": []}
    assert len(transactions) == 1
    with second.store.snapshot() as view:
        rows = view.usage.all()
    assert sorted((r["attempt"], r["mode"], r["outcome"], r["from_memory"]) for r in rows) == [
        (0, "act", "escalated", True), (1, "inject", "escalated", True)]
    other = "xccdf_org.ssgproject.content_rule_sysctl_kernel_dmesg_restrict"
    second.saw(other, "kernel", 1, [lesson], None)  # the run stops before this rule ends
    assert second.close()["state"] == "on" and len(transactions) == 2
    with second.store.snapshot() as view:
        rows = view.usage.all()
    assert [(r["rule"], r["outcome"]) for r in rows if r["rule"] != ENTRY["rule"]] == [("sysctl_kernel_dmesg_restrict", None)]


# ----------------------------------------------------------------------------- a busy lock (issue 19 item 7)
HOLD = "import filelock, sys, time; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(60)"


def hold(lock_path):
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-c", HOLD, lock_path], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_busy_lock_keeps_the_lessons_and_writes_them_at_the_next_chance(tmp_path):
    first, events = session(tmp_path, "R1")
    first.store.lock_timeout = 0.3
    first.learn(dict(ENTRY, rule="sysctl_fs_protected_fifos"), [], from_memory=False)  # the store exists
    holder = hold(first.store.lock_path)
    try:
        assert first.learn(ENTRY, [], from_memory=False) == {}  # 32 hosts queue for one lock
        assert first.state == "degraded" and "lessons are kept" in first.reason
        assert [e["data"]["kept"] for e in read_events(events.path) if e["event"] == "memory_busy"] == [1]
    finally:
        holder.kill()
        holder.wait()
    done = first.learn(dict(ENTRY, rule="sysctl_kernel_dmesg_restrict"), [], from_memory=False)
    assert done["supported"]  # the caution, with evidence from this rule too
    with first.store.snapshot() as tx:
        named = {row["rule"] for row in tx.evidence.all()}
    assert named == {"sysctl_fs_protected_fifos", "sysctl_kernel_kptr_restrict", "sysctl_kernel_dmesg_restrict"}
    block = first.close()
    assert (block["state"], block["reason"]) == ("degraded", "the store's lock was busy for a while (other hosts "
                                                             "held it): every lesson was written later")


def test_a_lock_busy_through_the_end_of_the_run_says_what_was_not_written(tmp_path):
    first, _events = session(tmp_path, "R1")
    first.store.lock_timeout = 0.1
    first.learn(dict(ENTRY, rule="sysctl_fs_protected_fifos"), [], from_memory=False)
    holder = hold(first.store.lock_path)
    try:
        first.learn(ENTRY, [], from_memory=False)
        block = first.close()  # waits 10 x 0.1 s
    finally:
        holder.kill()
        holder.wait()
    assert block["state"] == "off" and "the lessons of 1 finished rules were not written" in block["reason"]


def test_a_proven_vendor_fix_is_not_checked_for_preconditions(tmp_path):
    # the loop runs the content's fix as usual (re-rendered, not replayed): a check would cost a
    # command per rule and say nothing (run 2 of the closing note made 75 such checks before)
    first, _events = session(tmp_path, "R1")
    entry = {"rule": "aide_build_database", "outcome": "remediated", "reason": "verified", "attempts": 1,
             "category": "aide", "detail": "", "attempt_log": [], "from_memory": None}
    record = {"number": 1, "source": "vendor", "tasks": AIDE_TASKS, "gate": None, "gate_refusals": [],
              "report": {"ok": True, "changed": True, "error": None, "modules": [], "task_results": []},
              "verdict": "passed", "reason": "verified", "detail": "", "result": "pass", "reflection": None}
    first.learn(entry, [record], from_memory=False)
    second, _events = session(tmp_path, "R2")
    asked = []
    decision = second.decide(AIDE, "aide", llm=True, missing=lambda needs: asked.append(needs) or needs)
    assert (decision.action, decision.source, asked) == ("try_first", "vendor", [])
