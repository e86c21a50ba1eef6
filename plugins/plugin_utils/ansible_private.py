# Copyright: (c) 2026, scapforge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The private parts of ansible-core this collection relies on, in one place, checked at import.

The executor (plugin_utils/executor.py) runs task lists the way ansible-core's TaskExecutor
does, and the gate (plugin_utils/task_gate.py) keeps the parser's line/column origin: both need
names and behaviours that ansible-core does not promise to keep. Everything of that kind is
imported or probed here, so a core that changed them fails at import with one message naming
the ansible-core version and what is missing, instead of a task that misbehaves later.

Checked against ansible-core 2.19.14 (the lab suite), 2.20.10 (unit tests and a local run of
the executor, output identical to 2.19) and 2.21.5, which changed ``Task._resolve_conditional``
(no ``result_context``), ``AnsibleAction.result_contribution`` (gone), ``register`` (a dict of
projections) and ``changed_when``/``failed_when`` validation: 2.21 is refused here until the
executor is ported (issue 10).

Raises ImportError (with the message above) when a name or behaviour is missing.
"""

from __future__ import annotations

import inspect

from ansible.errors import AnsibleAction
from ansible.playbook.task import Task
from ansible.release import __version__ as ANSIBLE_CORE_VERSION

#: (major, minor) releases of ansible-core whose private parts match what we use.
SUPPORTED = ((2, 19), (2, 20))


def _refuse(missing: str) -> ImportError:
    return ImportError("scapforge.remediation needs ansible-core 2.19 or 2.20 (found %s): %s"
                       % (ANSIBLE_CORE_VERSION, missing))


try:
    from ansible._internal._datatag._tags import Origin
    from ansible._internal._datatag._utils import str_problematic_strip
    from ansible._internal._templating._engine import TemplateEngine
    from ansible._internal._templating._jinja_plugins import _DirectCall, _invoke_lookup
except ImportError as _ex:  # pragma: no cover - depends on the installed core
    raise _refuse("a private module moved: %s" % _ex) from _ex

if "result_context" not in inspect.signature(Task._resolve_conditional).parameters:  # pragma: no cover
    raise _refuse("Task._resolve_conditional has no result_context argument")
if not hasattr(AnsibleAction, "result_contribution"):  # pragma: no cover
    raise _refuse("AnsibleAction.result_contribution is gone")
if tuple(int(p) for p in ANSIBLE_CORE_VERSION.split(".")[:2]) not in SUPPORTED:  # pragma: no cover
    raise _refuse("this release is not one the executor was checked against")

__all__ = ["ANSIBLE_CORE_VERSION", "SUPPORTED", "Origin", "TemplateEngine", "_DirectCall", "_invoke_lookup",
           "str_problematic_strip"]
