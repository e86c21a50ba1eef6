"""Read-only probes (plugins/plugin_utils/probes.py): the exact task each allowed probe becomes,
the refusals, stable keys, and result formatting.  Pure: nothing runs on any host.

Every task a probe produces must also pass the untrusted gate (the loop runs probes through
the executor like any model-written task).
"""
import base64

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import probes, task_gate

POLICY = task_gate.GatePolicy(remote_user="scapforge")


def _cmd_task(key, argv):
    return {"name": f"probe {key}", "ansible.builtin.command": {"argv": argv}, "changed_when": False}


# ------------------------------------------------------------------ the exact tasks

def test_read_is_a_check_mode_slurp():
    assert probes.probe_task({"read": "/etc/ssh/sshd_config"}) == {
        "name": "probe read /etc/ssh/sshd_config", "ansible.builtin.slurp": {"src": "/etc/ssh/sshd_config"},
        "check_mode": True}


def test_read_under_proc_and_sys_is_fine():
    assert probes.probe_task({"read": "/proc/sys/kernel/dmesg_restrict"})["ansible.builtin.slurp"] == {
        "src": "/proc/sys/kernel/dmesg_restrict"}
    assert probes.probe_task({"read": "/sys/module/usb_storage/parameters/delay_use"})["check_mode"] is True


def test_stat_is_a_check_mode_stat_with_sha256_and_no_mime():
    assert probes.probe_task({"stat": "/etc/ssh//sshd_config"}) == {
        "name": "probe stat /etc/ssh/sshd_config",
        "ansible.builtin.stat": {"path": "/etc/ssh/sshd_config", "get_checksum": True, "get_mime": False,
                                 "checksum_algorithm": "sha256"},
        "check_mode": True}


def test_stat_under_proc_does_not_checksum():
    # /proc/kcore is a "regular" file of the size of the address space: a checksum never ends
    assert probes.probe_task({"stat": "/proc/kcore"})["ansible.builtin.stat"] == {
        "path": "/proc/kcore", "get_checksum": False, "get_mime": False}


def test_find_keeps_only_the_given_arguments():
    spec = {"find": {"paths": ["/etc/ssh", "/etc/ssh/sshd_config.d"], "patterns": "*.conf",
                     "contains": "^PermitRootLogin", "file_type": "file", "recurse": False}}
    task = probes.probe_task(spec)
    assert task["ansible.builtin.find"] == {"paths": ["/etc/ssh", "/etc/ssh/sshd_config.d"], "patterns": ["*.conf"],
                                            "contains": "^PermitRootLogin", "file_type": "file", "recurse": False}
    assert task["check_mode"] is True
    assert probes.probe_task({"find": {"paths": "/etc/audit/rules.d"}})["ansible.builtin.find"] == {
        "paths": ["/etc/audit/rules.d"]}


def test_getent_with_and_without_key():
    assert probes.probe_task({"getent": {"database": "passwd", "key": "scapforge"}}) == {
        "name": "probe getent passwd scapforge",
        "ansible.builtin.getent": {"database": "passwd", "key": "scapforge", "fail_key": False}, "check_mode": True}
    assert probes.probe_task({"getent": {"database": "group"}})["ansible.builtin.getent"] == {"database": "group"}


