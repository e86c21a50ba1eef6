"""One run per host at a time: the host's run lock, held for the whole run (issue 17 item 2).

The lock is a file on the target (``/var/lib/scapforge/run.lock``, the module
``scapforge.remediation.run_lock``) naming its holder: the run id, this controller's host
name, the process id of ansible-playbook (the worker's parent, which ``ParentWatch`` watches)
and that process's start time, a token, and when it was taken. It is on persistent storage,
so a crashed controller or a reboot the run made leaves it in place: the next run judges it
here (``decisions.lock_verdict``) and takes it over only when its holder is gone.
"""

from __future__ import annotations

import socket
import typing as t
import uuid

from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import utc_now
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import LoopError

MODULE = "scapforge.remediation.run_lock"
PATH = "/var/lib/scapforge/run.lock"


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks after boot, /proc/<pid>/stat field 22),
    or None when no such process runs."""
    try:
        with open("/proc/%d/stat" % int(pid), encoding="utf-8") as handle:
            stat = handle.read()
    except (OSError, ValueError, TypeError):
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def holder_alive(holder: t.Mapping, controller: str) -> bool | None:
    """Whether the holder's process still runs: None when it runs on another controller (it
    cannot be seen from here), False when its pid is gone or now names another process."""
    if holder.get("controller") != controller:
        return None
    started = process_start(holder.get("pid"))  # type: ignore[arg-type]
    if started is None:
        return False
    return not holder.get("pid_start") or str(holder.get("pid_start")) == started


class HostLock:
    """The run lock of one host's run: ``acquire()`` before the run's first look at the
    host, ``release()`` on every way out but a dead controller's. In check mode the lock is
    only read: a live holder refuses the run, nothing is written."""

    def __init__(self, session, run_id: str, pid: int, emit: t.Callable[..., t.Any]) -> None:
        self.session = session
        self.emit = emit
        self.held = False
        self.controller = socket.gethostname()
        self.me: dict[str, t.Any] = {"run_id": run_id, "controller": self.controller, "pid": pid,
                                     "pid_start": process_start(pid), "token": uuid.uuid4().hex, "started": utc_now()}

    def _call(self, **args: t.Any) -> dict:
        """The module's result; LoopError(``checkpoint``) when it fails (no root, a read-only /var)."""
        result = self.session.execute_module(MODULE, dict(args, path=PATH), wrap_async=False)
        if result.get("failed") or result.get("unreachable"):
            raise LoopError("checkpoint", "cannot take the host's run lock %s: %s" % (
                PATH, result.get("msg") or result.get("module_stderr") or "module failed"))
        return result

    def acquire(self) -> None:
        """Take the lock, or raise LoopError(``host_busy``) naming its holder, before any change."""
        check = self.session.check_mode
        result = self._call(state="locked", holder=self.me)
        if result.get("acquired"):
            self.held = not check
            self.emit("run_lock", path=PATH, taken_over=None, check_mode=check)
            return
        holder = result.get("holder") or {}
        verdict, why = decisions.lock_verdict(holder, self.me, holder_alive(holder, self.controller))
        if verdict == "refuse":
            raise LoopError("host_busy", self.busy_message(why))
        if check:  # a stale lock refuses nothing, and check mode writes nothing
            self.emit("run_lock", path=PATH, taken_over=None, stale=why, check_mode=True)
            return
        result = self._call(state="locked", holder=self.me, take_over=holder.get("token"))
        if not result.get("acquired"):  # another run took it over first
            _verdict, why = decisions.lock_verdict(result.get("holder") or {}, self.me, True)
            raise LoopError("host_busy", self.busy_message(why))
        self.held = True
        previous = result.get("previous") or holder
        self.emit("run_lock", path=PATH, check_mode=False, stale=why,
                  taken_over={k: previous.get(k) for k in ("run_id", "controller", "pid", "started", "age")})

    def busy_message(self, why: str) -> str:
        return ("host busy: %s, in %s on the host; this run changed nothing. Run again when it has ended; if it "
                "is gone for good, remove %s on the host (a lock held from another controller expires after %d s)"
                % (why, PATH, PATH, decisions.LOCK_MAX_AGE_S))

    def release(self) -> None:
        """Remove the lock if this run holds it (a failure is logged: it expires, or the next
        run on this controller sees its holder gone)."""
        if not self.held:
            return
        try:
            result = self.session.execute_module(MODULE, {"state": "unlocked", "token": self.me["token"], "path": PATH},
                                                 wrap_async=False)
            self.held = not result.get("released")
            self.emit("run_unlock", path=PATH, released=bool(result.get("released")), msg=result.get("msg"))
        except AnsibleError as exc:
            self.emit("run_unlock", path=PATH, released=False, msg=str(exc)[-300:])
