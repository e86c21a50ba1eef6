"""The main job as AWX / Automation Controller runs it: through ansible-runner (the library
AWX's job templates use), on four lab hosts at once, unchanged (issue 10 item 5).

Asserts what a controller shows and keeps: the status and rc, one ``runner_on_ok`` event of
the ralph task per host, the progress lines as ``verbose`` events and in the job's stdout,
the artifacts directory (job_events/, stdout, rc, status, fact_cache/) and the set_stats
payload (``artifact_data`` of the ``playbook_on_stats`` event, what AWX stores on the job):
its size in bytes must stay small whatever the number of hosts and rules.

Hosts: the session's lab host plus three more. ``SCAPFORGE_LAB_EXTRA_HOSTS`` names them
(comma-separated); by default lab<N+10>, lab<N+20>, lab<N+30> for lab host labN, so that two
pytest-xdist workers never share one. Hosts this test boots are stopped at its end; one that
already ran is reset to the lab baseline first.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import ansible_runner
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
RULES = ["accounts_umask_etc_login_defs", "file_permissions_sshd_config", "set_password_hashing_algorithm_logindefs"]
EXPECTED = {
    "accounts_umask_etc_login_defs": ("remediated", "verified"),
    "file_permissions_sshd_config": ("remediated", "verified"),
    "set_password_hashing_algorithm_logindefs": ("escalated", "llm_unavailable"),
}
#: the set_stats payload AWX keeps on the job: run id, summary path and run totals.
STATS_BOUND = 4096  # bytes of its JSON


def _extra_names(lab_host) -> list[str]:
    named = os.environ.get("SCAPFORGE_LAB_EXTRA_HOSTS")
    if named:
        return [n.strip() for n in named.split(",") if n.strip()][:3]
    return ["lab%d" % (lab_host.index + step) for step in (10, 20, 30)]


@pytest.fixture()
def four_hosts(lab, lab_host):
    """The session's lab host and three more, all at the lab baseline (list of LabHost)."""
    names = _extra_names(lab_host)
    running = {h.name for h in lab.hosts()}
    booted = [n for n in names if n not in running]
    if set(names) & running:
        lab.reset(sorted(set(names) & running))
    try:
        extra = lab.start(names)
        yield [lab_host] + extra
    finally:
        for name in booted:
            lab.stop(name)


def test_the_job_through_ansible_runner_on_four_hosts(lab, four_hosts, tmp_path):
    names = [h.name for h in four_hosts]
    inventory = lab.write_inventory(tmp_path / "inventory.yml", four_hosts)
    private = tmp_path / "runner"
    private.mkdir()
    runs = tmp_path / "runs"
    result = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(REPO_ROOT),
        playbook="playbooks/remediate.yml",
        inventory=str(inventory),
        limit=",".join(names),
        extravars={"scapforge_rules": RULES, "scapforge_runs_dir": str(runs),
                   "scapforge_memory_path": str(tmp_path / "memory")},
        envvars={"ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg")},
        quiet=True,
        timeout=1500,
    )
    stdout = (Path(result.config.artifact_dir) / "stdout").read_text()
    assert (result.status, result.rc) == ("successful", 0), stdout[-6000:]

    # the artifacts a controller reads back
    artifacts = Path(result.config.artifact_dir)
    for name in ("stdout", "rc", "status", "command", "job_events", "fact_cache"):
        assert (artifacts / name).exists(), name
    assert (artifacts / "rc").read_text().strip() == "0"
    assert (artifacts / "status").read_text().strip() == "successful"
    events = list(result.events)
    assert len(list((artifacts / "job_events").glob("*.json"))) == len(events)

    ok = [e for e in events if e["event"] == "runner_on_ok"
          and e["event_data"].get("task_action") == "scapforge.remediation.ralph"]
    assert sorted(e["event_data"]["host"] for e in ok) == sorted(names)
    for event in ok:
        res = event["event_data"]["res"]
        assert res["outcomes"] == {"escalated/llm_unavailable": 1, "remediated/verified": 2}, res
        assert res["regressions"] == []

    # the progress lines: verbose events of the job, one per rule and host, in its stdout
    verbose = "\n".join(e.get("stdout", "") for e in events if e["event"] == "verbose")
    for host in names:
        assert "%s: 3 failing rules to work, profile anssi_bp28_high" % host in verbose
        lines = [x for x in verbose.splitlines() if x.startswith("%s: rule " % host)]
        assert sorted(x.split()[2] for x in lines) == ["1/3", "2/3", "3/3"], lines
        for rule, (outcome, reason) in EXPECTED.items():
            assert any(" %s" % rule in x and "%s [%s]" % (outcome, reason) in x for x in lines), (rule, lines)
            assert any(x in stdout for x in lines)

    # the set_stats payload: what AWX stores as the job's artifacts
    stats = [e for e in events if e["event"] == "playbook_on_stats"]
    assert len(stats) == 1
    payload = stats[0]["event_data"]["artifact_data"]
    assert set(payload) == {"scapforge_run_id", "scapforge_summary", "scapforge_totals", "scapforge_report"}
    assert payload["scapforge_report"] == str(Path(payload["scapforge_summary"]).with_name("report.html"))
    assert Path(payload["scapforge_report"]).is_file()
    assert payload["scapforge_totals"]["outcomes"] == {"escalated/llm_unavailable": 4, "remediated/verified": 8}
    assert Path(payload["scapforge_summary"]).is_file()
    size = len(json.dumps(payload, separators=(",", ":")).encode())
    print("set_stats payload for %d hosts: %d bytes" % (len(names), size))
    assert size < STATS_BOUND, payload
    summary = json.loads(Path(payload["scapforge_summary"]).read_text())
    assert sorted(summary["hosts"]) == sorted(names)
