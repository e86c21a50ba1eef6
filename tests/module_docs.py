"""A module's documentation as Ansible itself reads it: its DOCUMENTATION with the doc
fragments it extends merged in by ansible.utils.plugin_docs.add_fragments (the collection's
own from plugins/doc_fragments/, ansible.builtin's from the installed ansible-core)."""

import ast
import importlib
import importlib.util
from pathlib import Path

import yaml
from ansible.utils.plugin_docs import add_fragments

ROOT = Path(__file__).resolve().parents[1]
OURS = "scapforge.remediation."
BUILTIN = "ansible.builtin."


class _Fragments:
    """Just enough of Ansible's fragment loader: ``get(name)`` -> the fragment class or None."""

    def get(self, name):
        if name.startswith(OURS):
            path = ROOT / "plugins" / "doc_fragments" / ("%s.py" % name[len(OURS):])
            if not path.is_file():
                return None
            spec = importlib.util.spec_from_file_location("_scapforge_fragment_" + path.stem, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        elif name.startswith(BUILTIN):
            module = importlib.import_module("ansible.plugins.doc_fragments." + name[len(BUILTIN):])
        else:
            return None
        fragment = module.ModuleDocFragment
        fragment.ansible_name = name
        return fragment


def _path(module: str) -> Path:
    return ROOT / "plugins" / "modules" / ("%s.py" % module)


def own_documentation(module: str) -> dict:
    """plugins/modules/<module>.py's DOCUMENTATION as written, fragments not merged."""
    tree = ast.parse(_path(module).read_text())
    text = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "DOCUMENTATION")
    return yaml.safe_load(text)


def documentation(module: str) -> dict:
    """plugins/modules/<module>.py's DOCUMENTATION, fragments merged."""
    doc = own_documentation(module)
    add_fragments(doc, str(_path(module)), _Fragments(), is_module=True)
    return doc


def extended_fragments(module: str) -> list:
    return list(own_documentation(module).get("extends_documentation_fragment") or [])


def own_options(module: str) -> dict:
    return own_documentation(module).get("options") or {}


def options(module: str) -> dict:
    return documentation(module)["options"]
