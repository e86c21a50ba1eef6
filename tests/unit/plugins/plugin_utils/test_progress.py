"""The progress file a resumed run reads back (pure file I/O, no host)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ansible_collections.scapforge.remediation.plugins.plugin_utils import progress as progress_module
from ansible_collections.scapforge.remediation.plugins.plugin_utils.progress import Progress

COLLECTIONS = str(Path(progress_module.__file__).parents[5])  # .collections, for a child process

RULE = "xccdf_org.ssgproject.content_rule_accounts_umask_etc_login_defs"


def test_a_new_run_has_nothing_to_resume(tmp_path):
    state = Progress(str(tmp_path), "lab1").load()
    assert (state.starts, state.baseline, state.outcomes, state.open, state.damaged) == (0, None, {}, [], [])


def test_open_attempts_are_those_never_closed_and_outcomes_are_kept(tmp_path):
    progress = Progress(str(tmp_path), "lab1")
    progress.append("start", run_id="R")
    progress.append("baseline", scan={"rules": {RULE: "fail"}, "oscap_version": "1.3.7"})
    progress.append("open", rule=RULE, attempt=1, checkpoint="accounts_umask_etc_login_defs-1-s1")
    progress.append("close", rule=RULE, attempt=1)
    progress.append("outcome", rule=RULE, outcome={"rule": RULE, "outcome": "remediated", "reason": "verified"})
    progress.append("open", rule="r2", attempt=1, checkpoint="r2-1-s1")
    progress.append("open", rule="r3", attempt=2, checkpoint="r3-2-s1")
    with open(progress.path, "a") as handle:  # the controller died while writing the next line
        handle.write('{"kind": "clo')
    state = Progress(str(tmp_path), "lab1").load()
    assert state.starts == 1
    assert state.baseline == {"rules": {RULE: "fail"}, "oscap_version": "1.3.7"}
    assert state.outcomes[RULE]["reason"] == "verified"
    assert state.open == [{"rule": "r2", "attempt": 1, "checkpoint": "r2-1-s1"},
                          {"rule": "r3", "attempt": 2, "checkpoint": "r3-2-s1"}]
    assert len(state.damaged) == 1 and "line 8" in state.damaged[0]


def test_a_writer_killed_with_sigkill_loses_at_most_its_last_line(tmp_path):
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from ansible_collections.scapforge.remediation.plugins.plugin_utils.progress import Progress\n"
            "p = Progress(%r, 'lab1')\n"
            "i = 0\n"
            "while True:\n"
            "    p.append('outcome', rule='r%%d' %% i, outcome={'pad': 'x' * 3000})\n"
            "    i += 1\n") % (COLLECTIONS, str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", code])
    path = os.path.join(str(tmp_path), "progress", "lab1.jsonl")
    deadline = time.monotonic() + 30
    while not os.path.exists(path) or os.path.getsize(path) < 200000:
        assert proc.poll() is None, "the writer died by itself"
        assert time.monotonic() < deadline, "the writer wrote too little"
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    state = Progress(str(tmp_path), "lab1").load()
    assert len(state.damaged) <= 1
    numbers = sorted(int(r[1:]) for r in state.outcomes)
    assert numbers == list(range(len(numbers))) and len(numbers) > 50
