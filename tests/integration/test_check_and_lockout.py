"""--check changes nothing; a fix that locks the controller out stops the host, plainly.

Both run the real playbook over SSH against a lab host. The lock-out test opts in to
sudo_remove_nopasswd (case sudo-nopasswd-lockout): the fix comments out the NOPASSWD rule
the controller escalates with, the fresh-connection health check must catch it, and the
host must stop with reason ``unhealthy`` instead of going on. The lab host is reset after.
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


def test_fix_that_removes_the_controllers_sudo_stops_the_host(lab, lab_host, lab_inventory, tmp_path, remediate):
    host = lab.reset([lab_host.name])[0]
    try:
        rules = ["sudo_remove_nopasswd", "accounts_umask_etc_login_defs", "accounts_umask_etc_profile"]
        extra = {"scapforge_rules": rules, "scapforge_allow_access_impacting": ["sudo_remove_nopasswd"]}
        proc = remediate(lab_inventory, host.name, tmp_path, extra)
        # the host is reported failed, with the reason, and the run still writes its summary
        assert proc.returncode != 0
        assert "host stopped" in proc.stdout
        report = summary_of(tmp_path, host)
        lockout = report["rules"]["sudo_remove_nopasswd"]
        assert (lockout["outcome"], lockout["reason"], lockout["attempts"]) == ("escalated", "unhealthy", 1)
        assert "ansible.builtin.replace" in lockout["modules"]
        assert report["stopped"] and "sudo_remove_nopasswd" in report["stopped"]
        # nothing after the lock-out was attempted
        events = [json.loads(x) for x in (tmp_path / "latest" / "events.jsonl").read_text().splitlines()]
        order = [e["rule"] for e in events if e["event"] == "rule_start"]
        for rule in order[order.index("sudo_remove_nopasswd") + 1:]:
            assert report["rules"][rule]["reason"] == "host_stopped", rule
        assert [e for e in events if e["event"] == "host_stopped"]
        # and it really is locked out: become without a password no longer works
        assert host.ssh("sudo -n true", check=False).returncode != 0
    finally:
        lab.reset([lab_host.name])
    assert host.ssh("sudo -n true", check=False).returncode == 0


def test_sshd_change_that_would_lock_out_at_the_next_reload_is_caught_and_rolled_back(
        lab, lab_host, lab_inventory, tmp_path, remediate):
    # PubkeyAuthentication no: the running sshd still lets the controller in (it is not
    # reloaded), so only a login to an sshd started with the NEW file shows the lock-out.
    # The open connection still works, so the attempt is rolled back and the host goes on.
    host = lab.reset([lab_host.name])[0]
    try:
        before = host.ssh("sudo sha256sum /etc/ssh/sshd_config").stdout
        extra = {"scapforge_rules": ["sshd_disable_pubkey_auth"],
                 "scapforge_allow_access_impacting": ["sshd_disable_pubkey_auth"]}
        proc = remediate(lab_inventory, host.name, tmp_path, extra)
        assert proc.returncode == 0, proc.stdout[-3000:]
        report = summary_of(tmp_path, host)
        outcome = report["rules"]["sshd_disable_pubkey_auth"]
        assert (outcome["outcome"], outcome["reason"]) == ("escalated", "unhealthy_rolled_back"), outcome
        assert "sshd with the new configuration" in outcome["detail"]
        assert "Permission denied" in outcome["detail"]
        assert [(a["verdict"], a["rolled_back"]) for a in outcome["attempt_log"]] == [("unhealthy", True)]
        assert report["stopped"] is None
        # the file is back byte for byte, the check sshd is gone, the controller still gets in
        assert host.ssh("sudo sha256sum /etc/ssh/sshd_config").stdout == before
        assert host.ssh("pgrep -f 'sshd -D -p 2299'", check=False).returncode == 1
        assert host.ssh("sudo -n true", check=False).returncode == 0
    finally:
        lab.reset([lab_host.name])


def test_sshd_check_works_with_host_key_checking_on(lab, lab_host, lab_inventory, tmp_path, remediate):
    # Ansible's default: known host keys only. The check sshd on another port serves the same
    # keys, which must be found under the host's own known_hosts entry.
    host = lab.reset([lab_host.name])[0]
    known = tmp_path / "known_hosts"
    scan = subprocess.run(["ssh-keyscan", "-T", "5", host.address], capture_output=True, text=True, timeout=30)
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
    assert health == ["sshd with the new configuration: fresh login and sudo ok"]
