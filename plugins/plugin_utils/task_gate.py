# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Static gate for Ansible task lists before they run on a host (controller only).

The gate answers one question without touching any host: may this task list be
executed by :class:`~.executor.TaskListExecutor`?  It checks, in order:

* structure: a list of mappings (tasks or ``block`` mappings);
* keywords: only the task keywords the SCAP content uses (``SUPPORTED_TASK_KEYWORDS``);
  any other Ansible keyword is refused by name;
* module: resolved through Ansible's plugin routing (short names and redirects such as
  ``ansible.builtin.sysctl`` -> ``ansible.posix.sysctl`` resolve as Ansible resolves them);
  an unknown module is refused, naming a module that exists when one can be guessed;
* module arguments: names (and literal ``choices``) checked against the module's
  documented options, read with Ansible's own doc loader;
* for untrusted task lists (LLM output, anything a target returned): no Jinja delimiters
  anywhere, conditionals and expression arguments (``assert: that``, ``debug: var``) limited
  to a small safe expression language, no modules that read controller files, no
  ``ansible_*`` variables (they steer interpreter, connection and become), then the policy
  of :mod:`.untrusted_policy`: the module allowlist (:data:`DEFAULT_UNTRUSTED_MODULES`,
  extended per skill through :class:`GatePolicy`) and the banned patterns of
  :func:`task_hazards` (shell lines read with :func:`split_shell`, from :mod:`.shell_split`).

This module is the gate's entry point: callers use :func:`parse_task_text` and
:func:`validate`, and reach the policy names above through it.  Trusted (vendor) task
lists get neither the allowlist nor the banned patterns (see :mod:`.untrusted_policy`).

Everything here is pure logic on the controller; nothing is executed.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import re
import typing as t

from ansible.errors import AnsibleError
from ansible.parsing.mod_args import ModuleArgsParser
from ansible.playbook.task import Task
from ansible.plugins.loader import fragment_loader, lookup_loader

