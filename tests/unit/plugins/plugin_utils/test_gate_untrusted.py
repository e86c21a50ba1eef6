"""The gate for model-written tasks (plugins/plugin_utils/task_gate.py): allowlist, expression
arguments, banned patterns, and the llm-output cases of ../shared/cases/cases.yml.

Pure checks: nothing runs on any host.  Each banned pattern is refused with a reason that says
what the task would do, and a close but harmless variant is accepted, so that nobody later
refuses valid remediation by accident.  The case inputs (tests/llm_cases.py) are copied
verbatim so the unit tests do not depend on the shared file.
"""
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llm_cases import (
    LLM_BACKREFS_NOOP,
    LLM_COMMAND_WARN_ARG,
    LLM_INVENTED_MODULE,
    LLM_PIPEFAIL_UNDER_DASH,
    LLM_YAML_UNQUOTED_COLON,
)

from ansible_collections.scapforge.remediation.plugins.plugin_utils import task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils.task_gate import GatePolicy

POLICY = GatePolicy(remote_user="scapforge")


def gate(tasks, policy=POLICY):
    return task_gate.validate(tasks, trusted=False, policy=policy)


def gate_text(text, policy=POLICY):
    return gate(task_gate.parse_task_text(text), policy)


def test_llm_yaml_unquoted_colon_refused_with_line_and_column():
    with pytest.raises(task_gate.TaskParseError) as err:
        task_gate.parse_task_text(LLM_YAML_UNQUOTED_COLON)
    assert "mapping values are not allowed in this context" in str(err.value)
    assert "line 4, column 34" in str(err.value)


def test_llm_command_warn_arg_refused_naming_warn():
    problems = gate_text(LLM_COMMAND_WARN_ARG)
    assert problems == [problems[0]] and problems[0].startswith(
        "task 1: Unsupported parameters for (ansible.builtin.command) module: warn.")


def test_llm_invented_module_refused_naming_the_real_one():
    assert gate_text(LLM_INVENTED_MODULE) == [
        "task 1: no module named 'ansible.builtin.sysctl_setting' in this Ansible installation;"
        " did you mean ansible.posix.sysctl?"]


def test_routed_builtin_sysctl_is_accepted_and_recorded_canonically():
    tasks = [{"ansible.builtin.sysctl": {"name": "kernel.dmesg_restrict", "value": "1"}}]
    assert gate(tasks) == []
    assert task_gate.resolve_module("ansible.builtin.sysctl").fqcn == "ansible.posix.sysctl"
    assert "ansible.posix.sysctl" in POLICY.allowed_modules()


@pytest.mark.parametrize("text", [LLM_PIPEFAIL_UNDER_DASH, LLM_BACKREFS_NOOP])
def test_cases_whose_fault_shows_only_at_run_time_pass_the_gate(text):
    assert gate_text(text) == []


def test_pipefail_with_bash_executable_passes():
    task = {"ansible.builtin.shell": "set -o pipefail && grep -c x /etc/passwd | head -1",
            "args": {"executable": "/bin/bash"}}
    assert gate([task]) == []


# ------------------------------------------------------------------ allowlist

@pytest.mark.parametrize("module, args", [
    ("ansible.posix.authorized_key", {"user": "bob", "key": "ssh-ed25519 AAAA"}),
    ("community.general.sudoers", {"name": "bob", "user": "bob", "commands": "ALL"}),
    ("ansible.builtin.uri", {"url": "http://10.0.0.1/"}),
    ("ansible.builtin.git", {"repo": "https://example.org/x.git", "dest": "/opt/x"}),
])
def test_modules_outside_the_allowlist_are_refused_with_the_list(module, args):
    problems = gate([{"name": "x", module: args}])
    assert len(problems) == 1
    assert problems[0].startswith(f"task 1 'x': module {module} is not in the allowlist for model-written tasks (allowed: ")
    assert "ansible.builtin.lineinfile" in problems[0] and "ansible.posix.sysctl" in problems[0]


