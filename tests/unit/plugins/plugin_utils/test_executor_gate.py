"""The task gate (plugins/plugin_utils/task_gate.py): pure checks, nothing runs on any host.

Covers the llm-output cases of ../shared/cases/cases.yml (tests/llm_cases.py, so the unit
tests do not depend on that file), keyword/module/argument refusals, the untrusted-input rules,
and every Ansible fix of the SSG Debian 12 datastream passing the trusted gate.
"""
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from llm_cases import (
    LLM_COMMAND_WARN_ARG,
    LLM_INVENTED_MODULE,
    LLM_PIPEFAIL_UNDER_DASH,
    LLM_YAML_UNQUOTED_COLON,
)

from ansible_collections.scapforge.remediation.plugins.plugin_utils._host.session import ActionSession
from ansible_collections.scapforge.remediation.plugins.plugin_utils import task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import (
    ExecutionReport, TaskListExecutor)

DATASTREAM = Path(os.environ.get("SCAPFORGE_LAB_HOME", "/var/lib/scapforge-lab"), "content", "ssg-debian12-ds.xml")


def _untrusted_executor():
    """An executor whose action is never touched: refusals happen before any use of it."""
    action = ActionSession(SimpleNamespace(_task=SimpleNamespace(check_mode=False), _loader=None, _shared_loader_obj=None), {})
    return TaskListExecutor(action, {}, trusted=False)


# ------------------------------------------------------------------ cases.yml llm-output

def test_llm_yaml_unquoted_colon_is_a_parse_error_naming_the_line():
    with pytest.raises(task_gate.TaskParseError) as err:
        task_gate.parse_task_text(LLM_YAML_UNQUOTED_COLON)
    msg = str(err.value)
    assert "mapping values are not allowed" in msg.lower()
    assert "line 4" in msg


def test_llm_yaml_unquoted_colon_is_refused_by_run_yaml_without_running():
    report = _untrusted_executor().run_yaml(LLM_YAML_UNQUOTED_COLON)
    assert report.ok is False
    assert "line 4" in report.refused
    assert report.modules == [] and report.task_results == []


def test_llm_command_warn_arg_is_refused_naming_warn():
    problems = task_gate.validate(task_gate.parse_task_text(LLM_COMMAND_WARN_ARG), trusted=False)
    assert len(problems) == 1
    assert "Unsupported parameters for (ansible.builtin.command) module: warn." in problems[0]


def test_llm_invented_module_is_refused_naming_the_real_one():
    problems = task_gate.validate(task_gate.parse_task_text(LLM_INVENTED_MODULE), trusted=False)
    assert len(problems) == 1
    assert "'ansible.builtin.sysctl_setting'" in problems[0]
    assert "did you mean ansible.posix.sysctl?" in problems[0]


def test_llm_pipefail_under_dash_passes_the_gate():
    # valid Ansible: its failure (dash has no pipefail) shows only on the host
    assert task_gate.validate(task_gate.parse_task_text(LLM_PIPEFAIL_UNDER_DASH), trusted=False) == []


# ------------------------------------------------------------------ modules and routing

@pytest.mark.parametrize("name, fqcn", [
    ("sysctl", "ansible.posix.sysctl"),
    ("ansible.builtin.sysctl", "ansible.posix.sysctl"),
    ("lineinfile", "ansible.builtin.lineinfile"),
    ("ini_file", "community.general.ini_file"),
    ("mount", "ansible.posix.mount"),
])
def test_module_names_resolve_through_ansible_routing(name, fqcn):
    assert task_gate.resolve_module(name).fqcn == fqcn


def test_redirected_builtin_sysctl_is_accepted():
    tasks = [{"ansible.builtin.sysctl": {"name": "kernel.dmesg_restrict", "value": "1", "state": "present"}}]
    assert task_gate.validate(tasks, trusted=False) == []


def test_unknown_module_without_guess_says_so():
    problems = task_gate.validate([{"frobnicate_widget_xyz": {"a": 1}}], trusted=True)
    assert problems == ["task 1: no module named 'frobnicate_widget_xyz' in this Ansible installation"]


