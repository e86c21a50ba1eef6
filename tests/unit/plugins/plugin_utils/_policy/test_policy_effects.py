"""The one table of what commands and modules write (plugins/plugin_utils/_policy/effects.py)
and its three readers: the gate, the checkpoint's path analysis, the probe allowlist.

Issue 16: if the gate and the checkpoint read a command differently, the gate can let
through a write the checkpoint never saved. The property tests generate commands and tasks
from the table's own vocabulary and check, for everything the gate lets through, that every
path it writes is in what ``checkpoint.paths_touched`` saves (or is said to be unsaved), and
that every command the probe allowlist accepts writes nothing by the table.
"""
import os
import posixpath
import shlex
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.scapforge.remediation.plugins.plugin_utils import checkpoint, probes, task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy import effects
from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy import refusals as R
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import ExecutionReport
from ansible_collections.scapforge.remediation.plugins.plugin_utils.shell_split import (
    expand_command, split_shell,
)

POLICY = task_gate.GatePolicy(remote_user="ansible")
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- what the gate sees written

def gate_writes(text):
    """Every path the commands of a shell line write, read as the gate reads them."""
    out = []
    for top in split_shell(text):
        for cmd in expand_command(top):
            out += [w for w in cmd.writes if not w.isdigit() and w != "-"]
            effect = effects.command_effect(cmd.argv)
            out += list(effect.writes) + list(effect.implied)
    return out


def saved(path, touched):
    """Whether the checkpoint saves ``path`` (or says it cannot): the path or a directory
    above it in full, a volatile directory shallow, or an unknown note for what it cannot
    resolve. Programs and /dev, /proc, /sys are left out on purpose (checkpoint._PROGRAM_DIRS,
    _VIRTUAL; the gate refuses writes under /proc and /sys)."""
    if "$" in path or "`" in path or path.startswith("~"):
        return path in (touched.unknown or "")
    if not path.startswith("/"):
        return True  # relative to the task's chdir: documented as not resolved
    if any(c in path for c in "*?["):
        head = path[:min(path.index(c) for c in "*?[" if c in path)]
        path = head if head.endswith("/") else posixpath.dirname(head)
        if path in ("", "/"):
            return "glob over the root directory" in (touched.unknown or "")
    norm = checkpoint.normalise_path(path)
    if (norm + "/").startswith(checkpoint._PROGRAM_DIRS + checkpoint._VIRTUAL):
        return True
    if norm == "/":
        return "the root directory /" in (touched.unknown or "")
    if norm in checkpoint.VOLATILE_DIRS:
        return norm in touched.shallow
    return any(norm == p or norm.startswith(p.rstrip("/") + "/") for p in touched.paths)


# ---------------------------------------------------------------- the vocabulary

_DIRS = ["/etc", "/etc/ssh", "/etc/security", "/etc/audit/rules.d", "/var/lib/aide", "/opt/app", "/tmp", "/usr/bin",
         "/boot", "/etc/cron.d", "/srv/my data"]
_NAMES = ["x.conf", "login.defs", "a b.txt", "*.rules", "issue", "sshd_config"]
_paths = st.one_of(
    st.builds(posixpath.join, st.sampled_from(_DIRS), st.sampled_from(_NAMES)),
    st.sampled_from(_DIRS),
    st.sampled_from(["/etc/$NAME", "~/x", "/etc/$(hostname).conf"]),
)
_quoted = _paths.map(lambda p: p if "$" in p or "~" in p else shlex.quote(p))


def _one(template):
    return st.builds(lambda a, b: template.format(a=a, b=b), _quoted, _quoted)


_WRITERS = [
    "tee {a}", "tee -a {a} {b}", "cp {a} {b}", "cp -t {a} {b}", "install -m 0644 {a} {b}", "install -d {a}",
    "mv {a} {b}", "ln -sf {a} {b}", "rm -f {a}", "rm -rf {a}", "touch {a}", "mkdir -p {a}", "rmdir {a}",
    "chmod 0600 {a}", "chown root:root {a}", "chgrp root {a}", "chmod --reference={a} {b}", "truncate -s 0 {a}",
    "sed -i 's/a/b/' {a}", "sed -i -e 's/a/b/' {a} {b}", "perl -pi -e 's/a/b/' {a}", "dd if=/dev/zero of={a}",
    "find {a} -name '*.bak' -delete", "find {a} -fprint {b}", "find {a} -exec chmod 0600 {{}} \\;",
    "sort -o {a} {b}", "uniq {a} {b}", "chattr +i {a}", "setfacl -m u:x:r {a}", "shred -u {a}", "unlink {a}",
    "echo x > {a}", "printf '%s\\n' x >> {a}", "cat {a} > {b}", "grep -v y {a} > {b}", "echo x | tee {a}",
    "sudo tee {a}", "env LC_ALL=C sed -i 's/x/y/' {a}", "sh -c 'echo x > {a}'", "xargs rm -f < {a}",
    "update-grub", "passwd -l games", "useradd -m bob", "newaliases", "augenrules --load",
]
_READERS = ["cat {a}", "grep -q x {a}", "stat {a}", "ls -l {a}", "test -f {a}", "find {a} -type f",
            "sysctl -n kernel.x", "systemctl is-enabled sshd", "dpkg -s aide", "true"]
