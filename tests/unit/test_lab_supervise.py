"""The lab's nspawn supervisor (lab/nspawn_supervise.py): a host that rebooted inside (nspawn
exit 133) boots again, any other exit ends it, SIGTERM is passed on and never restarts."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))
import nspawn_supervise  # noqa: E402


def _supervisor(tmp_path, script):
    lines = []
    sup = nspawn_supervise.Supervisor(["sh", "-c", script], veth="ve-scapforge-none", address="10.0.0.1/30",
                                      ip="true", log=lines.append)
    return sup, lines


def test_supervisor_boots_again_after_exit_133_only(tmp_path):
    runs = tmp_path / "runs"
    sup, lines = _supervisor(tmp_path, "echo x >> %s; test $(wc -l < %s) -ge 3 && exit 7; exit 133" % (runs, runs))
    assert sup.run() == 7
    assert len(runs.read_text().splitlines()) == 3
    assert sum("rebooted (nspawn exited 133)" in line for line in lines) == 2


@pytest.mark.parametrize("status", [0, 1, 132, 134])
def test_supervisor_does_not_restart_on_other_statuses(tmp_path, status):
    runs = tmp_path / "runs"
    sup, _lines = _supervisor(tmp_path, "echo x >> %s; exit %d" % (runs, status))
    assert sup.run() == status
    assert len(runs.read_text().splitlines()) == 1


def test_supervisor_gives_up_on_a_boot_loop(tmp_path):
    sup, lines = _supervisor(tmp_path, "exit 133")
    assert sup.run() == 133
    assert "a boot loop" in lines[-1]


def test_supervisor_passes_sigterm_on_and_does_not_restart(tmp_path):
    runs = tmp_path / "runs"
    sup, _lines = _supervisor(tmp_path, "echo x >> %s; trap 'exit 133' TERM; while :; do sleep 0.05; done" % runs)
    threading.Timer(0.5, lambda: sup._on_signal(signal.SIGTERM, None)).start()
    started = time.monotonic()
    assert sup.run() == 128 + signal.SIGTERM
    assert time.monotonic() - started < 10
    assert len(runs.read_text().splitlines()) == 1