@pytest.mark.parametrize("keyword", ["delegate_to", "notify", "until", "environment", "loop_control", "local_action"])
def test_unsupported_keyword_is_refused_by_name(keyword):
    task = {"name": "x", "ansible.builtin.command": "true", keyword: "localhost"}
    problems = task_gate.validate([task], trusted=True)
    assert problems and f"'{keyword}'" in problems[0], problems


def test_unknown_keyword_next_to_a_module_is_refused():
    problems = task_gate.validate([{"command": "true", "colour": "blue"}], trusted=True)
    assert problems == ["task 1: more than one module or unknown keyword: command, colour"]


def test_bad_choice_is_refused():
    problems = task_gate.validate([{"lineinfile": {"path": "/x", "line": "a", "state": "enabled"}}], trusted=True)
    assert problems == ["task 1: value of state must be one of: absent, present, got: enabled"]


def test_internal_check_mode_argument_is_refused():
    task = {"lineinfile": {"path": "/x", "regexp": "^U", "state": "absent", "_ansible_check_mode": True}}
    problems = task_gate.validate([task], trusted=True)
    assert len(problems) == 1 and "_ansible_check_mode" in problems[0] and "check_mode" in problems[0]


@pytest.mark.parametrize("module", ["ansible.builtin.include_tasks", "ansible.builtin.reboot", "ansible.builtin.script"])
def test_denied_modules_are_refused_even_when_trusted(module):
    problems = task_gate.validate([{module: "x.yml"}], trusted=True)
    assert problems and "is not allowed in remediation tasks" in problems[0]


def test_loop_lookups_are_limited_to_data_reshaping():
    assert task_gate.validate([{"debug": {"msg": "x"}, "with_items": [1, 2]}], trusted=True) == []
    problems = task_gate.validate([{"debug": {"msg": "x"}, "with_file": ["/etc/shadow"]}], trusted=True)
    assert problems and "'with_file' is not supported" in problems[0]


def test_block_keywords_and_children_are_checked():
    tasks = [{"name": "b", "when": "x is defined", "block": [{"command": "true", "notify": "h"}], "rescue": []}]
    problems = task_gate.validate(tasks, trusted=True)
    assert "task 1 'b': block keyword(s) not supported: rescue" in problems
    assert any(p.startswith("task 1.1: keyword 'notify'") for p in problems), problems


@pytest.mark.parametrize("junk, reason", [
    ("not a list", "must be a list of mappings, got str"),
    ([], "the task list is empty"),
    (["command: true"], "task 1: must be a mapping, got str"),
])
def test_junk_input_is_refused(junk, reason):
    assert any(reason in p for p in task_gate.validate(junk, trusted=True))
    report = _untrusted_executor().run(junk)
    assert report.ok is False and reason in report.refused


# ------------------------------------------------------------------ untrusted input

def test_untrusted_jinja_is_refused_anywhere():
    tasks = [{"copy": {"dest": "/tmp/x", "content": "{{ lookup('pipe','touch /tmp/pwned') }}"}}]
    problems = task_gate.validate(tasks, trusted=False)
    assert len(problems) == 1 and "Jinja templating is not allowed in untrusted tasks" in problems[0]
    assert task_gate.validate([{"name": "{% if 1 %}x{% endif %}", "command": "true"}], trusted=False)
    # the same task is vendor-acceptable when trusted
    assert task_gate.validate(tasks, trusted=True) == []


@pytest.mark.parametrize("expr", [
    "result.rc == 0", "'x' in result.stdout", "result.found | int > 0", "ansible_facts.packages['aide'] is defined",
    "not (r is failed) and r.stdout_lines | length < 3", True,
])
def test_safe_untrusted_conditionals_pass(expr):
    assert task_gate.check_safe_expression(expr) is None


@pytest.mark.parametrize("expr, word", [
    ("lookup('pipe', 'touch /tmp/pwned')", "Call"),
    ("query('file', '/etc/shadow') | length > 0", "Call"),
    ("result.__class__", "'__class__'"),
    ("'/etc' is exists", "'exists'"),
    ("x | to_json", "'to_json'"),
    ("{{ x }}", "Jinja"),
    ("x ==", "not a valid expression"),
])
def test_unsafe_untrusted_conditionals_are_refused(expr, word):
    reason = task_gate.check_safe_expression(expr)
    assert reason is not None and word in reason