_SEPARATORS = [" && ", " || ", "; ", " | ", "\n"]
_command = st.one_of(*[_one(t) for t in _WRITERS + _READERS])
_lines = st.builds(lambda first, rest: first + "".join(sep + cmd for sep, cmd in rest), _command,
                   st.lists(st.tuples(st.sampled_from(_SEPARATORS), _command), max_size=3))


@PROPERTY
@given(text=_lines, module=st.sampled_from(["ansible.builtin.shell", "ansible.builtin.command"]))
def test_every_write_the_gate_lets_through_is_saved_by_the_checkpoint(text, module):
    args = {"_raw_params": text}
    if module == "ansible.builtin.command":
        if any(sep.strip() and sep.strip() in text for sep in _SEPARATORS) or ">" in text or "\n" in text:
            module = "ansible.builtin.shell"  # no shell to read operators: the command module would not run it
    if task_gate.validate([{module: args}], trusted=False, policy=POLICY):
        return  # refused: nothing runs, nothing to save
    touched = checkpoint.paths_touched(module, args)
    assert not touched.read_only or not gate_writes(text)
    for path in gate_writes(text):
        assert saved(path, touched), (text, path, touched)


def test_the_holes_the_property_found_are_closed():
    # a quoted path with a space, dd of=, a written path built from a substitution: the gate
    # let them through and the checkpoint (its own tokenizer) saved nothing (main at a2909b2)
    assert checkpoint.paths_touched("ansible.builtin.shell", {"_raw_params": 'echo x > "/etc/my file"'}).paths == \
        ["/etc/my file"]
    assert checkpoint.paths_touched("ansible.builtin.shell", {"_raw_params": "dd if=/dev/zero of=/etc/x"}).paths == \
        ["/etc/x"]
    t = checkpoint.paths_touched("ansible.builtin.shell", {"_raw_params": "echo x > /etc/$(hostname)"})
    assert t.unknown == "paths built from shell variables (/etc/$(hostname) in ansible.builtin.shell)"


def test_the_gate_reads_find_and_sort_writes_from_the_table():
    # find -delete and -fprint write: the gate's old read-only list let both through
    def refused(cmd):
        return task_gate.validate([{"ansible.builtin.shell": cmd}], policy=POLICY)
    assert "changes /etc/sudoers.d from a command" in refused("find /etc/sudoers.d -delete")[0]
    assert refused("find / -name x -fprint /boot/list") == [
        "task 1: `find / -name x -fprint /boot/list` writes /boot/list, under /boot"]
    assert "writes /proc/x, under /proc" in refused("sort -o /proc/x /etc/a")[0]
    assert refused("find /etc/sudoers.d -name '*~' -exec grep -l NOPASSWD {} +") == []  # reads only
    assert refused("dpkg -S /etc/sudoers") == []  # a query: it names sudoers, changes nothing


_MODULE_VALUES = st.sampled_from(["/etc/x.conf", "/etc/security/limits.d/a b.conf", "/opt/app/", "/etc/cron.d",
                                  "/etc/modprobe.d/x.conf", "relative.conf"])


@PROPERTY
@given(fqcn=st.sampled_from(sorted(effects.MODULE_WRITES)), value=_MODULE_VALUES, data=st.data())
def test_every_module_write_the_gate_lets_through_is_saved_by_the_checkpoint(fqcn, value, data):
    spec = effects.MODULE_WRITES[fqcn]
    key = data.draw(st.sampled_from(spec.keys))
    args = {key: value}
    if spec.directory_of:
        args[spec.directory_of] = data.draw(st.sampled_from(["sshd", "x"]))
    if fqcn == "ansible.builtin.copy":
        args["content"] = "x"
    if task_gate.validate([{fqcn: args}], trusted=False, policy=POLICY):
        return
    touched = checkpoint.paths_touched(fqcn, args)
    path = value
    if spec.directory_of:
        path = posixpath.join(value, args[spec.directory_of])
    elif spec.relative_dir and not value.startswith("/"):
        path = posixpath.join(spec.relative_dir, value)
    if not path.startswith("/"):
        assert touched.unknown and "is not absolute" in touched.unknown
        return
    norm = checkpoint.normalise_path(path)
    assert norm in touched.paths + touched.shallow, (fqcn, args, touched)


