# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The dead-man switch of a checkpoint: a restore the target runs by itself unless the
controller cancels it in time.

The pattern is community.general's ``iptables_state`` (an asynchronous rollback that the
controller cancels once a fresh connection proves the host still answers). Here the rollback
is a program written into the checkpoint (``ROOT/ID/deadman/fire.py`` next to an unchanged
copy of ``checkpoint_store``) and scheduled as root, independent of sudo, sshd and the
controller:

- ``systemd``: ``systemd-run --on-active=Ns --unit=scapforge-deadman-ID`` (a transient
  timer and service of the system manager; the timer unloads itself once it elapsed);
- ``sleep``: ``sh -c 'sleep N; exec python fire.py ...'`` in a new session (``setsid``),
  its pid and start time recorded, where systemd does not run.

``deadman/armed.json`` says how it was armed (and, once cancelled, when); the program writes
``deadman/result.json`` (restore verified or not, mismatches, post-restore commands, time).
Every call here runs with the checkpoint root locked (``Store.check_root``); the program
takes the same lock, so a disarm and a firing never overlap: whichever comes second sees
what the first did. Target-side: standard library only, Python 3.9.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import os
import shutil
import signal
import subprocess
import sys
import time

from ansible_collections.scapforge.remediation.plugins.module_utils import checkpoint_store as core

UNIT_PREFIX = "scapforge-deadman-"
PROGRAM = "fire.py"
CORE_COPY = "scapforge_checkpoint_store.py"
LOG_FILE = "fire.log"
METHODS = ("auto", "systemd", "sleep")
MAX_TIMEOUT = 7 * 86400
#: ``systemctl is-system-running`` answers under which a transient timer works
SYSTEMD_STATES = ("running", "degraded", "starting", "initializing")

PROGRAM_TEXT = """# Written by scapforge.remediation.checkpoint (state=arm): the dead-man switch of checkpoint %(id)s.
# Usage: python3 -I fire.py CHECKPOINT_DIR TOKEN. Restores the checkpoint and verifies it, runs the
# armed post-restore commands, writes deadman/result.json; does nothing once disarmed.
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scapforge_checkpoint_store  # noqa: E402

sys.exit(scapforge_checkpoint_store.fire_main(sys.argv[1:]))
"""


class DeadmanFailed(core.CheckpointFailed):
    """An arm or disarm that cannot be done (``error_kind``: bad_timeout, no_systemd, fired,
    arm_failed, disarm_failed)."""


def unit_name(cid):
    """The systemd unit name (without .timer/.service) of checkpoint ``cid``'s switch."""
    return UNIT_PREFIX + cid


def _tool(name):
    return shutil.which(name, path=os.environ.get("PATH", "") + ":" + core.SAFE_PATH)


def _run(argv, timeout=30):
    """(exit status, stdout + stderr as text) of argv; (None, why) when it cannot run."""
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def systemd_usable():
    """(usable, why): whether a transient timer of the system manager can be armed here.

    Needs root, systemd as the running init system (``/run/systemd/system``, sd_booted(3)),
    ``systemd-run`` and ``systemctl``, and ``systemctl is-system-running`` in SYSTEMD_STATES
    (not ``offline``, ``stopping`` or ``maintenance``)."""
    if os.geteuid() != 0:
        return False, "not root (uid %d): only root can arm a system timer" % os.geteuid()
    if not os.path.isdir("/run/systemd/system"):
        return False, "systemd is not the running init system (/run/systemd/system is missing)"
    systemctl = _tool("systemctl")
    if not _tool("systemd-run") or not systemctl:
        return False, "systemd-run or systemctl not found"
    _rc, out = _run([systemctl, "is-system-running"])
    lines = out.strip().splitlines()
    state = lines[-1].strip() if lines else "unknown"
    if state not in SYSTEMD_STATES:
        return False, "systemctl is-system-running says %s" % state
    return True, "systemd is running (%s)" % state


def choose_method(requested):
    """(method, why) for ``requested`` (auto, systemd, sleep). Raises DeadmanFailed
    (no_systemd) when systemd was asked for and cannot be used."""
    if requested == "sleep":
        return "sleep", "method=sleep was asked for"
    usable, why = systemd_usable()
    if usable:
        return "systemd", why
    if requested == "systemd":
        raise DeadmanFailed("no_systemd", "method=systemd, but %s" % why)
    return "sleep", why


