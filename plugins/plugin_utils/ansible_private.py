# Copyright: (c) 2026, scapforge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The private parts of ansible-core this collection relies on, in one place, checked at import.

The executor (plugin_utils/executor.py) runs task lists the way ansible-core's TaskExecutor
does, and the gate (plugin_utils/task_gate.py) keeps the parser's line/column origin: both need
names and behaviours that ansible-core does not promise to keep. Everything of that kind is
imported or probed here, behind small functions that pick the implementation of the running
core, so a core that changed them fails at import with one message naming the ansible-core
version and the supported range, instead of a task that misbehaves later.

Checked with ``make test-matrix`` (noxfile.py: the unit tests and the executor's lab test on
each core) against ansible-core 2.19.14, 2.20.10 and 2.21.5. What differs:

- 2.19 and 2.20: ``Task._resolve_conditional(..., result_context=)`` names the false
  condition; an ``AnsibleAction`` carries its result in ``result_contribution``; an action's
  variables come back in the result's ``ansible_facts``; ``Task.register`` is a name.
- 2.21: the false condition comes from ``Task._resolve_conditional_with_item``; an
  ``AnsibleAction`` turns itself into a task result (``as_task_result``); actions such as
  set_fact register their variables, by precedence layer, in the *current task's*
  ``TaskContext`` (an action run by the executor inside our action plugin would otherwise
  write them into the calling task's context, to be applied to the host after it); and
  ``Task.register`` is a dict of projections (a plain name maps to the whole result).

Raises ImportError (with the message above) on another core or when a name is missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing as t

from ansible import constants as C
from ansible.errors import AnsibleAction
from ansible.playbook.task import Task
from ansible.release import __version__ as ANSIBLE_CORE_VERSION

#: (major, minor) releases of ansible-core whose private parts match what we use.
SUPPORTED = ((2, 19), (2, 20), (2, 21))
#: the same as a pip/requires_ansible specifier (requirements.txt, meta/runtime.yml).
SUPPORTED_RANGE = ">=2.19,<2.22"
#: the running core's (major, minor).
CORE = tuple(int(p) for p in ANSIBLE_CORE_VERSION.split(".")[:2])


def _refuse(missing: str) -> ImportError:
    return ImportError("scapforge.remediation supports ansible-core 2.19, 2.20 and 2.21 (%s); found %s: %s"
                       % (SUPPORTED_RANGE, ANSIBLE_CORE_VERSION, missing))


if CORE not in SUPPORTED:  # pragma: no cover - depends on the installed core
    raise _refuse("this release is not one the executor was checked against")

try:
    from ansible._internal._datatag._tags import Origin
    from ansible._internal._datatag._utils import str_problematic_strip
    from ansible._internal._templating._engine import TemplateEngine
    from ansible._internal._templating._jinja_plugins import _DirectCall, _invoke_lookup
    if CORE >= (2, 21):
        from ansible._internal._task import (POLYMORPHIC_RESULT_EXPRESSION, PendingChanges, TaskContext,
                                             UnifiedTaskResult, VariableLayer)
except ImportError as _ex:  # pragma: no cover - depends on the installed core
    raise _refuse("a private module moved: %s" % _ex) from _ex

#: True when actions register variables in a TaskContext (2.21) rather than in their result.
TASK_CONTEXT = CORE >= (2, 21)

if TASK_CONTEXT:  # pragma: no cover - depends on the installed core
    if not hasattr(Task, "_resolve_conditional_with_item"):
        raise _refuse("Task._resolve_conditional_with_item is gone")
    if not hasattr(AnsibleAction, "as_task_result"):
        raise _refuse("AnsibleAction.as_task_result is gone")
else:  # pragma: no cover - depends on the installed core
    import inspect
    if "result_context" not in inspect.signature(Task._resolve_conditional).parameters:
        raise _refuse("Task._resolve_conditional has no result_context argument")
    if not hasattr(AnsibleAction, "result_contribution"):
        raise _refuse("AnsibleAction.result_contribution is gone")


def when_result(task: Task, variables: dict) -> tuple[bool, t.Any]:
    """Evaluate ``task.when`` as TaskExecutor does: (True, None) when every condition holds,
    else (False, the first condition that was false). Raises AnsibleError as the core does
    (an undefined variable, a bad expression)."""
    if TASK_CONTEXT:
        return task._resolve_conditional_with_item(task.when, variables)
    context: dict = {}
    if task._resolve_conditional(task.when, variables, result_context=context):
        return True, None
    return False, context.get("false_condition")


def conditional(task: Task, conditions: list, variables: dict) -> bool:
    """True when every expression of ``conditions`` (a post-validated task's changed_when or
    failed_when: a list, or on 2.21 before post_validate a single expression or bool) holds with
    ``variables``; raises AnsibleError as the core does."""
    return task._resolve_conditional(conditions if isinstance(conditions, list) else [conditions], variables)


def action_exception_result(ex: AnsibleAction) -> dict:
    """The task result an action's flow-control exception stands for (AnsibleActionFail:
    failed with its message; AnsibleActionSkip: skipped; _ActionDone: its result)."""
    if TASK_CONTEXT:
        return ex.as_task_result(UnifiedTaskResult.from_action_result_dict()).as_result_dict()
    result = dict(ex.result_contribution)
    result.setdefault("msg", ex.message)
    return result


def register_names(task: Task) -> list[str]:
    """The variable names ``task.register`` sets to the whole task result ([] without register).

    The gate lets only a plain variable name through (``register: out``); 2.21 stores it as
    ``{out: <the task's result>}``. Raises ValueError for a 2.21 register projection of a
    part of the result, which the executor does not evaluate."""
    register = task.register
    if not register:
        return []
    if isinstance(register, str):
        return [register]
    names = []
    for name, expression in register.items():
        if str(expression) != str(POLYMORPHIC_RESULT_EXPRESSION):
            raise ValueError("register projection %s: %s is not supported" % (name, expression))
        names.append(name)
    return names


@dataclasses.dataclass
class VariableChanges:
    """Variables one action run gives the host, in the order TaskExecutor applies them.

    facts: facts for ``ansible_facts`` (and, with INJECT_FACTS_AS_VARS, ``ansible_*`` vars);
    variables: plain variables (set_fact, include_vars), applied after the facts.
    """

    facts: dict = dataclasses.field(default_factory=dict)
    variables: dict = dataclasses.field(default_factory=dict)


def changes_from_result(action: str, result: dict) -> VariableChanges:
    """The variables a result's ``ansible_facts`` gives (2.19/2.20, and a result that did not
    come from an action run, e.g. package facts served from a cache): set_fact and
    include_vars give plain variables (``C._ACTION_WITH_CLEAN_FACTS``), other actions facts."""
    facts = result.get("ansible_facts")
    if not isinstance(facts, dict) or not facts:
        return VariableChanges()
    if action in C._ACTION_WITH_CLEAN_FACTS:
        return VariableChanges(variables=dict(facts))
    return VariableChanges(facts=dict(facts))


@contextlib.contextmanager
def _task_context(task: Task, task_vars: dict, host_name: str) -> t.Iterator[t.Any]:
    if not TASK_CONTEXT:
        yield None
        return
    context = TaskContext.create(task, task_vars, host_name)
    context.pending_changes = PendingChanges()
    with context:
        yield context.pending_changes


def run_action(handler: t.Any, task: Task, task_vars: dict, host_name: str) -> tuple[dict, VariableChanges]:
    """Run ``handler.run(task_vars=task_vars)`` for ``task`` as TaskExecutor does and return
    (its result dict, the variables it gives the host).

    On 2.21 the handler runs in a TaskContext of its own, so what it registers stays with this
    task (not the calling action's task) and is returned here, layer by layer as TaskExecutor
    applies them (cacheable facts, include_vars, set_fact's facts, registered variables).
    Exceptions of the handler propagate (the core applies none of its variables then either).
    """
    with _task_context(task, task_vars, host_name) as pending:
        result = handler.run(task_vars=task_vars)
    if pending is None:
        return result, changes_from_result(task.action, result)
    layers = pending.register_host_variables
    facts = layers.get(VariableLayer.CACHEABLE_FACT) if VariableLayer.CACHEABLE_FACT in layers \
        else result.get("ansible_facts")
    variables: dict = {}
    for layer in (VariableLayer.INCLUDE_VARS, VariableLayer.EPHEMERAL_FACT, VariableLayer.REGISTER_VARS):
        variables.update(layers.get(layer) or {})
    return result, VariableChanges(facts=dict(facts or {}), variables=variables)


__all__ = ["ANSIBLE_CORE_VERSION", "CORE", "SUPPORTED", "SUPPORTED_RANGE", "TASK_CONTEXT", "Origin", "TemplateEngine",
           "VariableChanges", "_DirectCall", "_invoke_lookup", "action_exception_result", "changes_from_result",
           "conditional", "register_names", "run_action", "str_problematic_strip", "when_result"]
