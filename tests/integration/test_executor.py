"""TaskListExecutor for real: ansible-playbook runs the test-only action plugin
``run_task_list`` (tests/integration/fixtures/action_plugins), which hands a task list to the
executor on the action's own connection.

Two kinds of tests:
- local: ``connection: local`` with harmless tasks that only touch files under pytest's
  tmp_path (never this controller's /etc);
- lab: the real vendor fixes over SSH on a booted Debian 12 lab host (cases
  login-defs-umask, sshd-match-block, llm-pipefail-under-dash); the files they change are
  restored afterwards.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from lab_fixtures import render_fix

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ACTION_PLUGINS = REPO_ROOT / "tests" / "integration" / "fixtures" / "action_plugins"


def run_tasks(tmp_path, tasks, trusted, *, host=None, inventory=None, variables=None, name="run", play_extra=None,
              runs=1):
    """Run ``tasks`` (YAML text or a list) through run_task_list; return the report dict.

    host/inventory None: localhost over connection local with this Python.
    """
    work = tmp_path / name
    work.mkdir()
    task_file = work / "tasks.yml"
    task_file.write_text(tasks if isinstance(tasks, str) else yaml.safe_dump(tasks, sort_keys=False))
    report_path = work / "report.json"
    play = [{
        "hosts": host or "localhost",
        "gather_facts": False,
        "tasks": [{"run_task_list": {"path": str(task_file), "trusted": trusted, "vars": variables or {},
                                     "report_path": str(report_path), "runs": runs}}],
    }]
    play[0].update(play_extra or {})
    if host is None:
        play[0]["connection"] = "local"
        play[0]["vars"] = {"ansible_python_interpreter": sys.executable}
    (work / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory) if inventory else "localhost,", str(work / "play.yml")]
    if host:
        argv += ["-l", host]
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_ACTION_PLUGINS=str(ACTION_PLUGINS),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and report_path.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(report_path.read_text())


def results_by_name(report):
    return {r["name"]: r for r in report["task_results"]}


# ====================================================================== local, tmp files only

def test_vendor_umask_fix_on_a_tmp_copy(tmp_path):
    target = tmp_path / "login.defs"
    target.write_text("# comment\nUMASK\t\t022\nPASS_MAX_DAYS\t99999\n")
    text = render_fix("accounts_umask_etc_login_defs", {"var_accounts_user_umask": "077"})
    text = text.replace("/etc/login.defs", str(target))

    first = run_tasks(tmp_path, text, trusted=True, name="first")
    assert first["ok"] and first["changed"], first
    assert target.read_text() == "# comment\nUMASK\t\t077\nPASS_MAX_DAYS\t99999\n"
    assert first["modules"] == ["ansible.builtin.package_facts", "ansible.builtin.set_fact",
                                "ansible.builtin.lineinfile", "ansible.builtin.replace"]
    assert results_by_name(first)["Ensure the Default UMASK is Appended Correctly"]["skipped"] is True

    second = run_tasks(tmp_path, text, trusted=True, name="second")
    assert second["ok"] and second["changed"] is False, second
    assert target.read_text() == "# comment\nUMASK\t\t077\nPASS_MAX_DAYS\t99999\n"


def test_check_mode_task_reports_but_does_not_delete(tmp_path):
    target = tmp_path / "login.defs"
    target.write_text("UMASK\t\t022\n")
    tasks = [
        {"name": "check", "ansible.builtin.lineinfile": {"path": str(target), "regexp": r"^(\s*)UMASK\s+.*", "state": "absent"},
         "check_mode": True, "register": "res"},
        {"name": "found one", "ansible.builtin.assert": {"that": ["res.found == 1", "res is changed"]}},
    ]
    report = run_tasks(tmp_path, tasks, trusted=True)
    assert report["ok"], report
    check = results_by_name(report)["check"]
    assert check["changed"] is True and check["check_mode"] is True  # it would delete the line...
    assert target.read_text() == "UMASK\t\t022\n"                  # ...and did not
    assert report["changed"] is False


def test_block_check_mode_applies_to_its_children(tmp_path):
    tasks = [{"name": "checked block", "check_mode": True, "block": [
        {"name": "would touch", "ansible.builtin.file": {"path": str(tmp_path / "f"), "state": "touch"}}]}]
    report = run_tasks(tmp_path, tasks, trusted=False)
    assert report["ok"] and report["changed"] is False, report
    assert results_by_name(report)["would touch"]["check_mode"] is True
    assert not (tmp_path / "f").exists()


def test_untrusted_lookup_is_refused_and_never_runs(tmp_path):
    pwned = tmp_path / "pwned"
    tasks = [{"name": "banner", "ansible.builtin.copy": {
        "dest": str(tmp_path / "out"), "content": "{{ lookup('pipe', 'touch %s') }}" % pwned}}]
    report = run_tasks(tmp_path, tasks, trusted=False, name="args")
    assert report["refused"] and "Jinja templating is not allowed" in report["refused"]
    cond = [{"ansible.builtin.command": "true", "when": "lookup('pipe', 'touch %s') == ''" % pwned}]
    report2 = run_tasks(tmp_path, cond, trusted=False, name="when")
    assert report2["refused"] and "Call" in report2["refused"]
    assert report["task_results"] == [] and report2["task_results"] == []
    assert not pwned.exists() and not (tmp_path / "out").exists()


def test_data_returned_by_the_target_is_never_rendered(tmp_path):
    pwned = tmp_path / "pwned2"
    evil = tmp_path / "evil.txt"
    evil.write_text("{{ lookup('pipe', 'touch %s') }}" % pwned)
    out = tmp_path / "out.txt"
    tasks = [
        {"name": "read", "ansible.builtin.command": f"cat {evil}", "register": "r", "changed_when": False},
        {"name": "write", "ansible.builtin.copy": {"dest": str(out), "content": "{{ r.stdout }}"}},
    ]
    report = run_tasks(tmp_path, tasks, trusted=True)
    assert report["ok"], report
    assert out.read_text() == evil.read_text()
    assert not pwned.exists()


def test_untrusted_tasks_run_with_safe_conditionals(tmp_path):
    flag = tmp_path / "flag"
    tasks = [
        {"name": "say", "ansible.builtin.command": "echo hi", "register": "r", "changed_when": False},
        {"name": "touch", "ansible.builtin.file": {"path": str(flag), "state": "touch"}, "when": "r.stdout == 'hi'"},
        {"name": "never", "ansible.builtin.file": {"path": str(tmp_path / "never"), "state": "touch"},
         "when": ["r.rc == 0", "'bye' in r.stdout"]},
    ]
    report = run_tasks(tmp_path, tasks, trusted=False)
    assert report["ok"] and report["changed"], report
    assert flag.exists() and not (tmp_path / "never").exists()
    assert results_by_name(report)["never"]["skipped"] is True
    assert report["modules"] == ["ansible.builtin.command", "ansible.builtin.file"]


def test_loops_blocks_set_fact_and_conditions(tmp_path):
    d = tmp_path
    tasks = f"""
