"""`make test-matrix`: the unit tests and two lab tests on each supported ansible-core.

One session per core, named ``core-2.19``, ``core-2.20`` and ``core-2.21``; each installs
requirements-test.txt with the latest patch release of its core on PyPI (and the ``ansible``
package of that core: community.general and ansible.posix), then runs ``tests/unit`` and
``tests/integration/test_executor.py`` (vendor fixes and model-written tasks through the
executor, locally and over SSH) and ``tests/integration/test_remediate.py`` (the main job end
to end: scan, fixes, re-evaluation, rollback, a second run) and
``tests/integration/test_accelerated.py`` (the main job under Mitogen) on a lab host
(``SCAPFORGE_LAB_HOST``, default the first running host, else lab1). About 4-5 minutes a core. The supported range is plugin_utils/ansible_private.py's.

Controllers: 2.19 runs on the Python 3.11 of `make venv` (``SCAPFORGE_MATRIX_PYTHON311``, default
``python3``); 2.20 and 2.21 need Python 3.12+, and run on Debian trixie's
python3.13 from lab/matrix_python.py (``SCAPFORGE_MATRIX_PYTHON313`` overrides it).
"""

from __future__ import annotations

import os
import shutil
import sys

import nox

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lab"))
import matrix_python  # noqa: E402

nox.options.default_venv_backend = "virtualenv"  # seeds pip itself (Debian's ensurepip looks in /usr/share)
nox.options.error_on_missing_interpreters = True
nox.options.download_python = "never"

#: core -> (pip requirement of ansible-core, of the ansible package bringing its collections, controller Python)
CORES = {
    "2.19": ("ansible-core>=2.19,<2.20", "ansible>=12,<13", "py311"),
    "2.20": ("ansible-core>=2.20,<2.21", "ansible>=13,<14", "py313"),
    "2.21": ("ansible-core>=2.21,<2.22", "ansible>=14,<15", "py313"),
}


def _python(kind: str) -> str:
    """The controller interpreter of a session (the trixie one is built by `make test-matrix`,
    or ``python3 lab/matrix_python.py``; nox reports it missing otherwise)."""
    if kind == "py311":
        return os.environ.get("SCAPFORGE_MATRIX_PYTHON311") or shutil.which("python3") or "python3"
    return os.environ.get("SCAPFORGE_MATRIX_PYTHON313") or str(matrix_python.interpreter())


#: the core `make test` runs (requirements.txt resolves to it on Python 3.11).
DEFAULT_CORE = "2.19"


def _session(core: str):
    core_req, ansible_req, kind = CORES[core]

    @nox.session(name="core-" + core, python=_python(kind), reuse_venv=True)
    def run(session: nox.Session) -> None:
        session.install("-q", "-r", "requirements-test.txt", core_req, ansible_req)
        version = session.run("python", "-c", "from ansible.release import __version__; print(__version__)",
                              silent=True).strip()
        session.log("ansible-core %s on %s" % (version, session.python))
        if not version.startswith(core + "."):
            session.error("ansible-core %s installed for the %s session" % (version, core))
        pytest = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        # ansible-test sanity keeps an ignore file per core (tests/sanity/ignore-2.19.txt) and
        # bootstraps pip in its own per-core virtualenvs: it runs on the default core (make test)
        session.run(*pytest, "tests/unit", *([] if core == DEFAULT_CORE else ["--deselect", "tests/unit/test_sanity.py"]))
        session.run(*pytest, "tests/integration/test_executor.py", "tests/integration/test_remediate.py",
                    "tests/integration/test_accelerated.py")

    return run


for _core in CORES:
    globals()["core_" + _core.replace(".", "_")] = _session(_core)
