"""plugin_utils/ansible_private.py: the one module that may touch ansible-core's private parts."""

import re
from pathlib import Path

from ansible.release import __version__

from ansible_collections.scapforge.remediation.plugins.plugin_utils import ansible_private

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def test_the_installed_core_is_one_the_executor_was_checked_against():
    assert ansible_private.ANSIBLE_CORE_VERSION == __version__
    assert tuple(int(p) for p in __version__.split(".")[:2]) in ansible_private.SUPPORTED
    assert ansible_private.TemplateEngine.__module__ == "ansible._internal._templating._engine"


def test_refusal_names_the_version_and_what_is_missing():
    error = ansible_private._refuse("Task._resolve_conditional has no result_context argument")
    assert isinstance(error, ImportError)
    assert str(error) == ("scapforge.remediation needs ansible-core 2.19 or 2.20 (found %s): "
                          "Task._resolve_conditional has no result_context argument" % __version__)


def test_no_other_plugin_file_imports_ansible_internals():
    private = re.compile(r"^\s*(from|import)\s+ansible\._internal", re.M)
    offenders = sorted(str(p.relative_to(PLUGINS)) for p in PLUGINS.rglob("*.py")
                       if p.name != "ansible_private.py" and private.search(p.read_text()))
    assert offenders == []
