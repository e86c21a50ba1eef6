"""Each controller plugin imports without its third-party libraries, and its ``run`` then fails
with the error that names them (plugins/plugin_utils/deps.py). ``ansible-test sanity --test
import`` needs the first half: it imports every controller plugin with only ansible-core's own
requirements installed (tests/unit/test_sanity.py runs it).

Each case runs in a fresh interpreter in which importing the libraries raises ImportError
(``sys.modules[name] = None``, the documented way to block an import).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps

#: the checkout's collection path (tests/conftest.py puts it on sys.path; importing it from there
#: would pick whichever ``conftest`` module pytest loaded first).
COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           ".collections")
#: every third-party library of the controller plugins (requirements.txt, less what
#: ansible-core itself needs).
#: (import names: trestle is compliance-trestle on the package index, as deps.MISSING names it)
LIBRARIES = ("filelock", "jsonschema", "junitparser", "lxml", "openai", "tinydb", "trestle")
#: plugin -> (the libraries its imports need, the error its run raises without them)
NEEDS = {
    "action.ralph": (["filelock", "jsonschema", "lxml", "openai", "tinydb"], "AnsibleActionFail"),
    "action.memory_merge": (["filelock", "tinydb"], "AnsibleActionFail"),
    "action.run_summary": (["compliance-trestle", "junitparser", "lxml"], "AnsibleActionFail"),
    "lookup.lessons": (["filelock", "tinydb"], "AnsibleLookupError"),
    "lookup.skill": (["jsonschema"], "AnsibleLookupError"),
}

_SCRIPT = """
import ansible.errors, importlib, json, sys
sys.path.insert(0, sys.argv[1])
for name in sys.argv[4:]:
    sys.modules[name] = None
plugin = importlib.import_module("ansible_collections.scapforge.remediation.plugins." + sys.argv[3])
from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
try:
    if hasattr(plugin, "ActionModule"):
        plugin.ActionModule(None, None, None, None, None).run(task_vars={})
    else:
        plugin.LookupModule().run(["x"], variables={})
    raised = None
except Exception as exc:
    raised = exc
print(json.dumps({"missing": sorted(deps.MISSING), "error": type(raised).__name__,
                  "is_expected": isinstance(raised, getattr(ansible.errors, sys.argv[2])), "message": str(raised),
                  "cause": type(raised.__cause__).__name__}))
"""


def _without(plugin: str, error: str, blocked: tuple[str, ...]) -> dict:
    """Import ``plugin`` with ``blocked`` unimportable and call its run: what was recorded missing,
    the error raised (its class name, whether it is an ``ansible.errors.<error>``), its message."""
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, COLLECTIONS, error, plugin, *blocked],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("plugin", sorted(NEEDS))
def test_a_plugin_imports_without_its_libraries_and_its_run_names_them(plugin):
    needs, error = NEEDS[plugin]
    got = _without(plugin, error, LIBRARIES)
    assert got["missing"] == needs
    assert got["is_expected"], got["error"]  # ansible-core 2.19: AnsibleLookupError is AnsibleTemplatePluginError
    plural = "ies" if len(needs) > 1 else "y"
    assert "Python librar%s (%s) on the controller's Python %s." % (plural, ", ".join(needs), sys.executable) in got["message"]
    assert "requirements.txt" in got["message"]
    assert got["cause"] == "ModuleNotFoundError"


@pytest.mark.parametrize("plugin", sorted(NEEDS))
def test_with_its_libraries_a_plugin_records_none_missing(plugin):
    got = _without(plugin, NEEDS[plugin][1], ())
    assert got["missing"] == []
    assert "Failed to import" not in got["message"]  # its run went on (and failed later: no task here)


def test_require_names_only_the_missing_libraries_it_is_asked_for(monkeypatch):
    monkeypatch.setitem(deps.MISSING, "tinydb", ImportError("No module named 'tinydb'"))
    deps.require("lxml", "openai")
    with pytest.raises(AnsibleError, match=r"required Python library \(tinydb\) on the controller"):
        deps.require("lxml", "tinydb")