from ansible_collections.scapforge.remediation.plugins.plugin_utils import ansible_private
from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy import refusals as R
from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy.routing import ModuleRef, resolve_module
from ansible_collections.scapforge.remediation.plugins.plugin_utils.shell_split import (
    ShellCommand, ShellParseError, split_shell,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.untrusted_policy import (
    DEFAULT_UNTRUSTED_MODULES, GatePolicy, hazards, task_hazards,
)

Refusal = R.Refusal

# The gate's API; the shell splitting and the untrusted-task policy are re-exported so that
# callers (executor, loop, agent_loop, the tests) import one module.
__all__ = [
    'DENIED_MODULES', 'DEFAULT_UNTRUSTED_MODULES', 'EXPRESSION_ARGS', 'SUPPORTED_BLOCK_KEYWORDS',
    'SUPPORTED_LOOP_LOOKUPS', 'SUPPORTED_TASK_KEYWORDS', 'UNTRUSTED_DENIED_MODULES', 'GatePolicy', 'ModuleRef',
    'Refusal', 'ShellCommand', 'ShellParseError', 'TaskParseError', 'check_safe_expression', 'contains_jinja',
    'expression_problems', 'module_options', 'parse_task_text', 'refusals', 'resolve_module', 'split_shell',
    'split_task', 'suggest_module', 'task_hazards', 'validate',
]

# Task keywords the executor implements (DESIGN decision 1). Everything else is refused.
SUPPORTED_TASK_KEYWORDS = frozenset({
    'name', 'when', 'register', 'loop', 'failed_when', 'changed_when', 'check_mode',
    'ignore_errors', 'tags', 'vars', 'become', 'args', 'action',
})
# Keywords allowed on a ``block`` mapping; when/check_mode/ignore_errors/vars apply to children.
SUPPORTED_BLOCK_KEYWORDS = frozenset({
    'name', 'block', 'when', 'tags', 'vars', 'become', 'check_mode', 'ignore_errors',
})
# ``with_<lookup>`` loops allowed: lookups that only reshape data (no controller files, no commands).
SUPPORTED_LOOP_LOOKUPS = frozenset({
    'items', 'list', 'together', 'dict', 'subelements', 'indexed_items', 'flattened', 'nested',
})
# Modules/actions never run by the executor, whoever wrote the task: they act on the play
# or the controller rather than on the host, or cut the connection.
DENIED_MODULES = frozenset({
    'ansible.builtin.include_tasks', 'ansible.builtin.import_tasks', 'ansible.builtin.include_role',
    'ansible.builtin.import_role', 'ansible.builtin.include_vars', 'ansible.builtin.include',
    'ansible.builtin.import_playbook', 'ansible.builtin.meta', 'ansible.builtin.add_host',
    'ansible.builtin.group_by', 'ansible.builtin.pause', 'ansible.builtin.reboot',
    'ansible.builtin.wait_for_connection', 'ansible.builtin.script', 'ansible.builtin.fetch',
    'ansible.posix.synchronize',
})
# Extra refusals for untrusted tasks: these read files or templates on the controller.
UNTRUSTED_DENIED_MODULES = frozenset({'ansible.builtin.template', 'ansible.builtin.raw'})
_UNTRUSTED_SRC_MODULES = frozenset({'ansible.builtin.copy', 'ansible.builtin.unarchive'})
# Internal argument names ModuleArgsParser itself produces; any other ``_`` name is refused
# (``_ansible_check_mode`` in the arguments once ran a "check" for real).
_PARSER_INTERNAL_ARGS = frozenset({'_raw_params', '_uses_shell', '_variable_params'})
# Actions whose arguments are free-form variable names, not module options.
_FREE_ARG_ACTIONS = frozenset({'ansible.builtin.set_fact'})
# Collections searched for a module with the same last name component when a name is unknown.
_SUGGEST_COLLECTIONS = ('ansible.builtin', 'ansible.posix', 'community.general')

_JINJA_MARKERS = ('{{', '{%', '{#')
_VAR_NAME_RE = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')

_SAFE_TESTS = frozenset({
    'defined', 'undefined', 'none', 'boolean', 'true', 'false', 'number', 'integer', 'float',
    'string', 'mapping', 'sequence', 'iterable', 'in', 'eq', 'ne', 'lt', 'le', 'gt', 'ge',
    'equalto', 'lessthan', 'greaterthan', 'odd', 'even', 'divisibleby', 'lower', 'upper',
    'success', 'succeeded', 'failed', 'failure', 'changed', 'change', 'skipped', 'skip',
    'match', 'search', 'regex', 'contains', 'any', 'all', 'truthy', 'falsy', 'version',
    'version_compare', 'subset', 'superset',
})
_SAFE_FILTERS = frozenset({
    'length', 'count', 'int', 'float', 'bool', 'string', 'lower', 'upper', 'trim', 'first',
    'last', 'list', 'default', 'd', 'unique', 'sort', 'join', 'abs', 'min', 'max',
    'regex_search', 'split',
})


class TaskParseError(ScapforgeError, ValueError):
    """Raised by :func:`parse_task_text` when text is not a YAML/JSON task list; str() is the parser's message."""

    kind = 'task_parse'


def parse_task_text(text: str, trusted: bool = False, source: str = '<task text>') -> list:
    """Parse YAML (or JSON) text into a task list with Ansible's own DataLoader.

    ``trusted=True`` tags the text TrustedAsTemplate (vendor content from a datastream the
    controller trusts), so its ``{{ }}`` render as in a playbook; ``False`` leaves every
    string literal data.  Returns the list (possibly of blocks).  Raises TaskParseError
    whose message is the parser's (it names line and column) or says the top level is not
    a list.  Never executes anything.
    """
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import trust_as_template

    if not isinstance(text, str):
        raise TaskParseError(f'task text must be a string, got {type(text).__name__}')
    data = trust_as_template(text) if trusted else text
    data = ansible_private.Origin(description=source).tag(data)  # gives parser errors a line/column
    try:
        tasks = DataLoader().load(data)
    except AnsibleError as ex:
        raise TaskParseError(_error_text(ex)) from None
    if tasks is None:
        raise TaskParseError('task text is empty')
    if isinstance(tasks, dict):
        tasks = [tasks]
    if not isinstance(tasks, list):
        raise TaskParseError(f'a task list must be a YAML list of mappings, got {type(tasks).__name__}')
    return tasks


def _error_text(ex: BaseException) -> str:
    """Return an Ansible error's message with its causes, without the source excerpt noise."""
    parts = []
    seen = set()
    cur: BaseException | None = ex
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        msg = getattr(cur, 'message', None) or str(cur)
        msg = str(msg).strip()
        if msg and msg not in parts:
            parts.append(msg)
        cur = cur.__cause__
    text = ' '.join(p if p.endswith(('.', ':')) else p + '.' for p in parts)
    origin = getattr(ex, 'obj', None)
    loc = _origin_text(origin)
    if loc and loc not in text:
        text = f'{text} Origin: {loc}'
    return text


def _origin_text(obj: t.Any) -> str | None:
    origin = ansible_private.Origin.get_tag(obj) if obj is not None else None
    return str(origin) if origin else None


def suggest_module(name: str) -> str | None:
    """Guess an existing module for an unknown name, e.g. ``ansible.builtin.sysctl_setting`` -> ``ansible.posix.sysctl``.

    Tries the last name component, then that component cut at each ``_`` from the right,
    in ansible.builtin, ansible.posix and community.general.  Returns the canonical FQCN or None.
    """
    last = str(name).rsplit('.', 1)[-1]
    candidates = [last]
    parts = last.split('_')
    candidates += ['_'.join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
    for cand in candidates:
        for coll in _SUGGEST_COLLECTIONS:
            ref = resolve_module(f'{coll}.{cand}')
            if ref is not None:
                return ref.fqcn
    return None


def _unknown_module(name: str) -> R.Refusal:
    """The refusal of a module name that does not resolve, with :func:`suggest_module`'s guess."""
    guess = suggest_module(name)
    hint = f'; did you mean {guess}?' if guess else ''
    return R.Refusal(R.UNKNOWN_MODULE, f'no module named {name!r} in this Ansible installation{hint}',
                     subject=(str(name), guess or ''))


@functools.lru_cache(maxsize=256)
def module_options(fqcn: str) -> dict | None:
    """Return ``{option_or_alias: choices_or_None}`` from the module's DOCUMENTATION (fragments merged).

    Returns None when the documentation cannot be read cheaply (then arguments are left to the
    module's own check at run time).
    """
    from ansible.utils.plugin_docs import get_docstring

    ref = resolve_module(fqcn)
    if ref is None or not ref.path or not ref.path.endswith('.py'):
        return None
    try:
        doc, _plain, _ret, _meta = get_docstring(ref.path, fragment_loader, is_module=True,
                                                 collection_name=ref.collection)
    except Exception:  # unreadable docs: fall back to the module's own validation
        return None
    if not doc or not isinstance(doc.get('options'), dict):
        return None
    names: dict = {}
    for opt, spec in doc['options'].items():
        spec = spec or {}
        choices = spec.get('choices')
        if isinstance(choices, dict):
            choices = list(choices)
        if spec.get('type', 'str') != 'str' or not isinstance(choices, list):
            choices = None
        for n in [opt] + list(spec.get('aliases') or []):
            names[n] = tuple(str(c) for c in choices) if choices else None
    return names


def contains_jinja(value: t.Any) -> str | None:
    """Return the first string (key or value, recursively) that holds ``{{``, ``{%`` or ``{#``; else None."""
    if isinstance(value, str):
        return value if any(m in value for m in _JINJA_MARKERS) else None
    if isinstance(value, dict):
        for k, v in value.items():
            hit = contains_jinja(k) or contains_jinja(v)
            if hit:
                return hit
    elif isinstance(value, (list, tuple)):
        for v in value:
            hit = contains_jinja(v)
            if hit:
                return hit
    return None


def check_safe_expression(expr: t.Any) -> str | None:
    """Check that an untrusted conditional is a plain expression safe to evaluate on the controller.

    Allowed: booleans; names, attribute and item access (no ``_`` names), literals,
    comparisons, ``and``/``or``/``not``, ``in``, ``+ - ~``, if-else, tests and filters from
    small allowlists.  Refused: any call (``lookup(...)``, methods), other filters/tests.
    Returns None when safe, else a reason string.
    """
    from jinja2 import Environment, nodes
    from jinja2.exceptions import TemplateSyntaxError

    if isinstance(expr, bool):
        return None
    if not isinstance(expr, str):
        return f'conditional must be a string or boolean, got {type(expr).__name__}'
    if any(m in expr for m in _JINJA_MARKERS):
        return f'conditional {expr!r} contains Jinja delimiters'
    try:
        tree = Environment().parse('{{ (' + expr + ') }}')
    except TemplateSyntaxError as ex:
        return f'conditional {expr!r} is not a valid expression: {ex.message}'

    allowed = (nodes.Template, nodes.Output, nodes.Name, nodes.Const, nodes.List, nodes.Tuple,
               nodes.Dict, nodes.Pair, nodes.Getattr, nodes.Getitem, nodes.Slice, nodes.Compare,
               nodes.Operand, nodes.And, nodes.Or, nodes.Not, nodes.Neg, nodes.Pos, nodes.Add,
               nodes.Sub, nodes.Concat, nodes.CondExpr, nodes.Test, nodes.Filter, nodes.Keyword)
    for node in tree.find_all(nodes.Node):
        if not isinstance(node, allowed):
            return f'conditional {expr!r} uses {type(node).__name__}, not allowed in untrusted tasks'
        if isinstance(node, nodes.Name) and node.name.startswith('_'):
            return f'conditional {expr!r} names {node.name!r}'
        if isinstance(node, nodes.Getattr) and node.attr.startswith('_'):
            return f'conditional {expr!r} reads attribute {node.attr!r}'
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) \
                and isinstance(node.arg.value, str) and node.arg.value.startswith('_'):
            return f'conditional {expr!r} reads item {node.arg.value!r}'
        if isinstance(node, nodes.Test) and node.name not in _SAFE_TESTS:
            return f'conditional {expr!r} uses test {node.name!r}, not allowed in untrusted tasks'
        if isinstance(node, nodes.Filter) and node.name not in _SAFE_FILTERS:
            return f'conditional {expr!r} uses filter {node.name!r}, not allowed in untrusted tasks'
        if isinstance(node, (nodes.Test, nodes.Filter)) and (node.dyn_args or node.dyn_kwargs):
            return f'conditional {expr!r} uses *args/**kwargs'
    return None


def split_task(ds: dict) -> tuple[str | None, dict | None, str | None]:
    """Find a task mapping's module key and parse its arguments with ModuleArgsParser.

    Returns (module_name_as_written, args, problem): problem is None on success.  Only
    the key naming the module is consulted for routing; keywords are checked by the caller.
    """
    name, args, refusal = _split_task(ds)
    return name, args, refusal.problem if refusal else None


def _split_task(ds: dict) -> tuple[str | None, dict | None, R.Refusal | None]:
    """:func:`split_task`, its problem a refusal (code ``unknown_module`` or ``bad_task``)."""
    candidates = [k for k in ds if isinstance(k, str) and k not in Task.fattributes
                  and k not in ('args', 'action', 'local_action') and not k.startswith('with_')]
    if 'action' in ds:
        candidates.append('action')
    if not candidates:
        return None, None, R.Refusal(R.BAD_TASK, 'no module given (a task needs exactly one module key)')
    if len(candidates) > 1:
        return None, None, R.Refusal(R.BAD_TASK,
                                     f'more than one module or unknown keyword: {", ".join(map(str, candidates))}')
    key = candidates[0]
    if key != 'action' and resolve_module(key) is None:
        return key, None, _unknown_module(key)
    if key == 'action' and ds['action'] == '':  # ModuleArgsParser (2.19) fails on it with IndexError
        return key, None, R.Refusal(R.BAD_TASK, 'action names no module')
    try:
        action, args, _delegate = ModuleArgsParser(task_ds=copy.copy(ds)).parse()
    except AnsibleError as ex:
        return key, None, R.Refusal(R.BAD_TASK, _error_text(ex))
    return str(action), dict(args or {}), None


def validate(tasks: t.Any, trusted: bool = False, policy: GatePolicy | None = None) -> list[str]:
    """Return the reasons this task list may not run; an empty list means it passes the gate.

    ``tasks``: a list of task/block mappings (from :func:`parse_task_text` or yaml.safe_load).
    ``trusted``: False for anything an LLM wrote or a target returned (stricter rules: no
    Jinja, safe conditionals and expression arguments, no controller-file modules, the module
    allowlist and the banned patterns of :func:`task_hazards`).  ``policy``: who connects and
    what the skill adds to the allowlist; None means ``GatePolicy()`` (connecting user
    unknown, so the checks that need its name are skipped).  Each reason names the task
    (``task 2 'Set banner'``) and the keyword, module, argument or action at fault.  Pure:
    runs nothing, and never raises for odd input (a task the gate cannot read is refused).
    """
    return [r.message for r in refusals(tasks, trusted, policy)]


def refusals(tasks: t.Any, trusted: bool = False, policy: GatePolicy | None = None) -> list[Refusal]:
    """:func:`validate`'s reasons as :class:`~._policy.refusals.Refusal` objects: each with its
    code (``not_allowlisted``, ``jinja_untrusted``, ``touches_access``...), the task's label and
    the problem in words; ``message`` is validate's string."""
    problems: list[Refusal] = []
    if not isinstance(tasks, list):
        return [R.Refusal(R.BAD_STRUCTURE, f'a task list must be a list of mappings, got {type(tasks).__name__}')]
    if not tasks:
        return [R.Refusal(R.BAD_STRUCTURE, 'the task list is empty')]
    _validate_list(tasks, trusted, policy or GatePolicy(), problems, prefix='')
    return problems


def _task_label(prefix: str, index: int, ds: t.Any) -> str:
    name = ds.get('name') if isinstance(ds, dict) else None
    label = f'task {prefix}{index + 1}'
    return f'{label} {str(name)!r}' if name else label


def _validate_list(tasks: list, trusted: bool, policy: GatePolicy, problems: list[Refusal], prefix: str) -> None:
    for i, ds in enumerate(tasks):
        label = _task_label(prefix, i, ds)
        try:
            _validate_entry(ds, trusted, policy, problems, label, prefix=f'{prefix}{i + 1}.')
        except Exception as ex:  # a gate bug must refuse the task, never crash the loop
            problems.append(R.Refusal(
                R.GATE_ERROR, f'gate internal error, the task cannot be checked ({type(ex).__name__}: {ex})', label))


def _validate_entry(ds: t.Any, trusted: bool, policy: GatePolicy, problems: list[Refusal], label: str,
                    prefix: str) -> None:
    if not isinstance(ds, dict):
        problems.append(R.Refusal(R.BAD_STRUCTURE, f'must be a mapping, got {type(ds).__name__}', label))
        return
    if not trusted:
        hit = contains_jinja(ds)
        if hit is not None:
            problems.append(R.Refusal(
                R.JINJA_UNTRUSTED, f'Jinja templating is not allowed in untrusted tasks: {str(hit)[:120]!r}', label))
            return
        _validate_untrusted_vars(ds, problems, label)
    if 'block' in ds:
        unknown = [k for k in ds if k not in SUPPORTED_BLOCK_KEYWORDS]
        if unknown:
            problems.append(R.Refusal(
                R.UNSUPPORTED_KEYWORD, f'block keyword(s) not supported: {", ".join(map(str, unknown))}', label))
        _validate_conditionals(ds, ('when',), trusted, problems, label)
        if not isinstance(ds['block'], list) or not ds['block']:
            problems.append(R.Refusal(R.BAD_STRUCTURE, 'block must be a non-empty list of tasks', label))
        else:
            _validate_list(ds['block'], trusted, policy, problems, prefix=prefix)
        return
    _validate_task(ds, trusted, policy, problems, label)


def _validate_untrusted_vars(ds: dict, problems: list[Refusal], label: str) -> None:
    """``ansible_*`` variables steer the interpreter, connection and become of the task
    (``ansible_python_interpreter`` is a command line): untrusted tasks may not set them."""
    names = []
    if isinstance(ds.get('vars'), dict):
        names += [str(k) for k in ds['vars']]
    elif 'vars' in ds:
        problems.append(R.Refusal(R.BAD_STRUCTURE, f'vars must be a mapping, got {type(ds["vars"]).__name__}', label))
    if isinstance(ds.get('register'), str):
        names.append(ds['register'])
    _refuse_reserved_vars(names, problems, label)


def _refuse_reserved_vars(names: list[str], problems: list[Refusal], label: str) -> None:
    """Refuse ``ansible_*`` variable names (any case) an untrusted task would set."""
    bad = sorted(n for n in names if n.lower().startswith('ansible_'))
    if bad:
        problems.append(R.Refusal(
            R.RESERVED_VARS, f'untrusted tasks may not set ansible_* variables ({", ".join(bad)}):'
            ' they choose the interpreter, connection and privilege escalation', label))


def _validate_task(ds: dict, trusted: bool, policy: GatePolicy, problems: list[Refusal], label: str) -> None:
    for k in ds:
        if not isinstance(k, str):
            problems.append(R.Refusal(R.BAD_STRUCTURE, f'keys must be strings, got {k!r}', label))
            return
        if k in SUPPORTED_TASK_KEYWORDS:
            continue
        if k.startswith('with_'):
            lookup = k[len('with_'):]
            if lookup not in SUPPORTED_LOOP_LOOKUPS:
                problems.append(R.Refusal(R.UNSUPPORTED_KEYWORD, f'loop keyword {k!r} is not supported'
                                f' (supported: loop, {", ".join("with_" + n for n in sorted(SUPPORTED_LOOP_LOOKUPS))})',
                                          label))
            elif lookup not in lookup_loader:
                problems.append(R.Refusal(R.UNSUPPORTED_KEYWORD, f'lookup {lookup!r} for {k!r} not found', label))
            continue
        if k in Task.fattributes or k == 'local_action':
            problems.append(R.Refusal(R.UNSUPPORTED_KEYWORD, f'keyword {k!r} is not supported by the executor', label))
            return
    loops = [k for k in ds if k == 'loop' or (isinstance(k, str) and k.startswith('with_'))]
    if len(loops) > 1:
        problems.append(R.Refusal(R.UNSUPPORTED_KEYWORD, f'more than one loop keyword: {", ".join(loops)}', label))
    if 'register' in ds and not (isinstance(ds['register'], str) and _VAR_NAME_RE.fullmatch(ds['register'])):
        problems.append(R.Refusal(
            R.UNSUPPORTED_KEYWORD, f'register must be a variable name, got {ds["register"]!r}', label))
    _validate_conditionals(ds, ('when', 'failed_when', 'changed_when'), trusted, problems, label)

    module, args, problem = _split_task(ds)
    if problem:
        problems.append(dataclasses.replace(problem, task=label))
        return
    ref = resolve_module(module)
    if ref is None:  # ``action: NAME ...``: split_task leaves its name to ModuleArgsParser
        problems.append(dataclasses.replace(_unknown_module(module), task=label))
        return
    if ref.fqcn in DENIED_MODULES or (not trusted and ref.fqcn in UNTRUSTED_DENIED_MODULES):
        problems.append(R.Refusal(
            R.DENIED_MODULE, f'module {ref.fqcn} is not allowed in remediation tasks', label, subject=(ref.fqcn,)))
        return
    if not trusted:
        allowed = policy.allowed_modules()
        if ref.fqcn not in allowed:
            problems.append(R.Refusal(
                R.NOT_ALLOWLISTED, f'module {ref.fqcn} is not in the allowlist for model-written tasks'
                f' (allowed: {", ".join(sorted(allowed))})', label, subject=(ref.fqcn,)))
            return
    _validate_args(ref, args, trusted, problems, label)
    if not trusted:
        problems.extend(R.Refusal(R.UNSAFE_EXPRESSION, reason, label) for reason in expression_problems(ref.fqcn, args))
        problems.extend(R.Refusal(h.code, h.text, label) for h in hazards(ref.fqcn, args, policy))


def _validate_conditionals(ds: dict, keys: t.Iterable[str], trusted: bool, problems: list[Refusal], label: str) -> None:
    for key in keys:
        if key not in ds:
            continue
        value = ds[key]
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, (str, bool)):
                problems.append(R.Refusal(
                    R.BAD_TASK, f'{key} entries must be strings or booleans, got {item!r}', label))
            elif not trusted:
                reason = check_safe_expression(item)
                if reason:
                    problems.append(R.Refusal(R.UNSAFE_EXPRESSION, f'{key}: {reason}', label))