def core_source():
    """The bytes of checkpoint_store as this process imported it: from AnsiballZ's zip, a file,
    or Mitogen's importer (PEP 302 ``get_source``; its ``__file__`` is ``master:<path>``, a
    path on the controller)."""
    loader = getattr(core, "__loader__", None)
    if loader is not None and hasattr(loader, "get_data") and not core.__file__.startswith("master:"):
        return loader.get_data(core.__file__)
    if loader is not None and hasattr(loader, "get_source"):
        source = loader.get_source(core.__name__)
        if source is not None:
            return source.encode("utf-8") if not isinstance(source, bytes) else source
    with open(core.__file__, "rb") as fh:
        return fh.read()


def _write_file(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)


def paths(store):
    """{dir, armed, result, program, core, log} of the switch of ``store``'s checkpoint."""
    ddir = os.path.join(store.path, core.DEADMAN_DIR)
    return {"dir": ddir, "armed": os.path.join(ddir, core.ARMED_FILE), "result": os.path.join(ddir, core.RESULT_FILE),
            "program": os.path.join(ddir, PROGRAM), "core": os.path.join(ddir, CORE_COPY),
            "log": os.path.join(ddir, LOG_FILE)}


# ---------------------------------------------------------------- is it still waiting?

def proc_start_time(pid):
    """Start time of process ``pid`` (clock ticks since boot, /proc/PID/stat field 22), or None."""
    try:
        with open("/proc/%d/stat" % pid, "r") as fh:
            text = fh.read()
    except (IOError, OSError):
        return None
    fields = text[text.rfind(")") + 2:].split()
    if len(fields) < 20 or fields[0] == "Z":  # a zombie has already ended
        return None
    return int(fields[19])


