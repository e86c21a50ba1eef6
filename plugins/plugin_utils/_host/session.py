"""One host session: the only code that touches the private members of Ansible's ActionBase.

The engine (scans, fixes, checkpoints, health checks) reaches the host through this object
alone, as kubernetes.core's service reaches the API through its client. ansible-core keeps
``_execute_module``, ``_low_level_execute_command``, ``_connection``, ``_play_context``,
``_task``, ``_loader``, ``_templar`` and ``_shared_loader_obj`` private; when a core renames
one, this file is the one to change (tests/unit/test_host_session.py fails if another plugin
file uses them).

:class:`HostSession` is the typing Protocol; :class:`ActionSession` is the implementation
over a running action plugin. Test fakes implement the Protocol.
"""

from __future__ import annotations

import dataclasses
import typing as t

__all__ = ["AnsibleParts", "HostSession", "ActionSession"]


@dataclasses.dataclass(frozen=True)
class AnsibleParts:
    """The Ansible objects the executor loads and runs tasks with (Block/Task loading, the
    action loader, a handler's connection and templar): the running task, its play context,
    connection, data loader, templar and shared plugin loader object."""

    task: t.Any
    play_context: t.Any
    connection: t.Any
    loader: t.Any
    templar: t.Any
    shared_loader_obj: t.Any


class HostSession(t.Protocol):
    """What the engine may do on the host."""

    task_vars: dict

    @property
    def host(self) -> str:
        """The inventory hostname."""

    @property
    def check_mode(self) -> bool:
        """True when the play runs in check mode (``--check``)."""

    @property
    def connection_name(self) -> str | None:
        """The connection plugin's load name (``ssh``, ``mitogen_ssh`` ...)."""

    @property
    def become_method(self) -> str | None:
        """The play's become method, None without become."""

    def remote_user(self) -> str | None:
        """The user the controller logs in as."""

    def execute_module(self, name: str, args: dict, task_vars: dict | None = None, **kwargs: t.Any) -> dict:
        """Run a module on the host (``ActionBase._execute_module``) and return its result."""

    def run_command(self, command: str, sudoable: bool = True, in_data: bytes | None = None) -> dict:
        """Run a shell command on the host (``rc``, ``stdout``, ``stderr``)."""

    def parts(self) -> AnsibleParts:
        """The Ansible objects behind the session, for the executor and the fresh login."""


class ActionSession:
    """A :class:`HostSession` over a running ActionBase and its host's variables."""

    def __init__(self, action: t.Any, task_vars: dict) -> None:
        self._action = action
        self.task_vars = task_vars

    @property
    def action(self) -> t.Any:
        """The action plugin itself (public members only: ``_execute_module`` and its kin go
        through this session)."""
        return self._action

    @property
    def host(self) -> str:
        return str(self.task_vars.get("inventory_hostname", "localhost"))

    @property
    def check_mode(self) -> bool:
        return bool(getattr(getattr(self._action, "_task", None), "check_mode", False))

    @property
    def connection_name(self) -> str | None:
        return getattr(getattr(self._action, "_connection", None), "_load_name", None)

    @property
    def become_method(self) -> str | None:
        return getattr(getattr(self._action, "_play_context", None), "become_method", None)

    def remote_user(self) -> str | None:
        try:
            user = self._action._connection.get_option("remote_user")
        except Exception:  # a connection plugin without that option
            user = None
        return user or self.task_vars.get("ansible_user") or getattr(self._action._play_context, "remote_user", None)

    def execute_module(self, name: str, args: dict, task_vars: dict | None = None, **kwargs: t.Any) -> dict:
        return self._action._execute_module(module_name=name, module_args=args,
                                            task_vars=self.task_vars if task_vars is None else task_vars, **kwargs)

    def run_command(self, command: str, sudoable: bool = True, in_data: bytes | None = None) -> dict:
        if in_data is None:
            return self._action._low_level_execute_command(command, sudoable=sudoable)
        return self._action._low_level_execute_command(command, sudoable=sudoable, in_data=in_data)

    def parts(self) -> AnsibleParts:
        action = self._action  # a test's stand-in may lack some: they are None then
        return AnsibleParts(task=getattr(action, "_task", None), play_context=getattr(action, "_play_context", None),
                            connection=getattr(action, "_connection", None), loader=getattr(action, "_loader", None),
                            templar=getattr(action, "_templar", None),
                            shared_loader_obj=getattr(action, "_shared_loader_obj", None))

    def remove_tmp(self) -> None:
        """Remove the connection's remote temporary directory (a dead connection is ignored:
        it must not hide the run's own result)."""
        try:
            self._action._remove_tmp_path(self._action._connection._shell.tmpdir)
        except Exception:
            pass
