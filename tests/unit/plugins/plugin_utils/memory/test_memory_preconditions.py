"""What a proven fix needs that it does not create (issue 19 item 4): read from its tasks,
checked on the host by one read-only command, and a replay not made blind."""

import subprocess

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import preconditions as P

AIDE_FIX = [  # the lab's case: proven where an earlier attempt had installed aide
    {"name": "database", "ansible.builtin.lineinfile": {"path": "/etc/aide/aide.conf", "regexp": "^database_in",
                                                        "line": "database_in=file:/var/lib/aide/aide.db"}},
    {"name": "init", "ansible.builtin.command": {"cmd": "aideinit -y -f"}},
]


@pytest.mark.parametrize("tasks, needs", [
    (AIDE_FIX, [{"kind": "file", "name": "/etc/aide/aide.conf"}, {"kind": "command", "name": "aideinit"}]),
    # what the list installs or creates itself is no precondition
    ([{"ansible.builtin.apt": {"name": "aide", "state": "present"}}] + AIDE_FIX, []),
    ([{"ansible.builtin.copy": {"dest": "/etc/issue", "content": "x"}},
      {"ansible.builtin.lineinfile": {"path": "/etc/issue", "line": "y"}}], []),
    ([{"ansible.builtin.lineinfile": {"path": "/etc/login.defs", "line": "UMASK 027", "create": True}}], []),
    ([{"ansible.builtin.replace": {"path": "/etc/login.defs", "regexp": "a", "replace": "b"}}],
     [{"kind": "file", "name": "/etc/login.defs"}]),
    ([{"ansible.builtin.systemd": {"name": "auditd", "enabled": True}}], [{"kind": "service", "name": "auditd"}]),
    ([{"ansible.builtin.shell": {"cmd": "set -o pipefail; /usr/sbin/augenrules --load | tail -1",
                                 "executable": "/bin/bash"}}], [{"kind": "file", "name": "/usr/sbin/augenrules"}]),
    ([{"ansible.builtin.file": {"path": "/etc/cron.d", "state": "directory", "mode": "0700"}},
      {"ansible.builtin.file": {"path": "/etc/crontab", "mode": "0600"}}], [{"kind": "file", "name": "/etc/crontab"}]),
    ([{"ansible.builtin.command": {"argv": ["chage", "-M", "60", "root"]}}], [{"kind": "command", "name": "chage"}]),
    ([{"ansible.builtin.shell": "LANG=C sudo -n aide --check || true"}], [{"kind": "command", "name": "aide"}]),
    ([{"ansible.builtin.stat": {"path": "/x"}, "check_mode": True}], []),
])
def test_of_tasks_names_what_the_tasks_need_and_do_not_make(tasks, needs):
    assert P.of_tasks(tasks) == needs


def test_the_check_is_one_shell_command_that_names_only_what_is_missing(tmp_path):
    present = tmp_path / "aide.conf"
    present.write_text("x")
    needs = [{"kind": "file", "name": str(present)}, {"kind": "file", "name": str(tmp_path / "no such; rm -rf x")},
             {"kind": "command", "name": "sh"}, {"kind": "command", "name": "no-such-command-here"}]
    command = P.check_command(needs)
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert P.parse_missing(out.stdout, needs) == [needs[1], needs[3]]
    assert not (tmp_path / "x").exists() and present.exists()  # names are quoted: nothing ran
    assert P.check_command([]) == "true" and P.parse_missing("missing file /a\n", []) == []