- name: XCCDF Value names # promote to variable
  set_fact:
    names: !!str "a,b"
- name: make files
  ansible.builtin.file:
    path: "{d}/{{{{ item }}}}"
    state: touch
  loop: "{{{{ names.split(',') }}}}"
  register: made
- name: find them
  find:
    paths: "{d}"
    patterns: "?"
  register: found
- name: write each found file
  copy:
    dest: "{{{{ item.path }}}}"
    content: "x"
  loop: "{{{{ found.files }}}}"
- name: pairs
  ansible.builtin.lineinfile:
    path: "{d}/{{{{ item.0 }}}}"
    line: "{{{{ item.1 }}}}"
  with_together:
  - ['a', 'b']
  - ['one', 'two']
- name: with_items and a failed_when that tolerates rc 1
  command: grep -c zzz {{{{ item }}}}
  with_items:
  - "{d}/a"
  register: grep
  failed_when: grep.rc not in [0, 1]
  changed_when: false
- name: skipped block
  when: made.results | length == 5
  block:
  - name: inside skipped
    file:
      path: "{d}/skipped"
      state: touch
- name: block that runs
  when: made.results | length == 2
  block:
  - name: inside runs
    file:
      path: "{d}/ran"
      state: touch
  - name: nested
    block:
    - name: deepest
      file:
        path: "{d}/deepest"
        state: touch
