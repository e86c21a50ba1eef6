"""plugin_utils/ansible_private.py: the one module that may touch ansible-core's private parts."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import yaml
from ansible.errors import AnsibleActionFail, AnsibleActionSkip
from ansible.playbook.task import Task
from ansible.release import __version__
from ansible.template import trust_as_template
from packaging.specifiers import SpecifierSet

from ansible_collections.scapforge.remediation.plugins.plugin_utils import ansible_private

ROOT = Path(__file__).resolve().parents[4]
PLUGINS = ROOT / "plugins"


def test_the_installed_core_is_one_the_executor_was_checked_against():
    assert ansible_private.ANSIBLE_CORE_VERSION == __version__
    assert ansible_private.CORE == tuple(int(p) for p in __version__.split(".")[:2])
    assert ansible_private.CORE in ansible_private.SUPPORTED
    assert ansible_private.SUPPORTED == ((2, 19), (2, 20), (2, 21))
    assert ansible_private.TASK_CONTEXT is (ansible_private.CORE >= (2, 21))
    assert ansible_private.TemplateEngine.__module__ == "ansible._internal._templating._engine"


def test_refusal_names_the_version_and_the_supported_range():
    error = ansible_private._refuse("this release is not one the executor was checked against")
    assert isinstance(error, ImportError)
    assert str(error) == ("scapforge.remediation supports ansible-core 2.19, 2.20 and 2.21 (>=2.19,<2.22); found %s: "
                          "this release is not one the executor was checked against" % __version__)


def test_an_unknown_core_is_refused_at_import():
    # the real import, in a fresh interpreter whose ansible.release says 2.22.0
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import ansible.release; ansible.release.__version__ = '2.22.0'\n"
            "from ansible_collections.scapforge.remediation.plugins.plugin_utils import ansible_private\n"
            % str(ROOT / ".collections"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "ImportError: scapforge.remediation supports ansible-core 2.19, 2.20 and 2.21 (>=2.19,<2.22); "
        "found 2.22.0: this release is not one the executor was checked against")


def test_the_supported_range_is_the_one_requirements_and_runtime_declare():
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    # ansible-lint wants a "2.19." in requires_ansible: the same range, spelt >=2.19.0,<2.22.0
    assert SpecifierSet(runtime["requires_ansible"]) == SpecifierSet(ansible_private.SUPPORTED_RANGE)
    assert not SpecifierSet(runtime["requires_ansible"]).contains("2.22.0")
    requirements = (ROOT / "requirements.txt").read_text().splitlines()
    assert "ansible-core%s" % ansible_private.SUPPORTED_RANGE in requirements


def test_make_test_matrix_runs_every_supported_core():
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    cores = next(ast.literal_eval(node.value) for node in tree.body
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "CORES")
    assert sorted(cores) == ["%d.%d" % core for core in ansible_private.SUPPORTED]
    for core, (core_req, _ansible_req, _python) in cores.items():
        major, minor = map(int, core.split("."))
        assert core_req == "ansible-core>=%d.%d,<%d.%d" % (major, minor, major, minor + 1)


def test_when_names_the_first_false_condition():
    task = Task.load(dict(name="t", debug=dict(msg="x"), when=[trust_as_template("a == 1"), trust_as_template("b == 2")]))
    assert ansible_private.when_result(task, dict(a=1, b=3)) == (False, "b == 2")
    assert ansible_private.when_result(task, dict(a=1, b=2)) == (True, None)


def test_action_exceptions_become_their_task_result():
    failed = ansible_private.action_exception_result(AnsibleActionFail("bad path", result=dict(path="/x")))
    assert (failed["failed"], failed["msg"], failed["path"]) == (True, "bad path", "/x")
    skipped = ansible_private.action_exception_result(AnsibleActionSkip("nothing to do"))
    assert (skipped["skipped"], skipped["msg"], skipped.get("failed", False)) == (True, "nothing to do", False)


def test_register_names_a_plain_variable():
    assert ansible_private.register_names(Task.load(dict(debug=dict(msg="x"), register="out"))) == ["out"]
    assert ansible_private.register_names(Task.load(dict(debug=dict(msg="x")))) == []


def test_set_fact_gives_plain_variables_and_other_facts_go_to_ansible_facts():
    assert ansible_private.changes_from_result("ansible.builtin.set_fact", dict(ansible_facts=dict(a=1))) == \
        ansible_private.VariableChanges(facts={}, variables=dict(a=1))
    assert ansible_private.changes_from_result("ansible.builtin.package_facts", dict(ansible_facts=dict(packages={}))) == \
        ansible_private.VariableChanges(facts=dict(packages={}), variables={})


def test_no_other_plugin_file_imports_ansible_internals():
    private = re.compile(r"^\s*(from|import)\s+ansible\._internal", re.M)
    offenders = sorted(str(p.relative_to(PLUGINS)) for p in PLUGINS.rglob("*.py")
                       if p.name != "ansible_private.py" and private.search(p.read_text()))
    assert offenders == []
