"""The host session is the one place that touches ActionBase's private members (issue 16 item 2)."""

from __future__ import annotations

import ast
import inspect
import types
import typing as t
from pathlib import Path

from ansible_collections.scapforge.remediation.plugins.plugin_utils._host import session as S

PLUGINS = Path(__file__).resolve().parents[5] / "plugins"
PRIVATE = {"_execute_module", "_low_level_execute_command", "_connection", "_play_context", "_task", "_loader",
           "_templar", "_shared_loader_obj", "_remove_tmp_path"}


def test_no_plugin_file_but_the_session_uses_actionbases_private_members():
    hits = []
    for path in sorted(PLUGINS.rglob("*.py")):
        if path == PLUGINS / "plugin_utils" / "_host" / "session.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
                hits.append("%s:%d %s" % (path.relative_to(PLUGINS), node.lineno, node.attr))
    assert hits == []


def test_the_scan_finds_a_private_member_where_there_is_one(tmp_path):
    """The walk above is not vacuous: the same check flags such a line."""
    tree = ast.parse("x = self.action._execute_module(module_name='m')\ny = task.action\n")
    assert [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in PRIVATE] == ["_execute_module"]


def _members(protocol) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")} | set(t.get_type_hints(protocol))


def test_the_action_session_implements_every_member_of_the_protocol():
    members = _members(S.HostSession)
    assert members >= {"task_vars", "host", "check_mode", "connection_name", "become_method", "remote_user",
                       "execute_module", "run_command", "parts"}
    session = S.ActionSession(types.SimpleNamespace(), {"inventory_hostname": "web1"})
    assert [m for m in sorted(members) if not hasattr(session, m)] == []
    for name in ("execute_module", "run_command"):  # the same parameters, so callers can use either
        assert list(inspect.signature(getattr(S.HostSession, name)).parameters)[1:] == \
            list(inspect.signature(getattr(S.ActionSession, name)).parameters)[1:]


class _Action:
    """A stand-in ActionBase that records how the session calls it."""

    def __init__(self):
        self.calls = []
        self._task = types.SimpleNamespace(check_mode=True)
        self._connection = types.SimpleNamespace(_load_name="mitogen_ssh", get_option=lambda name: "alice",
                                                 _shell=types.SimpleNamespace(tmpdir="/tmp/x"))
        self._play_context = types.SimpleNamespace(become_method="sudo", remote_user="bob")
        self._loader, self._templar, self._shared_loader_obj = "loader", "templar", "shared"

    def _execute_module(self, **kwargs):
        self.calls.append(("module", kwargs))
        return {"ok": 1}

    def _low_level_execute_command(self, cmd, **kwargs):
        self.calls.append(("command", cmd, kwargs))
        return {"rc": 0}

    def _remove_tmp_path(self, path):
        self.calls.append(("rm", path))


def test_the_action_session_passes_through_with_the_exact_arguments():
    action = _Action()
    session = S.ActionSession(action, {"inventory_hostname": "web1", "ansible_user": "carol"})
    assert session.execute_module("ansible.builtin.stat", {"path": "/etc"}, wrap_async=False) == {"ok": 1}
    session.execute_module("ansible.builtin.setup", {}, task_vars={"other": 1})
    session.run_command("id", sudoable=False)
    session.run_command("cat", in_data=b"x")
    session.remove_tmp()
    assert action.calls == [
        ("module", {"module_name": "ansible.builtin.stat", "module_args": {"path": "/etc"},
                    "task_vars": {"inventory_hostname": "web1", "ansible_user": "carol"}, "wrap_async": False}),
        ("module", {"module_name": "ansible.builtin.setup", "module_args": {}, "task_vars": {"other": 1}}),
        ("command", "id", {"sudoable": False}),
        ("command", "cat", {"sudoable": True, "in_data": b"x"}),
        ("rm", "/tmp/x"),
    ]
    assert (session.host, session.check_mode, session.connection_name, session.become_method) == \
        ("web1", True, "mitogen_ssh", "sudo")
    assert session.remote_user() == "alice"  # the connection's option first
    parts = session.parts()
    assert (parts.task, parts.loader, parts.templar, parts.shared_loader_obj) == \
        (action._task, "loader", "templar", "shared")


def test_remote_user_falls_back_to_the_inventory_then_the_play_context():
    action = _Action()
    action._connection = types.SimpleNamespace(get_option=lambda name: None)
    assert S.ActionSession(action, {"ansible_user": "carol"}).remote_user() == "carol"
    assert S.ActionSession(action, {}).remote_user() == "bob"
