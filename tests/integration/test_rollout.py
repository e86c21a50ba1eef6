"""Roll-out habits on the main playbook (issue 10 item 8): waves (``scapforge_serial``) that
share one run, and a canary wave that stops the roll-out (``scapforge_max_fail_percentage``).

Hosts: the session's lab host and lab<N+40> for lab host labN (so two pytest-xdist workers
never share one); the extra host is booted here and stopped at the end. The canary that
fails is an unreachable host: 127.0.0.1 on a closed port (the lab's safety rule).
"""

from __future__ import annotations

import datetime
import json

import pytest
import yaml

RULE = "accounts_umask_etc_login_defs"


def _events(run_dir):
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def _time(event):
    return datetime.datetime.fromisoformat(event["time"].replace("Z", "+00:00"))


@pytest.fixture()
def two_hosts(lab, lab_host):
    name = "lab%d" % (lab_host.index + 40)
    booted = name not in {h.name for h in lab.hosts()}
    if not booted:
        lab.reset([name])
    try:
        yield [lab.reset([lab_host.name])[0]] + lab.start([name])
    finally:
        if booted:
            lab.stop(name)


def test_serial_waves_write_one_run(lab, two_hosts, tmp_path, remediate):
    inventory = lab.write_inventory(tmp_path / "inventory.yml", two_hosts)
    names = [h.name for h in two_hosts]
    proc = remediate(inventory, ",".join(names), tmp_path / "runs", {"scapforge_rules": [RULE], "scapforge_serial": 1})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    runs = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.is_symlink() and p.name != "memory"]
    assert len(runs) == 1, runs  # both waves wrote into one run directory
    run = runs[0]
    summary = json.loads((run / "summary.json").read_text())
    assert sorted(summary["hosts"]) == sorted(names) and summary["without_report"] == []
    for name in names:
        outcome = summary["hosts"][name]["rules"][RULE]
        assert (outcome["outcome"], outcome["reason"]) == ("remediated", "verified"), outcome
    # one wave after the other: the second host's loop started after the first one's ended
    events = _events(run)
    first_end = max(_time(e) for e in events if e["host"] == names[0] and e["event"] == "run_end")
    second_start = min(_time(e) for e in events if e["host"] == names[1] and e["event"] == "run_start")
    assert second_start > first_end, (first_end, second_start)
    loop_task = "TASK [scapforge.remediation.remediate : Run the remediation loop]"
    assert "PLAY [Bring hosts into compliance" in proc.stdout and proc.stdout.count(loop_task) == 2


def test_a_failed_canary_stops_the_rollout(lab, lab_host, tmp_path, remediate):
    host = lab.reset([lab_host.name])[0]
    inventory = lab.write_inventory(tmp_path / "inventory.yml", [host])
    data = yaml.safe_load(inventory.read_text())
    group = next(iter(data["all"]["children"].values()))
    # the canary first in inventory order; unreachable: 127.0.0.1 on a closed port
    group["hosts"] = dict({"canary": {"ansible_host": "127.0.0.1", "ansible_port": 9}}, **group["hosts"])
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = remediate(inventory, "canary,%s" % host.name, tmp_path / "runs",
                     {"scapforge_rules": [RULE], "scapforge_serial": [1, "50%"], "scapforge_max_fail_percentage": 0})
    assert proc.returncode != 0
    assert "canary" in proc.stdout and "UNREACHABLE" in proc.stdout, proc.stdout[-3000:]
    # the next wave never started: no loop ran on the lab host, and it is unchanged
    assert "TASK [scapforge.remediation.remediate : Run the remediation loop]" not in proc.stdout
    assert not list((tmp_path / "runs").glob("*/hosts/%s.json" % host.name))
    assert "%s " % host.name not in proc.stdout.split("PLAY RECAP")[-1], proc.stdout[-1500:]
