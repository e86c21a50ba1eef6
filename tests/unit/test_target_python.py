"""Code that runs on targets (modules, module_utils) must run on RHEL 9's Python 3.9 (decision 10)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERMIN = os.path.join(os.path.dirname(sys.executable), "vermin")


def test_target_code_needs_at_most_python_3_9():
    paths = [os.path.join(ROOT, "plugins", "modules"), os.path.join(ROOT, "plugins", "module_utils")]
    proc = subprocess.run([VERMIN, "-t=3.9-", "--no-tips", "--violations", *paths],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_vermin_catches_newer_syntax(tmp_path):
    # the check above must be able to fail: a match statement needs Python 3.10
    bad = tmp_path / "bad.py"
    bad.write_text("match 1:\n    case 1:\n        pass\n")
    proc = subprocess.run([VERMIN, "-t=3.9-", "--no-tips", "--violations", str(bad)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0
