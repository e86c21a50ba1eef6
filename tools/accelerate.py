#!/usr/bin/env python3
"""The environment that runs ansible-playbook under Mitogen for Ansible (README "Speed").

Mitogen (requirements.txt) keeps one Python interpreter per host and runs every module in it,
so a module call stops paying Python's start and AnsiballZ's imports each time. It is turned on
with two settings: ANSIBLE_STRATEGY=mitogen_linear and ANSIBLE_STRATEGY_PLUGINS=<the strategy
plugins of the installed ansible_mitogen package>
(https://mitogen.networkgenomics.com/ansible_detailed.html, "Installation").

Usage: ``eval "$(.venv/bin/python tools/accelerate.py)"`` exports both in a shell; the bench
and the tests call :func:`mitogen_env`. Raises ImportError when mitogen is not installed.
"""

import os
import shlex
import sys

STRATEGY = "mitogen_linear"


def strategy_plugins() -> str:
    """Path of the installed ansible_mitogen's strategy plugins; raises ImportError without it."""
    import ansible_mitogen
    return os.path.join(os.path.dirname(ansible_mitogen.__file__), "plugins", "strategy")


def mitogen_env(env: dict | None = None) -> dict:
    """A copy of ``env`` (default os.environ) with Mitogen's strategy turned on."""
    return dict(os.environ if env is None else env, ANSIBLE_STRATEGY=STRATEGY,
                ANSIBLE_STRATEGY_PLUGINS=strategy_plugins())


def main() -> int:
    print("export ANSIBLE_STRATEGY=%s" % STRATEGY)
    print("export ANSIBLE_STRATEGY_PLUGINS=%s" % shlex.quote(strategy_plugins()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
