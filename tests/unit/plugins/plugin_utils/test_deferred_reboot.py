"""Deferred reboot-required fixes (issue 8 item 6): the final reasons after a reboot, which
rules wait for one, and when the loop reboots (the host replaced by stubs)."""

from __future__ import annotations

import types

import pytest

import module_docs

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes, skills, task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import LOOP_ACTIONS, TaskListExecutor
from ansible_collections.scapforge.remediation.plugins.plugin_utils.console import ConsoleProgress
from ansible_collections.scapforge.remediation.plugins.plugin_utils.loop import LoopOptions
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.deferred import DeferredPhase
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.state import RunState, Sinks
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.verifier import Verifier

R = "xccdf_org.ssgproject.content_rule_"


@pytest.mark.parametrize("value, reason", [
    ("pass", "verified_after_reboot"),
    ("fail", "fix_ineffective_after_reboot"),
    ("scanner_crash", "scanner_crash"),
    ("scan_failed", "verify_error"),
    ("missing", "verify_error"),
    ("notapplicable", "verify_error"),
    (None, "verify_error"),
])
def test_reason_after_a_reboot(value, reason):
    assert A.after_reboot_reason(value) == reason
    assert outcomes.outcome_for(reason) in (outcomes.REMEDIATED, outcomes.ESCALATED)


def test_new_reasons_belong_to_their_outcomes():
    assert outcomes.outcome_for("verified_after_reboot") == outcomes.REMEDIATED
    assert outcomes.outcome_for("fix_ineffective_after_reboot") == outcomes.ESCALATED


def test_only_deferred_reboot_required_rules_wait_for_a_reboot():
    by_rule = {
        R + "b": outcomes.RuleOutcome.of(R + "b", "reboot_required"),
        R + "a": outcomes.RuleOutcome.of(R + "a", "verified"),
        R + "c": outcomes.RuleOutcome.of(R + "c", "fix_ineffective"),
        R + "d": outcomes.RuleOutcome.of(R + "d", "reboot_required"),
    }
    assert outcomes.deferred_for_reboot(by_rule) == [R + "b", R + "d"]
    assert outcomes.deferred_for_reboot({}) == []


def test_the_executor_runs_only_the_loops_own_actions():
    assert LOOP_ACTIONS == {"ansible.builtin.reboot", "ansible.builtin.fetch"}  # fetch: the scans' ARF
    executor = TaskListExecutor.__new__(TaskListExecutor)
    with pytest.raises(ValueError, match="not an action the loop runs itself"):
        executor.run_loop_action("ansible.builtin.command", {"cmd": "reboot"})
    # a fix can still never reboot: the gate refuses it whoever wrote it
    assert any("reboot" in p for p in task_gate.validate([{"ansible.builtin.reboot": {}}], trusted=True))
    assert task_gate.validate([{"ansible.builtin.fetch": {"src": "/etc/shadow", "dest": "/tmp/x"}}], trusted=True)


# -- DeferredPhase with the host replaced by stubs --------------------------------------------
class _Events:
    def __init__(self):
        self.seen = []

    def emit(self, event, **data):
        self.seen.append((event, data))