def _validate_args(ref: ModuleRef, args: dict, trusted: bool, problems: list[Refusal], label: str) -> None:
    internal = [k for k in args if str(k).startswith('_') and k not in _PARSER_INTERNAL_ARGS]
    if internal:
        problems.append(R.Refusal(
            R.BAD_ARGUMENTS, f'internal argument(s) not allowed for {ref.fqcn}: {", ".join(map(str, internal))}'
            ' (check mode is the task keyword check_mode)', label))
        return
    if '_variable_params' in args:
        if not trusted:
            problems.append(R.Refusal(
                R.BAD_ARGUMENTS, f'arguments of {ref.fqcn} must be written out, not taken from a variable', label))
        return  # trusted: arguments come from a variable at run time; the module checks them
    if ref.fqcn in _FREE_ARG_ACTIONS:
        bad = [k for k in args if not _VAR_NAME_RE.fullmatch(str(k)) and k != 'cacheable']
        if bad:
            problems.append(R.Refusal(
                R.BAD_ARGUMENTS, f'set_fact names must be variable names: {", ".join(map(str, bad))}', label))
        if not trusted:
            _refuse_reserved_vars([str(k) for k in args], problems, label)
        return
    if not trusted and ref.fqcn in _UNTRUSTED_SRC_MODULES and 'src' in args and not args.get('remote_src'):
        problems.append(R.Refusal(
            R.CONTROLLER_FILE, f'{ref.fqcn} with src reads a controller file; not allowed in untrusted tasks'
            ' (use content, or remote_src: true)', label))
    options = module_options(ref.fqcn)
    if options is None:
        return
    unknown = sorted(str(k) for k in args if k not in options and k not in _PARSER_INTERNAL_ARGS)
    if unknown:
        problems.append(R.Refusal(
            R.UNSUPPORTED_PARAMETERS, f'Unsupported parameters for ({ref.fqcn}) module: {", ".join(unknown)}.'
            f' Supported parameters include: {", ".join(sorted(options))}', label,
            subject=(ref.fqcn, ', '.join(unknown))))
    for k, v in args.items():
        choices = options.get(k)
        if choices and isinstance(v, str) and not contains_jinja(v) and v not in choices:
            problems.append(R.Refusal(
                R.BAD_ARGUMENTS, f'value of {k} must be one of: {", ".join(choices)}, got: {v}', label))


