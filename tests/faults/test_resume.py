"""The controller killed with SIGKILL in the middle of an attempt, then the same run again.

Issue 7, "Resume": re-running the playbook with the same scapforge_run_id continues where it
stopped, reports the interrupted attempt, and first rolls it back if its checkpoint is still
open. Real ansible-playbook, real lab host, a real SIGKILL to the whole process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from lab_fixtures import REPO_ROOT

RULES = ["accounts_umask_etc_login_defs", "file_permissions_sshd_config", "accounts_umask_etc_profile",
         "sshd_disable_root_login"]
RUN_ID = "resume-test"


def playbook(inventory, host, runs_dir):
    extra = {"scapforge_rules": RULES, "scapforge_runs_dir": str(runs_dir), "scapforge_run_id": RUN_ID,
             "scapforge_memory_mode": "off"}
    return ["ansible-playbook", "playbooks/remediate.yml", "-i", str(inventory), "-l", host.name,
            "-e", json.dumps(extra)]


def open_attempts(path) -> list:
    """Attempts opened and not closed yet, from the progress file as it is now."""
    opened = {}
    try:
        lines = open(path).read().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            step = json.loads(line)
        except ValueError:
            continue
        key = (step.get("rule"), step.get("attempt"))
        if step.get("kind") == "open":
            opened[key] = step
        elif step.get("kind") == "close":
            opened.pop(key, None)
    return list(opened.values())


def still_running(marker: str) -> list[int]:
    """PIDs of processes whose command line holds ``marker`` (the run id): the playbook and
    its workers, which Ansible detaches into sessions of their own."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as handle:
                    if marker.encode() in handle.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def test_killed_mid_attempt_then_resumed(lab, lab_host, lab_inventory, tmp_path):
    host = lab.reset([lab_host.name])[0]
    host.ssh("sudo sed -i 's/^UMASK.*/UMASK\\t\\t022/' /etc/login.defs")
    runs = tmp_path / "runs"
    progress = runs / RUN_ID / "progress" / ("%s.jsonl" % host.name)
    proc = subprocess.Popen(playbook(lab_inventory, host, runs), cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    try:
        while not open_attempts(progress):
            assert proc.poll() is None, "the playbook ended before any attempt opened"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.0)  # let its tasks start changing the host
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # the worker running the loop is in a session of its own: it must notice that
    # ansible-playbook is gone and stop by itself, changing nothing more
    deadline = time.monotonic() + 180
    while still_running(RUN_ID):
        assert time.monotonic() < deadline, "the loop went on after ansible-playbook was killed"
        time.sleep(0.5)
    interrupted = open_attempts(progress)
    assert interrupted, "the kill landed after the attempt closed; the test must kill inside one"

    again = subprocess.run(playbook(lab_inventory, host, runs), cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=1200, check=False)
    assert again.returncode == 0, again.stdout[-4000:]
    report = json.loads((runs / RUN_ID / "hosts" / ("%s.json" % host.name)).read_text())
    resumed = report["resumed"]
    assert resumed["count"] == 1
    assert [(i["rule"], i["attempt"]) for i in resumed["interrupted"]] == [
        (i["rule"].rsplit("_rule_", 1)[-1], i["attempt"]) for i in reversed(interrupted)]
    for entry in resumed["interrupted"]:
        assert entry["rolled_back"] in (True, None) and entry["by"] in ("resume", None), entry
    # every rule has its outcome once; the umask rule ends remediated with one UMASK line
    assert sorted(report["rules"]) == sorted(r for r in RULES if report["rules"].get(r)) and report["rules"]
    assert report["rules"]["accounts_umask_etc_login_defs"]["reason"] == "verified"
    lines = [x for x in host.ssh("cat /etc/login.defs").stdout.splitlines() if x.startswith("UMASK")]
    assert lines == ["UMASK 077"] or [x.split() for x in lines] == [["UMASK", "077"]]
    assert report["before"]["fail"] >= 3  # the first start's baseline, not a rescan of the changed host
    events = [json.loads(x) for x in (runs / RUN_ID / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("run_start") == 2
    assert [e for e in events if e["event"] == "resume"]
    assert host.ssh("sudo test -d /var/lib/scapforge/checkpoints/%s" % RUN_ID, check=False).returncode == 1
    # the killed start left the host's run lock (its ansible-playbook is gone): the resumed start
    # took it over, or found it released, and released it at its end (issue 17 item 2)
    locks = [e["data"] for e in events if e["event"] == "run_lock"]
    print("run locks: %s" % locks)
    assert len(locks) == 2 and (locks[1]["taken_over"] or {"run_id": RUN_ID})["run_id"] == RUN_ID
    assert host.ssh("sudo test -e /var/lib/scapforge/run.lock", check=False).returncode == 1