def test_every_default_allowlist_entry_is_a_canonical_module():
    for name in task_gate.DEFAULT_UNTRUSTED_MODULES:
        ref = task_gate.resolve_module(name)
        assert ref is not None and ref.fqcn == name, name


def test_skill_extra_extends_the_allowlist_and_keeps_banned_patterns():
    extra = GatePolicy(remote_user="scapforge", module_allowlist_extra={"community.general.sudoers"})
    assert "community.general.sudoers" in extra.allowed_modules()
    assert gate([{"community.general.sudoers": {"name": "bob", "user": "bob", "commands": "/usr/bin/id"}}], extra) == []
    problems = gate([{"community.general.sudoers": {"name": "sf", "user": "scapforge", "commands": "ALL"}}], extra)
    assert problems and "sudo rule of scapforge" in problems[0]


def test_denied_module_stays_denied_even_in_the_extras():
    extra = GatePolicy(module_allowlist_extra={"ansible.builtin.reboot"})
    assert gate([{"ansible.builtin.reboot": {}}], extra) == [
        "task 1: module ansible.builtin.reboot is not allowed in remediation tasks"]


def test_trusted_tasks_skip_the_allowlist_and_banned_patterns():
    vendor = [{"ansible.posix.authorized_key": {"user": "bob", "key": "ssh-ed25519 AAAA"}},
              {"ansible.builtin.command": "sysctl -w kernel.dmesg_restrict=1"},
              {"ansible.builtin.systemd": {"name": "sshd", "state": "stopped", "enabled": False}}]
    assert task_gate.validate(vendor, trusted=True, policy=POLICY) == []
    assert {p.split(':', maxsplit=1)[0] for p in gate(vendor)} == {"task 1", "task 2", "task 3"}


def test_validate_keeps_its_old_signature():
    assert task_gate.validate([{"ansible.builtin.command": "true"}]) == []
    assert task_gate.validate([{"ansible.builtin.command": "reboot"}], False) == [
        "task 1: `reboot` would reboot or power off the host"]


# ------------------------------------------------------------------ expression arguments

@pytest.mark.parametrize("task, key", [
    ({"ansible.builtin.assert": {"that": ["x.rc == 0", "lookup('pipe', 'id') != ''"]}}, "that"),
    ({"ansible.builtin.assert": {"that": "query('file', '/etc/shadow') | length > 0"}}, "that"),
    ({"ansible.builtin.debug": {"var": "lookup('env', 'HOME')"}}, "var"),
    ({"ansible.builtin.debug": {"var": "x.__class__"}}, "var"),
])
def test_assert_that_and_debug_var_are_expressions_checked_like_conditionals(task, key):
    problems = gate([task])
    assert len(problems) == 1 and problems[0].startswith(f"task 1: {key}: conditional ")


def test_safe_expressions_and_literal_messages_pass():
    tasks = [{"ansible.builtin.assert": {"that": ["r.rc == 0", "'PermitRootLogin no' in r.stdout"],
                                         "fail_msg": "lookup('pipe', 'id') is only text here"}},
             {"ansible.builtin.debug": {"var": "r.stdout_lines | length"}},
             {"ansible.builtin.fail": {"msg": "lookup('pipe', 'id') is a literal message"}}]
    assert gate(tasks) == []
    assert task_gate.EXPRESSION_ARGS == {"ansible.builtin.assert": ("that",), "ansible.builtin.debug": ("var",)}


# ------------------------------------------------------------------ banned patterns (refused, reason) / close variant (accepted)

def sh(cmd, **args):
    task = {"name": "t", "ansible.builtin.shell": cmd}
    if args:
        task["args"] = args
    return task


def cmd(line):
    return {"name": "t", "ansible.builtin.command": line}