COMMANDS = [
    (["sshd", "-T"], "command sshd -T"),
    (["/usr/sbin/sshd", "-T", "-C", "user=root,host=lab1,addr=10.87.1.1"],
     "command /usr/sbin/sshd -T -C user=root,host=lab1,addr=10.87.1.1"),
    (["sshd", "-t", "-f", "/etc/ssh/sshd_config"], "command sshd -t -f /etc/ssh/sshd_config"),
    (["systemctl", "show", "ssh", "-p", "ActiveState"], "command systemctl show ssh -p ActiveState"),
    (["systemctl", "is-enabled", "auditd"], "command systemctl is-enabled auditd"),
    (["systemctl", "is-active", "auditd.service"], "command systemctl is-active auditd.service"),
    (["systemctl", "is-failed", "rsyslog"], "command systemctl is-failed rsyslog"),
    (["systemctl", "cat", "ssh.service"], "command systemctl cat ssh.service"),
    (["systemctl", "status", "--no-pager", "ssh"], "command systemctl status --no-pager ssh"),
    (["dpkg", "-l", "aide*"], "command dpkg -l 'aide*'"),
    (["dpkg", "-s", "openssh-server"], "command dpkg -s openssh-server"),
    (["dpkg", "-S", "/usr/sbin/sshd"], "command dpkg -S /usr/sbin/sshd"),
    (["dpkg", "-L", "auditd"], "command dpkg -L auditd"),
    (["dpkg-query", "-W", "-f", "${Version}", "sudo"], "command dpkg-query -W -f '${Version}' sudo"),
    (["rpm", "-q", "aide"], "command rpm -q aide"),
    (["rpm", "-qa"], "command rpm -qa"),
    (["rpm", "-qf", "/etc/ssh/sshd_config"], "command rpm -qf /etc/ssh/sshd_config"),
    (["rpm", "-V", "openssh-server"], "command rpm -V openssh-server"),
    (["apt-cache", "policy", "aide"], "command apt-cache policy aide"),
    (["apt-cache", "show", "auditd"], "command apt-cache show auditd"),
    (["getent", "passwd", "scapforge"], "command getent passwd scapforge"),
    (["getent", "group"], "command getent group"),
    (["auditctl", "-l"], "command auditctl -l"),
    (["auditctl", "-s"], "command auditctl -s"),
    (["sysctl", "-n", "kernel.dmesg_restrict"], "command sysctl -n kernel.dmesg_restrict"),
    (["sysctl", "-a"], "command sysctl -a"),
    (["sysctl", "net.ipv4.ip_forward"], "command sysctl net.ipv4.ip_forward"),
    (["find", "/etc", "-xdev", "-type", "f", "-perm", "-0002"], "command find /etc -xdev -type f -perm -0002"),
    (["find", "-L", "/var/log", "-name", "*.log", "-printf", "%m %p\\n"],
     "command find -L /var/log -name '*.log' -printf '%m %p\\n'"),
    (["grep", "-rnE", "^(PermitRootLogin|Port)", "/etc/ssh"], "command grep -rnE '^(PermitRootLogin|Port)' /etc/ssh"),
    (["grep", "-c", "-e", "^-e 2", "/etc/audit/rules.d/audit.rules"],
     "command grep -c -e '^-e 2' /etc/audit/rules.d/audit.rules"),
    (["grep", "-r", "--include=*.conf", "Defaults", "/etc/sudoers.d"],
     "command grep -r '--include=*.conf' Defaults /etc/sudoers.d"),
    (["grep", "-c", "^scapforge:!", "/etc/shadow"], "command grep -c '^scapforge:!' /etc/shadow"),
    (["stat", "-c", "%a %U %G", "/etc/shadow"], "command stat -c '%a %U %G' /etc/shadow"),
    (["ls", "-l", "/etc/cron.d"], "command ls -l /etc/cron.d"),
    (["ls", "-la", "/home/scapforge"], "command ls -la /home/scapforge"),
    (["ls", "-ld", "/tmp"], "command ls -ld /tmp"),
    (["id"], "command id"),
    (["id", "scapforge"], "command id scapforge"),
    (["ss", "-ltn"], "command ss -ltn"),
    (["ss", "-ltnp"], "command ss -ltnp"),
    (["findmnt"], "command findmnt"),
    (["findmnt", "-n", "-o", "OPTIONS", "/tmp"], "command findmnt -n -o OPTIONS /tmp"),
    (["mount"], "command mount"),
    (["lsmod"], "command lsmod"),
    (["modprobe", "-n", "-v", "usb-storage"], "command modprobe -n -v usb-storage"),
    (["uname", "-r"], "command uname -r"),
    (["uname", "-a"], "command uname -a"),
    (["aa-status"], "command aa-status"),
    (["authselect", "current"], "command authselect current"),
    (["update-crypto-policies", "--show"], "command update-crypto-policies --show"),
    (["crontab", "-l"], "command crontab -l"),
    (["crontab", "-l", "-u", "root"], "command crontab -l -u root"),
    (["head", "-n", "20", "/etc/login.defs"], "command head -n 20 /etc/login.defs"),
    (["tail", "-n", "50", "/var/log/auth.log"], "command tail -n 50 /var/log/auth.log"),
    (["cat", "/etc/issue.net"], "command cat /etc/issue.net"),
]


