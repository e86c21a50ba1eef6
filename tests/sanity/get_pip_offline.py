"""Stand-in for ansible-test's pip bootstrap script (get-pip.py from ci-files.testing.ansible.com,
which this network cannot reach): pip from the interpreter's own ensurepip, then the packages
ansible-test asked for (pip==<its version>, ...) from the package index pip is configured with.

tests/unit/test_sanity.py puts it where ansible-test caches the real one
(~/.ansible/test/cache/get_pip_<version>.py, under the test's own HOME); with network access
ansible-test would download the original instead.
"""

import subprocess
import sys

# get-pip.py options that pip install does not know
ARGS = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install"] + ARGS)