BANNED = [
    # reboot / power off
    (cmd("reboot"), "`reboot` would reboot or power off the host"),
    (sh("sleep 5; shutdown -r now"), "`shutdown -r now` would reboot or power off the host"),
    (sh("systemctl poweroff"), "`systemctl poweroff` would reboot, power off or suspend the host"),
    (sh("systemctl kexec"), "would reboot, power off or suspend the host"),
    (sh("/sbin/halt -p"), "`/sbin/halt -p` would reboot or power off the host"),
    (sh("init 0"), "`init 0` changes the runlevel"),
    (sh("telinit 6"), "`telinit 6` changes the runlevel"),
    (sh("systemctl start reboot.target"), "would reboot or power off the host"),
    (sh("bash -c 'sudo systemctl reboot'"), "`systemctl reboot` would reboot"),
    (sh('echo "$(reboot)"'), "`reboot` would reboot"),
    ({"ansible.builtin.systemd": {"name": "poweroff.target", "state": "started"}}, "starts poweroff.target"),
    ({"ansible.builtin.cron": {"name": "nightly", "job": "/sbin/reboot"}}, "cron job: `/sbin/reboot` would reboot"),
    # sshd
    (sh("systemctl stop ssh"), "`systemctl stop ssh` stops ssh: no new SSH login"),
    (sh("systemctl disable --now sshd.service"), "stops sshd.service"),
    (sh("systemctl mask ssh.socket"), "`systemctl mask ssh.socket` masks ssh.socket"),
    (sh("systemctl restart sshd"), "use `systemctl reload ssh`"),
    (sh("service ssh stop"), "`service ssh stop` stops sshd"),
    (sh("/etc/init.d/ssh stop"), "stops sshd"),
    (sh("pkill -f /usr/sbin/sshd"), "signals sshd"),
    (sh("kill $(cat /run/sshd.pid)"), "signals sshd"),
    (sh("killall sshd"), "signals sshd"),
    ({"ansible.builtin.service": {"name": "ssh", "state": "stopped"}}, "stops ssh: no new SSH login"),
    ({"ansible.builtin.systemd": {"name": "sshd", "enabled": "no"}}, "disables sshd"),
    ({"ansible.builtin.systemd_service": {"name": "ssh.service", "masked": True}}, "masks ssh.service"),
    ({"ansible.builtin.service": {"name": "sshd", "state": "restarted"}}, "use state: reloaded"),
    ({"ansible.builtin.apt": {"name": "openssh-server", "state": "absent"}}, "removes openssh-server"),
    (sh("apt-get -y purge sudo"), "removes sudo"),
    # the connecting user
    ({"ansible.builtin.user": {"name": "scapforge", "state": "absent", "remove": True}},
     "removes the connecting user scapforge"),
    ({"ansible.builtin.user": {"name": "scapforge", "password_lock": True}}, "locks the password of the connecting user"),
    ({"ansible.builtin.user": {"name": "scapforge", "expires": 1}}, "sets an account expiry date on the connecting user"),
    ({"ansible.builtin.user": {"name": "scapforge", "shell": "/usr/sbin/nologin"}}, "the shell /usr/sbin/nologin"),
    ({"ansible.builtin.user": {"name": "scapforge", "shell": "/sbin/nologin"}}, "the shell /sbin/nologin"),
    ({"ansible.builtin.user": {"name": "scapforge", "shell": "/bin/false"}}, "the shell /bin/false"),
    ({"ansible.builtin.user": {"name": "scapforge", "groups": ["audit"]}}, "replaces the groups of the connecting user"),
    (sh("userdel -r scapforge"), "`userdel -r scapforge` removes the connecting user scapforge"),
    (sh("usermod -L scapforge"), "`usermod -L scapforge` locks the connecting user"),
    (sh("usermod -e 1 scapforge"), "sets an account expiry date"),
    (sh("usermod -s /usr/sbin/nologin scapforge"), "its logins would be refused"),
    (sh("passwd -l scapforge"), "`passwd -l scapforge` locks the password"),
    (sh("chage -E 0 scapforge"), "`chage -E 0 scapforge` sets an account expiry date"),
    (sh("pkill -u scapforge"), "kills the processes of the connecting user scapforge"),
    # its SSH keys
    ({"ansible.builtin.lineinfile": {"path": "/home/scapforge/.ssh/authorized_keys", "line": "ssh-ed25519 AAAA"}},
     "changes /home/scapforge/.ssh/authorized_keys: the SSH access"),
    ({"ansible.builtin.file": {"path": "/root/.ssh/authorized_keys2", "mode": "0644"}}, "the SSH access"),
    ({"ansible.builtin.file": {"path": "/home/scapforge/.ssh", "state": "absent"}}, "the SSH access"),
    ({"ansible.builtin.copy": {"dest": "~/.ssh/config", "content": "x"}}, "the SSH access"),
    (sh("echo ssh-ed25519 AAAA >> /home/scapforge/.ssh/authorized_keys"), "the SSH access"),
    (sh("chmod 666 /home/scapforge/.ssh/authorized_keys"), "the SSH access"),
    # its sudo rule
    ({"ansible.builtin.lineinfile": {"path": "/etc/sudoers.d/scapforge", "regexp": "^scapforge .*NOPASSWD",
                                     "state": "absent", "validate": "visudo -cf %s"}},
     "matches the connecting user's sudo rule"),
    ({"ansible.builtin.replace": {"path": "/etc/sudoers", "regexp": "NOPASSWD:", "replace": "",
                                  "validate": "/usr/sbin/visudo -cf %s"}}, "matches the connecting user's sudo rule"),
    ({"ansible.builtin.lineinfile": {"path": "/etc/sudoers", "regexp": ".*", "state": "absent",
                                     "validate": "visudo -cf %s"}}, "may only match Defaults lines"),
    ({"ansible.builtin.lineinfile": {"path": "/etc/sudoers.d/50-x", "line": "bob ALL=(ALL) NOPASSWD: ALL",
                                     "create": True, "validate": "visudo -cf %s"}}, "may only add or change sudo Defaults"),
    ({"ansible.builtin.lineinfile": {"path": "/etc/sudoers.d/50-defaults", "line": "Defaults requiretty",
                                     "create": True, "validate": "visudo -cf %s"}}, "requiretty and noexec break"),
    ({"ansible.builtin.lineinfile": {"path": "/etc/sudoers.d/50-defaults", "line": "Defaults use_pty",
                                     "create": True}}, "without validate: visudo -cf %s"),
    ({"ansible.builtin.copy": {"dest": "/etc/sudoers", "content": "Defaults use_pty\n",
                               "validate": "visudo -cf %s"}}, "replaces the whole of /etc/sudoers"),
    ({"ansible.builtin.copy": {"dest": "/etc/sudoers.d/90-admins", "content": "Defaults use_pty\n",
                               "validate": "visudo -cf %s"}}, "use force: false"),
    ({"ansible.builtin.file": {"path": "/etc/sudoers.d/scapforge", "state": "absent"}},
     "removes /etc/sudoers.d/scapforge: it may hold the connecting user's sudo rule"),
    ({"ansible.builtin.file": {"path": "/etc/sudoers.d/scapforge", "mode": "0666"}}, "sudo then refuses to run"),
    ({"ansible.builtin.group": {"name": "sudo", "state": "absent"}}, "removes the group sudo"),
    (sh("sed -i '/scapforge/d' /etc/sudoers.d/scapforge"), "changes /etc/sudoers.d/scapforge from a command"),
    (sh("sed -i.bak -e 's/NOPASSWD://' /etc/sudoers"), "changes /etc/sudoers from a command"),
    (sh("echo 'Defaults use_pty' > /etc/sudoers.d/pty"), "through a redirection"),
    (sh("rm -f /etc/sudoers.d/scapforge"), "changes /etc/sudoers.d/scapforge from a command"),
    # recursive and broad removal
    (sh("rm -rf /etc/*"), "`rm -rf '/etc/*'` removes '/etc/*' recursively and it uses a glob"),
    (sh("rm -rf /etc"), "it is fewer than two levels below /"),
    (sh("rm -r /var/lib/foo/$DIR"), "it uses a variable or a command substitution"),
    (sh("rm -rf /opt/app/$(cat /tmp/x)"), "it uses a variable or a command substitution"),
    (sh("rm -rf `ls -d /opt/*`"), "it uses a variable or a command substitution"),
    (sh("cd /etc && rm -rf foo"), "it is not an absolute path"),
    (sh("rm -rf ~/.cache"), "it uses ~"),
    (sh("rm -rf /etc/foo/../.."), "it uses .."),
    (sh("rm -rf /etc/ssh"), "which takes /etc/ssh/sshd_config with it"),
    (sh("rm -rf --no-preserve-root /tmp/x"), "--no-preserve-root is never allowed"),
    (sh("find / -name '*.bak' -exec rm -rf {} +"), "recursively and it uses a glob or braces"),
    (sh("find /etc -delete"), "fewer than two levels below /"),
    (sh("ls /tmp/x | xargs rm -rf"), "it uses a variable or a command substitution"),
    ({"ansible.builtin.file": {"path": "/etc", "state": "absent"}}, "removes /etc, fewer than two levels below /"),
    ({"ansible.builtin.file": {"path": "/var/lib/dpkg", "state": "absent"}}, "takes /var/lib/dpkg with it"),
    ({"ansible.builtin.file": {"path": "/etc/pam.d/sshd", "state": "absent"}}, "PAM reads it at every login"),
    # /boot, /proc, /sys
    ({"ansible.builtin.copy": {"dest": "/boot/grub/custom.cfg", "content": "x"}}, "writes /boot/grub/custom.cfg, under /boot"),
    ({"ansible.builtin.lineinfile": {"path": "/proc/sys/kernel/dmesg_restrict", "line": "1"}}, "under /proc"),
    ({"ansible.builtin.file": {"path": "/sys/kernel/x", "mode": "0600"}}, "under /sys"),
    (sh("echo 1 > /proc/sys/kernel/dmesg_restrict"), "writes /proc/sys/kernel/dmesg_restrict, under /proc"),
    (sh("echo 1 >>/sys/module/x/parameters/y"), "under /sys"),
    (sh("echo quiet | tee -a /boot/cmdline.txt"), "`tee -a /boot/cmdline.txt` writes /boot/cmdline.txt, under /boot"),
    (sh("echo b 2>/dev/null >/proc/sysrq-trigger"), "under /proc"),
    (sh("sed -i 's/x/y/' /boot/grub/grub.cfg"), "under /boot"),
    (sh("sysctl -w kernel.dmesg_restrict=1"), "writes kernel parameters under /proc/sys at once"),
    (sh("sysctl kernel.dmesg_restrict=1"), "writes kernel parameters under /proc/sys at once"),
    (cmd("sysctl -qw net.ipv4.ip_forward=0"), "writes kernel parameters under /proc/sys at once"),
    ({"ansible.posix.sysctl": {"name": "kernel.dmesg_restrict", "value": "1", "sysctl_set": True}},
     "sysctl_set: true writes the value under /proc/sys at once"),
    # indirections
    ({"ansible.builtin.package": {"name": "scapforge", "state": "absent", "use": "ansible.builtin.user"}},
     "use: ansible.builtin.user would run another module"),
    ({"ansible.builtin.set_fact": {"ansible_python_interpreter": "/bin/sh -c reboot"}},
     "untrusted tasks may not set ansible_* variables (ansible_python_interpreter)"),
    ({"ansible.builtin.command": "true", "vars": {"ansible_become_exe": "/tmp/x"}}, "ansible_become_exe"),
    ({"ansible.builtin.copy": {"dest": "/etc/issue", "content": "x", "validate": "sh -c 'reboot' %s"}},
     "validate: `reboot` would reboot"),
    (sh("ls", executable="/tmp/evil"), "executable '/tmp/evil' is not a known shell"),
    ({"ansible.builtin.command": {"cmd": "bash", "stdin": "systemctl reboot"}}, "`systemctl reboot` would reboot"),
    (sh("x=reboot; $x"), "comes from a variable or a substitution"),
    (sh("eval 'init 6'"), "`init 6` changes the runlevel"),
    (sh("env -S 'shutdown now'"), "`shutdown now` would reboot"),
    ({"ansible.posix.mount": {"path": "/home", "state": "unmounted"}}, "unmounts /home"),
    (sh("case $x in a) reboot;; esac"), "cannot check this shell command"),
    (sh("cat <<EOF > /etc/motd\n$(reboot)\nEOF\n"), "cannot check this shell command"),
]


