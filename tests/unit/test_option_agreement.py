"""One definition of each option of scapforge.remediation.ralph and the remediate role
(issue 10 item 6): the argument spec (plugins/module_utils/ralph_options.py, used by the
action plugin and the module stub), the module's DOCUMENTATION, the role's
meta/argument_specs.yml and defaults/main.yml, and the role's mapping of its variables onto
the module's options (tasks/main.yml) agree: names, type, elements, choices, default,
required. The test walks whatever options exist; it names no option but the few the role
computes instead of passing through.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import module_docs

from ansible_collections.scapforge.remediation.plugins.module_utils.ralph_options import ARGUMENT_SPEC

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "remediate"
KEYS = ("type", "elements", "choices", "default", "required", "no_log")
#: module options the role computes rather than passing one variable through, with the
#: role variable they come from (None: from the skill's data or the run, not a variable).
COMPUTED = {
    "datastream": "scapforge_datastream",        # or the skill's datastream path
    "profile": "scapforge_profile",              # or the skill's profile
    "trusted_sha256": "scapforge_trusted_sha256",  # plus the skill's trusted digests
    "skill_description": None,                   # the skill's description
    "run_id": "scapforge_run_id",                # or a fresh id, one for every host
    "run_dir": None,                             # scapforge_runs_dir/<run id>
}
PLAIN = re.compile(r"^\{\{\s*(scapforge_\w+)\s*(or omit\s*)?\}\}$")


def _docs_options() -> dict:
    return module_docs.options("ralph")


def _role_spec() -> dict:
    return yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def _role_defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def _task_args() -> dict:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    found = [t for block in tasks for t in block.get("block", [block]) if "scapforge.remediation.ralph" in t]
    assert len(found) == 1
    return found[0]["scapforge.remediation.ralph"]


def _shape(entry: dict) -> dict:
    """The agreement-relevant keys of a spec or documentation entry, with Ansible's implicit
    values made explicit (required false, no default, not no_log)."""
    out = {k: entry.get(k) for k in KEYS}
    out["required"] = bool(out["required"])
    out["no_log"] = bool(out["no_log"])
    out["type"] = out["type"] or "str"
    return out


def _same(a, b) -> bool:
    """Equal values, a bool never equal to a number (YAML true vs 1)."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def test_the_documentation_and_the_argument_spec_agree():
    docs = _docs_options()
    assert sorted(docs) == sorted(ARGUMENT_SPEC)
    wrong = {}
    for name, entry in ARGUMENT_SPEC.items():
        spec, doc = _shape(entry), _shape(docs[name])
        diff = {k: (spec[k], doc[k]) for k in KEYS if k != "no_log" and not _same(spec[k], doc[k])}
        if diff:
            wrong[name] = diff
    assert wrong == {}, "option: {key: (spec, docs)}"


def test_the_role_argument_specs_and_defaults_agree():
    spec, defaults = _role_spec(), _role_defaults()
    assert sorted(spec) == sorted(defaults) or sorted(set(spec) - set(defaults)) == ["scapforge_run_id"], (
        sorted(set(spec) ^ set(defaults)))
    wrong = {name: (entry.get("default"), defaults.get(name)) for name, entry in spec.items()
             if name in defaults and not _same(entry.get("default"), defaults[name])}
    assert wrong == {}, "variable: (argument_specs default, defaults/main.yml)"
    for name, entry in spec.items():
        assert entry.get("description"), name
        if entry.get("type") == "list":
            assert entry.get("elements"), name


def test_every_option_is_passed_by_the_role_from_its_own_variable():
    args, spec, defaults = _task_args(), _role_spec(), _role_defaults()
    assert sorted(args) == sorted(ARGUMENT_SPEC)
    wrong = {}
    for option, entry in ARGUMENT_SPEC.items():
        if option in COMPUTED:
            variable = COMPUTED[option]
            if variable is not None:
                assert variable in spec and variable in str(args[option]) + str(
                    (ROLE / "tasks" / "main.yml").read_text()), (option, variable)
            continue
        match = PLAIN.match(str(args[option]))
        assert match, "%s: %r is neither a plain variable nor listed in COMPUTED" % (option, args[option])
        variable, omitted = match.group(1), bool(match.group(2))
        assert variable == "scapforge_" + option, (option, variable)
        role = _shape(spec[variable])
        module = _shape(entry)
        diff = {}
        # a path option is a str variable in the role (argument_specs' path type would expand ~ on the
        # controller before the module does); no_log must hold on both sides
        if not (role["type"] == module["type"] or (module["type"], role["type"]) == ("path", "str")):
            diff["type"] = (module["type"], role["type"])
        for key in ("elements", "choices", "no_log"):
            if not _same(module[key], role[key]):
                diff[key] = (module[key], role[key])
        default = defaults.get(variable, spec[variable].get("default"))
        if omitted:  # "{{ x or omit }}": the role's empty default means the module's own (none)
            if module["default"] is not None or default not in ("", None):
                diff["default"] = (module["default"], default)
        elif not (_same(module["default"], default) or (module["type"] == "raw" and str(module["default"]) == str(default))):
            diff["default"] = (module["default"], default)
        if diff:
            wrong[option] = diff
    assert wrong == {}, "option: {key: (module, role)}"


@pytest.mark.parametrize("option", sorted(COMPUTED))
def test_computed_options_still_exist(option):
    assert option in ARGUMENT_SPEC


def _summary_docs() -> dict:
    return module_docs.options("run_summary")


def test_run_summary_documentation_spec_and_role_agree():
    from ansible_collections.scapforge.remediation.plugins.module_utils.run_summary_options import (
        ARGUMENT_SPEC as SUMMARY_SPEC)
    docs = _summary_docs()
    assert sorted(docs) == sorted(SUMMARY_SPEC)
    wrong = {n: {k: (_shape(e)[k], _shape(docs[n])[k]) for k in KEYS if k != "no_log"
                 and not _same(_shape(e)[k], _shape(docs[n])[k])} for n, e in SUMMARY_SPEC.items()}
    assert {n: d for n, d in wrong.items() if d} == {}
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    found = [t for block in tasks for t in block.get("block", [block]) + block.get("always", [])
             if "scapforge.remediation.run_summary" in t]
    assert len(found) == 1
    args, spec, defaults = found[0]["scapforge.remediation.run_summary"], _role_spec(), _role_defaults()
    assert sorted(args) == sorted(SUMMARY_SPEC)
    for option in ("datastream_src", "evidence_key"):  # the user's variables, passed through
        match = PLAIN.match(str(args[option]))
        assert match and match.group(1) == "scapforge_" + option and match.group(2), args[option]
        assert spec[match.group(1)]["type"] == "str" and defaults[match.group(1)] == ""
