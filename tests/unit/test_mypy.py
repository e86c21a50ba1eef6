"""mypy over the controller plugins with the repository's .mypy.ini (issue 16 item 5): the
engine's packages (_run, _host) and errors.py are checked in full; the modules listed in
.mypy.ini's burn-down section are still exempt, and the list may only shrink."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_error_in_the_plugins():
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / ".mypy.ini"),
                           "-p", "ansible_collections.scapforge.remediation.plugins"],
                          cwd=ROOT / ".collections", capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_engines_new_packages_are_not_exempt():
    config = configparser.ConfigParser()
    config.read(ROOT / ".mypy.ini")
    exempt = [s for s in config.sections() if config[s].getboolean("ignore_errors", fallback=False)]
    for name in ("_run", "_host", "errors"):
        assert not any(".%s" % name in s for s in exempt), exempt
