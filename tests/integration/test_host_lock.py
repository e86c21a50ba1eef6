"""One run per host at a time, and run ids that never erase (issue 17 items 2 and 4), for
real: two playbooks on one lab host at once, a failed start that reuses a finished run's id,
and a lock a dead controller process left behind.

Run A holds the host for a while (a health command that sleeps, run at its baseline and
after each fix); run B starts once A's lock is on the host and must be refused with
``host_busy`` naming A, touching nothing; A's remediated rules then pass the test's own oscap.
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from lab_fixtures import REPO_ROOT

DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
PREFIX = "xccdf_org.ssgproject.content_rule_"
PROFILE = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
LOCK = "/var/lib/scapforge/run.lock"
CHECKPOINTS = "/var/lib/scapforge/checkpoints"
RULES = ["accounts_umask_etc_login_defs"]
RUN_A, RUN_B = "lock-test-a", "lock-test-b"
#: how long A's health command holds A in its baseline and after each fix: B's playbook
#: reaches its lock well within it on a loaded controller.
HOLD_S = 45


def playbook(inventory, host, runs: Path, run_id: str, **extra) -> list[str]:
    variables = dict({"scapforge_rules": RULES, "scapforge_runs_dir": str(runs), "scapforge_run_id": run_id,
                      "scapforge_memory_mode": "off", "scapforge_memory_path": str(runs / "memory"),
                      "scapforge_rescan": False}, **extra)
    return ["ansible-playbook", "playbooks/remediate.yml", "-i", str(inventory), "-l", host.name,
            "-e", json.dumps(variables)]


def run(argv) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)


def report_of(runs: Path, run_id: str, host) -> dict:
    return json.loads((runs / run_id / "hosts" / ("%s.json" % host.name)).read_text())


def events_of(runs: Path, run_id: str) -> list[dict]:
    return [json.loads(x) for x in (runs / run_id / "events.jsonl").read_text().splitlines()]


def lock_on_host(host) -> dict | None:
    out = host.ssh("sudo cat %s 2>/dev/null; true" % LOCK).stdout.strip()
    return json.loads(out) if out else None


def own_oscap(host, rules) -> dict:
    """oscap run by the test itself on the host: {short id: result}."""
    args = " ".join("--rule %s%s" % (PREFIX, r) for r in rules)
    out = host.ssh("cd /tmp && sudo oscap xccdf eval --profile %s %s %s 2>/dev/null | tr -d '\\r' "
                   "| awk '/^Rule/{r=$2} /^Result/{print r, $2}'; true" % (PROFILE, args, DS), timeout=300).stdout
    return {line.split()[0][len(PREFIX):]: line.split()[1] for line in out.splitlines() if line.startswith(PREFIX)}


def digests(run_dir: Path) -> dict:
    """sha256 of every file of a run directory but its event log (which gains the refused
    start's run_error event)."""
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name != "events.jsonl"}