- name: fails but ignored
  command: /bin/false
  ignore_errors: true
- name: after ignored
  file:
    path: "{d}/after"
    state: touch
"""
    report = run_tasks(tmp_path, tasks, trusted=True)
    assert report["ok"], report
    assert (d / "a").read_text() == "x\none\n" and (d / "b").read_text() == "x\ntwo\n"
    assert not (d / "skipped").exists()
    assert (d / "ran").exists() and (d / "deepest").exists() and (d / "after").exists()
    by_name = results_by_name(report)
    assert by_name["inside skipped"]["skipped"] is True
    assert by_name["with_items and a failed_when that tolerates rc 1"]["failed"] is False
    assert by_name["fails but ignored"]["failed"] is True and by_name["fails but ignored"]["ignored"] is True
    assert report["modules"][:4] == ["ansible.builtin.set_fact", "ansible.builtin.file", "ansible.builtin.find",
                                     "ansible.builtin.copy"]


def test_with_items_terms_render_like_the_vendor_content(tmp_path):
    # the SSG pattern: with_items: ['{{ files_found.stdout_lines }}'], empty and non-empty
    (tmp_path / "k1.pub").write_text("")
    (tmp_path / "k2.pub").write_text("")
    tasks = f"""
- name: find pub
  command: find {tmp_path} -name '*.pub'
  register: files_found
  changed_when: false
- name: find none
  command: find {tmp_path} -name '*.nothing'
  register: none_found
  changed_when: false
- name: chmod found
  file:
    path: '{{{{ item }}}}'
    mode: '0600'
  with_items:
  - '{{{{ files_found.stdout_lines }}}}'
- name: chmod none
  file:
    path: '{{{{ item }}}}'
    mode: '0600'
  with_items:
  - '{{{{ none_found.stdout_lines }}}}'
- name: dict loop
  copy:
    dest: "{tmp_path}/{{{{ item.key }}}}.txt"
    content: "{{{{ item.value }}}}"
  with_dict: {{"a": "1", "b": "2"}}