# ============================================================================ expression arguments

# Module arguments that Ansible evaluates as Jinja expressions (no delimiters), not as
# templates: assert's ``that`` (templar.evaluate_conditional in the assert action) and debug's
# ``var`` (evaluate_expression in the debug action).  ``fail: msg``, ``debug: msg`` and
# assert's ``fail_msg``/``success_msg`` are templates: untrusted, 2.19 leaves them literal text.
# (``until`` is such an expression too, but the executor does not support that keyword.)
# The executor has to tag these values trusted after this check, as it does for
# when/failed_when/changed_when; untrusted, 2.19 refuses to evaluate them at run time.
EXPRESSION_ARGS = {
    'ansible.builtin.assert': ('that',),
    'ansible.builtin.debug': ('var',),
}


def expression_problems(fqcn: str, args: dict) -> list[str]:
    """Reasons the expression arguments (:data:`EXPRESSION_ARGS`) of an untrusted task are unsafe.

    Each value (``that`` may be a list) must pass :func:`check_safe_expression`.  Returns a
    list of reasons such as ``"that: conditional \"lookup('pipe', 'id')\" uses Call, ..."``.
    """
    out = []
    for key in EXPRESSION_ARGS.get(fqcn, ()):
        if key not in args:
            continue
        value = args[key]
        for item in value if isinstance(value, list) else [value]:
            reason = check_safe_expression(item)
            if reason:
                out.append(f'{key}: {reason}')
    return out
