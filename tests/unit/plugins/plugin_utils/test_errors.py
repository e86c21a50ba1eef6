"""One error base with a machine-readable kind, health verdict codes and the restore's
``missing`` flag (issue 16 item 4): the engine decides on codes, never on prose."""
import importlib
import pickle
import types
from pathlib import Path

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import errors
from ansible_collections.scapforge.remediation.plugins.plugin_utils import health as H
from ansible_collections.scapforge.remediation.plugins.plugin_utils.answers import AnswerError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import (
    CheckpointError, FilesProvider, RestoreResult, _check_id)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import ControllerGone, LoopError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.llm import ERROR_KINDS, LLMError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._host.session import ActionSession
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import resume
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.errors import (
    MemoryCorrupt, MemorySchemaError, MemoryStoreError)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.lessons import LessonError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.probes import ProbeRefused, probe_task
from ansible_collections.scapforge.remediation.plugins.plugin_utils.prompts import PromptError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.shell_split import ShellParseError, split_shell
from ansible_collections.scapforge.remediation.plugins.plugin_utils.skills import SkillError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.task_gate import TaskParseError, parse_task_text
from ansible_collections.scapforge.remediation.plugins.plugin_utils.waivers import WaiverError, parse

ScapforgeError = errors.ScapforgeError
PLUGINS = Path(errors.__file__).parents[1]
PACKAGE = "ansible_collections.scapforge.remediation.plugins"