@pytest.mark.parametrize("argv, key", COMMANDS, ids=[" ".join(a) for a, _key in COMMANDS])
def test_allowed_command_gives_the_exact_task_and_passes_the_gate(argv, key):
    task = probes.probe_task({"command": argv})
    assert task == _cmd_task(key, argv)
    assert probes.probe_key({"command": argv}) == key
    assert probes.run_as_check({"command": argv}) is False
    assert task_gate.validate([task], trusted=False, policy=POLICY) == []


def test_string_command_is_split_and_keyed_like_its_argv():
    assert probes.probe_task({"command": "systemctl is-enabled auditd"}) == probes.probe_task(
        {"command": ["systemctl", "is-enabled", "auditd"]})
    assert probes.probe_key({"command": "sshd  -T"}) == probes.probe_key({"command": ["sshd", "-T"]}) == "command sshd -T"


@pytest.mark.parametrize("spec", [
    {"read": "/etc/login.defs"}, {"stat": "/etc/shadow"}, {"find": {"paths": ["/etc"], "patterns": "*.conf"}},
    {"getent": {"database": "passwd", "key": "root"}},
])
def test_check_mode_probes_pass_the_gate(spec):
    task = probes.probe_task(spec)
    assert probes.run_as_check(spec) is True and task["check_mode"] is True
    assert task_gate.validate([task], trusted=False, policy=POLICY) == []


# ------------------------------------------------------------------ refusals

