"""One run per host (issue 17 item 2) and run ids that never erase (item 4): the pure
decisions, the target's lock module (for real, in processes of its own) and the run's use
of the lock, with values that would catch a wrong answer."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.scapforge.remediation.plugins.action.run_summary import ActionModule as SummaryAction
from ansible_collections.scapforge.remediation.plugins.modules import run_lock as M
from ansible_collections.scapforge.remediation.plugins.plugin_utils import summary as S
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions as D
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import engine, host_lock
from ansible_collections.scapforge.remediation.plugins.plugin_utils.attempt_runner import checkpoint_base
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import ControllerGone, LoopError

MODULE_FILE = Path(M.__file__)
HOLDER = {"run_id": "20261202T050000Z-0042", "controller": "ctl-a", "pid": 4242, "started": "2026-12-02T05:00:00Z",
          "token": "t-old"}


# ---------------------------------------------------------------- stale or not

def test_a_holder_whose_process_is_gone_is_taken_over_at_once():
    verdict, why = D.lock_verdict(dict(HOLDER, age=3.0), {}, alive=False)
    assert verdict == "take_over" and "4242" in why and "ctl-a" in why


def test_a_live_holder_refuses_whatever_its_age():
    """On this controller the process decides: a run of two days that still runs holds the host."""
    assert D.lock_verdict(dict(HOLDER, age=2 * 86400.0), {}, alive=True)[0] == "refuse"


def test_a_holder_on_another_controller_expires_only_after_the_bound():
    assert D.LOCK_MAX_AGE_S == 86400
    verdict, why = D.lock_verdict(dict(HOLDER, age=86399.0), {}, alive=None)
    assert verdict == "refuse"
    assert why == "run 20261202T050000Z-0042 holds it (controller ctl-a, process 4242, since 2026-12-02T05:00:00Z)"
    assert D.lock_verdict(dict(HOLDER, age=86401.0), {}, alive=None)[0] == "take_over"
    assert D.lock_verdict(dict(HOLDER, age=None), {}, alive=None)[0] == "refuse"  # no age: never expired


def test_the_same_run_id_alive_is_refused_too():
    """Two playbooks with one run id on one host would undo each other as two run ids do."""
    assert D.lock_verdict(dict(HOLDER, age=1.0), dict(HOLDER, token="t-new"), alive=True)[0] == "refuse"


def test_an_unreadable_lock_is_judged_by_its_age():
    young = {"unreadable": "Expecting value: ''", "age": 10.0}
    assert D.lock_verdict(young, {}, alive=None)[0] == "refuse"
    assert "cannot be read" in D.lock_verdict(young, {}, alive=None)[1]
    assert D.lock_verdict(dict(young, age=90000.0), {}, alive=None)[0] == "take_over"


def test_holder_alive_reads_the_process_and_its_start_time():
    me = os.getpid()
    start = host_lock.process_start(me)
    assert start is not None and start.isdigit()
    here = socket.gethostname()
    assert host_lock.holder_alive({"controller": here, "pid": me, "pid_start": start}, here) is True
    assert host_lock.holder_alive({"controller": here, "pid": me, "pid_start": str(int(start) + 1)}, here) is False
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert host_lock.holder_alive({"controller": here, "pid": dead.pid}, here) is False
    assert host_lock.holder_alive({"controller": "elsewhere", "pid": me}, here) is None


# ---------------------------------------------------------------- run ids never erase

FINISHED = {"host": "h", "run_id": "r1", "before": {"fail": 3}, "after": {"fail": 1}, "rules": {"r": {}}}
ERROR_ONLY = {"host": "h", "run_id": "r1", "error": {"reason": "rule"}, "before": None, "rules": {}}


def test_a_failed_start_keeps_a_finished_report():
    assert D.keep_old_report(FINISHED, changed=False) is True
    assert D.keep_old_report(dict(ERROR_ONLY, rules={"r": {}}), changed=False) is True  # rules worked before an error


def test_a_failed_start_replaces_nothing_worth_keeping():
    assert D.keep_old_report(None, changed=False) is False
    assert D.keep_old_report(ERROR_ONLY, changed=False) is False
    assert D.keep_old_report(FINISHED, changed=True) is False  # what this start applied must be reported


def test_a_check_start_over_a_runs_report_is_refused(tmp_path):
    from ansible_collections.scapforge.remediation.plugins.action.ralph import ActionModule as RalphAction
    run_dir = tmp_path / "r1"
    (run_dir / "hosts").mkdir(parents=True)
    (run_dir / "hosts" / "h.json").write_text(json.dumps(FINISHED))
    with pytest.raises(LoopError) as refused:
        RalphAction._refuse_check_over_a_run(True, str(run_dir), "r1", "h")
    assert refused.value.reason == "run_id" and str(run_dir / "hosts" / "h.json") in str(refused.value)
    RalphAction._refuse_check_over_a_run(False, str(run_dir), "r1", "h")  # a real start resumes
    RalphAction._refuse_check_over_a_run(True, str(run_dir), "r1", "other")  # no report for that host
    (run_dir / "hosts" / "h.json").write_text(json.dumps(dict(FINISHED, check_mode=True)))
    RalphAction._refuse_check_over_a_run(True, str(run_dir), "r1", "h")  # a plan over a plan


def _run_dir(tmp_path):
    run_dir = tmp_path / "r1"
    (run_dir / "hosts").mkdir(parents=True)
    (run_dir / "hosts" / "h.json").write_text(json.dumps(FINISHED))
    S.write_summary(str(run_dir), ["h"])
    (run_dir / "report.html").write_text("<html>old</html>")
    (run_dir / "evidence-r1.tar.gz").write_bytes(b"old bundle")
    return run_dir


def test_run_summary_keeps_the_reports_when_no_host_report_changed(tmp_path):
    run_dir = _run_dir(tmp_path)
    summary = S.merge_host_reports(str(run_dir), ["h"])
    assert S.summary_unchanged(str(run_dir), summary) is True
    kept = SummaryAction.kept_reports(str(run_dir), summary)
    assert kept is not None and kept[2]["html"] == str(run_dir / "report.html") and kept[2]["kept"] is True
    assert kept[2]["evidence"] == {"path": str(run_dir / "evidence-r1.tar.gz"), "signature": None, "signed": False,
                                   "files": None}


def test_run_summary_writes_again_when_a_host_report_changed(tmp_path):
    run_dir = _run_dir(tmp_path)
    (run_dir / "hosts" / "h.json").write_text(json.dumps(dict(FINISHED, after={"fail": 0})))
    summary = S.merge_host_reports(str(run_dir), ["h"])
    assert S.summary_unchanged(str(run_dir), summary) is False
    assert SummaryAction.kept_reports(str(run_dir), summary) is None
    assert SummaryAction.kept_reports(str(run_dir), S.merge_host_reports(str(run_dir), ["h", "h2"])) is None


def test_checkpoint_ids_carry_the_run_id():
    """The dead-man switch's unit is scapforge-deadman-<checkpoint id>: two runs on one host
    working one rule must not share it."""
    assert checkpoint_base("20261202T050000Z-0042", "sshd_disable_root_login", 2, 1) == \
        "20261202T050000Z-0042-sshd_disable_root_login-2-s1"
    assert checkpoint_base("", "r", 1, 3) == "r-1-s3"
    odd = checkpoint_base("my run/../x" + "y" * 60, "r" * 100, 1, 1)
    assert odd.startswith("my_run_.._x") and len(odd) == 120 and set(odd) <= set(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


# ---------------------------------------------------------------- the target's module, for real

def _module(tmp_path, name, args):
    path = tmp_path / ("%s.json" % name)
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    return subprocess.Popen([sys.executable, str(MODULE_FILE), str(path)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def _result(proc):
    return json.loads(proc.communicate(timeout=60)[0])


def test_eight_runs_at_the_same_instant_one_holds_the_lock(tmp_path):
    lock = str(tmp_path / "lib" / "run.lock")
    procs = [_module(tmp_path, "p%d" % i, {"state": "locked", "path": lock, "holder": {"token": "t%d" % i, "run_id": "r%d" % i}})
             for i in range(8)]
    results = [_result(p) for p in procs]
    winners = [r["holder"]["token"] for r in results if r["acquired"]]
    assert len(winners) == 1
    assert json.loads(Path(lock).read_text())["token"] == winners[0]
    assert all(r["holder"]["token"] == winners[0] for r in results)  # the losers name the winner


def test_take_over_needs_the_stale_holders_token_and_unlock_its_own(tmp_path):
    lock = str(tmp_path / "run.lock")
    assert M.lock(lock, {"token": "a", "run_id": "ra"}, None, False)["acquired"] is True
    assert M.lock(lock, {"token": "b"}, None, False)["holder"]["run_id"] == "ra"
    assert M.lock(lock, {"token": "b"}, "not-a", False)["acquired"] is False
    assert M.unlock(lock, "b", False)["released"] is False and os.path.exists(lock)
    taken = M.lock(lock, {"token": "b", "run_id": "rb"}, "a", False)
    assert taken["acquired"] is True and taken["previous"]["run_id"] == "ra"
    assert M.unlock(lock, "a", False)["released"] is False
    assert M.unlock(lock, "b", False)["released"] is True and not os.path.exists(lock)
    assert M.lock(lock, {"token": "c"}, None, True)["acquired"] is True and not os.path.exists(lock)  # check mode


# ---------------------------------------------------------------- the run's use of the lock

class FakeSession:
    """Answers the run_lock module from a dict, like the host would."""

    check_mode = False

    def __init__(self, holder=None):
        self.lock = holder
        self.calls = []

    def execute_module(self, name, args, **_kwargs):
        assert name == host_lock.MODULE
        self.calls.append(args)
        if args["state"] == "locked":
            current = self.lock
            if current is None or current.get("token") == args.get("take_over"):
                self.lock = dict(args["holder"], age=0.0)
                return {"acquired": True, "holder": self.lock, "previous": current}
            return {"acquired": False, "holder": current}
        released = self.lock is not None and self.lock.get("token") == args["token"]
        if released:
            self.lock = None
        return {"released": released}


def test_a_busy_host_is_refused_naming_the_holder():
    session = FakeSession(dict(HOLDER, controller="elsewhere", age=60.0))
    lock = host_lock.HostLock(session, "r2", os.getpid(), lambda *a, **k: None)
    with pytest.raises(LoopError) as refused:
        lock.acquire()
    assert refused.value.reason == "host_busy"
    assert "run 20261202T050000Z-0042 holds it (controller elsewhere, process 4242" in str(refused.value)
    assert len(session.calls) == 1 and session.lock["token"] == "t-old" and lock.held is False


def test_a_stale_lock_is_taken_over_and_released_at_the_end():
    events = []
    session = FakeSession(dict(HOLDER, controller=socket.gethostname(), pid=2 ** 22 + 7, age=5.0))
    lock = host_lock.HostLock(session, "r2", os.getpid(), lambda event, **kw: events.append((event, kw)))
    lock.acquire()
    assert session.calls[1]["take_over"] == "t-old" and session.lock["run_id"] == "r2" and lock.held
    assert events[0][1]["taken_over"]["run_id"] == HOLDER["run_id"]
    lock.release()
    assert session.lock is None and session.calls[-1] == {"state": "unlocked", "token": lock.me["token"],
                                                          "path": host_lock.PATH}


class _Recorder:
    made = []

    def __init__(self, *args):
        self.released = False
        _Recorder.made.append(self)

    def acquire(self):
        pass

    def release(self):
        self.released = True


@pytest.mark.parametrize("error, released", [(LoopError("rule", "no such rule"), True), (RuntimeError("bug"), True),
                                             (ControllerGone("gone"), False)])
def test_the_run_releases_its_lock_on_every_way_out_but_a_dead_controller(monkeypatch, tmp_path, error, released):
    def fail(*_args, **kwargs):
        assert isinstance(kwargs["lock"], _Recorder)  # setup takes the lock, after the options
        raise error
    monkeypatch.setattr(engine, "HostLock", _Recorder)
    monkeypatch.setattr(engine.setup, "build", fail)
    session = type("S", (), {"host": "h"})()
    loop = engine.RemediationLoop(session, engine.LoopOptions(datastream="d", profile="p", run_dir=str(tmp_path)))
    with pytest.raises(type(error)):
        loop.run()
    assert _Recorder.made[-1].released is released