def test_untrusted_when_with_a_lookup_is_refused_but_trusted_passes():
    tasks = [{"command": "true", "when": "lookup('pipe', 'id') != ''"}]
    assert task_gate.validate(tasks, trusted=False)
    assert task_gate.validate(tasks, trusted=True) == []


def test_untrusted_copy_src_and_template_read_controller_files():
    assert task_gate.validate([{"copy": {"src": "/etc/shadow", "dest": "/tmp/x"}}], trusted=False)
    assert task_gate.validate([{"template": {"src": "a.j2", "dest": "/tmp/x"}}], trusted=False)
    assert task_gate.validate([{"copy": {"src": "/etc/hosts", "dest": "/tmp/x", "remote_src": True}}], trusted=False) == []


# ------------------------------------------------------------------ report

def test_report_to_dict_has_the_documented_fields():
    report = ExecutionReport.refusal("no")
    assert report.to_dict() == dict(ok=False, changed=False, refused="no", failed_task=None, error=None,
                                    unreachable=False, modules=[], task_results=[], diffs=[], changes=[])


# ------------------------------------------------------------------ the vendor content

def _vendor_fixes():
    from lxml import etree
    xccdf = "http://checklists.nist.gov/xccdf/1.2"
    tree = etree.parse(str(DATASTREAM))
    for fix in tree.iterfind(f".//{{{xccdf}}}fix[@system='urn:xccdf:fix:script:ansible']"):
        parts = [fix.text or ""]
        for sub in fix:  # <xccdf:sub idref=.../>: the catalog puts the Value here, quoted
            parts.append('"0"')
            parts.append(sub.tail or "")
        yield fix.get("id"), "".join(parts)


def test_every_vendor_fix_passes_the_trusted_gate_and_is_refused_untrusted():
    assert DATASTREAM.is_file(), "%s not found: run `make lab-build`" % DATASTREAM
    seen = 0
    untrusted = {}
    for rule, text in _vendor_fixes():
        tasks = task_gate.parse_task_text(text, trusted=True, source=rule)
        assert task_gate.validate(tasks, trusted=True) == [], rule
        untrusted[rule] = task_gate.validate(yaml.safe_load(text), trusted=False)
        seen += 1
    assert seen > 300
    # the same text as LLM output is refused where it templates: only vendor content may
    umask = untrusted["accounts_umask_etc_login_defs"]
    assert umask and "Jinja templating is not allowed in untrusted tasks" in umask[0]
    assert sum(bool(p) for p in untrusted.values()) > 150


def test_a_command_tasks_output_is_kept_for_the_next_prompt():
    """A relay trial: the Worker ran ``systemctl show`` as evidence, and the next prompt said "ok"."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import STDOUT_LIMIT, command_output

    shown = command_output("ansible.builtin.command", {"stdout": "ActiveState=inactive\nConditionResult=no\n"})
    assert shown == {"stdout": "ActiveState=inactive\nConditionResult=no"}
    looped = command_output("ansible.builtin.shell", {"results": [{"stdout": "a"}, {"stdout": ""}, {"stdout": "b"}]})
    assert looped == {"stdout": "a\nb"}
    assert command_output("ansible.builtin.lineinfile", {"stdout": "x"}) == {}
    assert command_output("ansible.builtin.command", {"stdout": ""}) == {}
    tail = command_output("ansible.builtin.command", {"stdout": "x" * 1000 + "END"})["stdout"]
    assert tail.startswith("[...] ") and tail.endswith("END") and len(tail) == STDOUT_LIMIT + 6
    hashed = command_output("ansible.builtin.command", {"stdout": "root:$6$abcdefgh$" + "A" * 86 + ":19700:0:99999:7:::"})
    assert "$6$abcdefgh" not in hashed["stdout"] and "REDACTED" in hashed["stdout"]
