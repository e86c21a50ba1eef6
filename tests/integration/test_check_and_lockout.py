"""--check changes nothing; the check sshd keeps host-key checking on.

Both run the real playbook over SSH against a lab host. The lock-outs (sudo, sshd, PAM) are
in the fault suite, tests/faults/test_lockouts.py.
"""

from __future__ import annotations

import json
import subprocess
FILES = ("/etc/login.defs", "/etc/ssh/sshd_config", "/etc/sudoers", "/etc/sudoers.d/scapforge")


def digests(host):
    out = host.ssh("sudo sha256sum %s" % " ".join(FILES)).stdout
    return dict(reversed(line.split()) for line in out.splitlines())


def summary_of(runs_dir, host):
    return json.loads((runs_dir / "latest" / "summary.json").read_text())["hosts"][host.name]


def test_check_mode_plans_and_changes_nothing(lab, lab_host, lab_inventory, tmp_path, remediate):
    host = lab.reset([lab_host.name])[0]
    before = digests(host)
    rules = ["accounts_umask_etc_login_defs", "sshd_disable_root_login", "sudo_add_noexec"]
    proc = remediate(lab_inventory, host.name, tmp_path, {"scapforge_rules": rules}, "--check")
    assert proc.returncode == 0, proc.stdout[-4000:]
    report = summary_of(tmp_path, host)
    assert report["check_mode"] is True
    assert report["rules"]["accounts_umask_etc_login_defs"]["reason"] == "check_mode"
    assert report["rules"]["sshd_disable_root_login"]["reason"] == "check_mode"
    assert report["rules"]["sudo_add_noexec"]["reason"] == "access_impacting"
    assert "Ensure the Default UMASK is Appended Correctly" in report["rules"]["accounts_umask_etc_login_defs"]["detail"]
    assert report["after"] is None and report["before"]["fail"] == 3
    assert digests(host) == before


def test_sshd_check_works_with_host_key_checking_on(lab, lab_host, lab_inventory, tmp_path, remediate):
    # Ansible's default: known host keys only. The check sshd on another port serves the same
    # keys, which must be found under the host's own known_hosts entry.
    host = lab.reset([lab_host.name])[0]
    known = tmp_path / "known_hosts"
    scan = subprocess.run(["ssh-keyscan", "-T", "5", host.address], capture_output=True, text=True, timeout=30,
                          check=False)
    known.write_text(scan.stdout)
    assert host.address in known.read_text()
    extra = {"scapforge_rules": ["sshd_disable_root_login"], "ansible_host_key_checking": True,
             "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s" % known}
    proc = remediate(lab_inventory, host.name, tmp_path / "runs", extra)
    assert proc.returncode == 0, proc.stdout[-3000:]
    outcome = summary_of(tmp_path / "runs", host)["rules"]["sshd_disable_root_login"]
    assert (outcome["outcome"], outcome["reason"]) == ("remediated", "verified"), outcome
    events = [json.loads(x) for x in (tmp_path / "runs" / "latest" / "events.jsonl").read_text().splitlines()]
    health = [e["data"]["detail"] for e in events if e["event"] == "health"]
    # the fresh login through the check sshd, then the checks after every attempt (sshd -t,
    # visudo -c, package db, failed units, side effects)
    assert health == ["sshd with the new configuration: fresh login and sudo ok; 9 checks ok"]