@pytest.mark.parametrize("task, reason", BANNED, ids=[str(i) for i in range(len(BANNED))])
def test_banned_pattern_is_refused_with_what_it_would_do(task, reason):
    problems = gate([task])
    assert problems, task
    label = "task 1 't': " if task.get("name") == "t" else "task 1: "
    assert all(p.startswith(label) for p in problems), problems
    assert any(reason in p for p in problems), problems


HARMLESS = [
    sh("systemctl reload ssh"),
    sh("systemctl reload-or-restart sshd"),
    sh("sshd -t && systemctl reload ssh"),
    sh("systemctl restart rsyslog"),
    sh("systemctl status ssh --no-pager; systemctl is-enabled ssh"),
    sh("systemctl daemon-reload"),
    sh("shutdown_delay=5; echo $shutdown_delay"),
    sh("echo 'systemctl stop ssh' > /etc/motd"),
    sh("echo reboot # not a command: a word\n"),
    sh("echo x # ; reboot"),
    sh("grep -q reboot /var/log/syslog || true"),
    {"ansible.builtin.service": {"name": "ssh", "state": "reloaded"}},
    {"ansible.builtin.systemd": {"name": "sshd", "state": "started", "enabled": True}},
    {"ansible.builtin.service": {"name": "rsyslog", "state": "restarted"}},
    {"ansible.builtin.apt": {"name": ["aide", "auditd"], "state": "present"}},
    {"ansible.builtin.apt": {"name": "telnetd", "state": "absent", "purge": True}},
    sh("apt-get -y remove telnetd"),
    {"ansible.builtin.user": {"name": "games", "shell": "/usr/sbin/nologin"}},
    {"ansible.builtin.user": {"name": "scapforge", "groups": ["adm"], "append": True}},
    {"ansible.builtin.user": {"name": "scapforge", "expires": -1}},
    sh("usermod -s /usr/sbin/nologin games"),
    sh("usermod -aG adm scapforge"),
    sh("passwd -l games"),
    sh("chage -M 60 -m 1 games"),
    sh("cat /home/scapforge/.ssh/authorized_keys"),
    sh("stat -c %a /root/.ssh/authorized_keys"),
    {"ansible.builtin.stat": {"path": "/home/scapforge/.ssh/authorized_keys"}},
    {"ansible.builtin.lineinfile": {"path": "/etc/sudoers.d/50-defaults", "line": "Defaults use_pty", "create": True,
                                    "owner": "root", "group": "root", "mode": "0440",
                                    "validate": "/usr/sbin/visudo -cf %s"}},
    {"ansible.builtin.lineinfile": {"path": "/etc/sudoers", "regexp": r"^\s*Defaults\s+logfile=",
                                    "line": 'Defaults logfile="/var/log/sudo.log"', "validate": "visudo -cf %s"}},
    {"ansible.builtin.lineinfile": {"path": "/etc/sudoers.d/50-defaults", "line": "Defaults !requiretty",
                                    "create": True, "validate": "visudo -cf %s"}},
    {"ansible.builtin.copy": {"dest": "/etc/sudoers.d/60-pty", "content": "Defaults use_pty\n", "force": False,
                              "owner": "root", "group": "root", "mode": "0440", "validate": "visudo -cf %s"}},
    {"ansible.builtin.file": {"path": "/etc/sudoers.d/50-defaults", "owner": "root", "mode": "0440"}},
    sh("visudo -cf /etc/sudoers.d/50-defaults"),
    sh("grep -r NOPASSWD /etc/sudoers /etc/sudoers.d"),
    sh("rm -rf /etc/foo/bar.d"),
    sh("rm -rf /var/tmp/scapforge-work"),
    sh("rm -f /etc/cron.d/legacy-job /etc/ssh/sshd_config.d/50-cloud-init.conf"),
    sh("rm -f /etc/modprobe.d/*.bak"),
    sh("find /var/tmp/scapforge -name '*.tmp' -delete"),
    sh("find /etc -xdev -type f -perm -0002 -exec chmod o-w {} +"),
    {"ansible.builtin.file": {"path": "/etc/foo", "state": "absent"}},
    {"ansible.builtin.file": {"path": "/etc/ssh/sshd_config.d/50-cloud-init.conf", "state": "absent"}},
    {"ansible.builtin.file": {"path": "/boot/grub/grub.cfg", "owner": "root", "group": "root", "mode": "0600"}},
    sh("chmod 0600 /boot/grub/grub.cfg && chown root:root /boot/grub/grub.cfg"),
    sh("update-grub"),
    sh("cat /proc/sys/kernel/dmesg_restrict; sysctl -n kernel.dmesg_restrict"),
    sh("sysctl --system"),
    sh("sysctl -p /etc/sysctl.d/99-hardening.conf"),
    {"ansible.posix.sysctl": {"name": "kernel.dmesg_restrict", "value": "1", "sysctl_file": "/etc/sysctl.d/99-x.conf",
                              "reload": True}},
    {"ansible.posix.mount": {"path": "/tmp", "opts": "nodev,nosuid,noexec", "state": "remounted"}},
    {"ansible.builtin.cron": {"name": "aide", "job": "/usr/bin/aide --check", "minute": "5", "hour": "4"}},
    {"ansible.builtin.package": {"name": "aide", "state": "present", "use": "apt"}},
    {"ansible.builtin.copy": {"dest": "/etc/issue.net", "content": "Authorized uses only\n",
                              "validate": "grep -q Authorized %s"}},
    sh("cat > /etc/audit/rules.d/10-x.rules <<'EOF'\n-w /etc/passwd -p wa -k x\nEOF\naugenrules --load"),
    sh("cat <<EOF >> /etc/motd\nhost $HOSTNAME; reboot is a word here\nEOF"),
    sh("echo \"$(date +%F) hardened\" >> /var/log/hardening.log 2>&1"),
    sh("kill -HUP $(cat /run/rsyslogd.pid)"),
    {"ansible.builtin.command": {"argv": ["grep", "-c", "^-e 2", "/etc/audit/rules.d/99-finalize.rules"]}},
    {"ansible.builtin.set_fact": {"sshd_ok": True}},
]