REFUSED = [
    ({"command": ["find", "/tmp", "-name", "x", "-delete"]}, "-delete acts on what it finds"),
    ({"command": ["find", "/etc", "-exec", "cat", "{}", ";"]}, "-exec acts on what it finds"),
    ({"command": ["find", "/etc", "-fprint", "/tmp/out"]}, "-fprint acts on what it finds"),
    ({"command": ["find", "etc", "-name", "x"]}, "not absolute"),
    ({"command": ["sysctl", "-w", "kernel.dmesg_restrict=1"]}, "sysctl probes never write"),
    ({"command": ["sysctl", "kernel.dmesg_restrict=1"]}, "sysctl probes never write"),
    ({"command": ["sysctl", "-p"]}, "sysctl probes never write"),
    ({"command": ["sysctl", "--system"]}, "sysctl probes never write"),
    ({"command": ["grep", "-f", "/etc/patterns", "/etc/x"]}, "-f reads patterns from a file"),
    ({"command": ["grep", "-rf", "/etc/patterns", "/etc"]}, "-f reads patterns from a file"),
    ({"command": ["grep", "-A", "3", "x", "/etc/x"]}, "-A is not allowed"),
    ({"command": ["grep", "x"]}, "it needs 1 or more absolute paths"),
    ({"command": ["grep", "PermitRootLogin", "sshd_config"]}, "not absolute"),
    ({"command": ["grep", "-r", "x", "/"]}, "a recursive grep from / reads too much"),
    ({"command": ["grep", "-r", "x", "/proc"]}, "a recursive grep from /proc reads too much"),
    ({"command": ["sshd"]}, "sshd without -T (or -t) would start a daemon"),
    ({"command": ["sshd", "-D"]}, "'-D' is not allowed"),
    ({"command": ["sshd", "-p", "2222", "-T"]}, "'-p' is not allowed"),
    ({"command": ["/tmp/sshd", "-T"]}, "commands are named, or taken from /usr/bin"),
    ({"command": "ls -l /etc; reboot"}, "probes run without a shell"),
    ({"command": "cat /etc/passwd | head"}, "probes run without a shell"),
    ({"command": "echo $(id)"}, "probes run without a shell"),
    ({"command": "cat /etc/issue > /etc/motd"}, "probes run without a shell"),
    ({"command": ["systemctl", "stop", "ssh"]}, "only cat, is-active, is-enabled, is-failed, show, status"),
    ({"command": ["systemctl", "status", "ssh"]}, "status needs --no-pager"),
    ({"command": ["systemctl", "show"]}, "name the unit(s)"),
    ({"command": ["systemctl", "--user", "show", "x"]}, "option --user is not allowed"),
    ({"command": ["dpkg", "-i", "/tmp/x.deb"]}, "only dpkg"),
    ({"command": ["rpm", "-e", "aide"]}, "only rpm"),
    ({"command": ["apt-cache", "gencaches"]}, "only apt-cache policy"),
    ({"command": ["auditctl", "-D"]}, "allowed forms: -l; -s"),
    ({"command": ["modprobe", "usb-storage"]}, "only modprobe -n -v MODULE"),
    ({"command": ["modprobe", "-r", "-n", "usb-storage"]}, "only modprobe -n -v MODULE"),
    ({"command": ["ss", "-K", "dst", "10.0.0.1"]}, "only listening sockets"),
    ({"command": ["findmnt", "--poll"]}, "option --poll is not allowed"),
    ({"command": ["mount", "-o", "remount,ro", "/"]}, "allowed forms: (no arguments)"),
    ({"command": ["crontab", "-r"]}, "only crontab -l"),
    ({"command": ["tail", "-f", "/var/log/syslog"]}, "only tail -n N FILE"),
    ({"command": ["head", "/etc/passwd"]}, "give the number of lines"),
    ({"command": ["cat", "/etc/shadow"]}, "its content is a secret"),
    ({"command": ["grep", "root", "/etc/shadow"]}, "its content is a secret"),
    ({"command": ["cat", "/dev/zero"]}, "reading it never ends"),
    ({"command": ["ls", "-R", "/"]}, "only ls -l, -la or -ld"),
    ({"command": ["rm", "-rf", "/tmp/x"]}, "rm is not a read-only probe command"),
    ({"command": ["bash", "-c", "id"]}, "bash is not a read-only probe command"),
    ({"command": []}, "one to 64 arguments"),
    ({"command": ["cat", "{{ lookup('pipe', 'id') }}"]}, "Jinja delimiters"),
    ({"read": "etc/shadow"}, "is not absolute"),
    ({"read": "../etc/passwd"}, "is not absolute"),
    ({"read": "/etc/shadow"}, "its content is a secret"),
    ({"read": "/etc/ssh/ssh_host_ed25519_key"}, "its content is a secret"),
    ({"read": "/home/scapforge/.ssh/id_ed25519"}, "its content is a secret"),
    ({"read": "/dev/sda"}, "reading it never ends"),
    ({"read": "/proc/kcore"}, "reading it never ends"),
    ({"read": "/etc/x\nreboot"}, "newline"),
    ({"stat": "relative/path"}, "is not absolute"),
    ({"find": {"paths": ["/etc"], "excludes": "x"}}, "find takes only paths, patterns, contains, file_type, recurse"),
    ({"find": {"paths": "/", "recurse": True}}, "find from / with recurse"),
    ({"find": {"paths": ["/proc"], "contains": "x"}}, "find from /proc with recurse or contains"),
    ({"find": {"paths": ["/etc"], "contains": "("}}, "not a valid (Python) regular expression"),
    ({"find": {"paths": ["/etc"], "file_type": "socket"}}, "find \"file_type\" is one of"),
    ({"find": {"paths": ["/etc"], "recurse": "yes"}}, "find \"recurse\" is true or false"),
    ({"find": {"paths": []}}, "find needs \"paths\""),
    ({"getent": {"database": "shadow", "key": "root"}}, "shadow and gshadow hold password hashes"),
    ({"getent": {"database": "passwd", "split": ":"}}, "getent takes"),
    ({"write": "/etc/x"}, "unknown probe kind 'write'"),
    ({"read": "/a", "stat": "/b"}, "exactly one of read, stat, find, getent, command"),
    ("sshd -T", "exactly one of read, stat, find, getent, command"),
]


