"""What users and their CI check of the built collection (issue 10 items 5-7): ansible-doc
renders every module, lookup and the role; antsibull-docs lints the docs; ansible-builder
turns the example execution environment into a build context and reads the collection's
own dependency metadata. The tools come from the packaging virtualenv (requirements-pkg.txt,
`make venv-pkg`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

import collection_build
from collection_build import REPO_ROOT, pkg_tool, run

PLUGINS = {
    "module": sorted(p.stem for p in (REPO_ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__"),
    "lookup": sorted(p.stem for p in (REPO_ROOT / "plugins" / "lookup").glob("*.py") if p.stem != "__init__"),
    "role": sorted(p.name for p in (REPO_ROOT / "roles").iterdir() if p.is_dir()),
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(root of the collection installed from its tarball, environment that finds it)."""
    where = tmp_path_factory.mktemp("installed")
    return collection_build.install(collection_build.build(where), where)


def test_every_action_plugin_has_a_module_that_documents_it():
    actions = sorted(p.stem for p in (REPO_ROOT / "plugins" / "action").glob("*.py") if p.stem != "__init__")
    assert actions and set(actions) <= set(PLUGINS["module"])


@pytest.mark.parametrize("kind", sorted(PLUGINS))
def test_ansible_doc_renders_every_plugin_and_the_role(kind, installed):
    root, env = installed
    names = ["scapforge.remediation.%s" % n for n in PLUGINS[kind]]
    proc = run(["ansible-doc", "-t", kind, "--json"] + names, cwd=root, env=env)
    docs = json.loads(proc.stdout)
    assert sorted(docs) == sorted(names)
    for name, doc in docs.items():
        if kind == "role":
            assert doc["entry_points"]["main"]["short_description"], name
            assert "scapforge_rules" in doc["entry_points"]["main"]["options"], name
        else:
            assert doc["doc"]["short_description"] and doc["doc"]["options"] is not None, name
            assert doc["examples"], name
    text = run(["ansible-doc", "-t", kind] + names, cwd=root, env=env).stdout  # the rendered text too
    assert all(n in text for n in names)


def test_antsibull_docs_lint_passes(installed):
    root, env = installed
    env = dict(env, PATH="%s:%s" % (Path(pkg_tool("ansible-doc")).parent, env["PATH"]),
               # community.general and ansible.posix, which the docs' references resolve against
               ANSIBLE_COLLECTIONS_PATH="%s:%s" % (root.parents[2], _site_collections()))
    proc = run([pkg_tool("antsibull-docs"), "lint-collection-docs", "--plugin-docs", "."], cwd=root, env=env,
               timeout=600)
    assert proc.stdout.strip() == "", proc.stdout


def _site_collections() -> str:
    """The sys.path entry holding the `ansible` package's collections (community.general...)."""
    for entry in sys.path:
        if (Path(entry) / "ansible_collections" / "community" / "general").is_dir():
            return entry
    raise AssertionError("community.general not found on sys.path: install requirements.txt")


def test_the_collection_declares_its_execution_environment_dependencies(installed):
    root, _env = installed
    meta = yaml.safe_load((root / "meta" / "execution-environment.yml").read_text())
    for kind in ("python", "system"):
        assert (root / meta["dependencies"][kind]).is_file(), kind
    proc = run([pkg_tool("ansible-builder"), "introspect", "--sanitize", str(root.parents[2])])
    found = yaml.safe_load(proc.stdout.split("\n", 1)[1])  # after the "# Dependency data for" line
    python = {line.split()[0] for line in found["python"]}
    # every controller library requirements.txt names, but those the image brings (ansible,
    # ansible-core, ansible-runner), is declared for the execution environment
    wanted = {line.split("#")[0].strip() for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()}
    wanted = {w for w in wanted if w and not w.startswith(("ansible>", "ansible-core", "ansible-runner"))}
    declared = {line.split("#")[0].strip() for line in (root / meta["dependencies"]["python"]).read_text().splitlines()}
    assert wanted and "junitparser>=3.1" in wanted
    assert wanted <= declared, sorted(wanted - declared)
    assert any(line.startswith("openssh-clients [platform:rpm]") for line in found["system"])


def test_ansible_builder_creates_the_example_build_context(tmp_path):
    context = tmp_path / "context"
    run([pkg_tool("ansible-builder"), "create", "-f", str(REPO_ROOT / "examples" / "execution-environment.yml"),
         "-c", str(context), "--output-filename", "Containerfile"])
    containerfile = (context / "Containerfile").read_text()
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core>=2.19,<2.20 ansible-runner>=2.4"' in containerfile
    assert "ansible-galaxy collection install" in containerfile and "introspect" in containerfile
    galaxy = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert [c["name"] for c in galaxy["collections"]][0] == "scapforge.remediation"
    assert os.access(context / "_build" / "scripts" / "assemble", os.R_OK)
