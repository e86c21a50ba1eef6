"""``ansible-test sanity`` on the collection as built and installed (an
``ansible_collections/scapforge/remediation`` path), what users' CI runs (issue 10 item 7).

Offline, with ``--local --python 3.11`` (no containers). ansible-test installs each test's
own requirements into a virtualenv; it bootstraps pip there with a script from
ci-files.testing.ansible.com, which this network cannot reach, so tests/sanity/get_pip_offline.py
stands in for it (pip from ensurepip, the requirements from the package index). Those
virtualenvs are kept under ``$SCAPFORGE_ANSIBLE_TEST_HOME`` (default
/var/tmp/scapforge-ansible-test, used as ansible-test's HOME): the first run builds them
(about two minutes), later runs take about a minute (pylint most of it).

Every sanity test ansible-test lists for a collection runs, none skipped; tests/sanity/ignore-2.19.txt
lists the accepted exceptions with their reasons. What this cannot cover here: ``compile`` and
``import`` on Python versions other than 3.11 (only 3.11 is installed, and ``--docker`` needs a
Docker daemon and an image from quay.io, neither available; tests/unit/test_target_python.py
checks the target side's 3.9 syntax with vermin); four tests find no files of theirs
(NO_TARGETS; pwsh and shellcheck, which pslint and shellcheck would need for such files, are
not installed).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import ansible_test

import collection_build
from collection_build import REPO_ROOT, run

#: every sanity test of ansible-core 2.19 for a collection (``ansible-test sanity --list-tests``).
EXPECTED = {
    "action-plugin-docs", "ansible-doc", "changelog", "compile", "empty-init", "ignores", "import", "line-endings",
    "no-assert", "no-get-exception", "no-illegal-filenames", "no-smart-quotes", "pep8", "pslint", "pylint",
    "replace-urlopen", "runtime-metadata", "shebang", "shellcheck", "symlinks", "use-argspec-type-path",
    "use-compat-six", "validate-modules", "yamllint",
}
#: tests that run and find nothing to check ("No tests applicable."): changelog (no
#: changelogs/config.yaml nor fragments), empty-init (no __init__.py under modules or module_utils),
#: pslint (no PowerShell), shellcheck (no shell scripts).
NO_TARGETS = {"changelog", "empty-init", "pslint", "shellcheck"}
HOME = Path(os.environ.get("SCAPFORGE_ANSIBLE_TEST_HOME", "/var/tmp/scapforge-ansible-test"))


def _pip_version() -> str:
    """The pip version ansible-test bootstraps (its python_requirements.default_packages)."""
    source = (Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
    return re.search(r"pip='([0-9.]+)'", source).group(1)


def test_ansible_test_sanity_passes_offline(tmp_path):
    root, env = collection_build.install(collection_build.build(tmp_path), tmp_path)
    cache = HOME / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    shim = cache / ("get_pip_%s.py" % _pip_version().replace(".", "_"))
    if not shim.is_file():
        shutil.copyfile(REPO_ROOT / "tests" / "sanity" / "get_pip_offline.py", shim)
    listed = run(["ansible-test", "sanity", "--list-tests"], cwd=root, env=env).stdout.split()
    assert set(listed) == EXPECTED, "ansible-test's list changed: %s" % sorted(set(listed) ^ EXPECTED)
    started = time.monotonic()
    proc = run(["ansible-test", "sanity", "--local", "--python", "3.11", "--color", "no", "-v"],
               cwd=root, env=dict(env, HOME=str(HOME)), timeout=900)
    out = proc.stdout
    ran = re.findall(r'^Running sanity test "([a-z0-9-]+)"(?: on Python [0-9.]+)?\n(No tests applicable\.)?', out, re.M)
    assert {name for name, _none in ran} == EXPECTED
    assert {name for name, none in ran if none} == NO_TARGETS
    print("ansible-test sanity: %d tests passed (%d with nothing to check: %s) in %.0f s"
          % (len(ran), len(NO_TARGETS), ", ".join(sorted(NO_TARGETS)), time.monotonic() - started))