@pytest.mark.parametrize("spec, reason", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_dangerous_or_malformed_probe_is_refused_with_a_reason(spec, reason):
    with pytest.raises(probes.ProbeRefused) as err:
        probes.probe_task(spec)
    assert reason in str(err.value)
    assert isinstance(err.value, ValueError)


def test_run_as_check_refuses_what_is_not_a_probe():
    with pytest.raises(probes.ProbeRefused):
        probes.run_as_check({"nope": 1})


# ------------------------------------------------------------------ keys

def test_probe_key_is_stable_and_normalised():
    assert probes.probe_key({"read": "/etc//ssh/./sshd_config"}) == "read /etc/ssh/sshd_config"
    a = probes.probe_key({"find": {"recurse": True, "paths": "/etc/ssh", "patterns": ["*.conf"]}})
    b = probes.probe_key({"find": {"patterns": "*.conf", "paths": ["/etc/ssh"], "recurse": True}})
    assert a == b == 'find paths=["/etc/ssh"] patterns=["*.conf"] recurse=true'
    assert probes.probe_key({"getent": {"database": "passwd", "key": "root"}}) == "getent passwd root"


def test_probe_key_labels_refused_and_malformed_probes_without_raising():
    assert probes.probe_key({"command": ["find", "/", "-delete"]}) == "command find / -delete"
    assert probes.probe_key({"read": "/etc/shadow"}) == "read /etc/shadow"
    assert probes.probe_key("junk") == 'invalid "junk"'
    assert probes.probe_key({"x": object()}).startswith("invalid {")
    assert "\n" not in probes.probe_key({"command": "a\nb"})


# ------------------------------------------------------------------ results

def test_read_result_is_decoded():
    result = {"content": base64.b64encode(b"PermitRootLogin no\nPort 22\n").decode(), "encoding": "base64",
              "source": "/etc/ssh/sshd_config", "changed": False}
    assert probes.format_probe_result({"read": "/etc/ssh/sshd_config"}, result) == \
        "/etc/ssh/sshd_config (27 bytes):\nPermitRootLogin no\nPort 22\n"


def test_binary_read_is_described_by_size():
    result = {"content": base64.b64encode(b"\x7fELF\x00\x01").decode(), "encoding": "base64"}
    assert probes.format_probe_result({"read": "/usr/bin/x"}, result) == "/usr/bin/x: binary file, 6 bytes"


def test_stat_result_essentials():
    result = {"stat": {"exists": True, "isreg": True, "mode": "0640", "pw_name": "root", "gr_name": "shadow",
                       "uid": 0, "gid": 42, "size": 1024, "checksum": "ab" * 32, "mime_type": "x"}}
    assert probes.format_probe_result({"stat": "/etc/shadow"}, result) == (
        "/etc/shadow: regular file, mode 0640, owner root:shadow (uid 0, gid 42), 1024 bytes, sha256 " + "ab" * 32)
    assert probes.format_probe_result({"stat": "/nope"}, {"stat": {"exists": False}}) == "/nope: does not exist"


def test_find_result_lists_paths():
    result = {"matched": 2, "examined": 9, "files": [
        {"path": "/etc/ssh/sshd_config.d/b.conf", "mode": "0644", "pw_name": "root", "gr_name": "root"},
        {"path": "/etc/ssh/sshd_config.d/a.conf", "mode": "0600", "pw_name": "root", "gr_name": "root"}]}
    assert probes.format_probe_result({"find": {"paths": ["/etc/ssh"]}}, result) == (
        "2 matched (path mode owner:group):\n/etc/ssh/sshd_config.d/a.conf 0600 root:root\n"
        "/etc/ssh/sshd_config.d/b.conf 0644 root:root")
    assert probes.format_probe_result({"find": {"paths": ["/x"]}}, {"files": [], "examined": 3}) == "no match (examined 3)"


def test_getent_result_rows():
    spec = {"getent": {"database": "passwd", "key": "scapforge"}}
    result = {"ansible_facts": {"getent_passwd": {
        "scapforge": ["x", "1000", "1000", "", "/home/scapforge", "/bin/bash"]}}}
    assert probes.format_probe_result(spec, result) == "scapforge:x:1000:1000::/home/scapforge:/bin/bash"
    missing = {"ansible_facts": {"getent_passwd": {"ghost": None}}, "msg": "One or more supplied key could not be found"}
    assert probes.format_probe_result({"getent": {"database": "passwd", "key": "ghost"}}, missing) == "ghost: not found"


def test_command_result_keeps_rc_even_when_the_task_failed():
    result = {"rc": 1, "stdout": "disabled\n", "stderr": "", "failed": True, "msg": "non-zero return code"}
    assert probes.format_probe_result({"command": ["systemctl", "is-enabled", "auditd"]}, result) == \
        "rc=1\nstdout:\ndisabled"
    result = {"rc": 0, "stdout": "", "stderr": "warning: x\n"}
    assert probes.format_probe_result({"command": "sshd -T"}, result) == "rc=0\nstderr:\nwarning: x"


def test_failed_and_skipped_results_say_so():
    assert probes.format_probe_result({"read": "/etc/nope"}, {"failed": True, "msg": "file not found: /etc/nope"}) == \
        "failed: file not found: /etc/nope"
    assert probes.format_probe_result({"stat": "/x"}, {"skipped": True, "skip_reason": "Conditional result was False"}) \
        == "skipped: Conditional result was False"


def test_long_output_is_cut_with_a_marker_within_the_limit():
    result = {"rc": 0, "stdout": "x" * 10000}
    text = probes.format_probe_result({"command": ["sysctl", "-a"]}, result, limit=500)
    assert len(text) == 500
    assert text == "rc=0\nstdout:\n" + "x" * 436 + "\n[... cut: the first 449 of 10013 characters shown]"
    assert probes.format_probe_result({"command": ["id"]}, {"rc": 0, "stdout": "uid=0(root)"}, limit=4000) == \
        "rc=0\nstdout:\nuid=0(root)"


@pytest.mark.parametrize("spec, result", [
    ({"read": "/x"}, None),
    ({"read": "/x"}, {"content": "!!!not base64", "encoding": "base64"}),
    ({"read": "/x"}, {"content": 5}),
    ({"stat": "/x"}, {"stat": "odd"}),
    ({"find": {"paths": ["/x"]}}, {"files": "odd"}),
    ({"find": {"paths": ["/x"]}}, {"files": [1, None, {"path": "/x/y"}]}),
    ({"getent": {"database": "passwd"}}, {"ansible_facts": {"getent_passwd": {"a": [["x", "1"], ["y", "2"]]}}}),
    ({"getent": {"database": "passwd"}}, {"ansible_facts": "odd"}),
    ({"command": ["id"]}, {"rc": None, "stdout": b"bytes", "stderr": 3}),
    ("junk", {"x": {1, 2}}),
    ({"command": ["id"]}, []),
])
def test_odd_results_never_raise(spec, result):
    text = probes.format_probe_result(spec, result, limit=300)
    assert isinstance(text, str) and 0 < len(text) <= 300