class _Harness:
    """A DeferredPhase over a real RunState and Verifier, with the scanner and the reboot stubbed."""

    def __init__(self, allow_reboot, check_mode, reboot_problem, scan, skill_root):
        self.events = _Events()
        self.screen = []  # the console's progress lines
        console = ConsoleProgress("lab1", types.SimpleNamespace(display=self.screen.append,
                                                                verbose=lambda msg, caplevel=0: None))
        catalog = types.SimpleNamespace(expand_requires=list, rule=lambda rule_id: types.SimpleNamespace(
            short_id=rule_id[len(R):], group_path=("kernel",)))
        skill = skills.load_skill(skill_root[1], root=skill_root[0]) if skill_root else skills.load_skill("anssi-debian12")
        self.scanned, self.reboots = [], []

        def fake_scan(rules, evidence=False):
            self.scanned.append(list(rules))
            return scan if scan is not None else {"rules": {R + "a": "pass", R + "b": "fail"}}

        self.state = RunState(Sinks(self.events, console), lambda rule_id: "kernel")
        ctx = types.SimpleNamespace(
            opts=LoopOptions(datastream="ds", profile="p", allow_reboot=allow_reboot), check_mode=check_mode,
            parent=types.SimpleNamespace(check=lambda: None), skill=skill, emit=self.events.emit,
            verifier=Verifier(types.SimpleNamespace(scan=fake_scan), catalog, self.events))
        self.phase = DeferredPhase(ctx, self.state)

        def fake_reboot(rules):
            self.reboots.append(list(rules))
            self.state.rebooted = {"rules": rules, "seconds": 12.5, "ok": reboot_problem is None,
                                   "detail": reboot_problem or ""}
            return reboot_problem

        self.phase._reboot = fake_reboot
        self.state.outcomes.update({
            R + "a": outcomes.RuleOutcome.of(R + "a", "reboot_required", attempts=1, modules=["ansible.posix.sysctl"],
                                             attempt_log=[{"attempt": 1, "verdict": "ineffective"}]),
            R + "b": outcomes.RuleOutcome.of(R + "b", "reboot_required", attempts=1),
            R + "c": outcomes.RuleOutcome.of(R + "c", "verified", attempts=1),
        })

    @property
    def outcomes(self):
        return self.state.outcomes

    @outcomes.setter
    def outcomes(self, value):
        self.state.outcomes = value

    @property
    def stopped(self):
        return self.state.stopped

    @stopped.setter
    def stopped(self, value):
        self.state.stopped = value

    def _settle_deferred(self):
        self.phase.run()


def _loop(allow_reboot=True, check_mode=False, reboot_problem=None, scan=None, skill_root=None):
    return _Harness(allow_reboot, check_mode, reboot_problem, scan, skill_root)


def test_allowed_reboot_happens_once_and_verifies_exactly_the_deferred_rules():
    loop = _loop()
    loop._settle_deferred()
    assert loop.reboots == [[R + "a", R + "b"]]
    assert loop.scanned == [[R + "a", R + "b"]]
    a, b = loop.outcomes[R + "a"], loop.outcomes[R + "b"]
    assert (a.outcome, a.reason) == ("remediated", "verified_after_reboot")
    assert (b.outcome, b.reason) == ("escalated", "fix_ineffective_after_reboot")
    assert a.attempts == 1 and a.modules == ["ansible.posix.sysctl"] and a.attempt_log  # the history stays
    assert "after the reboot (12.5 s) OpenSCAP reports pass" in a.detail
    assert loop.outcomes[R + "c"].reason == "verified"
    assert outcomes.deferred_for_reboot(loop.outcomes) == []
    verified = [d for e, d in loop.events.seen if e == "verify"]
    assert [(d["rule"], d["result"], d["label"]) for d in verified] == [
        ("a", "pass", "after_reboot"), ("b", "fail", "after_reboot")]


@pytest.mark.parametrize("kwargs", [dict(allow_reboot=False), dict(check_mode=True)])
def test_no_reboot_without_permission_or_in_check_mode(kwargs):
    loop = _loop(**kwargs)
    loop._settle_deferred()
    assert loop.reboots == [] and loop.scanned == []
    assert outcomes.deferred_for_reboot(loop.outcomes) == [R + "a", R + "b"]


def test_no_reboot_on_a_stopped_host_or_without_deferred_rules():
    loop = _loop()
    loop.stopped = "unhealthy"
    loop._settle_deferred()
    loop2 = _loop()
    loop2.outcomes = {R + "c": outcomes.RuleOutcome.of(R + "c", "verified")}
    loop2._settle_deferred()
    assert loop.reboots == [] and loop2.reboots == []


