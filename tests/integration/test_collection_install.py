"""The collection as users get it: ``ansible-galaxy collection build``, then ``install`` of
the tarball into a fresh path, and the installed playbook and role run on a lab host with
nothing of the checkout on Ansible's paths (issue 10 item 7)."""

from __future__ import annotations

import json
import subprocess
import tarfile

import pytest

import collection_build
#: one rule the vendor fix remediates, one without a fix (no endpoint: llm_unavailable).
RULES = ["accounts_umask_etc_login_defs", "set_password_hashing_algorithm_logindefs"]
#: trees of the checkout that must not ship (galaxy.yml build_ignore).
LEFT_OUT = ("lab/", "bench/", "tools/", ".ci/", "tests/output/", ".venv", ".collections", "scapforge-runs",
            "playbooks/scapforge-runs", "inventory/lab.yml", ".pytest_cache")


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    """The collection built from this checkout (Path of scapforge-remediation-<version>.tar.gz)."""
    return collection_build.build(tmp_path_factory.mktemp("built"))


def test_the_tarball_ships_the_collection_and_not_the_maintainers_trees(tarball):
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    leaked = [n for n in names if n.startswith(LEFT_OUT) or "/__pycache__" in n or n.endswith(".pyc")]
    assert leaked == []
    for needed in ("MANIFEST.json", "FILES.json", "plugins/action/ralph.py", "plugins/modules/ralph.py",
                   "roles/remediate/tasks/main.yml", "roles/remediate/meta/argument_specs.yml",
                   "playbooks/remediate.yml", "skills/anssi-debian12/skill.yml", "meta/runtime.yml"):
        assert needed in names, needed


def test_the_installed_collection_runs_its_playbook_on_a_lab_host(tarball, lab_host, lab_inventory, tmp_path):
    installed, env = collection_build.install(tarball, tmp_path)
    assert (installed / "roles" / "remediate" / "tasks" / "main.yml").is_file()
    assert not (installed / "lab").exists() and not (installed / "tools").exists()
    listed = collection_build.run(["ansible-galaxy", "collection", "list", "scapforge.remediation", "--format", "json"],
                                  cwd=tmp_path, env=env)
    assert list(json.loads(listed.stdout)) == [str(installed.parents[1])]
    runs = tmp_path / "runs"
    extra = {"scapforge_rules": RULES, "scapforge_runs_dir": str(runs), "scapforge_memory_path": str(tmp_path / "memory")}
    proc = subprocess.run(["ansible-playbook", "scapforge.remediation.remediate", "-i", str(lab_inventory),
                           "-l", lab_host.name, "-e", json.dumps(extra)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    summary = json.loads((runs / "latest" / "summary.json").read_text())
    rules = summary["hosts"][lab_host.name]["rules"]
    assert {r: (o["outcome"], o["reason"]) for r, o in rules.items()} == {
        "accounts_umask_etc_login_defs": ("remediated", "verified"),
        "set_password_hashing_algorithm_logindefs": ("escalated", "llm_unavailable")}
    # the progress lines (plugin_utils/console.py) reach ansible-playbook's stdout from the worker
    name = lab_host.name
    assert "%s: 2 failing rules to work, profile anssi_bp28_high" % name in proc.stdout
    lines = [x for x in proc.stdout.splitlines() if x.startswith("%s: rule " % name)]
    assert len(lines) == 2, proc.stdout[-4000:]
    assert any(x.startswith("%s: rule " % name) and "accounts_umask_etc_login_defs attempt 1 (vendor): "
               "remediated [verified]" in x for x in lines), lines
    assert any("set_password_hashing_algorithm_logindefs: escalated [llm_unavailable]" in x for x in lines), lines
    assert sorted(x.split()[2] for x in lines) == ["1/2", "2/2"]