@pytest.mark.parametrize("task", HARMLESS, ids=[str(i) for i in range(len(HARMLESS))])
def test_close_but_harmless_variant_is_accepted(task):
    assert gate([task]) == []


def test_user_specific_checks_need_the_connecting_user():
    task = [{"ansible.builtin.user": {"name": "scapforge", "state": "absent"}}]
    assert task_gate.validate(task, trusted=False) == []  # user unknown: only the health check protects
    assert gate(task) == ["task 1: removes the connecting user scapforge"]
    other = GatePolicy(remote_user="ansible", remote_home="/srv/ansible")
    assert gate([{"ansible.builtin.file": {"path": "/srv/ansible/.ssh", "mode": "0777"}}], other)
    assert gate([{"ansible.builtin.file": {"path": "/srv/other/.ssh", "mode": "0700"}}], other) == []


def test_nopasswd_removal_is_refused_whoever_connects():
    task = {"ansible.builtin.lineinfile": {"path": "/etc/sudoers.d/90-admins", "regexp": "NOPASSWD",
                                           "state": "absent", "validate": "visudo -cf %s"}}
    problems = task_gate.validate([task], trusted=False)
    assert problems == ["task 1: regexp 'NOPASSWD' in /etc/sudoers.d/90-admins matches the connecting user's sudo rule"
                        " (its name, NOPASSWD or its sudo group)"]


