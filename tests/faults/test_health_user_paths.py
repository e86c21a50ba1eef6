"""Harm a pass hides (issue 17 item 6), for real on a lab host: a fix that breaks password
changes while a fresh login and sudo still work is rolled back as unhealthy.

The (scripted) Worker puts ``password requisite pam_deny.so`` at the top of
/etc/pam.d/common-password: sshd logins (publickey: auth is not asked, account and session
are untouched) and ``sudo -n`` (auth, account, session) still work, so the fresh login with
become passes; the ``passwd_change`` check (a throwaway ``scapforge-hc-*`` account whose
password is set with chpasswd and changed with passwd on a pty, both through
common-password) fails with ``password_change_failed``, the attempt is restored over the
open connection, and the host is healthy again. The file is back byte for byte, a password
change works, and no throwaway account, home or opasswd line is left.
"""

from __future__ import annotations

import json

from llm_server import ScriptedLLM

SWITCH = 30
RULE = "accounts_password_pam_retry"
PAM_FILES = ("/etc/pam.d/common-password", "/etc/pam.d/common-auth", "/etc/pam.d/common-account",
             "/etc/passwd", "/etc/group")
BREAK_PASSWORDS = {"tasks": [{"name": "Require a retry", "ansible.builtin.lineinfile": {
    "path": "/etc/pam.d/common-password", "line": "password requisite pam_deny.so", "insertbefore": "BOF"}}],
    "rationale": "retry"}


def digests(host):
    out = host.ssh("sudo sha256sum %s" % " ".join(PAM_FILES)).stdout
    return dict(reversed(line.split()) for line in out.splitlines())


def leftovers(host):
    """Throwaway accounts, homes and opasswd lines of the health check still on the host."""
    out = host.ssh("getent passwd | grep '^scapforge-hc-'; ls -d /home/scapforge-hc-* 2>/dev/null; "
                   "sudo grep '^scapforge-hc-' /etc/security/opasswd; true").stdout
    return out.split()


def password_change_works(host):
    """A password change through PAM's common-password (chpasswd) for an account of this test."""
    script = ("u=scapforge-test-pw; useradd -M -N $u && echo \"$u:Vq7-kT2.mW9+rZ4@\" | chpasswd; rc=$?; "
              "userdel -f $u 2>/dev/null; exit $rc")
    return host.ssh("sudo sh -c '%s'" % script.replace("'", "'\\''"), check=False).returncode == 0


def test_a_fix_that_breaks_password_changes_is_rolled_back(lab, lab_host, lab_inventory, tmp_path, remediate):
    host = lab.reset([lab_host.name])[0]
    try:
        before = digests(host)
        with ScriptedLLM() as llm:
            llm.script_agents({RULE: BREAK_PASSWORDS})
            extra = {"scapforge_rules": [RULE], "scapforge_llm_base_url": llm.url, "scapforge_llm_model": "scripted",
                     "scapforge_llm_max_attempts": 1, "scapforge_deadman_seconds": SWITCH}
            proc = remediate(lab_inventory, host.name, tmp_path, extra)
        assert proc.returncode == 0, proc.stdout[-4000:]
        report = json.loads((tmp_path / "latest" / "summary.json").read_text())["hosts"][host.name]
        assert report["stopped"] is None
        attempts = report["rules"][RULE]["attempt_log"]
        assert [(a["verdict"], a["rolled_back"]) for a in attempts] == [("unhealthy", True)], attempts
        assert attempts[0]["reason"] == "unhealthy_rolled_back", attempts[0]
        assert "passwd_change: password change failed: chpasswd exited 1" in attempts[0]["detail"], attempts[0]
        events = [json.loads(x) for x in (tmp_path / "latest" / "events.jsonl").read_text().splitlines()]
        healths = [e["data"] for e in events if e["event"] == "health" and e.get("rule") == RULE]
        assert [(h["healthy"], h.get("after_restore", False)) for h in healths] == [(False, False), (True, True)]
        assert healths[0]["codes"] == ["password_change_failed"], healths[0]
        assert healths[1]["checks"]["passwd_change"]["ok"] is True
        # login and sudo were fine all along: only the new check saw it
        assert healths[0]["checks"]["pam_modules"]["ok"] is True
        assert digests(host) == before
        assert password_change_works(host)
        assert leftovers(host) == []
    finally:
        lab.reset([lab_host.name])