def test_a_host_that_does_not_come_back_is_stopped_and_its_rules_stay_deferred():
    loop = _loop(reboot_problem="Timed out waiting for last boot time check (timeout=600)")
    loop._settle_deferred()
    assert loop.scanned == []
    assert "the reboot for the deferred fixes (a, b) failed: Timed out" in loop.stopped
    assert outcomes.deferred_for_reboot(loop.outcomes) == [R + "a", R + "b"]


def test_a_failed_verification_after_the_reboot_is_a_verify_error():
    loop = _loop(scan={"failed": True, "error_kind": "oscap_error", "msg": "boom"})
    loop._settle_deferred()
    assert {o.reason for r, o in loop.outcomes.items() if r != R + "c"} == {"verify_error"}
    assert loop.stopped is None


RESOLVE = '''
def resolve_deferred(rule_ids, results):
    if rule_ids == ["boom"]:
        raise KeyError("x")
    return {"a": "verified", "b": "no_such_reason", "zz": "verified"}
'''


def test_the_skill_hook_settles_what_stays_deferred_and_a_bad_answer_changes_nothing(tmp_path):
    import shutil

    shutil.copytree(skills.SKILLS_ROOT + "/anssi-debian12", tmp_path / "anssi-debian12")
    (tmp_path / "anssi-debian12" / "hooks.py").write_text(RESOLVE)
    loop = _loop(allow_reboot=False, skill_root=(str(tmp_path), "anssi-debian12"))
    loop._settle_deferred()
    assert loop.reboots == []
    a, b = loop.outcomes[R + "a"], loop.outcomes[R + "b"]
    assert (a.outcome, a.reason, a.attempts) == ("remediated", "verified", 1)
    assert a.detail == "settled by the skill's resolve_deferred hook"
    assert (b.outcome, b.reason) == ("deferred", "reboot_required")
    failed = [d for e, d in loop.events.seen if e == "hook_failed"]
    assert failed == [{"name": "resolve_deferred", "error": "ignored 'b': 'no_such_reason'"},
                      {"name": "resolve_deferred", "error": "ignored 'zz': 'verified'"}]
    loop = _loop(allow_reboot=False, skill_root=(str(tmp_path), "anssi-debian12"))
    loop.outcomes = {R + "boom": outcomes.RuleOutcome.of(R + "boom", "reboot_required")}
    loop._settle_deferred()
    assert loop.outcomes[R + "boom"].reason == "reboot_required"
    assert [d for e, d in loop.events.seen if e == "hook_failed"] == [{"name": "resolve_deferred", "error": "KeyError: 'x'"}]


def test_allow_reboot_flows_from_the_role_to_the_loop_as_deadman_seconds_does():
    import ast
    import pathlib

    import yaml

    root = pathlib.Path(__file__).resolve().parents[4]

    def constants(path):  # module-level literals, read without importing the plugin
        tree = ast.parse((root / path).read_text())
        return {n.targets[0].id: ast.literal_eval(n.value) for n in tree.body
                if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id in ("DOCUMENTATION", "ARGUMENT_SPEC", "_PASSED_AS_IS")}

    action = dict(constants("plugins/action/ralph.py"), **constants("plugins/module_utils/ralph_options.py"))
    docs = module_docs.options("ralph")
    assert set(docs) == set(action["ARGUMENT_SPEC"])  # the documentation parses and names every option
    assert docs["allow_reboot"]["default"] is False and action["ARGUMENT_SPEC"]["allow_reboot"]["default"] is False
    assert "allow_reboot" in action["_PASSED_AS_IS"] and LoopOptions(datastream="d", profile="p").allow_reboot is False
    role = root / "roles" / "remediate"
    assert yaml.safe_load((role / "defaults" / "main.yml").read_text())["scapforge_allow_reboot"] is False
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert spec["scapforge_allow_reboot"]["default"] is False
    ralph = next(t for t in yaml.safe_load((role / "tasks" / "main.yml").read_text())
                 if "block" in t for t in t["block"] if "scapforge.remediation.ralph" in t)
    assert ralph["scapforge.remediation.ralph"]["allow_reboot"] == "{{ scapforge_allow_reboot }}"