def test_every_reason_names_the_task_in_a_block():
    tasks = [{"name": "outer", "block": [{"name": "ok", "ansible.builtin.command": "true"},
                                         {"name": "bad", "ansible.builtin.command": "reboot"}]}]
    assert gate(tasks) == ["task 1.2 'bad': `reboot` would reboot or power off the host"]


# ------------------------------------------------------------------ the shell splitter itself

def argvs(text):
    return [c.argv for c in task_gate.split_shell(text)]


def test_split_shell_separators_quotes_and_comments():
    assert argvs("a 'b; c' && d \"e | f\" || g | h & i\nj # k; l") == [
        ["a", "b; c"], ["d", "e | f"], ["g"], ["h"], ["i"], ["j"]]
    assert argvs("echo a#b") == [["echo", "a#b"]]


def test_split_shell_lists_substitutions_and_keeps_their_words():
    assert argvs('echo "x$(id -u)y" `hostname`') == [["id", "-u"], ["hostname"], ["echo", "x$(id -u)y", "$(hostname)"]]
    assert argvs("echo '$(not run)'") == [["echo", "$(not run)"]]


def test_split_shell_redirections_and_heredocs():
    cmds = task_gate.split_shell("cat <<'EOF' >/etc/x 2>&1\nrm -rf /\nEOF\necho 2>/dev/null >>/boot/y")
    assert [(c.argv, c.writes) for c in cmds] == [(["cat"], ["/etc/x"]), (["echo"], ["/dev/null", "/boot/y"])]