def test_module_write_arguments_are_the_checkpoints_and_the_gates():
    for fqcn, spec in effects.MODULE_WRITES.items():
        given_ = {spec.keys[-1]: "/etc/a"}
        if spec.directory_of:
            given_[spec.directory_of] = "b"
        assert effects.module_write_paths(fqcn, given_) == ["/etc/a"], fqcn
        touched = checkpoint.paths_touched(fqcn, given_)
        assert (touched.paths + touched.shallow)[:1] == (["/etc/a/b"] if spec.directory_of else ["/etc/a"]), fqcn


# ---------------------------------------------------------------- the probe allowlist

_PROBE_COMMANDS = [
    ["sshd", "-T"], ["sshd", "-T", "-C", "user=root"], ["systemctl", "is-enabled", "sshd"],
    ["systemctl", "show", "-p", "ActiveState", "auditd"], ["systemctl", "status", "--no-pager", "auditd"],
    ["dpkg", "-l"], ["dpkg", "-s", "aide"], ["dpkg-query", "-W", "-f", "${Status}", "aide"], ["rpm", "-q", "aide"],
    ["rpm", "-qa"], ["apt-cache", "policy", "aide"], ["getent", "passwd", "root"], ["auditctl", "-l"],
    ["auditctl", "-s"], ["sysctl", "-a"], ["sysctl", "-n", "kernel.dmesg_restrict"], ["find", "/etc", "-name", "x"],
    ["find", "-L", "/etc/ssh", "-type", "f", "-perm", "/022"], ["grep", "-c", "x", "/etc/shadow"],
    ["grep", "-rn", "PermitRootLogin", "/etc/ssh"], ["stat", "-c", "%a", "/etc/passwd"], ["ls", "-ld", "/etc"],
    ["id", "-u", "root"], ["ss", "-ltn"], ["findmnt", "-n", "/tmp"], ["mount"], ["lsmod"],
    ["modprobe", "-n", "-v", "usb-storage"], ["uname", "-r"], ["aa-status"], ["authselect", "current"],
    ["update-crypto-policies", "--show"], ["crontab", "-l"], ["crontab", "-u", "root", "-l"],
    ["head", "-n", "5", "/etc/login.defs"], ["tail", "-n", "+2", "/etc/login.defs"], ["cat", "/etc/issue"],
]


def test_every_probe_form_in_the_examples_is_accepted():
    for argv in _PROBE_COMMANDS:
        probes.probe_task({"command": argv})  # raises ProbeRefused if the allowlist refused it


_probe_words = st.sampled_from(sorted({w for argv in _PROBE_COMMANDS for w in argv[1:]} | set(effects.FIND_ACTIONS)
                                      | {"-w", "-p", "kernel.x=1", "-i", "-o", "/etc/x", "start", "stop", "-r",
                                         "-delete", "--system", "-e", "{}", ";", "of=/etc/x"}))


@PROPERTY
@given(name=st.sampled_from(sorted(probes.COMMANDS)), args=st.lists(_probe_words, max_size=5))
def test_every_command_the_probe_allowlist_accepts_writes_nothing(name, args):
    try:
        task = probes.probe_task({"command": [name] + args})
    except probes.ProbeRefused:
        return
    argv = task["ansible.builtin.command"]["argv"]
    effect = effects.command_effect(argv)
    assert effect.read_only and not effect.writes and not effect.implied and effect.state is None, (argv, effect)


def test_the_probe_allowlist_and_the_table_agree_on_the_examples():
    for argv in _PROBE_COMMANDS:
        assert effects.command_effect(argv).read_only, argv


# ---------------------------------------------------------------- the table's own decisions