"""
    report = run_tasks(tmp_path, tasks, trusted=True)
    assert report["ok"], report
    assert oct((tmp_path / "k1.pub").stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "k2.pub").stat().st_mode & 0o777) == "0o600"
    assert results_by_name(report)["chmod none"]["skipped"] is True
    assert (tmp_path / "a.txt").read_text() == "1" and (tmp_path / "b.txt").read_text() == "2"


def test_a_failure_stops_the_run_and_names_the_task(tmp_path):
    tasks = [
        {"name": "boom", "ansible.builtin.command": "ls /nonexistent-scapforge"},
        {"name": "not reached", "ansible.builtin.file": {"path": str(tmp_path / "nr"), "state": "touch"}},
    ]
    report = run_tasks(tmp_path, tasks, trusted=False)
    assert report["ok"] is False and report["failed_task"] == "boom"
    assert "No such file or directory" in report["error"]
    assert [r["name"] for r in report["task_results"]] == ["boom"]
    assert not (tmp_path / "nr").exists()


def test_play_level_ignore_errors_does_not_hide_a_failed_fix(tmp_path):
    tasks = [{"name": "boom", "ansible.builtin.command": "/bin/false"},
             {"name": "not reached", "ansible.builtin.file": {"path": str(tmp_path / "nr"), "state": "touch"}}]
    report = run_tasks(tmp_path, tasks, trusted=False, play_extra={"ignore_errors": True})
    assert report["ok"] is False and report["failed_task"] == "boom"
    assert not (tmp_path / "nr").exists()


def test_run_variables_reach_templates(tmp_path):
    out = tmp_path / "v"
    tasks = [{"name": "w", "ansible.builtin.copy": {"dest": str(out), "content": "{{ var_x }}-{{ var_x | int + 1 }}"}}]
    report = run_tasks(tmp_path, tasks, trusted=True, variables={"var_x": "41"})
    assert report["ok"], report
    assert out.read_text() == "41-42"


def test_undefined_variable_fails_the_task_with_its_name(tmp_path):
    tasks = [{"name": "uses missing", "debug": {"msg": "{{ no_such_var }}"}}]
    report = run_tasks(tmp_path, tasks, trusted=True)
    assert report["ok"] is False and report["failed_task"] == "uses missing"
    assert "no_such_var" in report["error"]


def test_llm_invented_module_is_refused_through_the_plugin(tmp_path):
    text = '- ansible.builtin.sysctl_setting:\n    name: kernel.dmesg_restrict\n    value: "1"\n'
    report = run_tasks(tmp_path, text, trusted=False)
    assert report["ok"] is False and report["task_results"] == []
    assert "did you mean ansible.posix.sysctl?" in report["refused"]


# ====================================================================== lab, over SSH

@pytest.fixture
def restore_files(lab_host):
    """Back up the given host files (as root) and put them back after the test."""
    saved = []

    def backup(*paths):
        for path in paths:
            lab_host.ssh(f"sudo cp -a {path} {path}.scapforge-test-bak")
            saved.append(path)

    yield backup
    for path in saved:
        lab_host.ssh(f"sudo mv -f {path}.scapforge-test-bak {path}", check=False)


def _cat(host, path):
    return host.ssh(f"sudo cat {path}").stdout


def test_lab_login_defs_umask(tmp_path, lab_host, lab_inventory, restore_files):
    restore_files("/etc/login.defs")
    lab_host.ssh("printf 'UMASK\\t\\t022\\n' | sudo tee /etc/login.defs >/dev/null")
    text = render_fix("accounts_umask_etc_login_defs", {"var_accounts_user_umask": "077"})

    first = run_tasks(tmp_path, text, True, host=lab_host.name, inventory=lab_inventory, name="first")
    assert first["ok"] and first["changed"], first
    lines = [ln for ln in _cat(lab_host, "/etc/login.defs").splitlines() if "UMASK" in ln]
    assert [ln.split() for ln in lines] == [["UMASK", "077"]]

    second = run_tasks(tmp_path, text, True, host=lab_host.name, inventory=lab_inventory, name="second")
    assert second["ok"] and second["changed"] is False, second
    assert _cat(lab_host, "/etc/login.defs") == "UMASK\t\t077\n"


MATCH_TAIL = "Subsystem sftp internal-sftp\nMatch Group sftponly\n    ChrootDirectory /srv/sftp\n    ForceCommand internal-sftp\n"


def test_lab_sshd_root_login_lands_before_match_block(tmp_path, lab_host, lab_inventory, restore_files):
    restore_files("/etc/ssh/sshd_config")
    # the host's file up to any Match block, without Subsystem/PermitRootLogin lines, then the case's tail
    stock = _cat(lab_host, "/etc/ssh/sshd_config.scapforge-test-bak").split("\nMatch ")[0]
    stock = "".join(ln + "\n" for ln in stock.splitlines()
                    if not ln.strip().startswith(("PermitRootLogin", "Subsystem")))
    work = tmp_path / "sshd_config"
    work.write_text(stock + MATCH_TAIL)
    lab_host.ssh("sudo tee /etc/ssh/sshd_config >/dev/null <<'EOF'\n%sEOF" % work.read_text())

    report = run_tasks(tmp_path, render_fix("sshd_disable_root_login", {}), True,
                       host=lab_host.name, inventory=lab_inventory)
    assert report["ok"] and report["changed"], report
    after = _cat(lab_host, "/etc/ssh/sshd_config")
    assert after.endswith(MATCH_TAIL)                      # Match block byte-for-byte unchanged
    head = after[: after.index("Match Group sftponly")]
    assert [ln for ln in head.splitlines() if ln.startswith("PermitRootLogin")] == ["PermitRootLogin no"]
    assert lab_host.ssh("sudo /usr/sbin/sshd -t", check=False).returncode == 0


def test_lab_pipefail_under_dash_fails_with_the_shell_message(tmp_path, lab_host, lab_inventory):
    text = "- ansible.builtin.shell: set -o pipefail && grep -c x /etc/passwd | head -1\n"
    report = run_tasks(tmp_path, text, False, host=lab_host.name, inventory=lab_inventory)
    assert report["refused"] is None
    assert report["ok"] is False
    assert "Illegal option -o pipefail" in report["error"]
    assert report["modules"] == ["ansible.builtin.shell"]


def test_set_fact_in_a_loop_accumulates_into_later_tasks(tmp_path):
    # SSG's audit fixes count paths with a set_fact loop, then read the dict afterwards:
    # as in a play, every item's facts reach the tasks after the loop.
    out = tmp_path / "counts"
    tasks = [
        {"name": "reset", "set_fact": {"seen": {}}},
        {"name": "count", "set_fact": {"seen": "{{ seen | combine({item: 1 + seen.get(item, 0)}) }}"},
         "loop": ["a", "b", "a"]},
        {"name": "last", "set_fact": {"top": "{{ (seen | dict2items | sort(attribute='value') | last).key }}"}},
        {"name": "write", "ansible.builtin.copy": {"dest": str(out), "content": "{{ seen.a }}{{ seen.b }}{{ top }}"}},
    ]
    report = run_tasks(tmp_path, tasks, trusted=True)
    assert report["ok"], report
    assert out.read_text() == "21a"


def test_variables_set_by_a_fix_stay_in_its_run(tmp_path):
    # set_fact, a registered result and gathered facts of a fix are the run's own: the play's
    # next task on the host does not see them (ansible-core 2.21 registers an action's
    # variables in the running task's context: the executor gives each task its own).
    tasks = [
        {"name": "fact", "set_fact": {"scapforge_leak": "fact"}},
        {"name": "reg", "command": "true", "register": "scapforge_leak_reg"},
        {"name": "facts", "setup": {"gather_subset": ["!all", "!min", "date_time"]}},
        {"name": "seen inside", "assert": {"that": [
            "scapforge_leak == 'fact'", "scapforge_leak_reg.rc == 0", "ansible_facts.date_time is defined"]}},
    ]
    after = {"name": "after the fix", "assert": {"that": [
        "scapforge_leak is undefined", "scapforge_leak_reg is undefined", "ansible_facts.date_time is undefined"]}}
    report = run_tasks(tmp_path, tasks, trusted=True, play_extra={"post_tasks": [after]})
    assert report["ok"], report
    assert [r["name"] for r in report["task_results"]] == ["fact", "reg", "facts", "seen inside"]


def test_long_errors_keep_their_tail(tmp_path):
    tasks = [{"name": "noisy", "ansible.builtin.shell": "seq 1 400; echo 'the real cause' >&2; exit 3"}]
    report = run_tasks(tmp_path, tasks, trusted=True)
    assert not report["ok"] and report["failed_task"] == "noisy"
    assert "the real cause" in report["error"] and len(report["error"]) <= 500


def test_package_facts_are_gathered_once_and_again_after_a_package_change(tmp_path):
    """Issue 9: every SSG fix starts with package_facts; the run's cache answers all but the
    first, until a task that can change packages (here `command`) changed something."""
    tasks = [
        {"name": "Gather the package facts", "package_facts": {"manager": "auto"}},
        {"name": "python is installed", "ansible.builtin.set_fact": {
            "seen": "{{ ansible_facts.packages | length > 0 }}"}},
        {"name": "A command (it may install packages)", "ansible.builtin.command": "true",
         "when": "do_command | default(false) | bool"},
        {"name": "Gather the package facts again", "package_facts": {"manager": "auto"}},
    ]
    report = run_tasks(tmp_path, tasks, True, runs=2, variables={"do_command": False})
    assert report["package_facts"] == {"gathered": 1, "served": 3}
    first, second = report["runs"]
    assert all(r["ok"] for r in report["runs"])
    assert [t["msg"] for t in second["task_results"] if t["module"] == "ansible.builtin.package_facts"] == [
        "package facts of this run, unchanged since gathered"] * 2
    report = run_tasks(tmp_path, tasks, True, runs=2, variables={"do_command": True}, name="changed")
    # run 1: gather, the command changed something, gather again; run 2: the first is served
    # from that second gathering, then the command changes something again: gather
    assert report["package_facts"] == {"gathered": 3, "served": 1}
