"""RunState (plugins/plugin_utils/_run/state.py): one finish, one reclassify, the stop and the
time budget, emitting into the real EventLog, ConsoleProgress and Progress file (memory is a
recorder: MemorySession's own tests cover what it learns)."""

import dataclasses
import json

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.engine import RemediationLoop
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.state import RunState, Sinks
from ansible_collections.scapforge.remediation.plugins.plugin_utils.console import ConsoleProgress
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog, read_events
from ansible_collections.scapforge.remediation.plugins.plugin_utils.progress import Progress

P = "xccdf_org.ssgproject.content_rule_"
CATEGORIES = {P + "sysctl_a": "kernel", P + "sshd_b": "ssh"}


class Display:
    def __init__(self):
        self.lines = []

    def display(self, msg):
        self.lines.append(msg)

    def verbose(self, msg, caplevel=0):
        self.lines.append("v: " + msg)


class Memory:
    def __init__(self):
        self.learned = []

    def learn(self, rule_entry, attempt_records, from_memory):
        self.learned.append((rule_entry, attempt_records, from_memory))
        return {}


@pytest.fixture
def run(tmp_path):
    display, memory = Display(), Memory()
    events = EventLog(str(tmp_path / "events.jsonl"), "web1")
    progress = Progress(str(tmp_path), "web1")
    state = RunState(Sinks(events, ConsoleProgress("web1", display), progress, memory),
                     lambda rule: CATEGORIES.get(rule, "misc"), time_budget=100.0, started=1000.0)
    return state, tmp_path, display, memory


def _events(tmp_path):
    return [(e["event"], e["rule"], e["attempt"], e["data"]) for e in read_events(str(tmp_path / "events.jsonl"))]