@pytest.mark.parametrize("text", ["echo 'x", 'echo "x', "echo $(x", "echo `x", "a )", "cat <<EOF\nno end",
                                  "cat <<EOF\n$(id)\nEOF", "echo \x01"])
def test_split_shell_refuses_what_it_cannot_split(text):
    with pytest.raises(task_gate.ShellParseError):
        task_gate.split_shell(text)


# ------------------------------------------------------------------ never crash

_KEYS = ["name", "when", "register", "loop", "with_items", "args", "action", "vars", "block", "check_mode",
         "failed_when", "changed_when", "become", "tags", "ignore_errors", "notify", "until",
         "ansible.builtin.shell", "ansible.builtin.command", "ansible.builtin.lineinfile", "ansible.builtin.file",
         "ansible.builtin.user", "ansible.builtin.systemd", "ansible.builtin.copy", "ansible.builtin.assert",
         "ansible.builtin.set_fact", "ansible.posix.sysctl", "ansible.builtin.cron", "ansible.builtin.package",
         "community.general.sudoers", "shell", "command", "file", "path", "dest", "state", "cmd", "argv", "stdin",
         "regexp", "line", "validate", "that", "var", "use", "executable", "mode", "owner", "job", "sysctl_set"]
_WORDS = ["reboot", "rm -rf /", "systemctl stop ssh", "/etc/sudoers", "scapforge", "NOPASSWD", "absent", "0666",
          "/boot/x", "$(id)", "`id`", "'", '"', "<<EOF", ")", "{{ x }}", "x == 1", "lookup('pipe', 'id')", "/",
          "~/.ssh/authorized_keys", "ansible_python_interpreter", "-1", ">&", "\\", "\n", ";", "|", "&"]
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 700), st.floats(allow_nan=True),
                     st.sampled_from(_WORDS), st.text(string.printable, max_size=30),
                     st.lists(st.sampled_from(_WORDS), max_size=4).map(" ".join))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.sampled_from(_KEYS), st.integers(0, 3)), inner, max_size=4)),
    max_leaves=12)
_TASKS = st.dictionaries(st.sampled_from(_KEYS), _VALUES, min_size=1, max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tasks=st.lists(st.one_of(_TASKS, _VALUES), min_size=0, max_size=3), trusted=st.booleans())
def test_random_task_like_input_never_crashes_the_gate(tasks, trusted):
    problems = task_gate.validate(tasks, trusted=trusted, policy=POLICY)
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
    assert not any("gate internal error" in p for p in problems), problems


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=string.printable, max_size=60) | st.lists(st.sampled_from(_WORDS), max_size=8).map(" ".join))
def test_random_shell_text_is_split_or_refused_never_crashes(text):
    reasons = task_gate.task_hazards("ansible.builtin.shell", {"_raw_params": text}, POLICY)
    assert isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)