@pytest.fixture(scope="module")
def two_runs(lab, lab_host, lab_inventory, tmp_path_factory):
    """A (holding the host) and B (started while A holds it); both finished."""
    host = lab.reset([lab_host.name])[0]
    host.ssh("sudo sed -i 's/^UMASK.*/UMASK\\t\\t022/' /etc/login.defs")
    runs = tmp_path_factory.mktemp("lock-runs")
    first = subprocess.Popen(playbook(lab_inventory, host, runs, RUN_A, scapforge_health_commands=["sleep %d" % HOLD_S]),
                             cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while (lock_on_host(host) or {}).get("run_id") != RUN_A:
            assert first.poll() is None, "run A ended before it held the lock"
            assert time.monotonic() < deadline
            time.sleep(0.5)
        held = lock_on_host(host)
        started = time.monotonic()
        second = run(playbook(lab_inventory, host, runs, RUN_B))
        b_seconds = time.monotonic() - started
        b_checkpoints = host.ssh("sudo test -e %s/%s" % (CHECKPOINTS, RUN_B), check=False).returncode
        still_a = first.poll() is None
        out_a = first.communicate(timeout=600)[0]
    finally:
        if first.poll() is None:
            first.kill()
    print("run B refused after %.1f s" % b_seconds)
    return {"host": host, "runs": runs, "held": held, "second": second, "rc_a": first.returncode, "out_a": out_a,
            "b_checkpoints": b_checkpoints, "pid_a": first.pid,
            "a_running_when_b_ended": still_a}


def test_a_second_run_on_a_busy_host_is_refused_and_changes_nothing(two_runs):
    host, runs, second = two_runs["host"], two_runs["runs"], two_runs["second"]
    assert two_runs["held"]["controller"] == socket.gethostname() and two_runs["held"]["pid"] == two_runs["pid_a"]
    assert two_runs["a_running_when_b_ended"], "A ended before B was refused: the test proves nothing"
    assert second.returncode != 0
    error = report_of(runs, RUN_B, host)["error"]
    assert error["reason"] == "host_busy"
    assert "run %s holds it" % RUN_A in error["msg"] and "process %d" % two_runs["held"]["pid"] in error["msg"]
    assert report_of(runs, RUN_B, host)["rules"] == {}
    # B touched nothing: no checkpoint of its own, no baseline or attempt in its progress
    assert two_runs["b_checkpoints"] == 1
    progress = runs / RUN_B / "progress" / ("%s.jsonl" % host.name)
    assert not progress.exists() or progress.read_text() == ""
    assert [e["event"] for e in events_of(runs, RUN_B) if e["event"] not in ("run_error",)] == []


def test_the_first_run_ends_as_if_alone_and_releases_the_lock(two_runs):
    host, runs = two_runs["host"], two_runs["runs"]
    assert two_runs["rc_a"] == 0, two_runs["out_a"][-3000:]
    report = report_of(runs, RUN_A, host)
    remediated = [r for r, o in report["rules"].items() if o["outcome"] == "remediated"]
    assert remediated == RULES
    assert own_oscap(host, remediated) == {r: "pass" for r in remediated}
    assert lock_on_host(host) is None
    locks = [e for e in events_of(runs, RUN_A) if e["event"] in ("run_lock", "run_unlock")]
    assert [e["event"] for e in locks] == ["run_lock", "run_unlock"] and locks[1]["data"]["released"] is True


def test_a_failed_start_with_a_finished_runs_id_leaves_its_files_byte_identical(two_runs, lab_inventory):
    host, runs = two_runs["host"], two_runs["runs"]
    assert two_runs["rc_a"] == 0
    before = digests(runs / RUN_A)
    assert {"hosts/%s.json" % host.name, "summary.json", "report.html"} <= set(before)
    again = run(playbook(lab_inventory, host, runs, RUN_A, scapforge_rules=["no_such_rule_at_all"]))
    assert again.returncode != 0
    # the controller's input check refuses the rule before anything reaches the host or the run dir
    assert "rule 'no_such_rule_at_all' is not in" in again.stdout and "reason: rule" in again.stdout, again.stdout[-3000:]
    assert digests(runs / RUN_A) == before


def test_a_lock_whose_holder_is_gone_is_taken_over(two_runs, lab_inventory):
    host, runs = two_runs["host"], two_runs["runs"]
    dead = subprocess.Popen(["true"])
    dead.wait()
    ghost = {"run_id": "ghost-run", "controller": socket.gethostname(), "pid": dead.pid, "pid_start": "1",
             "token": "ghost-token", "started": "2026-12-02T00:00:00Z", "acquired_at": time.time()}
    host.ssh("sudo mkdir -p /var/lib/scapforge && echo %s | sudo tee %s >/dev/null"
             % (json.dumps(json.dumps(ghost)), LOCK))
    assert lock_on_host(host)["run_id"] == "ghost-run"
    proc = run(playbook(lab_inventory, host, runs, "lock-test-c", scapforge_rules=["file_permissions_etc_passwd"]))
    assert proc.returncode == 0, proc.stdout[-3000:]
    lock = [e for e in events_of(runs, "lock-test-c") if e["event"] == "run_lock"][0]
    assert lock["data"]["taken_over"]["run_id"] == "ghost-run" and "is gone" in lock["data"]["stale"]
    assert report_of(runs, "lock-test-c", host)["before"] == {"pass": 1}
    assert lock_on_host(host) is None