def _progress(tmp_path):
    lines = (tmp_path / "progress" / "web1.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "time"} for line in lines]


def _ran(item, verdict, reason, modules, tasks, side_effects=(), tokens=0):
    attempt = item.new_attempt(A.VENDOR if not item.attempts else A.WORKER)
    attempt.verdict, attempt.reason, attempt.tokens = verdict, reason, tokens
    attempt.report = {"ok": True, "changed": True, "modules": list(modules), "task_results": tasks}
    attempt.side_effects = list(side_effects)
    return attempt


def test_item_is_made_once_with_its_category(run):
    state = run[0]
    item = state.item(P + "sysctl_a")
    assert (item.rule, item.category, item.attempts) == (P + "sysctl_a", "kernel", [])
    assert state.item(P + "sysctl_a") is item
    assert state.item(P + "other").category == "misc"
    assert list(state.items) == [P + "sysctl_a", P + "other"]


def test_out_of_budget_with_an_injected_clock(tmp_path):
    sinks = Sinks(EventLog(str(tmp_path / "e.jsonl"), "h"), ConsoleProgress("h", Display()))
    state = RunState(sinks, str, time_budget=100.0, started=1000.0)
    assert state.out_of_budget(now=1100.0) is False          # exactly the budget: not spent yet
    assert state.out_of_budget(now=1100.5) is True
    assert state.out_of_budget(now=1000.0) is False
    unlimited = RunState(sinks, str, time_budget=0, started=1000.0)
    assert unlimited.out_of_budget(now=10 ** 9) is False
    assert RunState(sinks, str, started=1000.0).out_of_budget(now=1005.0) is False   # no budget by default
    with pytest.raises(dataclasses.FrozenInstanceError):
        sinks.memory = object()
    assert (sinks.progress, sinks.memory) == (None, None)


def test_started_defaults_to_the_monotonic_clock(tmp_path, monkeypatch):
    from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import state as S
    monkeypatch.setattr(S.time, "monotonic", lambda: 500.0)
    state = RunState(Sinks(None, None), str, time_budget=10.0)
    assert state.started == 500.0 and state.time_budget == 10.0
    assert state.out_of_budget() is False
    monkeypatch.setattr(S.time, "monotonic", lambda: 510.5)
    assert state.out_of_budget() is True
    assert (state.queue, state.stopped, state.rebooted, state.interrupted, state.arf, state.outcomes) == \
        ([], None, None, [], {}, {})


def test_finish_emits_everywhere_exactly_once(run):
    state, tmp_path, display, memory = run
    outcome = state.finish(P + "sysctl_a", "no_effect", detail="still 1", attempts=2, modules=["ansible.posix.sysctl"])
    assert outcome == state.outcomes[P + "sysctl_a"]
    assert (outcome.outcome, outcome.reason, outcome.category, outcome.attempts) == ("escalated", "no_effect",
                                                                                     "kernel", 2)
    data = {"outcome": "escalated", "reason": "no_effect", "modules": ["ansible.posix.sysctl"], "detail": "still 1",
            "category": "kernel", "changed_tasks": [], "lessons_shown": [], "from_memory": None,
            "side_effects": [], "waiver": None, "warnings": []}
    assert _events(tmp_path) == [("rule_complete", "sysctl_a", 2, data)]
    assert display.lines == ["web1: rule 1/1 sysctl_a attempt 2: escalated [no_effect]", "v: web1:   sysctl_a: still 1"]
    assert _progress(tmp_path) == [{"kind": "outcome", "rule": P + "sysctl_a", "outcome": outcome.to_dict()}]
    assert memory.learned == [(dict(outcome.to_dict(), rule="sysctl_a"), [], False)]


def test_finish_without_attempts_says_attempt_none_and_memory_sees_from_memory(run):
    state, tmp_path, _display, memory = run
    state.finish(P + "sshd_b", "verified", from_memory="L-7")
    assert _events(tmp_path)[0][:3] == ("rule_complete", "sshd_b", None)
    assert memory.learned[0][2] is True and memory.learned[0][0]["from_memory"] == "L-7"


def test_finish_hands_memory_the_attempts_of_the_item(run):
    state, _tmp, _display, memory = run
    item = state.item(P + "sysctl_a")
    attempt = _ran(item, A.PASSED, "verified", ["ansible.posix.sysctl"], [])
    state.finish(P + "sysctl_a", "verified", attempts=1)
    assert memory.learned[0][1] == [dataclasses.asdict(attempt)]


def test_finish_tells_memory_which_agent_declared_a_cannot_fix(run):
    """Issue 18 item 1 (a mutant survived here): memory must know a cannot_fix is an agent's
    word, not an observation, to never learn it as the fix's failure."""
    state, _tmp, _display, memory = run
    state.item(P + "service_chronyd_enabled").declared_by = "worker"
    state.finish(P + "service_chronyd_enabled", "environment:no_sys_time", attempts=1)
    state.finish(P + "sysctl_a", "no_effect", attempts=1)
    assert [entry.get("declared_by") for entry, _records, _from in memory.learned] == ["worker", None]


def test_finish_in_check_mode_writes_no_progress_and_no_memory(tmp_path):
    display = Display()
    state = RunState(Sinks(EventLog(str(tmp_path / "e.jsonl"), "h"), ConsoleProgress("h", display)), str)
    state.finish("r1", "check_mode")
    assert [e["event"] for e in read_events(str(tmp_path / "e.jsonl"))] == ["rule_complete"]
    assert display.lines == ["h: rule 1/1 r1: skipped [check_mode]"]
    assert not (tmp_path / "progress").exists()


def test_finish_item_collects_the_attempts(run):
    state, tmp_path, _display, memory = run
    item = state.item(P + "sysctl_a")
    item.lessons_shown = ["L-1", "L-2"]
    _ran(item, A.INEFFECTIVE, "fix_ineffective", ["ansible.posix.sysctl", "ansible.builtin.copy"],
         [{"name": "set it", "module": "ansible.posix.sysctl", "changed": True}], side_effects=[{"a": 1}])
    refused = item.new_attempt(A.WORKER)
    refused.verdict, refused.reason, refused.gate = A.REFUSED, "fix_refused", "shell is banned"
    last = _ran(item, A.PASSED, "verified", ["ansible.builtin.lineinfile", "ansible.posix.sysctl"],
                [{"name": "edit", "module": "ansible.builtin.lineinfile", "changed": True},
                 {"name": "dry", "module": "ansible.builtin.copy", "changed": True, "check_mode": True},
                 {"name": "same", "module": "ansible.builtin.copy", "changed": False}],
                side_effects=[{"kind": "umask", "path": "/etc/x"}])
    outcome = state.finish_item(item, "verified", "y" * 900)
    assert outcome.attempts == 3
    assert outcome.modules == ["ansible.posix.sysctl", "ansible.builtin.copy", "ansible.builtin.lineinfile"]
    assert outcome.changed_tasks == ["edit (ansible.builtin.lineinfile)"]
    assert outcome.detail == "y" * 800
    assert outcome.attempt_log == [a.log_entry() for a in item.attempts] and len(outcome.attempt_log) == 3
    assert outcome.lessons_shown == ["L-1", "L-2"] and outcome.lessons_shown is not item.lessons_shown
    assert outcome.side_effects == [{"kind": "umask", "path": "/etc/x"}]
    assert outcome.side_effects is not last.side_effects
    assert [e[0] for e in _events(tmp_path)] == ["rule_complete"] and len(memory.learned) == 1


def test_finish_item_keeps_side_effects_of_a_passed_fix_only(run):
    state = run[0]
    item = state.item(P + "sysctl_a")
    _ran(item, A.INEFFECTIVE, "fix_ineffective", ["ansible.posix.sysctl"],
         [{"name": "set", "module": "ansible.posix.sysctl", "changed": True}], side_effects=[{"kind": "umask"}])
    outcome = state.finish_item(item, "fix_ineffective", "still fails")
    assert outcome.side_effects == [] and outcome.changed_tasks == ["set (ansible.posix.sysctl)"]
    assert outcome.detail == "still fails"


def test_finish_item_carries_the_scope_warnings_of_a_passed_fix_only(run):
    """Issue 17 item 7: the warnings of the attempt that stands reach the outcome, its
    event and the console line; a failed attempt's warnings do not."""
    state, tmp_path, display, _memory = run
    item = state.item(P + "sysctl_a")
    last = _ran(item, A.PASSED, "verified", ["ansible.posix.sysctl"],
                [{"name": "set", "module": "ansible.posix.sysctl", "changed": True}])
    last.warnings = ["the fix added time servers a.example to /etc/chrony/chrony.conf"]
    outcome = state.finish_item(item, "verified")
    assert outcome.warnings == ["the fix added time servers a.example to /etc/chrony/chrony.conf"]
    assert outcome.warnings is not last.warnings
    assert _events(tmp_path)[-1][3]["warnings"] == outcome.warnings
    assert display.lines[-1].endswith(": remediated [verified] 0.0 s (1 warning: the fix added time servers a.example to "
                                      "/etc/chrony/chrony.conf)")
    other = state.item(P + "sshd_b")
    failed = _ran(other, A.INEFFECTIVE, "fix_ineffective", ["m"], [])
    failed.warnings = ["x"]
    assert state.finish_item(other, "fix_ineffective").warnings == []


def test_finish_item_of_attempts_that_never_ran(run):
    state = run[0]
    item = state.item(P + "sshd_b")
    refused = item.new_attempt(A.VENDOR)
    refused.verdict, refused.reason = A.REFUSED, "fix_refused"
    refused.side_effects = [{"kind": "x"}]
    outcome = state.finish_item(item, "fix_refused")
    assert (outcome.attempts, outcome.modules, outcome.changed_tasks, outcome.side_effects, outcome.detail) == \
        (1, [], [], [], "")
    none = state.finish_item(state.item(P + "sysctl_a"), "llm_unavailable", "no endpoint")
    assert (none.attempts, none.attempt_log, none.modules) == (0, [], [])
    ran_no_tasks = state.item("r3")
    attempt = ran_no_tasks.new_attempt(A.VENDOR)
    attempt.verdict, attempt.report = A.NO_EFFECT, {"ok": True, "modules": ["m"], "task_results": None}
    assert state.finish_item(ran_no_tasks, "no_effect").changed_tasks == []


def test_reclassify_keeps_every_field_and_changes_reason_outcome_detail(run):
    state, tmp_path, display, memory = run
    waiver = {"rule": "sysctl_a", "reason": "r", "expires": "2031-01-01"}
    first = state.finish(P + "sysctl_a", "verified", attempts=2, modules=["ansible.posix.sysctl"], detail="ok",
                         changed_tasks=["set (ansible.posix.sysctl)"], attempt_log=[{"attempt": 1}, {"attempt": 2}],
                         lessons_shown=["L-1"], side_effects=[{"kind": "umask"}], from_memory="L-9", waiver=waiver,
                         warnings=["the fix added time servers a.example"])
    again = state.reclassify(P + "sysctl_a", "regressed", "fails in the final scan")
    assert (again.outcome, again.reason, again.detail) == ("escalated", "regressed", "fails in the final scan")
    kept = ("rule", "attempts", "modules", "category", "changed_tasks", "attempt_log", "lessons_shown",
            "from_memory", "side_effects", "waiver", "warnings")
    assert {f: getattr(again, f) for f in kept} == {f: getattr(first, f) for f in kept}
    assert again.warnings == ["the fix added time servers a.example"]
    assert {f.name for f in dataclasses.fields(again)} == set(kept) | {"outcome", "reason", "detail"}
    assert state.outcomes[P + "sysctl_a"] is again
    assert [(e[0], e[3]["reason"]) for e in _events(tmp_path)] == [("rule_complete", "verified"),
                                                                   ("rule_complete", "regressed")]
    assert display.lines[-1] == "web1: rule sysctl_a attempt 2: now escalated [regressed] 0.0 s"
    assert [p["outcome"]["reason"] for p in _progress(tmp_path)] == ["verified", "regressed"]
    assert [m[0]["reason"] for m in memory.learned] == ["verified", "regressed"]


def test_reclassify_of_an_unfinished_rule_is_an_error(run):
    with pytest.raises(KeyError):
        run[0].reclassify(P + "sysctl_a", "regressed", "x")


def test_stop_finishes_only_rules_without_an_outcome_and_keeps_the_first_detail(run):
    state, tmp_path, _display, memory = run
    state.finish(P + "sysctl_a", "verified", attempts=1)
    item = state.item(P + "sshd_b")
    _ran(item, A.UNHEALTHY, "unhealthy", ["ansible.builtin.lineinfile"],
         [{"name": "edit", "module": "ansible.builtin.lineinfile", "changed": True}])
    state.item("r_untried")
    state.stop("sudo lost after sshd_b", [P + "sysctl_a", P + "sshd_b", "r_untried", "r_new"])
    assert state.stopped == "sudo lost after sshd_b"
    assert state.outcomes[P + "sysctl_a"].reason == "verified"                  # finished before: untouched
    b = state.outcomes[P + "sshd_b"]                                            # has attempts: finish_item
    assert (b.reason, b.detail, b.attempts, b.changed_tasks) == ("unhealthy", "sudo lost after sshd_b", 1,
                                                                 ["edit (ansible.builtin.lineinfile)"])
    assert b.attempt_log == [item.attempts[0].log_entry()]
    for rule in ("r_untried", "r_new"):                                         # no attempts: plain finish
        o = state.outcomes[rule]
        assert (o.reason, o.detail, o.attempts, o.attempt_log) == ("unhealthy", "sudo lost after sshd_b", 0, [])
    state.stop("a later stop", ["r_later"], reason="host_stopped")
    assert state.stopped == "sudo lost after sshd_b"
    assert (state.outcomes["r_later"].reason, state.outcomes["r_later"].detail) == ("host_stopped", "a later stop")
    names = [(e[0], e[1]) for e in _events(tmp_path)]
    assert names == [("rule_complete", "sysctl_a"), ("host_stopped", None), ("rule_complete", "sshd_b"),
                     ("rule_complete", "r_untried"), ("rule_complete", "r_new"), ("host_stopped", None),
                     ("rule_complete", "r_later")]
    assert [e[3] for e in _events(tmp_path) if e[0] == "host_stopped"] == [{"detail": "sudo lost after sshd_b"},
                                                                           {"detail": "a later stop"}]
    assert len(memory.learned) == 5


def test_stop_without_rules_only_stops(run):
    state, tmp_path, _display, _memory = run
    state.stop("lost the connection")
    assert state.stopped == "lost the connection" and state.outcomes == {}
    assert [e[0] for e in _events(tmp_path)] == ["host_stopped"]


def test_outcome_of_every_reason_goes_through_finish(run):
    state = run[0]
    for reason in outcomes.REASONS:
        assert state.finish("r_" + reason, reason).outcome == outcomes.REASONS[reason][0]


def test_the_final_scan_reconciles_rules_left_for_a_human(run):
    """Issue 17 item 5, through the engine's own step and RunState.reclassify: the rule left
    for a human that passes in the final scan becomes remediated/passes_after_other_fixes
    (every sink sees it), its detail names what it was; a waived rule and one that still
    fails keep their outcomes. Fails if the engine's reconciliation is skipped."""
    state, tmp_path, display, memory = run
    state.finish(P + "sysctl_a", "llm_unavailable", detail="no Ansible fix")
    state.finish(P + "sshd_b", "waived", detail="by the owner")
    state.finish(P + "fails", "fix_failed", attempts=1, attempt_log=[{"attempt": 1, "changed": True, "rolled_back": True}])
    loop = RemediationLoop.__new__(RemediationLoop)
    loop.state = state
    loop._mark_passing({P + "sysctl_a": "pass", P + "sshd_b": "pass", P + "fails": "fail"}, "final")
    done = state.outcomes[P + "sysctl_a"]
    assert (done.outcome, done.reason, done.category) == ("remediated", "passes_after_other_fixes", "kernel")
    assert done.detail == ("passes in the final scan after other rules' fixes; it was escalated/llm_unavailable; "
                           "no fix of its own stays applied (earlier: no Ansible fix)")
    assert (state.outcomes[P + "sshd_b"].reason, state.outcomes[P + "fails"].reason) == ("waived", "fix_failed")
    assert [(e[1], e[3]["reason"]) for e in _events(tmp_path)][-1] == ("sysctl_a", "passes_after_other_fixes")
    assert display.lines[-1] == "web1: rule sysctl_a: now remediated [passes_after_other_fixes]"
    assert [p["outcome"]["reason"] for p in _progress(tmp_path)][-1] == "passes_after_other_fixes"
    assert memory.learned[-1][0]["reason"] == "passes_after_other_fixes"


def test_the_engine_marks_a_pass_on_a_package_name_without_candidate_check_unreliable(run):
    """Issue 17 item 7, through the engine's own step: of the rules passing in the final scan,
    the package-removed check on a name apt has no candidate for ends escalated/check_unreliable
    (a new outcome for a rule that passed at baseline, the skill's known defect in its
    detail); one on a name apt has stays without an outcome; one apt-cache policy is run."""
    import types

    state, tmp_path, _display, _memory = run
    policy = "dpkg:\n  Installed: 1.21\n  Candidate: 1.21\ntelnet-server:\n  Installed: (none)\n  Candidate: (none)\n" \
             "telnet:\n  Installed: (none)\n  Candidate: 0.17\n"
    commands = []

    class Session:
        def run_command(self, command, sudoable=True, in_data=None):
            commands.append(command)
            return {"rc": 0, "stdout": policy, "stderr": ""}

    catalog = types.SimpleNamespace(removed_packages={P + "telnetd_server": ("telnet-server",), P + "telnet": ("telnet",),
                                                      P + "fails": ("telnet-server",)})
    skill = types.SimpleNamespace(known_defect=lambda r: {"defect": "a virtual name", "evidence": "Candidate: (none)"}
                                  if r == P + "telnetd_server" else None)
    loop = RemediationLoop.__new__(RemediationLoop)
    loop.state, loop.session = state, Session()
    loop.ctx = types.SimpleNamespace(catalog=catalog, skill=skill, emit=lambda *a, **k: None)
    loop._mark_unreliable({P + "telnetd_server": "pass", P + "telnet": "pass", P + "fails": "fail", P + "other": "pass"})
    assert commands == ["LC_ALL=C apt-cache policy dpkg telnet telnet-server 2>/dev/null; true"]
    assert sorted(state.outcomes) == [P + "telnetd_server"]
    done = state.outcomes[P + "telnetd_server"]
    assert (done.outcome, done.reason, done.attempts) == ("escalated", "check_unreliable", 0)
    assert done.detail.endswith("; a known content defect: a virtual name (evidence: Candidate: (none))")
    assert _events(tmp_path)[-1][3]["reason"] == "check_unreliable"
