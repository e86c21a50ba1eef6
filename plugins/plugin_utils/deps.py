# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller-side third-party libraries: which failed to import, and the error that
names them.

The controller plugins use openai, tinydb, filelock, lxml, jsonschema, junitparser and
compliance-trestle (requirements.txt; meta/ee-requirements.txt for an execution
environment). Each plugin_utils
module imports its library inside ``try``/``except ImportError`` and calls :func:`missing`
there, so that the module, and every plugin that imports it, still imports without the
library: ``ansible-test sanity --test import`` imports every controller plugin with only
ansible-core's own requirements installed (the guard is the one of community.crypto and
kubernetes.core). Each action and lookup plugin calls :func:`require` first in ``run``, with
the libraries its imports need; tests/unit/test_missing_libraries.py checks those lists.
"""

from __future__ import annotations

import sys

from ansible.errors import AnsibleError

#: {library's distribution name: the ImportError it raised}, filled as modules import.
MISSING: dict[str, ImportError] = {}


def missing(library: str) -> None:
    """Record that ``library`` (its name on the package index) failed to import; call it from
    the ``except ImportError`` block (it keeps the exception being handled)."""
    MISSING.setdefault(library, sys.exc_info()[1])


def require(*libraries: str, error: type[AnsibleError] = AnsibleError) -> None:
    """Raise ``error`` (AnsibleError or a subclass: AnsibleActionFail, AnsibleLookupError)
    naming those of ``libraries`` that failed to import, in the words of
    ``missing_required_lib`` (ansible.module_utils.basic) but for the controller; chained to
    the first ImportError. Returns None when all imported."""
    absent = sorted(name for name in libraries if name in MISSING)
    if absent:
        raise error("Failed to import the required Python librar%s (%s) on the controller's Python %s. "
                    "Install the collection's requirements.txt into it (pip install -r requirements.txt) "
                    "or run in an execution environment built with meta/execution-environment.yml."
                    % ("ies" if len(absent) > 1 else "y", ", ".join(absent), sys.executable)) from MISSING[absent[0]]