def proc_cmdline(pid):
    """argv of process ``pid`` (list of str), or []."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
    except (IOError, OSError):
        return []


def sleeper_phase(state):
    """For method=sleep: "waiting" (still in sleep), "firing" (the program runs) or None (the
    recorded pid is gone or is another process: same start time and our token required)."""
    pid = state.get("pid")
    if not pid or proc_start_time(pid) != state.get("pid_start"):
        return None
    argv = proc_cmdline(pid)
    if state.get("token") not in argv:
        return None
    return "firing" if state.get("program") in argv and argv[0] != "/bin/sh" else "waiting"


def unit_states(unit):
    """{"timer": (LoadState, ActiveState), "service": (...)} from systemctl show."""
    out = {}
    for kind in ("timer", "service"):
        rc, text = _run([_tool("systemctl") or "systemctl", "show", "--property=LoadState,ActiveState",
                         "%s.%s" % (unit, kind)])
        props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line) if rc == 0 else {}
        out[kind] = (props.get("LoadState", "unknown"), props.get("ActiveState", "unknown"))
    return out


def systemd_phase(state):
    """For method=systemd: "waiting" (timer active), "firing" (service running) or None."""
    units = unit_states(state["unit"])
    if units["service"][1] in ("active", "activating", "reloading"):
        return "firing"
    if units["timer"][1] in ("active", "activating"):
        return "waiting"
    return None


def phase(state):
    """"waiting", "firing" or None (nothing scheduled any more) for an armed.json state."""
    if state.get("method") == "systemd" and state.get("unit"):
        return systemd_phase(state)
    if state.get("method") == "sleep":
        return sleeper_phase(state)
    return None


def describe(state, result, live):
    """The ``deadman`` return value for an armed.json ``state`` (None: never armed), the
    fired ``result`` (None: not fired) and ``live`` (phase())."""
    out = {"was_armed": state is not None, "armed": False, "firing": False, "fired": result is not None,
           "lost": False, "disarmed": False, "disarmed_at": None, "cancelled": False, "method": None, "method_why": None, "unit": None, "pid": None,
           "armed_at": None, "fires_at": None, "fires_in": None, "timeout": None, "post_restore": [],
           "program": None, "result": result}
    if state is None:
        return out
    for key in ("method", "method_why", "unit", "pid", "armed_at", "fires_at", "timeout", "post_restore", "program"):
        out[key] = state.get(key)
    out["disarmed"] = bool(state.get("disarmed_at"))
    out["disarmed_at"] = state.get("disarmed_at")
    out["cancelled"] = bool(state.get("cancelled"))
    if state.get("fires_at"):
        out["fires_in"] = round(state["fires_at"] - time.time(), 1)
    if result is None and not out["disarmed"]:
        out["armed"] = live == "waiting"
        out["firing"] = live == "firing"
        # armed, never disarmed, never fired, and nothing scheduled: a reboot, or stopped by hand
        out["lost"] = live is None
    return out


def read_state(store):
    """(armed.json, result.json) of the checkpoint (each None when missing)."""
    where = paths(store)
    return core.read_json(where["armed"]), core.read_json(where["result"])


# ---------------------------------------------------------------- arm

def _stop_leftovers(state):
    """Stop and forget what an earlier arm of this checkpoint left (a failed unit, a process)."""
    if state.get("method") == "systemd" and state.get("unit"):
        systemctl = _tool("systemctl") or "systemctl"
        _run([systemctl, "stop", state["unit"] + ".timer", state["unit"] + ".service"])
        _run([systemctl, "reset-failed", state["unit"] + ".timer", state["unit"] + ".service"])
    elif state.get("method") == "sleep" and sleeper_phase(state):
        _kill_sleeper(state)


def _schedule_systemd(state, where, store, timeout):
    """Arm a transient timer; returns None, or why systemd-run failed."""
    unit = unit_name(store.id)
    _run([_tool("systemctl") or "systemctl", "reset-failed", unit + ".timer", unit + ".service"])
    argv = [_tool("systemd-run"), "--unit=" + unit, "--quiet", "--collect",
            "--description=scapforge dead-man switch: restore checkpoint %s" % store.id,
            "--on-active=%ds" % timeout,
            "--timer-property=AccuracySec=1s",        # the default (1 min) would fire up to a minute late
            "--timer-property=RemainAfterElapse=no",  # the timer unloads itself once elapsed
            state["python"], "-I", where["program"], store.path, state["token"]]
    rc, out = _run(argv)
    if rc != 0:
        return "systemd-run exited %s: %s" % (rc, out.strip()[-300:])
    state["unit"] = unit
    return None


def _schedule_sleep(state, where, store, timeout):
    """Start ``sh -c 'sleep N; exec python -I fire.py DIR TOKEN'`` in a new session, its
    output appended to deadman/fire.log; record its pid and start time."""
    log = os.open(where["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", 'sleep "$1"; exec "$2" -I "$3" "$4" "$5"', "scapforge-deadman", str(timeout),
             state["python"], where["program"], store.path, state["token"]],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True, cwd="/",
            start_new_session=True, env={"PATH": core.SAFE_PATH, "LANG": "C"})
    finally:
        os.close(log)
    state["pid"] = proc.pid
    # the module exits without waiting for it (init, or a subreaper, reaps it): marked done so
    # that Popen does not warn that it still runs
    proc.returncode = 0
    for _attempt in range(50):
        state["pid_start"] = proc_start_time(proc.pid)
        if state["pid_start"] is not None:
            break
        time.sleep(0.01)


def arm(store, params, check_mode):
    """state=arm: schedule the restore of the checkpoint in ``params["timeout"]`` seconds.

    params: timeout (s, 1..MAX_TIMEOUT), method (auto, systemd, sleep), post_restore (shell
    commands the program runs after the restore, e.g. ``systemctl reload ssh``), fresh.
    A missing checkpoint is created empty (the attempt's saves fill it; the program restores
    what it holds when it fires). Arming an armed switch changes nothing (``already``); a
    lost one (its timer or process gone) is armed again. Returns the module result
    (``changed``, ``deadman``). Raises CheckpointFailed / DeadmanFailed.
    """
    timeout = params.get("timeout")
    if not isinstance(timeout, int) or not 1 <= timeout <= MAX_TIMEOUT:
        raise DeadmanFailed("bad_timeout", "state=arm needs timeout, 1 to %d seconds (got %r)" % (MAX_TIMEOUT, timeout))
    exists = store.check_root(create=not check_mode)
    if exists and store.exists():
        if params.get("fresh"):
            raise core.CheckpointFailed("exists", "checkpoint %s already exists under %s (left by an earlier attempt?); "
                                        "restore or discard it first" % (store.id, store.root))
        store.load()
        created = False
    else:
        store.new()
        created = True
    where = paths(store)
    old, result = (None, None) if created else read_state(store)
    if old is not None and not old.get("disarmed_at"):
        if result is not None:
            raise DeadmanFailed("fired", "the dead-man switch of checkpoint %s already fired (%s): disarm it, "
                                "which reports its result, before arming it again"
                                % (store.id, "verified" if result.get("verified") else "NOT verified"))
        live = phase(old)
        if live is not None:
            out = describe(old, None, live)
            out["already"] = True
            return {"changed": False, "deadman": out}
    method, why = choose_method(params.get("method") or "auto")
    now = time.time()
    state = {"id": store.id, "token": binascii.hexlify(os.urandom(8)).decode("ascii"), "method": method,
             "method_why": why, "timeout": timeout, "armed_at": now, "fires_at": now + timeout,
             "python": sys.executable or "/usr/bin/python3", "program": where["program"],
             "post_restore": list(params.get("post_restore") or []), "unit": None, "pid": None, "pid_start": None}
    if check_mode:
        out = describe(state, None, "waiting")
        out["rearmed_lost"] = old is not None and not old.get("disarmed_at")
        return {"changed": True, "deadman": out}
    if created:
        store.save_manifest()
    if old is not None:
        _stop_leftovers(old)
        if result is not None:  # a fired and disarmed switch armed again: keep the old result aside
            os.rename(where["result"], os.path.join(where["dir"], "result.%d.json" % int(result.get("fired_at") or now)))
    if not os.path.isdir(where["dir"]):
        os.mkdir(where["dir"], 0o700)
    _write_file(where["core"], core_source())
    _write_file(where["program"], (PROGRAM_TEXT % {"id": store.id}).encode("utf-8"))
    core.write_json(where["armed"], state)  # before scheduling: the program reads its token there
    if method == "systemd":
        failed = _schedule_systemd(state, where, store, timeout)
        if failed and (params.get("method") or "auto") == "systemd":
            state["method_why"] = failed
            state["disarmed_at"] = time.time()
            core.write_json(where["armed"], state)
            raise DeadmanFailed("arm_failed", "checkpoint %s: %s" % (store.id, failed))
        if failed:
            state["method"], state["method_why"] = "sleep", "%s; %s" % (why, failed)
    if state["method"] == "sleep":
        _schedule_sleep(state, where, store, timeout)
    core.write_json(where["armed"], state)
    out = describe(state, None, "waiting")
    out["rearmed_lost"] = old is not None and not old.get("disarmed_at")
    return {"changed": True, "deadman": out}


# ---------------------------------------------------------------- disarm and status

def _kill_sleeper(state):
    """SIGTERM the sleeper's process group (it leads its own session), SIGKILL after 3 s."""
    pid = state["pid"]
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pid, sig)
        except OSError:
            return
        deadline = time.time() + wait
        while time.time() < deadline:
            if proc_start_time(pid) != state.get("pid_start"):
                return
            time.sleep(0.05)


