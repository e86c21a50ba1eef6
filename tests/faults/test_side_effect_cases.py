"""The safety and environment cases of ../shared/cases/cases.yml at the loop level: the main
job for real on a lab host, then the host itself is asked (issue 7, "Done when"; DESIGN
decision 19: what a fix changes beyond its rule is part of its outcome).

- tmout-login-shells, variants a (stock /etc/profile) and b (/etc/profile ends with a read-only
  TMOUT): after the run every login shell is clean, and a rule whose fix broke them is not a
  pass (``side_effect_rolled_back``, the findings in its attempt_log);
- sudo-umask-then-new-files: after ``Defaults umask=0077`` a later fix's new file would be 0600;
  the skill's accounts_tmout fix sets its mode, so every file the run left under /etc is 0644
  root:root and a non-root login shell has TMOUT=600;
- dotfile-symlink-owner: the content's chown (as it runs under dash, and as a Worker writes it
  under bash, following the user's link to /etc/shadow): /etc/shadow stays root:shadow 0640,
  the link untouched, a fix that changed /etc/shadow caught, undone and reported;
- sshd-match-override: a fix that deletes the ``Match User backup`` override is rolled back and
  names the override (``sshd_match`` finding), the other sshd rule is remediated;
- sshd-validate-no-privsep-dir: /run/sshd removed before the run; preflight makes it again and
  the sshd rule is remediated, not classified as the environment.

Every test resets the host before and after.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from lab_fixtures import REPO_ROOT
from llm_server import ScriptedLLM

PREFIX = "xccdf_org.ssgproject.content_rule_"
PROFILE = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
USER = "scapforge"
SHELLS = [(shell, user) for shell in ("sh", "bash") for user in ("root", USER)]


def root(host, command: str, check: bool = True) -> str:
    """A root shell command on the host through its own SSH session (sudo); stdout."""
    return host.ssh("sudo sh -c %s" % shlex.quote(command), check=check, timeout=300).stdout


def run_job(remediate, inventory, host, runs: Path, rules, **extra) -> dict:
    """The main job for real; returns the host report (the playbook must not crash)."""
    proc = remediate(inventory, host.name, runs, dict({"scapforge_rules": rules}, **extra))
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-4000:]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return json.loads((runs / "latest" / "summary.json").read_text())["hosts"][host.name]


def own_oscap(host, rules) -> dict:
    """oscap run by the test itself on the host: {short id: result}."""
    args = " ".join("--rule %s%s" % (PREFIX, r) for r in rules)
    out = host.ssh("cd / && sudo oscap xccdf eval --profile %s %s %s 2>/dev/null | tr -d '\\r' "
                   "| awk '/^Rule/{r=$2} /^Result/{print r, $2}'; true" % (PROFILE, args, DS), timeout=300).stdout
    return {line.split()[0][len(PREFIX):]: line.split()[1] for line in out.splitlines() if line.startswith(PREFIX)}


def login_shells(host) -> dict:
    """{(shell, user): (exit code, stderr)} of ``<shell> -l -c true`` as root and as the admin
    user, each from a clean environment (as a login would start it)."""
    found = {}
    for shell, user in SHELLS:
        home = "/root" if user == "root" else "/home/%s" % user
        command = "env -i HOME=%s USER=%s LOGNAME=%s TERM=dumb PATH=/usr/local/bin:/usr/bin:/bin %s -l -c true" % (
            home, user, user, shell)
        proc = host.ssh(("sudo " if user == "root" else "") + command, check=False)
        found[(shell, user)] = (proc.returncode, proc.stderr)
    return found


def clean(shells: dict) -> bool:
    return all(rc == 0 and err == "" for rc, err in shells.values())


def stat(host, path: str) -> str:
    """``<octal mode> <owner>:<group> <type>`` of path, not following a link."""
    return root(host, "stat -c '%%a %%U:%%G %%F' %s" % shlex.quote(path)).strip()


def findings(outcome: dict, kind: str) -> list[dict]:
    return [f for a in outcome["attempt_log"] for f in a.get("side_effects") or [] if f["kind"] == kind]


def clean_pass(outcome: dict) -> bool:
    return outcome["outcome"] == "remediated" and not outcome["side_effects"]


# ---------------------------------------------------------------------- tmout-login-shells

TMOUT_READONLY = "TMOUT=900\nreadonly TMOUT\nexport TMOUT\n"


def test_tmout_login_shells_variant_b_is_rolled_back_not_a_pass(lab, lab_host, lab_inventory, tmp_path, remediate):
    host = lab.reset([lab_host.name])[0]
    try:
        root(host, "rm -f /etc/profile.d/tmout.sh; printf %s >> /etc/profile" % shlex.quote(TMOUT_READONLY))
        profile = root(host, "sha256sum /etc/profile").split()[0]
        assert clean(login_shells(host))
        report = run_job(remediate, lab_inventory, host, tmp_path, ["accounts_tmout"])
        outcome = report["rules"]["accounts_tmout"]
        assert (outcome["outcome"], outcome["reason"]) == ("escalated", "side_effect_rolled_back"), outcome
        assert [(a["verdict"], a["reason"], a["rolled_back"]) for a in outcome["attempt_log"]] == [
            ("unhealthy", "side_effect_rolled_back", True)]
        shells = {(f["shell"], f["user"]): f for f in findings(outcome, "login_shell")}
        assert set(shells) == {("%s -l -c true" % s, u) for s, u in SHELLS}
        assert all(f["unhealthy"] for f in shells.values())
        # the skill's fix: `readonly TMOUT=600` in /etc/profile.d, then the site's TMOUT=900 at
        # the end of /etc/profile fails in every login shell
        assert "TMOUT: is read only" in shells[("sh -l -c true", USER)]["after"]
        assert "TMOUT: readonly variable" in shells[("bash -l -c true", "root")]["after"]
        assert "login_shell" in outcome["detail"] and "rolled back" in outcome["detail"]
        # after the run: every login shell clean, nothing of the fix left
        after = login_shells(host)
        assert clean(after), after
        assert root(host, "test -e /etc/profile.d/tmout.sh && echo left; true").strip() == ""
        assert root(host, "sha256sum /etc/profile").split()[0] == profile
        assert host.ssh("bash -l -c 'echo $TMOUT'").stdout.strip() == "900"  # the site's own value stands
    finally:
        lab.reset([lab_host.name])


def test_tmout_login_shells_variant_a_pass_only_if_shells_are_clean(lab, lab_host, lab_inventory, tmp_path,
                                                                    remediate):
    host = lab.reset([lab_host.name])[0]
    try:
        root(host, "rm -f /etc/profile.d/tmout.sh")
        report = run_job(remediate, lab_inventory, host, tmp_path, ["accounts_tmout"])
        outcome = report["rules"]["accounts_tmout"]
        after = login_shells(host)
        assert clean(after), after  # whatever the product did
        if outcome["outcome"] == "remediated":
            assert host.ssh("bash -l -c 'echo $TMOUT'").stdout.strip() == "600"
            assert own_oscap(host, ["accounts_tmout"]) == {"accounts_tmout": "pass"}
        else:
            # the content's `typeset -xr` under dash: found in root's and the user's sh -l, undone
            assert (outcome["outcome"], outcome["reason"]) == ("escalated", "side_effect_rolled_back"), outcome
            shells = {(f["shell"], f["user"]) for f in findings(outcome, "login_shell")}
            assert shells == {("sh -l -c true", "root"), ("sh -l -c true", USER)}
            assert all("typeset: not found" in f["after"] for f in findings(outcome, "login_shell"))
            assert root(host, "test -e /etc/profile.d/tmout.sh && echo left; true").strip() == ""
    finally:
        lab.reset([lab_host.name])


# ---------------------------------------------------------------------- sudo-umask-then-new-files

def etc_entries(host) -> set[str]:
    return set(root(host, "find /etc -xdev -print").splitlines())


def test_sudo_umask_then_new_files(lab, lab_host, lab_inventory, tmp_path, remediate):
    host = lab.reset([lab_host.name])[0]
    try:
        root(host, "rm -f /etc/profile.d/tmout.sh")
        before = etc_entries(host)
        report = run_job(remediate, lab_inventory, host, tmp_path, ["sudo_add_umask", "accounts_tmout"],
                         scapforge_deadman_seconds=120)
        rules = report["rules"]
        assert (rules["sudo_add_umask"]["outcome"], rules["sudo_add_umask"]["reason"]) == ("remediated", "verified")
        assert "umask=0077" in root(host, "grep -h umask /etc/sudoers")
        tmout = rules["accounts_tmout"]
        # the skill's own fix sets the file's mode: 0644 under sudo's umask=0077 too, a clean pass
        # (the content's fix made it 0600 and was rolled back; that check is in
        # tests/integration/test_health_checks_lab.py)
        assert (tmout["outcome"], tmout["reason"], tmout["side_effects"]) == ("remediated", "verified", []), tmout
        assert stat(host, "/etc/profile.d/tmout.sh") == "644 root:root regular file"
        assert host.ssh("bash -l -c 'echo $TMOUT'").stdout.strip() == "600"  # the admin user, not root
        # every file the run left under /etc is 0644 root:root, or its rule is not a clean pass
        new = sorted(etc_entries(host) - before)
        for path in new:
            if stat(host, path) != "644 root:root regular file":
                owners = [r for r, o in rules.items() if any(f.get("path") == path for a in o["attempt_log"]
                                                             for f in a.get("side_effects") or [])]
                assert owners and not any(clean_pass(rules[r]) for r in owners), (path, stat(host, path), rules)
        assert clean(login_shells(host))
        assert host.ssh("sudo -n env true", check=False).returncode == 0
    finally:
        lab.reset([lab_host.name])


# ---------------------------------------------------------------------- dotfile-symlink-owner

DOT_RULES = ["accounts_user_dot_user_ownership", "accounts_user_dot_group_ownership"]
DOT_SETUP = ("ln -s /etc/shadow /home/scapforge/.evil && "
             "install -o root -g root -m 0644 /dev/null /home/scapforge/.rootowned")
SENSITIVE = ("/etc/shadow", "/etc/gshadow", "/etc/passwd", "/etc/group", "/etc/sudoers")


def sensitive_state(host) -> dict:
    return {p: stat(host, p) for p in SENSITIVE}


def link_state(host) -> str:
    return root(host, "stat -c '%U:%G %N' /home/scapforge/.evil").strip()


def test_dotfile_symlink_owner_content_fix(lab, lab_host, lab_inventory, tmp_path, remediate):
    """The content's fixes as they are: under Debian's dash the glob .[^\\.]?* matches nothing,
    so they change nothing; the rules are not claimed and nothing sensitive moves."""
    host = lab.reset([lab_host.name])[0]
    try:
        root(host, DOT_SETUP)
        before, link = sensitive_state(host), link_state(host)
        assert before["/etc/shadow"] == "640 root:shadow regular file"
        report = run_job(remediate, lab_inventory, host, tmp_path, DOT_RULES)
        for rule in DOT_RULES:
            outcome = report["rules"][rule]
            # the command module always says changed: the fix "ran", oscap still says fail
            assert (outcome["outcome"], outcome["reason"]) == ("escalated", "fix_ineffective"), outcome
            assert [a["side_effects"] for a in outcome["attempt_log"]] == [[]]
        assert sensitive_state(host) == before
        assert link_state(host) == link == "root:root '/home/scapforge/.evil' -> '/etc/shadow'"
    finally:
        lab.reset([lab_host.name])


#: the content's chown as it runs where /bin/sh is bash (RHEL): its glob matches, its chown
#: follows the user's link to /etc/shadow. A (scripted) Worker answers it for each rule.
DOT_TASKS = {
    "accounts_user_dot_user_ownership": ("chown", "$3"),
    "accounts_user_dot_group_ownership": ("chgrp", "$4"),
}


def dot_answer(rule: str) -> dict:
    command, field = DOT_TASKS[rule]
    cmd = ("awk -F':' '{ if ($3 >= 1000 && $3 != 65534) print %s\" \"$6 }' /etc/passwd | while read -r id home; "
           "do %s -f \"$id\" \"$home\"/.[^.]?*; done; true" % (field, command))
    return {"tasks": [{"name": "Own the users' dot files", "ansible.builtin.shell": {"cmd": cmd,
                                                                                     "executable": "/bin/bash"}}],
            "rationale": "the content's fix, under bash"}


def test_dotfile_symlink_owner_worker_chown_through_the_link(lab, lab_host, lab_inventory, tmp_path, remediate):
    host = lab.reset([lab_host.name])[0]
    try:
        root(host, DOT_SETUP)
        before, link = sensitive_state(host), link_state(host)
        with ScriptedLLM() as llm:
            llm.script_agents({rule: dot_answer(rule) for rule in DOT_RULES})
            report = run_job(remediate, lab_inventory, host, tmp_path, DOT_RULES, scapforge_llm_base_url=llm.url,
                             scapforge_llm_model="scripted", scapforge_llm_max_attempts=1)
            assert llm.unused_scripts == []
        expected = {"accounts_user_dot_user_ownership": ("owner changed", "file scapforge:shadow 0640"),
                    "accounts_user_dot_group_ownership": ("group changed", "file root:scapforge 0640")}
        for rule in DOT_RULES:
            outcome = report["rules"][rule]
            # the Worker's one attempt (its budget) was caught and undone; the rule says so
            assert (outcome["outcome"], outcome["reason"]) == ("escalated", "attempt_budget"), outcome
            assert "sensitive_file /etc/shadow" in outcome["detail"] and outcome["side_effects"] == []
            assert [(a["source"], a["verdict"], a["reason"], a["rolled_back"]) for a in outcome["attempt_log"]] == [
                ("vendor", "ineffective", "fix_ineffective", True),
                ("worker", "unhealthy", "side_effect_rolled_back", False)]
            worker = outcome["attempt_log"][-1]
            assert [(f["path"], f["what"], f["before"], f["after"], f["unhealthy"])
                    for f in worker["side_effects"] if f["kind"] == "sensitive_file"] == [
                ("/etc/shadow",) + expected[rule][:1] + ("file root:shadow 0640",) + expected[rule][1:] + (True,)]
        events = [json.loads(x) for x in (tmp_path / "latest" / "events.jsonl").read_text().splitlines()]
        undone = [e["data"] for e in events if e["event"] == "side_effects_undone"]
        assert [(u["restored"], u["verified"]) for u in undone] == [(["/etc/shadow"], True)] * 2
        assert sensitive_state(host) == before  # /etc/shadow root:shadow 0640 again
        assert link_state(host) == link         # the link itself untouched
        assert host.ssh("sudo -n env true", check=False).returncode == 0
    finally:
        lab.reset([lab_host.name])


# ---------------------------------------------------------------------- sshd-match-override

MATCH_TAIL = "PermitRootLogin no\nMatch User backup\n    PermitRootLogin yes\n"


def test_sshd_match_override_is_not_reported_as_remediated(lab, lab_host, lab_inventory, tmp_path, remediate):
    host = lab.reset([lab_host.name])[0]
    rules = ["sshd_disable_empty_passwords", "sshd_disable_root_login"]
    try:
        root(host, "printf %s >> /etc/ssh/sshd_config" % shlex.quote(MATCH_TAIL))
        assert own_oscap(host, rules) == {r: "fail" for r in rules}
        report = run_job(remediate, lab_inventory, host, tmp_path, rules)
        root_login = report["rules"]["sshd_disable_root_login"]
        assert (root_login["outcome"], root_login["reason"]) == ("escalated", "side_effect_rolled_back"), root_login
        assert [(a["verdict"], a["rolled_back"]) for a in root_login["attempt_log"]] == [("unhealthy", True)]
        match = findings(root_login, "sshd_match")
        assert [(f["path"], f["what"], f["unhealthy"]) for f in match] == [
            ("/etc/ssh/sshd_config", "removed from the block 'Match User backup': PermitRootLogin yes", True)]
        assert "Match User backup" in root_login["detail"] and "PermitRootLogin yes" in root_login["detail"]
        # the other rule's fix inserts its line before any Match block: remediated, nothing to report
        empty = report["rules"]["sshd_disable_empty_passwords"]
        assert (empty["outcome"], empty["reason"], empty["side_effects"]) == ("remediated", "verified", []), empty
        # the host: the override is still there, exactly; sshd accepts the file; logins work
        config = root(host, "cat /etc/ssh/sshd_config")
        assert config.endswith(MATCH_TAIL), config[-300:]
        assert root(host, "sshd -t && echo ok").strip() == "ok"
        assert own_oscap(host, rules) == {"sshd_disable_empty_passwords": "pass", "sshd_disable_root_login": "fail"}
        assert host.ssh("sudo -n env true", check=False).returncode == 0
    finally:
        lab.reset([lab_host.name])


# ---------------------------------------------------------------------- sshd-validate-no-privsep-dir

def test_sshd_without_privsep_dir_is_prepared_by_preflight(lab, lab_host, lab_inventory, tmp_path, remediate):
    """With /run/sshd gone, sshd refuses every new login ("Missing privilege separation
    directory") and `sshd -t` fails. The test removes it through Ansible's own persistent SSH
    connection (ControlPersist), which the playbook then reuses, as a controller already
    connected would; preflight makes the directory again before anything validates with it."""
    host = lab.reset([lab_host.name])[0]
    rule = "sshd_disable_empty_passwords"
    try:
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"))
        adhoc = subprocess.run([str(Path(sys.executable).parent / "ansible"), "-i", str(lab_inventory), host.name,
                                "-b", "-m", "ansible.builtin.file", "-a", "path=/run/sshd state=absent"],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env, check=False)
        assert adhoc.returncode == 0, adhoc.stdout + adhoc.stderr
        refused = host.ssh("true", check=False)  # sshd's child dies at once: no new login at all
        assert refused.returncode == 255 and "kex_exchange_identification" in refused.stderr, refused
        report = run_job(remediate, lab_inventory, host, tmp_path, [rule])
        outcome = report["rules"][rule]
        assert (outcome["outcome"], outcome["reason"]) == ("remediated", "verified"), outcome
        assert stat(host, "/run/sshd") == "755 root:root directory"
        assert root(host, "sshd -t && echo ok").strip() == "ok"
        assert own_oscap(host, [rule]) == {rule: "pass"}
    finally:
        lab.reset([lab_host.name])
