"""Lock-outs caused by an attempt, for real on a lab host: found, undone, the host manageable.

Cases sudo-nopasswd-lockout and sudo-noexec-breaks-become (../shared/cases/cases.yml): the
user opts in to the access-impacting rule, its fix breaks become, the open connection can no
longer restore it (its own become is what broke), so the dead-man switch armed before the
change restores it by itself; a fresh login then works again and the rule ends
``unhealthy_rolled_back``. An sshd change that would lock the controller out at the next
reload is caught by the check sshd and restored over the open connection. A PAM stack that
refuses every account, written by the (scripted) Worker, is undone by the switch too.
"""

from __future__ import annotations

import json

import pytest
from llm_server import ScriptedLLM

SWITCH = 30  # seconds: short, so the suite does not wait ten minutes per lock-out
FILES = ("/etc/sudoers", "/etc/sudoers.d/scapforge", "/etc/ssh/sshd_config", "/etc/pam.d/common-account")


def digests(host):
    out = host.ssh("sudo sha256sum %s" % " ".join(FILES)).stdout
    return dict(reversed(line.split()) for line in out.splitlines())


def report_of(runs_dir, host):
    return json.loads((runs_dir / "latest" / "summary.json").read_text())["hosts"][host.name]


def events_of(runs_dir):
    return [json.loads(x) for x in (runs_dir / "latest" / "events.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("rule", ["sudo_remove_nopasswd", "sudo_add_noexec"])
def test_a_fix_that_breaks_become_is_undone_by_the_dead_man_switch(lab, lab_host, lab_inventory, tmp_path,
                                                                   remediate, rule):
    host = lab.reset([lab_host.name])[0]
    try:
        before = digests(host)
        rules = [rule, "accounts_umask_etc_login_defs"]
        extra = {"scapforge_rules": rules, "scapforge_allow_access_impacting": [rule],
                 "scapforge_deadman_seconds": SWITCH}
        proc = remediate(lab_inventory, host.name, tmp_path, extra)
        assert proc.returncode == 0, proc.stdout[-4000:]
        report = report_of(tmp_path, host)
        outcome = report["rules"][rule]
        assert (outcome["outcome"], outcome["reason"]) == ("escalated", "unhealthy_rolled_back"), outcome
        assert [(a["verdict"], a["rolled_back"]) for a in outcome["attempt_log"]] == [("unhealthy", True)]
        assert "dead-man switch" in outcome["detail"]
        assert report["stopped"] is None
        # ordered last: the other rule was worked before it
        order = [e["rule"] for e in events_of(tmp_path) if e["event"] == "rule_start"]
        assert order.index("accounts_umask_etc_login_defs") < order.index(rule)
        assert report["rules"]["accounts_umask_etc_login_defs"]["reason"] == "verified"
        steps = [e["data"]["step"] for e in events_of(tmp_path) if e["event"] == "deadman" and e["rule"] == rule]
        assert steps[0] == "armed" and "waiting" in steps and steps[-1] == "status"
        # the host is manageable: become works, sudoers is back byte for byte
        assert host.ssh("sudo -n env true", check=False).returncode == 0
        assert {f: d for f, d in digests(host).items() if "sudoers" in f} == \
            {f: d for f, d in before.items() if "sudoers" in f}
    finally:
        lab.reset([lab_host.name])


def test_an_sshd_change_that_would_lock_out_at_the_next_reload_is_rolled_back(lab, lab_host, lab_inventory, tmp_path,
                                                                              remediate):
    # PubkeyAuthentication no: the running sshd still lets the controller in (it is not
    # reloaded), so only a login to an sshd started with the NEW file shows the lock-out.
    # The open connection still works, so the restore runs over it and the host goes on.
    host = lab.reset([lab_host.name])[0]
    try:
        before = digests(host)
        extra = {"scapforge_rules": ["sshd_disable_pubkey_auth"],
                 "scapforge_allow_access_impacting": ["sshd_disable_pubkey_auth"], "scapforge_deadman_seconds": SWITCH}
        proc = remediate(lab_inventory, host.name, tmp_path, extra)
        assert proc.returncode == 0, proc.stdout[-3000:]
        report = report_of(tmp_path, host)
        outcome = report["rules"]["sshd_disable_pubkey_auth"]
        assert (outcome["outcome"], outcome["reason"]) == ("escalated", "unhealthy_rolled_back"), outcome
        assert "sshd with the new configuration" in outcome["detail"] and "Permission denied" in outcome["detail"]
        assert [(a["verdict"], a["rolled_back"]) for a in outcome["attempt_log"]] == [("unhealthy", True)]
        assert report["stopped"] is None
        assert digests(host) == before
        assert host.ssh("pgrep -f 'sshd -D -p 2299'", check=False).returncode == 1
        steps = [e["data"]["step"] for e in events_of(tmp_path) if e["event"] == "deadman"]
        assert steps[0] == "armed" and "waiting" not in steps  # restored over the open connection
    finally:
        lab.reset([lab_host.name])


PAM_DENY = {"tasks": [{"name": "Lock accounts", "ansible.builtin.lineinfile": {
    "path": "/etc/pam.d/common-account", "line": "account requisite pam_deny.so", "insertbefore": "BOF"}}],
    "rationale": "deny"}
SSHD_BROKEN = {"tasks": [{"name": "Tighten sshd", "ansible.builtin.lineinfile": {
    "path": "/etc/ssh/sshd_config", "line": "PermitRootLogin sometimes", "insertbefore": "BOF"}}]}
#: a sudoers line the gate lets through (a validated Defaults line) but sudo cannot parse
#: (passwd_tries takes a number): a syntax error there would stop sudo for everyone.
SUDOERS_BROKEN = {"tasks": [{"name": "Limit password tries", "ansible.builtin.lineinfile": {
    "path": "/etc/sudoers.d/99-hardening", "create": True, "mode": "0440", "line": "Defaults passwd_tries=three",
    "validate": "/usr/sbin/visudo -cf %s"}}]}


def test_a_worker_that_breaks_pam_or_sshd_is_undone(lab, lab_host, lab_inventory, tmp_path, remediate):
    """The Worker's tasks (scripted) refuse every account in PAM: sshd logins and sudo both
    fail, the switch restores common-account. On another rule they write a line sshd -t
    rejects: the check after the attempt catches it and the restore runs at once. On a third
    they write a sudoers line sudo cannot parse: visudo refuses it on the host, nothing is
    written."""
    host = lab.reset([lab_host.name])[0]
    try:
        before = digests(host)
        with ScriptedLLM() as llm:
            llm.script_agents({"accounts_passwords_pam_faillock_deny": PAM_DENY,
                               "accounts_password_pam_retry": SSHD_BROKEN,
                               "accounts_passwords_pam_faillock_interval": SUDOERS_BROKEN})
            extra = {"scapforge_rules": ["accounts_passwords_pam_faillock_deny", "accounts_password_pam_retry",
                                         "accounts_passwords_pam_faillock_interval"],
                     "scapforge_llm_base_url": llm.url, "scapforge_llm_model": "scripted",
                     "scapforge_llm_max_attempts": 1, "scapforge_deadman_seconds": SWITCH}
            proc = remediate(lab_inventory, host.name, tmp_path, extra)
        assert proc.returncode == 0, proc.stdout[-4000:]
        rules = report_of(tmp_path, host)["rules"]
        pam = rules["accounts_passwords_pam_faillock_deny"]
        assert [(a["verdict"], a["rolled_back"]) for a in pam["attempt_log"]] == [("unhealthy", True)], pam
        assert "dead-man switch" in pam["attempt_log"][0]["detail"]
        sshd = rules["accounts_password_pam_retry"]
        assert [(a["verdict"], a["rolled_back"]) for a in sshd["attempt_log"]] == [("unhealthy", True)], sshd
        assert "sshd_t" in sshd["attempt_log"][0]["detail"] or "sshd -t" in sshd["attempt_log"][0]["detail"]
        sudoers = rules["accounts_passwords_pam_faillock_interval"]
        assert [(a["verdict"], a["reason"]) for a in sudoers["attempt_log"]] == [("failed", "fix_failed")], sudoers
        assert "failed to validate" in sudoers["attempt_log"][0]["detail"], sudoers
        assert host.ssh("sudo ls /etc/sudoers.d/99-hardening", check=False).returncode != 0
        assert digests(host) == before
        assert host.ssh("sudo -n env true", check=False).returncode == 0
    finally:
        lab.reset([lab_host.name])