def disarm(store, check_mode):
    """state=disarm: cancel the switch before it fires, or report that it fired.

    Marks armed.json disarmed first (so a program already started gives up even if it
    cannot be stopped), then stops the timer and service, or kills the recorded process
    (pid, start time and token checked). Returns the module result: ``deadman`` with
    ``cancelled`` (this call stopped it in time), ``fired`` and ``result`` (the fired
    restore's result.json). Idempotent: a second disarm reports the first's outcome with
    ``changed`` false; a checkpoint never armed (or gone) reports ``was_armed`` false.
    """
    if not store.check_root(create=False) or not os.path.isdir(store.path):
        return {"changed": False, "deadman": describe(None, None, None)}
    state, result = read_state(store)
    if state is None or state.get("disarmed_at"):
        return {"changed": False, "deadman": describe(state, result, None)}
    live = phase(state)
    if check_mode:
        out = describe(state, result, live)
        out["cancelled"] = result is None and live is not None
        return {"changed": True, "deadman": out}
    state["disarmed_at"] = time.time()
    core.write_json(paths(store)["armed"], state)
    if state.get("method") == "systemd" and state.get("unit"):
        _stop_leftovers(state)
        if systemd_phase(state) is not None:
            raise DeadmanFailed("disarm_failed", "checkpoint %s: %s.timer/.service still active after systemctl stop"
                                % (store.id, state["unit"]))
    elif state.get("method") == "sleep" and sleeper_phase(state):
        _kill_sleeper(state)
        if sleeper_phase(state):
            raise DeadmanFailed("disarm_failed", "checkpoint %s: process %s survived SIGKILL" % (store.id, state["pid"]))
    result = read_state(store)[1]
    state["cancelled"] = result is None and live is not None
    core.write_json(paths(store)["armed"], state)
    out = describe(state, result, None)
    out["lost"] = result is None and live is None
    return {"changed": True, "deadman": out}


def status(store):
    """The ``deadman`` value for state=status (see :func:`describe`); the store is locked."""
    if not os.path.isdir(store.path):
        return describe(None, None, None)
    state, result = read_state(store)
    return describe(state, result, phase(state) if state and not state.get("disarmed_at") and not result else None)


def cancel_before_discard(store, check_mode):
    """Disarm a switch that is still armed before its checkpoint is deleted (the program
    would have nothing to restore); returns the ``deadman`` value (disarm's, or status')."""
    state, result = read_state(store)
    if state is not None and not state.get("disarmed_at"):
        return disarm(store, check_mode)["deadman"]
    return describe(state, result, None)
