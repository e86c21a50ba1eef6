"""Build the collection from this checkout and install it into a fresh path, as users get it
(``ansible-galaxy collection build``, ``ansible-galaxy collection install TARBALL -p DEST``).

Used by the packaging checks (tests/unit/test_packaging.py, tests/unit/test_sanity.py) and
the installed-role lab test (tests/integration/test_collection_install.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
#: the virtual environment of the packaging and documentation tools (requirements-pkg.txt).
PKG_VENV = Path(os.environ.get("SCAPFORGE_PKG_VENV", REPO_ROOT / ".venv-pkg"))


def run(cmd, **kw) -> subprocess.CompletedProcess:
    """Run ``cmd``; AssertionError with its output tail when it exits non-zero."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 300), **kw, check=False)
    assert proc.returncode == 0, "%s\n%s\n%s" % (cmd, proc.stdout[-4000:], proc.stderr[-4000:])
    return proc


def pkg_tool(name: str) -> str:
    """Path of a tool of the packaging virtualenv; AssertionError naming how to get it."""
    path = PKG_VENV / "bin" / name
    assert path.is_file(), "%s missing: run `make venv-pkg` (requirements-pkg.txt into %s)" % (path, PKG_VENV)
    return str(path)


def build(out: Path) -> Path:
    """Build the collection into ``out``; returns the tarball's Path."""
    run(["ansible-galaxy", "collection", "build", "--output-path", str(out), str(REPO_ROOT)], cwd=REPO_ROOT)
    built = sorted(out.glob("scapforge-remediation-*.tar.gz"))
    assert len(built) == 1, built
    return built[0]


def install(tarball: Path, where: Path) -> tuple[Path, dict]:
    """Install ``tarball`` into ``where/collections`` (no dependencies fetched: they come with
    the ``ansible`` package). Returns (the installed collection's root, an environment whose
    ANSIBLE_CONFIG makes that path the only collections path: the checkout's .collections
    would otherwise count as installed already)."""
    dest = where / "collections"
    cfg = where / "ansible.cfg"
    cfg.write_text((REPO_ROOT / "ansible.cfg").read_text().replace(
        "collections_path = ./.collections", "collections_path = %s" % dest))
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg))
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    run(["ansible-galaxy", "collection", "install", str(tarball), "-p", str(dest), "--no-deps"], cwd=where, env=env)
    root = dest / "ansible_collections" / "scapforge" / "remediation"
    assert (root / "MANIFEST.json").is_file()
    return root, env
