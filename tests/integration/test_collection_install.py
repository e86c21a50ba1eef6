"""The collection as users get it: ``ansible-galaxy collection build``, then ``install`` of
the tarball into a fresh path, and the installed playbook and role run on a lab host with
nothing of the checkout on Ansible's paths (issue 10 item 7)."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
#: one rule the vendor fix remediates, one without a fix (no endpoint: llm_unavailable).
RULES = ["accounts_umask_etc_login_defs", "set_password_hashing_algorithm_logindefs"]
#: trees of the checkout that must not ship (galaxy.yml build_ignore).
LEFT_OUT = ("lab/", "bench/", "tools/", ".ci/", "tests/output/", ".venv", ".collections", "scapforge-runs",
            "playbooks/scapforge-runs", "inventory/lab.yml", ".pytest_cache")


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 300), **kw)
    assert proc.returncode == 0, "%s\n%s\n%s" % (cmd, proc.stdout[-4000:], proc.stderr[-4000:])
    return proc


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    """The collection built from this checkout (Path of scapforge-remediation-<version>.tar.gz)."""
    out = tmp_path_factory.mktemp("built")
    _run(["ansible-galaxy", "collection", "build", "--output-path", str(out), str(REPO_ROOT)], cwd=REPO_ROOT)
    built = sorted(out.glob("scapforge-remediation-*.tar.gz"))
    assert len(built) == 1, built
    return built[0]


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
    dest = tmp_path / "collections"
    # the checkout's ansible.cfg with the fresh path as the only collections path (the
    # checkout's .collections would count as installed already; the dependencies come from
    # the `ansible` package's own ansible_collections on sys.path)
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text((REPO_ROOT / "ansible.cfg").read_text().replace(
        "collections_path = ./.collections", "collections_path = %s" % dest))
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg))
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    _run(["ansible-galaxy", "collection", "install", str(tarball), "-p", str(dest), "--no-deps"], cwd=tmp_path, env=env)
    installed = dest / "ansible_collections" / "scapforge" / "remediation"
    assert (installed / "roles" / "remediate" / "tasks" / "main.yml").is_file()
    assert not (installed / "lab").exists() and not (installed / "tools").exists()
    listed = _run(["ansible-galaxy", "collection", "list", "scapforge.remediation", "--format", "json"],
                  cwd=tmp_path, env=env)
    assert list(json.loads(listed.stdout)) == [str(dest / "ansible_collections")]
    runs = tmp_path / "runs"
    extra = {"scapforge_rules": RULES, "scapforge_runs_dir": str(runs), "scapforge_memory_path": str(tmp_path / "memory")}
    proc = subprocess.run(["ansible-playbook", "scapforge.remediation.remediate", "-i", str(lab_inventory),
                           "-l", lab_host.name, "-e", json.dumps(extra)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
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