def controller_modules():
    """Every module under plugins/plugin_utils and plugins/action, imported."""
    names = []
    for folder in ("plugin_utils", "action"):
        for path in sorted((PLUGINS / folder).rglob("*.py")):
            parts = list(path.relative_to(PLUGINS).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names.append(".".join([PACKAGE] + parts))
    return [importlib.import_module(name) for name in names]


#: imported while pytest collects, before a test installs Ansible's collection finder (which
#: then answers the imports of this collection and fails on it: it was not loaded as one)
MODULES = controller_modules()


def exception_classes():
    """{qualified name: class} of every exception class defined in those modules."""
    found = {}
    for module in MODULES:
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                found["%s.%s" % (module.__name__[len(PACKAGE) + 1:], value.__name__)] = value
    return found


# ---------------------------------------------------------------------- one base

def test_every_controller_exception_derives_from_the_one_base():
    classes = exception_classes()
    # the walk finds the classes it is meant to judge (a broken walk would pass vacuously)
    assert {"plugin_utils.host_setup.LoopError", "plugin_utils.llm.LLMError", "plugin_utils.checkpoint.CheckpointError",
            "plugin_utils.memory.errors.MemoryCorrupt", "plugin_utils.memory.store._CorruptFile",
            "plugin_utils.task_gate.TaskParseError", "plugin_utils.errors.ScapforgeError"} <= set(classes)
    assert len(classes) >= 19
    assert sorted(name for name, cls in classes.items() if not issubclass(cls, ScapforgeError)) == []


def test_every_class_has_a_documented_snake_case_kind():
    for name, cls in exception_classes().items():
        if cls is ScapforgeError:
            continue
        assert cls.__name__ in errors.__doc__, "%s is missing from errors.py's table of kinds" % name
        assert isinstance(cls.kind, str) and cls.kind.replace("_", "").isalpha() and cls.kind.islower(), name


def test_target_side_code_does_not_import_the_controller_base():
    for folder in ("module_utils", "modules"):
        for path in (PLUGINS / folder).glob("*.py"):
            assert "plugin_utils" not in path.read_text(), path


@pytest.mark.parametrize("cls, kind", [
    (ControllerGone, "controller_gone"), (CatalogError, "content"), (SkillError, "skill"), (PromptError, "prompts"),
    (WaiverError, "waiver"), (ProbeRefused, "probe_refused"), (AnswerError, "bad_answer"),
    (ShellParseError, "shell_parse"), (TaskParseError, "task_parse"), (LessonError, "lesson"),
    (MemoryStoreError, "memory"), (H.HealthError, "baseline"),
])
def test_single_kind_classes(cls, kind):
    exc = cls("what happened")
    assert (exc.kind, str(exc), exc.message) == (kind, "what happened", "what happened")


@pytest.mark.parametrize("cls", [ProbeRefused, AnswerError, ShellParseError, TaskParseError, WaiverError, LessonError])
def test_the_value_errors_stay_value_errors(cls):
    with pytest.raises(ValueError):
        raise cls("x")


def test_loop_error_kind_is_its_reason():
    exc = LoopError("skill", "no skill named nope")
    assert (exc.kind, exc.reason, str(exc)) == ("skill", "skill", "no skill named nope")
    assert LoopError("unhealthy_before", "x").kind == "unhealthy_before"


def test_llm_error_kind_is_one_of_its_kinds():
    exc = LLMError("timeout", "no answer within 120 s")
    assert (exc.kind, exc.status, str(exc)) == ("timeout", None, "no answer within 120 s")
    assert LLMError("auth", "401", status=401).status == 401
    assert "timeout" in ERROR_KINDS
    with pytest.raises(ValueError, match="unknown LLMError kind"):
        raise LLMError("nope", "x")


def test_checkpoint_error_kind_is_the_modules_error_kind_or_module_failed():
    assert CheckpointError("checkpoint c-1 restore: gone", "missing").kind == "missing"
    assert CheckpointError("checkpoint c-1 restore: module crashed").kind == "module_failed"
    assert CheckpointError("x", None).kind == "module_failed"
    with pytest.raises(CheckpointError) as err:
        _check_id("../etc")
    assert err.value.kind == "bad_id"


def test_real_raises_carry_their_kind():
    with pytest.raises(ProbeRefused) as refused:
        probe_task({"command": "rm -rf /"})
    assert refused.value.kind == "probe_refused"
    with pytest.raises(ShellParseError) as split:
        split_shell(42)
    assert split.value.kind == "shell_parse"
    with pytest.raises(WaiverError) as waiver:
        parse([{"rule": "x"}])
    assert waiver.value.kind == "waiver"
    with pytest.raises(TaskParseError) as task:
        parse_task_text("- name: [unclosed")
    assert task.value.kind == "task_parse"


def test_memory_errors_keep_their_kind_and_fields_through_pickle():
    corrupt = pickle.loads(pickle.dumps(MemoryCorrupt("lessons", "/m/lessons.json.corrupt-x", "empty file")))
    assert (corrupt.kind, corrupt.table, corrupt.reason) == ("memory_corrupt", "lessons", "empty file")
    assert isinstance(corrupt, MemoryStoreError)
    schema = pickle.loads(pickle.dumps(MemorySchemaError(3, 2, "newer")))
    assert (schema.kind, schema.found, schema.supported) == ("memory_schema", 3, 2)


def test_a_raise_may_name_its_own_kind():
    assert ScapforgeError("x").kind == "error"
    assert ScapforgeError("x", kind="special").kind == "special"
    assert CatalogError("x", kind="profile").kind == "profile"
    assert CatalogError.kind == "content"  # the instance's kind does not leak into the class


# ---------------------------------------------------------------------- health verdict codes

NONCE_LINE = "N="


class FakeConn:
    """What check_host uses of a fresh connection: exec_command, become, _shell, close."""

    def __init__(self, rc=0, stderr=b"", raises=None, become=True):
        self.rc, self.stderr, self.raises = rc, stderr, raises
        self.become = types.SimpleNamespace(name="sudo", build_become_command=lambda cmd, shell: "sudo -n " + cmd) \
            if become else None
        self._shell = None

    def set_option(self, *_args):
        pass

    def get_option(self, name):
        return "lab5" if name == "host" else ""

    def exec_command(self, command, sudoable=False):
        if self.raises:
            raise self.raises
        return self.rc, b"", self.stderr

    def close(self):
        pass


def check_host_with(monkeypatch, conn):
    monkeypatch.setattr(H, "fresh_connection", lambda session: conn)
    return H.check_host(object())


def test_a_passing_login_has_no_code(monkeypatch):
    report = check_host_with(monkeypatch, FakeConn())
    assert (report.healthy, report.codes, report.code) == (True, [], "ok")
    assert "codes" not in report.to_dict()


def test_become_exiting_non_zero_is_become_failed(monkeypatch):
    report = check_host_with(monkeypatch, FakeConn(rc=1, stderr=b"sudo: a password is required"))
    assert (report.healthy, report.codes) == (False, ["become_failed"])
    assert report.to_dict()["codes"] == ["become_failed"]


def test_without_become_a_non_zero_probe_is_login_failed(monkeypatch):
    report = check_host_with(monkeypatch, FakeConn(rc=126, become=False))
    assert (report.healthy, report.codes) == (False, ["login_failed"])


def test_a_raising_login_is_login_failed_and_nothing_answering_is_unreachable(monkeypatch):
    from ansible.errors import AnsibleConnectionFailure
    refused = check_host_with(monkeypatch, FakeConn(raises=AnsibleConnectionFailure(
        "Failed to connect to the host via ssh: ssh: connect to host lab5 port 2299: Connection refused")))
    assert refused.codes == ["unreachable"]
    denied = check_host_with(monkeypatch, FakeConn(raises=AnsibleConnectionFailure(
        "Failed to connect to the host via ssh: scapforge@lab5: Permission denied (publickey).")))
    assert denied.codes == ["login_failed"]


class FakeAction:
    """What check_sshd_config uses of the action: the connection's name and one command."""

    def __init__(self, rc, stdout="SSHD_PID=4242\n", raises=None):
        self._connection = types.SimpleNamespace(_load_name="ansible.builtin.ssh")
        self.rc, self.stdout, self.raises, self.commands = rc, stdout, raises, []

    def _low_level_execute_command(self, cmd, sudoable=False):
        self.commands.append(cmd)
        if self.raises and not cmd.startswith("kill"):
            raise self.raises
        return {"rc": self.rc, "stdout": self.stdout, "stderr": "line 3: Bad configuration option: Nope"}


def sshd_check(monkeypatch, action, login=None):
    monkeypatch.setattr(H, "check_host", lambda session, port=None: login)
    return H.check_sshd_config(ActionSession(action, {}))


def test_sshd_check_codes(monkeypatch):
    assert sshd_check(monkeypatch, FakeAction(97)).codes == ["sshd_config_invalid"]
    assert sshd_check(monkeypatch, FakeAction(99)).codes == ["sshd_check_unproven"]
    assert sshd_check(monkeypatch, FakeAction(0, raises=OSError("gone"))).codes == ["sshd_check_failed"]
    unproven = sshd_check(monkeypatch, FakeAction(0), H.HealthReport(False, "x", 0.1, codes=["unreachable"]))
    assert (unproven.healthy, unproven.codes) == (True, ["sshd_check_unproven"])
    become = sshd_check(monkeypatch, FakeAction(0), H.HealthReport(False, "x", 0.1, codes=["become_failed"]))
    assert (become.healthy, become.codes) == (False, ["sshd_become_failed"])
    login = sshd_check(monkeypatch, FakeAction(0), H.HealthReport(False, "x", 0.1, codes=["login_failed"]))
    assert (login.healthy, login.codes) == (False, ["sshd_login_failed"])
    fine = sshd_check(monkeypatch, FakeAction(0), H.HealthReport(True, "fresh login and sudo ok", 0.1))
    assert (fine.healthy, fine.codes) == (True, [])


def test_the_decision_reads_the_code_not_the_words(monkeypatch):
    """A detail that says "Connection refused" without the code is a failed login to the
    check sshd (unhealthy), not a check sshd that did not answer."""
    login = H.HealthReport(False, "ssh: connect to host lab5 port 2299: Connection refused", 0.1, codes=["login_failed"])
    report = sshd_check(monkeypatch, FakeAction(0), login)
    assert (report.healthy, report.codes) == (False, ["sshd_login_failed"])


def test_sshd_check_on_another_transport_is_healthy_with_its_caveat():
    action = types.SimpleNamespace(_connection=types.SimpleNamespace(_load_name="ansible.builtin.local"))
    report = H.check_sshd_config(ActionSession(action, {}))
    assert (report.healthy, report.codes, report.code) == (True, ["not_ssh"], "not_ssh")


def test_verdict_codes_one_per_failed_check_in_order():
    checks = {"sshd_t": {"ok": False}, "visudo_c": {"ok": True}, "pkgdb": {"ok": False}, "units": {"ok": False},
              "user_1": {"ok": False}, "user_2": {"ok": False}, "side_effects": {"ok": False},
              "script": {"ok": False}}
    findings = [{"kind": "sensitive_file", "unhealthy": True}, {"kind": "created_mode", "unhealthy": False},
                {"kind": "login_shell", "unhealthy": True}, {"kind": "sensitive_file", "unhealthy": True}]
    assert H.verdict_codes(checks, findings) == [
        "sshd_config_invalid", "package_db_broken", "unit_failed", "health_command_failed",
        "side_effect:sensitive_file", "side_effect:login_shell", "checks_incomplete"]
    assert H.verdict_codes({"visudo_c": {"ok": False}}, []) == ["sudoers_invalid"]
    assert H.verdict_codes({"sshd_t": {"ok": True}, "side_effects": {"ok": True}}, findings) == []


LOGINS = ["login_%s_%s" % (shell, who) for shell in ("sh", "bash") for who in ("root", "user")]


def test_check_after_gives_the_codes_of_what_failed(monkeypatch):
    """The whole check_after on a canned answer: a chown through a symlink to /etc/shadow and
    a failing inventory health command."""
    baseline = H.HostBaseline(user="", facts={"sshd": True, "visudo": True, "systemd": False, "pkg": "dpkg"},
                              active_units=[], pkgdb={"rc": 0, "output": ""},
                              results=dict({"user_1": {"rc": 0, "skipped": False, "detail": ""}}, **{
                                  name: {"rc": None, "skipped": True, "detail": ""} for name in LOGINS}),
                              commands=["true"],
                              files={"/etc/shadow": {"kind": "file", "mode": "0640", "uid": 0, "gid": 42,
                                                     "owner": "root", "group": "shadow"}},
                              taken_at=0.0, seconds=0.0)

    def answer(action, script):
        nonce = script.split("\n", 1)[0][len(NONCE_LINE):]
        rows = ["sshd_t 0", "visudo_c 0", "pkgdb 0", "units_failed skip", "services skip", "user_1 1"] + \
            ["%s skip" % name for name in LOGINS]
        out = ["SCAPFORGE_DATA %s files F 81a0 1000 1000 u u /etc/shadow" % nonce, "SCAPFORGE_CHECK %s files 0" % nonce]
        out += ["SCAPFORGE_CHECK %s %s" % (nonce, row) for row in rows] + ["SCAPFORGE_END " + nonce]
        return "\n".join(out) + "\n", "", 0, ""

    monkeypatch.setattr(H, "_run_script", answer)
    report = H.check_after(object(), baseline, ["true"])
    assert report.healthy is False
    assert report.codes == ["health_command_failed", "side_effect:sensitive_file"]
    assert report.code == "health_command_failed"


def test_a_report_built_without_codes_still_says_ok_or_unhealthy():
    assert H.HealthReport(True, "x", 0.0).code == "ok"
    assert H.HealthReport(False, "x", 0.0).code == "unhealthy"


# ---------------------------------------------------------------------- the restore's "missing" flag

class ModuleAction:
    """An action whose checkpoint module answers every call with ``answer``."""

    def __init__(self, answer):
        self._task = types.SimpleNamespace(check_mode=False)
        self.answer, self.calls = answer, []

    def _execute_module(self, module_name, module_args, task_vars, wrap_async=False):
        self.calls.append(module_args["state"])
        return self.answer(module_args)


def missing(args):
    return {"failed": True, "error_kind": "missing",
            "msg": "checkpoint %s does not exist under /var/lib/scapforge/checkpoints" % args["id"]}


def corrupt(args):
    # its words say "does not exist" too: only the error_kind tells the two apart
    return {"failed": True, "error_kind": "corrupt",
            "msg": "checkpoint %s: saved copy blobs/3f2a does not exist (manifest corrupt)" % args["id"]}


def test_a_restore_of_a_checkpoint_that_does_not_exist_is_flagged_missing():
    result = FilesProvider(ActionSession(ModuleAction(missing), {}), {}).attach("r-1-s1").restore()
    assert (result.verified, result.missing) == (False, True)
    assert result.to_dict()["missing"] is True


def test_a_restore_that_failed_otherwise_is_not_missing():
    result = FilesProvider(ActionSession(ModuleAction(corrupt), {}), {}).attach("r-1-s1").restore()
    assert (result.verified, result.missing) == (False, False)
    assert "missing" not in result.to_dict()  # the reports' restore entries keep their keys


def test_a_failure_whose_words_say_does_not_exist_is_not_missing():
    """The flag comes from the module's error_kind, not from the message's words."""
    action = ModuleAction(lambda args: {"failed": True, "error_kind": "io_error", "msg": "/etc/x does not exist"})
    result = FilesProvider(ActionSession(action, {}), {}).attach("r-1").restore()
    assert result.missing is False


def test_restore_result_missing_defaults_false():
    assert RestoreResult(True).missing is False


def settle(answer):
    """resume.settle on one open attempt, the checkpoint module answering ``answer``
    (no switch armed); returns (what it found, the progress lines it wrote)."""
    action = ModuleAction(lambda args: {"deadman": {}} if args["state"] == "status" else answer(args))
    written = []
    ctx = types.SimpleNamespace(runner=types.SimpleNamespace(checkpoints=FilesProvider(ActionSession(action, {}), {})),
                                progress=types.SimpleNamespace(append=lambda kind, **kw: written.append((kind, kw))))
    entry = {"rule": "xccdf_org.ssgproject.content_rule_r", "attempt": 1, "checkpoint": "r-1-s1"}
    return resume.settle(ctx, entry), written


def test_resume_settles_a_missing_checkpoint_as_nothing_to_roll_back():
    found, written = settle(missing)
    assert (found["rolled_back"], found["by"]) == (None, None)
    assert written == [("close", {"rule": "xccdf_org.ssgproject.content_rule_r", "attempt": 1})]


def test_resume_does_not_close_an_attempt_whose_restore_failed():
    found, written = settle(corrupt)
    assert (found["rolled_back"], found["by"]) == (False, "resume")
    assert written == []
