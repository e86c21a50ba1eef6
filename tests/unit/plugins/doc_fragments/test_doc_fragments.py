"""The collection's doc fragments: each one is extended by a module, and what it documents
reaches the module's documentation as Ansible merges it (ansible-doc renders the same in
tests/unit/test_packaging.py)."""

import ast
from pathlib import Path

import module_docs

ROOT = Path(__file__).resolve().parents[4]
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
FRAGMENTS = sorted(p.stem for p in (ROOT / "plugins" / "doc_fragments").glob("*.py") if p.stem != "__init__")


def _fragment_options(name):
    tree = ast.parse((ROOT / "plugins" / "doc_fragments" / ("%s.py" % name)).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    text = next(ast.literal_eval(n.value) for n in cls.body if isinstance(n, ast.Assign))
    return module_docs.yaml.safe_load(text).get("options", {})


def test_every_fragment_is_extended_by_a_module():
    extended = {f for m in MODULES for f in module_docs.extended_fragments(m)}
    assert FRAGMENTS == ["attributes", "llm", "memory", "safety"]
    assert {"scapforge.remediation." + f for f in FRAGMENTS} <= extended


def test_the_option_groups_reach_ralph_and_nothing_is_documented_twice():
    own = module_docs.own_options("ralph")
    merged = module_docs.options("ralph")
    groups = {f: set(_fragment_options(f)) for f in ("llm", "memory", "safety")}
    assert groups["memory"] == {"memory_path", "memory_mode", "memory_retry"}
    assert "llm_api_key" in groups["llm"] and "deadman_seconds" in groups["safety"]
    assert not own.keys() & set().union(*groups.values())
    assert set(merged) == set(own) | set().union(*groups.values())
    assert merged["llm_timeout"]["default"] == 120 and merged["memory_path"]["default"] == "~/.scapforge/memory"


def test_every_module_gets_the_shared_attributes_and_keeps_its_own_check_mode():
    for name in MODULES:
        attributes = module_docs.documentation(name)["attributes"]
        assert attributes["diff_mode"]["support"] == "none", name
        assert attributes["platform"]["platforms"] == "posix", name
        assert attributes["check_mode"]["support"] == "full", name
    assert "changes nothing" in module_docs.documentation("ralph")["attributes"]["check_mode"]["details"]