@pytest.mark.parametrize("argv, kind, writes", [
    (["find", "/etc", "-delete"], "writes", ("/etc",)),
    (["find", "-H", "/etc", "/opt", "-delete"], "writes", ("/etc", "/opt")),
    (["find", "/", "-fprint0", "/tmp/list"], "writes", ("/tmp/list",)),
    (["find", "/etc", "-exec", "chmod", "600", "{}", ";"], "wraps", ()),
    (["find", "/etc", "-name", "x"], "reads", ()),
    (["sed", "-i.bak", "s/a/b/", "/etc/a"], "writes", ("/etc/a",)),
    (["sed", "-n", "w /etc/out", "/etc/in"], "writes", ()),
    (["sed", "s/a/b/", "/etc/a"], "reads", ()),
    (["cp", "-t", "/etc/dir", "a", "b"], "writes", ("/etc/dir",)),
    (["install", "-d", "-m", "0750", "/etc/a", "/etc/b"], "writes", ("/etc/a", "/etc/b")),
    (["chmod", "0600", "/etc/a"], "writes", ("/etc/a",)),
    (["dd", "if=/dev/zero", "of=/etc/x"], "writes", ("/etc/x",)),
    (["sort", "-o/etc/sorted", "/etc/in"], "writes", ("/etc/sorted",)),
    (["sudo", "-u", "root", "tee", "/etc/x"], "wraps", ()),
    (["sh", "-c", "echo x"], "wraps", ()),
    (["command", "-v", "aide"], "reads", ()),
    (["visudo", "-cf", "/etc/sudoers.d/x"], "reads", ()),
    (["visudo", "-f", "/etc/sudoers.d/x"], "writes", ()),
    (["authselect", "select", "sssd"], "writes", ()),
    (["some-unknown-tool", "/etc/x"], "writes", ()),
])
def test_command_effects(argv, kind, writes):
    effect = effects.command_effect(argv)
    assert (effect.kind, effect.writes) == (kind, writes)


def test_known_effects_that_are_not_files():
    assert effects.command_effect(["chown", "root", "/boot/x"]).metadata_only
    assert effects.command_effect(["systemctl", "restart", "ssh"]).state == "service state"
    assert effects.command_effect(["update-grub"]).implied == ("/boot/grub/grub.cfg",)
    assert effects.command_effect(["xargs", "rm"]).state == "arguments built at run time"
    assert effects.command_effect(["bash", "/root/fix.sh"]).state == "runs a shell script (/root/fix.sh)"


def test_one_within():
    assert effects.within("/etc/ssh/sshd_config", "/etc/ssh") and effects.within("/etc", "/etc")
    assert not effects.within("/etcetera", "/etc")
    assert effects.within("/etc/x", "/")


# ---------------------------------------------------------------- refusal codes

def test_every_refusal_carries_a_known_code_beside_its_message():
    tasks = [
        {"name": "a", "ansible.builtin.raw": "id"},
        {"ansible.builtin.uri": {"url": "http://x"}},
        {"ansible.builtin.lineinfile": {"path": "/etc/issue", "line": "{{ x }}"}},
        {"ansible.builtin.sysctl_setting": {"name": "x"}},
        {"ansible.builtin.shell": "systemctl stop ssh"},
        {"ansible.builtin.shell": "echo 1 > /proc/sys/kernel/x"},
        {"ansible.builtin.shell": "reboot"},
        {"ansible.builtin.shell": "case $x in a) reboot;; esac"},
        {"ansible.builtin.command": {"cmd": "true", "warn": True}},
    ]
    found = task_gate.refusals(tasks, trusted=False, policy=POLICY)
    assert [r.message for r in found] == task_gate.validate(tasks, trusted=False, policy=POLICY)
    assert all(r.code in R.CODES for r in found)
    by_task = {r.task.split(" ")[1]: (r.code, r.subject) for r in found}
    assert by_task == {
        "1": ("denied_module", ("ansible.builtin.raw",)),
        "2": ("not_allowlisted", ("ansible.builtin.uri",)),
        "3": ("jinja_untrusted", ()),
        "4": ("unknown_module", ("ansible.builtin.sysctl_setting", "ansible.posix.sysctl")),
        "5": ("touches_access", ()),
        "6": ("writes_outside", ()),
        "7": ("banned_pattern", ()),
        "8": ("unreadable_command", ()),
        "9": ("unsupported_parameters", ("ansible.builtin.command", "warn")),
    }


def test_the_executor_hands_the_codes_to_the_report_but_not_to_its_dict():
    found = task_gate.refusals([{"ansible.builtin.uri": {"url": "http://x"}}])
    report = ExecutionReport.refusal("; ".join(r.message for r in found), found)
    assert report.refusals == [{"code": "not_allowlisted", "task": "task 1", "subject": ["ansible.builtin.uri"],
                                "problem": found[0].problem}]
    assert "refusals" not in report.to_dict()
    assert R.Refusal.from_dict(report.refusals[0]) == found[0]
    assert R.Refusal.from_dict(None) is None and R.Refusal.from_dict({"problem": "x"}) is None


def test_no_import_cycle_between_the_gate_and_its_policy():
    code = ("import sys; "
            "import ansible_collections.scapforge.remediation.plugins.plugin_utils.untrusted_policy as u; "
            "assert 'ansible_collections.scapforge.remediation.plugins.plugin_utils.task_gate' not in sys.modules; "
            "assert u.resolve_module('sysctl').fqcn == 'ansible.posix.sysctl'")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
