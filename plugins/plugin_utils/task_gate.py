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
  ``ansible_*`` variables (they steer interpreter, connection and become), a module
  allowlist (:data:`DEFAULT_UNTRUSTED_MODULES`, extended per skill through
  :class:`GatePolicy`), and banned patterns: tasks that would reboot the host, stop sshd,
  remove or lock the connecting user, touch its SSH keys or sudo rule, remove broadly, or
  write under /boot, /proc or /sys (see :func:`task_hazards`).  Shell lines are cut into
  simple commands by :func:`split_shell` (quote-aware, on ``;``, ``&&``, ``||``, ``|``,
  ``&``, parentheses, command substitutions and newlines) and each is split with
  :mod:`shlex`; a line that cannot be split is refused rather than guessed at.

Trusted (vendor) task lists get neither the allowlist nor the banned patterns: some SSG
fixes do these things on purpose (service_sshd_disabled stops and masks sshd,
package_openssh-server_removed removes it, sudo_add_noexec writes ``Defaults noexec``);
the loop treats such rules as access-impacting, and the health check after each fix
protects the host.

The banned patterns catch a model's plain mistakes; they are not a sandbox (a script file
the task wrote itself, or an interpreter such as ``python3 -c``, is not read).

Everything here is pure logic on the controller; nothing is executed.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import getopt
import posixpath
import re
import shlex
import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.parsing.mod_args import ModuleArgsParser
from ansible.playbook.task import Task
from ansible.plugins.loader import fragment_loader, lookup_loader, module_loader

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


class TaskParseError(ValueError):
    """Raised by :func:`parse_task_text` when text is not a YAML/JSON task list; str() is the parser's message."""


@dataclasses.dataclass(frozen=True)
class ModuleRef:
    """A module name resolved through Ansible's plugin routing.

    name: the name as written; fqcn: the canonical FQCN after routing (e.g. ``ansible.posix.sysctl``
    for ``sysctl``); path: the module file on the controller; collection: its collection.
    """

    name: str
    fqcn: str
    path: str | None
    collection: str | None


# Modules a model-written task may use (DESIGN "Gate": modules allowlist): what a STIG / ANSSI
# remediation needs.  Written as Ansible users write them; compared after routing, so
# ansible.builtin.sysctl (routed to ansible.posix.sysctl) is the same entry.
# ansible.builtin.setup: read-only, and one SSG Debian 12 fix gathers facts with it.
# ansible.builtin.yum is absent: ansible-core 2.19 has no such module (dnf replaces it).
# community.general.sudoers is absent: it only writes user/group grant rules (never the
# Defaults lines the STIG/ANSSI sudo rules set), so a model would use it to grant or remove
# privileges; a skill that needs it adds it through GatePolicy.module_allowlist_extra.
DEFAULT_UNTRUSTED_MODULES = frozenset({
    'ansible.builtin.lineinfile', 'ansible.builtin.blockinfile', 'ansible.builtin.replace',
    'ansible.builtin.copy', 'ansible.builtin.file', 'ansible.builtin.stat', 'ansible.builtin.slurp',
    'ansible.builtin.find', 'ansible.builtin.getent', 'ansible.builtin.command', 'ansible.builtin.shell',
    'ansible.builtin.service', 'ansible.builtin.systemd', 'ansible.builtin.systemd_service',
    'ansible.builtin.package', 'ansible.builtin.apt', 'ansible.builtin.dnf',
    'ansible.builtin.package_facts', 'ansible.builtin.service_facts', 'ansible.builtin.setup',
    'ansible.builtin.set_fact', 'ansible.builtin.assert', 'ansible.builtin.debug', 'ansible.builtin.fail',
    'ansible.builtin.user', 'ansible.builtin.group', 'ansible.builtin.cron', 'ansible.builtin.debconf',
    'ansible.posix.sysctl', 'ansible.posix.mount', 'ansible.posix.seboolean',
    'community.general.ini_file', 'community.general.pamd', 'community.general.kernel_blacklist',
    'community.general.modprobe',
})


@functools.lru_cache(maxsize=64)
def _canonical_modules(names: frozenset) -> frozenset:
    """Names resolved to their canonical FQCNs (names that do not resolve are kept as written)."""
    out = set()
    for name in names:
        ref = resolve_module(str(name))
        out.add(ref.fqcn if ref else str(name))
    return frozenset(out)


@dataclasses.dataclass(frozen=True)
class GatePolicy:
    """What the gate needs to know about the run for untrusted (model-written) tasks.

    remote_user: the user Ansible connects as (``ansible_user``); None when unknown, which
      skips the checks that need its name (removing/locking it, its authorized_keys through
      the authorized_key module, its sudo rule by name).  remote_home: its home directory;
      None means ``/root`` for root, else ``/home/<remote_user>``.  module_allowlist_extra:
      module names (FQCN or short, resolved through routing) a skill adds to
      :data:`DEFAULT_UNTRUSTED_MODULES`; a denied module stays denied.
    """

    remote_user: str | None = None
    remote_home: str | None = None
    module_allowlist_extra: frozenset = frozenset()

    def __post_init__(self):
        object.__setattr__(self, 'module_allowlist_extra', frozenset(self.module_allowlist_extra or ()))

    def home(self) -> str | None:
        """The connecting user's home directory (normalised), or None when the user is unknown."""
        if self.remote_home:
            return posixpath.normpath(self.remote_home)
        if not self.remote_user:
            return None
        return '/root' if self.remote_user == 'root' else f'/home/{self.remote_user}'

    def allowed_modules(self) -> frozenset:
        """Canonical FQCNs an untrusted task may use: the defaults plus the skill's extras."""
        return _canonical_modules(DEFAULT_UNTRUSTED_MODULES) | _canonical_modules(self.module_allowlist_extra)


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
    try:
        from ansible._internal._datatag._tags import Origin  # 2.19: gives parser errors a line/column
        data = Origin(description=source).tag(data)
    except ImportError:  # pragma: no cover
        pass
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
    try:
        from ansible._internal._datatag._tags import Origin  # 2.19 data tagging
    except ImportError:  # pragma: no cover - older cores are unsupported anyway
        return None
    origin = Origin.get_tag(obj) if obj is not None else None
    return str(origin) if origin else None


def _ensure_plugin_loader() -> None:
    """Install Ansible's collection loader when nothing did (outside an ansible-playbook run,
    e.g. unit tests), so collection modules such as ansible.posix.sysctl resolve."""
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:
        from ansible.plugins.loader import init_plugin_loader
        init_plugin_loader()


@functools.lru_cache(maxsize=512)
def resolve_module(name: str) -> ModuleRef | None:
    """Resolve a module/action name as Ansible does (routing, redirects, ansible.legacy).

    Returns a ModuleRef, or None when no such module exists.  Uses the global module loader
    (the same object as an action's ``_shared_loader_obj.module_loader``).
    """
    if not isinstance(name, str) or not name:
        return None
    _ensure_plugin_loader()
    try:
        ctx = module_loader.find_plugin_with_context(name)
    except AnsibleError:
        return None
    if not ctx.resolved:
        return None
    return ModuleRef(name=name, fqcn=ctx.resolved_fqcn, path=ctx.plugin_resolved_path,
                     collection=ctx.plugin_resolved_collection)


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
    candidates = [k for k in ds if isinstance(k, str) and k not in Task.fattributes
                  and k not in ('args', 'action', 'local_action') and not k.startswith('with_')]
    if 'action' in ds:
        candidates.append('action')
    if not candidates:
        return None, None, 'no module given (a task needs exactly one module key)'
    if len(candidates) > 1:
        return None, None, f'more than one module or unknown keyword: {", ".join(map(str, candidates))}'
    key = candidates[0]
    if key != 'action':
        ref = resolve_module(key)
        if ref is None:
            guess = suggest_module(key)
            hint = f'; did you mean {guess}?' if guess else ''
            return key, None, f'no module named {key!r} in this Ansible installation{hint}'
    try:
        action, args, _delegate = ModuleArgsParser(task_ds=copy.copy(ds)).parse()
    except AnsibleError as ex:
        return key, None, _error_text(ex)
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
    problems: list[str] = []
    if not isinstance(tasks, list):
        return [f'a task list must be a list of mappings, got {type(tasks).__name__}']
    if not tasks:
        return ['the task list is empty']
    _validate_list(tasks, trusted, policy or GatePolicy(), problems, prefix='')
    return problems


def _task_label(prefix: str, index: int, ds: t.Any) -> str:
    name = ds.get('name') if isinstance(ds, dict) else None
    label = f'task {prefix}{index + 1}'
    return f'{label} {str(name)!r}' if name else label


def _validate_list(tasks: list, trusted: bool, policy: GatePolicy, problems: list[str], prefix: str) -> None:
    for i, ds in enumerate(tasks):
        label = _task_label(prefix, i, ds)
        try:
            _validate_entry(ds, trusted, policy, problems, label, prefix=f'{prefix}{i + 1}.')
        except Exception as ex:  # a gate bug must refuse the task, never crash the loop
            problems.append(f'{label}: gate internal error, the task cannot be checked ({type(ex).__name__}: {ex})')


def _validate_entry(ds: t.Any, trusted: bool, policy: GatePolicy, problems: list[str], label: str, prefix: str) -> None:
    if not isinstance(ds, dict):
        problems.append(f'{label}: must be a mapping, got {type(ds).__name__}')
        return
    if not trusted:
        hit = contains_jinja(ds)
        if hit is not None:
            problems.append(f'{label}: Jinja templating is not allowed in untrusted tasks: {str(hit)[:120]!r}')
            return
        _validate_untrusted_vars(ds, problems, label)
    if 'block' in ds:
        unknown = [k for k in ds if k not in SUPPORTED_BLOCK_KEYWORDS]
        if unknown:
            problems.append(f'{label}: block keyword(s) not supported: {", ".join(map(str, unknown))}')
        _validate_conditionals(ds, ('when',), trusted, problems, label)
        if not isinstance(ds['block'], list) or not ds['block']:
            problems.append(f'{label}: block must be a non-empty list of tasks')
        else:
            _validate_list(ds['block'], trusted, policy, problems, prefix=prefix)
        return
    _validate_task(ds, trusted, policy, problems, label)


def _validate_untrusted_vars(ds: dict, problems: list[str], label: str) -> None:
    """``ansible_*`` variables steer the interpreter, connection and become of the task
    (``ansible_python_interpreter`` is a command line): untrusted tasks may not set them."""
    names = []
    if isinstance(ds.get('vars'), dict):
        names += [str(k) for k in ds['vars']]
    elif 'vars' in ds:
        problems.append(f'{label}: vars must be a mapping, got {type(ds["vars"]).__name__}')
    if isinstance(ds.get('register'), str):
        names.append(ds['register'])
    bad = sorted(n for n in names if n.lower().startswith('ansible_'))
    if bad:
        problems.append(f'{label}: untrusted tasks may not set ansible_* variables ({", ".join(bad)}):'
                        ' they choose the interpreter, connection and privilege escalation')


def _validate_task(ds: dict, trusted: bool, policy: GatePolicy, problems: list[str], label: str) -> None:
    for k in ds:
        if not isinstance(k, str):
            problems.append(f'{label}: keys must be strings, got {k!r}')
            return
        if k in SUPPORTED_TASK_KEYWORDS:
            continue
        if k.startswith('with_'):
            lookup = k[len('with_'):]
            if lookup not in SUPPORTED_LOOP_LOOKUPS:
                problems.append(f'{label}: loop keyword {k!r} is not supported'
                                f' (supported: loop, {", ".join("with_" + n for n in sorted(SUPPORTED_LOOP_LOOKUPS))})')
            elif lookup not in lookup_loader:
                problems.append(f'{label}: lookup {lookup!r} for {k!r} not found')
            continue
        if k in Task.fattributes or k == 'local_action':
            problems.append(f'{label}: keyword {k!r} is not supported by the executor')
            return
    loops = [k for k in ds if k == 'loop' or (isinstance(k, str) and k.startswith('with_'))]
    if len(loops) > 1:
        problems.append(f'{label}: more than one loop keyword: {", ".join(loops)}')
    if 'register' in ds and not (isinstance(ds['register'], str) and re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', ds['register'])):
        problems.append(f'{label}: register must be a variable name, got {ds["register"]!r}')
    _validate_conditionals(ds, ('when', 'failed_when', 'changed_when'), trusted, problems, label)

    module, args, problem = split_task(ds)
    if problem:
        problems.append(f'{label}: {problem}')
        return
    ref = resolve_module(module)
    if ref is None:
        guess = suggest_module(module)
        hint = f'; did you mean {guess}?' if guess else ''
        problems.append(f'{label}: no module named {module!r} in this Ansible installation{hint}')
        return
    if ref.fqcn in DENIED_MODULES or (not trusted and ref.fqcn in UNTRUSTED_DENIED_MODULES):
        problems.append(f'{label}: module {ref.fqcn} is not allowed in remediation tasks')
        return
    if not trusted:
        allowed = policy.allowed_modules()
        if ref.fqcn not in allowed:
            problems.append(f'{label}: module {ref.fqcn} is not in the allowlist for model-written tasks'
                            f' (allowed: {", ".join(sorted(allowed))})')
            return
    _validate_args(ref, args, trusted, problems, label)
    if not trusted:
        problems.extend(f'{label}: {reason}' for reason in expression_problems(ref.fqcn, args))
        problems.extend(f'{label}: {reason}' for reason in task_hazards(ref.fqcn, args, policy))


def _validate_conditionals(ds: dict, keys: t.Iterable[str], trusted: bool, problems: list[str], label: str) -> None:
    for key in keys:
        if key not in ds:
            continue
        value = ds[key]
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, (str, bool)):
                problems.append(f'{label}: {key} entries must be strings or booleans, got {item!r}')
            elif not trusted:
                reason = check_safe_expression(item)
                if reason:
                    problems.append(f'{label}: {key}: {reason}')


def _validate_args(ref: ModuleRef, args: dict, trusted: bool, problems: list[str], label: str) -> None:
    internal = [k for k in args if str(k).startswith('_') and k not in _PARSER_INTERNAL_ARGS]
    if internal:
        problems.append(f'{label}: internal argument(s) not allowed for {ref.fqcn}: {", ".join(map(str, internal))}'
                        ' (check mode is the task keyword check_mode)')
        return
    if '_variable_params' in args:
        if not trusted:
            problems.append(f'{label}: arguments of {ref.fqcn} must be written out, not taken from a variable')
        return  # trusted: arguments come from a variable at run time; the module checks them
    if ref.fqcn in _FREE_ARG_ACTIONS:
        bad = [k for k in args if not re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', str(k)) and k != 'cacheable']
        if bad:
            problems.append(f'{label}: set_fact names must be variable names: {", ".join(map(str, bad))}')
        reserved = sorted(str(k) for k in args if str(k).lower().startswith('ansible_'))
        if not trusted and reserved:
            problems.append(f'{label}: untrusted tasks may not set ansible_* variables ({", ".join(reserved)}):'
                            ' they choose the interpreter, connection and privilege escalation')
        return
    if not trusted and ref.fqcn in _UNTRUSTED_SRC_MODULES and 'src' in args and not args.get('remote_src'):
        problems.append(f'{label}: {ref.fqcn} with src reads a controller file; not allowed in untrusted tasks'
                        ' (use content, or remote_src: true)')
    options = module_options(ref.fqcn)
    if options is None:
        return
    unknown = sorted(str(k) for k in args if k not in options and k not in _PARSER_INTERNAL_ARGS)
    if unknown:
        problems.append(f'{label}: Unsupported parameters for ({ref.fqcn}) module: {", ".join(unknown)}.'
                        f' Supported parameters include: {", ".join(sorted(options))}')
    for k, v in args.items():
        choices = options.get(k)
        if choices and isinstance(v, str) and not contains_jinja(v) and v not in choices:
            problems.append(f'{label}: value of {k} must be one of: {", ".join(choices)}, got: {v}')


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


# ============================================================================ banned patterns

_SPECIAL_TREES = ('/boot', '/proc', '/sys')
_SHELLS = frozenset({'sh', 'bash', 'dash', 'zsh', 'ksh', 'ash', 'mksh', 'yash'})
_SHELL_DIRS = ('/bin', '/usr/bin', '/usr/local/bin')
_SSH_UNIT_RE = re.compile(r'(ssh|sshd|openssh-server)(@[^.]*)?(\.(service|socket))?')
_NETWORK_UNIT_RE = re.compile(r'(networking|NetworkManager|systemd-networkd|network)(\.service)?')
_SHUTDOWN_UNITS = frozenset({
    'reboot.target', 'poweroff.target', 'halt.target', 'kexec.target', 'shutdown.target',
    'soft-reboot.target', 'rescue.target', 'emergency.target', 'ctrl-alt-del.target', 'sleep.target',
    'suspend.target', 'hibernate.target', 'hybrid-sleep.target', 'suspend-then-hibernate.target',
    'systemd-reboot.service', 'systemd-poweroff.service', 'systemd-halt.service', 'systemd-kexec.service',
    'systemd-soft-reboot.service',
})
_SHUTDOWN_VERBS = frozenset({
    'reboot', 'poweroff', 'halt', 'kexec', 'soft-reboot', 'suspend', 'hibernate', 'hybrid-sleep',
    'suspend-then-hibernate', 'rescue', 'emergency', 'exit', 'switch-root',
})
_SHUTDOWN_COMMANDS = frozenset({'reboot', 'shutdown', 'poweroff', 'halt', 'kexec'})
_SHUTDOWN_MODULES = frozenset({'ansible.builtin.reboot', 'community.general.shutdown'})
# Packages whose removal cuts the controller off: SSH, sudo (become), Python (every module).
_ACCESS_PACKAGES = frozenset({'openssh-server', 'openssh', 'sudo', 'python3'})
_SUDO_GROUPS = frozenset({'sudo', 'wheel', 'admin'})
_NOLOGIN_SHELLS = frozenset({'/sbin/nologin', '/usr/sbin/nologin', '/bin/false', '/usr/bin/false'})
# Removing one of these, or a directory above one, breaks login, sudo or the system itself.
_PROTECTED_FROM_REMOVAL = (
    '/etc/ssh/sshd_config', '/etc/pam.d', '/etc/sudoers', '/etc/sudoers.d', '/etc/passwd', '/etc/shadow',
    '/etc/group', '/etc/gshadow', '/etc/nsswitch.conf', '/etc/security', '/etc/systemd', '/etc/fstab',
    '/usr/bin', '/usr/sbin', '/usr/lib', '/usr/libexec', '/var/lib/dpkg', '/var/lib/rpm',
)
_AUTH_KEYS_RE = re.compile(r'(^|/)\.ssh/authorized_keys[^/]*$')
_TILDE_SSH_RE = re.compile(r'^~[^/]*/\.ssh(/|$)')
_GLOB_CHARS = '*?['
# Path arguments through which these modules write (aliases included).
_WRITE_PATH_ARGS = {
    'ansible.builtin.lineinfile': ('path', 'dest', 'destfile', 'name'),
    'ansible.builtin.blockinfile': ('path', 'dest', 'destfile', 'name'),
    'ansible.builtin.replace': ('path', 'dest', 'destfile', 'name'),
    'ansible.builtin.copy': ('dest',),
    'ansible.builtin.file': ('path', 'dest', 'name'),
    'ansible.builtin.template': ('dest',),
    'ansible.builtin.unarchive': ('dest',),
    'ansible.builtin.get_url': ('dest',),
    'community.general.ini_file': ('path', 'dest'),
    'community.general.kernel_blacklist': ('blacklist_file',),
    'community.general.pamd': ('path',),
    'ansible.posix.authorized_key': ('path',),
    'community.general.sudoers': ('sudoers_path',),
}
_SUDOERS_EDITORS = frozenset({'ansible.builtin.lineinfile', 'ansible.builtin.blockinfile',
                              'ansible.builtin.replace', 'ansible.builtin.copy'})
_SERVICE_MODULES = frozenset({'ansible.builtin.service', 'ansible.builtin.systemd',
                              'ansible.builtin.systemd_service', 'ansible.builtin.sysvinit'})
_PACKAGE_MODULES = frozenset({'ansible.builtin.package', 'ansible.builtin.apt', 'ansible.builtin.dnf',
                              'ansible.builtin.dnf5'})
# ``use`` makes package/service run another module with the same arguments: only these.
_PACKAGE_BACKENDS = frozenset({'ansible.builtin.apt', 'ansible.builtin.dnf', 'ansible.builtin.dnf5'})
_SERVICE_BACKENDS = frozenset({'ansible.builtin.systemd', 'ansible.builtin.systemd_service',
                               'ansible.builtin.sysvinit', 'ansible.builtin.service'})


def task_hazards(fqcn: str, args: dict, policy: GatePolicy | None = None) -> list[str]:
    """What an untrusted task would do that the gate bans; [] when nothing.

    fqcn: the module's canonical FQCN (after routing); args: its arguments as
    ModuleArgsParser returns them (free-form text in ``_raw_params``).  Each reason says
    what the task would do, e.g. "`systemctl stop ssh` stops ssh: ...".  Banned: rebooting
    or powering off; stopping, restarting, disabling or masking sshd (reload is the safe way:
    ssh.service checks the file with ``sshd -t`` first); taking the network down; removing
    or locking the connecting user or its sudo group; touching its authorized_keys;
    changing its sudo rule (sudoers may only get validated Defaults lines); removing the
    packages SSH, sudo and Ansible need; ``rm -r`` except on explicit absolute paths at least
    two levels deep; removing paths fewer than two levels deep or paths login depends on;
    writing under /boot, /proc or /sys (``sysctl -w``, ``sysctl_set``); unmounting; shell and
    command lines that cannot be split.  Pure; never raises for odd argument values.
    """
    policy = policy or GatePolicy()
    args = args if isinstance(args, dict) else {}
    out: list[str] = []
    if fqcn in _SHUTDOWN_MODULES:
        out.append(f'{fqcn} would reboot or power off the host')
    if fqcn in ('ansible.builtin.command', 'ansible.builtin.shell'):
        out += _command_module_reasons(fqcn, args, policy)
    if fqcn in _SERVICE_MODULES:
        out += _service_module_reasons(fqcn, args)
    if fqcn in _PACKAGE_MODULES:
        out += _package_module_reasons(fqcn, args)
    if fqcn == 'ansible.builtin.user':
        out += _user_module_reasons(args, policy)
    if fqcn == 'ansible.builtin.group':
        name = args.get('name')
        if str(args.get('state')) == 'absent' and isinstance(name, str) \
                and (name in _SUDO_GROUPS or name == policy.remote_user):
            out.append(f'removes the group {name}, through which sudo or the connecting user depends on it')
    if fqcn == 'ansible.posix.authorized_key':
        user = args.get('user')
        if policy.remote_user is None or user == policy.remote_user:
            out.append(f'changes the authorized_keys of {user or "a user"}: the SSH access the controller logs in with')
    if fqcn == 'community.general.sudoers':
        out += _sudoers_module_reasons(args, policy)
    if fqcn == 'ansible.posix.sysctl' and _as_bool(args.get('sysctl_set')):
        out.append('sysctl_set: true writes the value under /proc/sys at once with sysctl -w; persist it with'
                   ' sysctl_set: false and let reload apply the file (as the host does at every boot)')
    if fqcn == 'ansible.posix.mount' and str(args.get('state')) in ('unmounted', 'absent'):
        out.append(f'unmounts {args.get("path") or args.get("name")}: remediation changes mount options, it does'
                   ' not unmount (a home directory or /usr could vanish under running services)')
    if fqcn == 'ansible.builtin.cron' and str(args.get('state', 'present')) != 'absent' \
            and isinstance(args.get('job'), str):
        out += [f'cron job: {r}' for r in _shell_text_reasons(args['job'], policy)]
    if isinstance(args.get('validate'), str):
        out += [f'validate: {r}' for r in _argv_text_reasons(args['validate'].replace('%s', '/tmp/validate'), policy)]
    out += _write_path_reasons(fqcn, args, policy)
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------- helpers

def _as_bool(value: t.Any) -> bool | None:
    """Ansible's boolean reading of value; None when absent or not a boolean."""
    if value is None:
        return None
    try:
        return boolean(value, strict=True)
    except TypeError:
        return None


def _as_list(value: t.Any) -> list[str]:
    """A module's list argument as strings (comma-separated strings split, as Ansible does)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(',') if v.strip()]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def _norm(path: t.Any) -> str | None:
    """An absolute path normalised lexically; None for anything else."""
    if not isinstance(path, str) or not path.startswith('/'):
        return None
    norm = posixpath.normpath(path)
    return '/' + norm.lstrip('/')


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip('/') + '/')


def _depth(path: str) -> int:
    return len([p for p in path.split('/') if p not in ('', '.')])


def _is_sudoers_path(path: t.Any) -> bool:
    norm = _norm(path)
    return bool(norm) and norm.startswith('/etc/sudoers')


def _is_ssh_access_path(path: t.Any, policy: GatePolicy) -> bool:
    """authorized_keys anywhere, any ``~…/.ssh``, and the connecting user's ``~/.ssh``."""
    if not isinstance(path, str):
        return False
    if _AUTH_KEYS_RE.search(path) or _TILDE_SSH_RE.match(path):
        return True
    home, norm = policy.home(), _norm(path)
    return bool(home and norm and _within(norm, posixpath.join(home, '.ssh')))


def _special_tree(path: t.Any) -> str | None:
    norm = _norm(path)
    if norm:
        for root in _SPECIAL_TREES:
            if _within(norm, root):
                return root
    return None


def _mentions_user(text: str, user: str | None) -> bool:
    return bool(user) and re.search(rf'(?<![\w.-]){re.escape(user)}(?![\w-])', text) is not None


def _is_ssh_unit(name: t.Any) -> bool:
    return _unit_matches(name, _SSH_UNIT_RE, ('ssh', 'sshd', 'ssh.service', 'sshd.service', 'ssh.socket'))


def _is_network_unit(name: t.Any) -> bool:
    return _unit_matches(name, _NETWORK_UNIT_RE, ('networking.service', 'NetworkManager.service',
                                                  'systemd-networkd.service'))


def _unit_matches(name: t.Any, pattern: re.Pattern, examples: tuple) -> bool:
    import fnmatch

    if not isinstance(name, str):
        return False
    if any(c in name for c in _GLOB_CHARS):
        return any(fnmatch.fnmatchcase(ex, name) for ex in examples)
    return pattern.fullmatch(name) is not None


def _is_shutdown_unit(name: t.Any) -> bool:
    return isinstance(name, str) and (name in _SHUTDOWN_UNITS or f'{name}.target' in _SHUTDOWN_UNITS)


def _removal_reasons(path: str, policy: GatePolicy) -> list[str]:
    """Why removing ``path`` (absolute, normalised; may hold a glob) is banned; [] when it is not."""
    parts = [p for p in path.split('/') if p not in ('', '.')]
    if any(c in path for c in _GLOB_CHARS):
        fixed = []
        for part in parts:
            if any(c in part for c in _GLOB_CHARS):
                break
            fixed.append(part)
        base, glob = '/' + '/'.join(fixed), True
    else:
        base, glob = path, False
    if _depth(base) < 2:  # a glob in /etc/* removes from /etc itself
        return [f'removes {path}, fewer than two levels below /']
    protected = list(_PROTECTED_FROM_REMOVAL)
    if policy.home():
        protected.append(policy.home())
    for prot in protected:
        if prot == base or prot.startswith(base.rstrip('/') + '/'):
            return [f'removes {path}, which takes {prot} with it']
    if _within(base, '/etc/pam.d'):
        return [f'removes {path}: PAM reads it at every login and sudo']
    return []


def _explicit_path_problem(op: str) -> str | None:
    """Why ``op`` is not an explicit absolute path at least two levels deep; None when it is."""
    if any(c in op for c in ('$', '`', _MARK)):
        return 'it uses a variable or a command substitution'
    if any(c in op for c in _GLOB_CHARS + '{}'):
        return 'it uses a glob or braces'
    if op.startswith('~'):
        return 'it uses ~'
    if not op.startswith('/'):
        return 'it is not an absolute path'
    parts = [p for p in op.split('/') if p not in ('', '.')]
    if '..' in parts:
        return 'it uses ..'
    if len(parts) < 2:
        return 'it is fewer than two levels below /'
    return None


# ---------------------------------------------------------------------------- module checks

def _service_module_reasons(fqcn: str, args: dict) -> list[str]:
    out = []
    name = args.get('name', args.get('service', args.get('unit')))
    state = str(args.get('state') or '')
    enabled, masked = _as_bool(args.get('enabled')), _as_bool(args.get('masked'))
    if _is_ssh_unit(name):
        if state == 'stopped':
            out.append(f'stops {name}: no new SSH login (the health check, the next run) would get in')
        if state == 'restarted':
            out.append(f'restarts {name}: with a broken configuration sshd then stays stopped; use state: reloaded'
                       ' (ssh.service checks the file with sshd -t before it reloads)')
        if enabled is False:
            out.append(f'disables {name}: after the next boot nobody can log in over SSH')
        if masked is True:
            out.append(f'masks {name}: sshd could not be started again')
    if _is_network_unit(name) and (state == 'stopped' or enabled is False or masked is True):
        out.append(f'stops or disables {name}: it would take the network, and the SSH connection, down')
    if _is_shutdown_unit(name) and state in ('started', 'restarted', 'reloaded'):
        out.append(f'starts {name}: it would reboot, power off or isolate the host')
    use = args.get('use')
    if use is not None and str(use).lower() != 'auto':
        ref = resolve_module(str(use))
        if ref is None or ref.fqcn not in _SERVICE_BACKENDS:
            out.append(f'use: {use} would run another module with these arguments; only auto, systemd or sysvinit')
    return out


def _package_module_reasons(fqcn: str, args: dict) -> list[str]:
    out = []
    names = _as_list(args.get('name', args.get('pkg', args.get('package'))))
    state = str(args.get('state') or '')
    if state in ('absent', 'removed'):
        hit = sorted({n for n in names if _package_base(n) in _ACCESS_PACKAGES})
        if hit:
            out.append(f'removes {", ".join(hit)}: the host would lose SSH, sudo or the Python every Ansible'
                       ' module needs')
    for n in names:
        if '://' in n or n.startswith(('/', '~', '.')) or n.endswith(('.deb', '.rpm')):
            out.append(f'installs {n} from outside the configured package repositories')
    if args.get('deb'):
        out.append(f'deb: installs {args["deb"]} from outside the configured package repositories')
    for key in ('allow_unauthenticated', 'disable_gpg_check'):
        if _as_bool(args.get(key)):
            out.append(f'{key}: installs packages whose signatures are not checked')
    use = args.get('use')
    if use is not None and str(use).lower() != 'auto':
        ref = resolve_module(str(use))
        if ref is None or ref.fqcn not in _PACKAGE_BACKENDS:
            out.append(f'use: {use} would run another module with these arguments; only auto, apt or dnf')
    return out


def _package_base(name: str) -> str:
    return re.split(r'[=<>:\s]', name.strip(), maxsplit=1)[0]


def _user_module_reasons(args: dict, policy: GatePolicy) -> list[str]:
    user = policy.remote_user
    name = args.get('name', args.get('user'))
    if not user or name != user:
        return []
    out = []
    who = f'the connecting user {user}'
    if str(args.get('state')) == 'absent':
        out.append(f'removes {who}')
    if _as_bool(args.get('password_lock')):
        out.append(f'locks the password of {who}')
    expires = args.get('expires')
    if expires is not None:
        try:
            never = float(expires) == -1
        except (TypeError, ValueError):
            never = False
        if not never:
            out.append(f'sets an account expiry date on {who}')
    shell = args.get('shell')
    if isinstance(shell, str) and shell in _NOLOGIN_SHELLS:
        out.append(f'gives {who} the shell {shell}: its logins, Ansible\'s among them, would be refused')
    password = args.get('password')
    if isinstance(password, str) and password.startswith(('!', '*')):
        out.append(f'locks the password of {who} (a password field starting with {password[0]})')
    if args.get('groups') is not None and not _as_bool(args.get('append')):
        out.append(f'replaces the groups of {who} (its sudo/wheel membership may go); use append: true')
    return out


def _sudoers_module_reasons(args: dict, policy: GatePolicy) -> list[str]:
    out = []
    user = args.get('user')
    if policy.remote_user is None or user == policy.remote_user:
        out.append(f'changes the sudo rule of {user or "a user"} (the connecting user\'s privilege escalation'
                   ' may depend on it)')
    if str(args.get('state')) == 'absent':
        out.append(f'removes the sudoers rule {args.get("name")}: it may be the one the connecting user escalates with')
    if _as_bool(args.get('noexec')):
        out.append('sets NOEXEC: commands run through sudo, Ansible\'s modules among them, could not start others')
    return out


def _write_path_reasons(fqcn: str, args: dict, policy: GatePolicy) -> list[str]:
    out = []
    state = args.get('state')
    for key in _WRITE_PATH_ARGS.get(fqcn, ()):
        path = args.get(key)
        if not isinstance(path, str):
            continue
        root = _special_tree(path)
        metadata_only = fqcn == 'ansible.builtin.file' and state in (None, 'file')
        if root and not (root == '/boot' and metadata_only):
            out.append(f'writes {path}, under {root}')
        if _is_ssh_access_path(path, policy):
            out.append(f'changes {path}: the SSH access (authorized_keys) the controller logs in with')
        if _is_sudoers_path(path):
            out += _sudoers_edit_reasons(fqcn, args, _norm(path), policy)
        if fqcn == 'ansible.builtin.file' and state == 'absent' and not _is_sudoers_path(path):
            norm = _norm(path)
            out += _removal_reasons(norm, policy) if norm else [f'removes the relative path {path}']
    return out


_DEFAULTS_LINE_RE = re.compile(r'Defaults([:@!>]\S+)?(\s|$)')
_BACKREF_RE = re.compile(r'^(\\\d|\\g<\w+>)')
_SUDO_BREAKING_RE = re.compile(r'(?<![!\w])(requiretty|noexec)\b', re.I)


def _sudoers_edit_reasons(fqcn: str, args: dict, path: str, policy: GatePolicy) -> list[str]:
    """Model-written tasks may add or change sudo ``Defaults`` lines, validated by visudo, and nothing else.

    Source: cases sudo-nopasswd-lockout and sudo-noexec-breaks-become (../shared/cases/cases.yml):
    a sudoers change can remove the controller's own privilege escalation.
    """
    user = policy.remote_user
    out = []
    if fqcn == 'ansible.builtin.file':
        state = args.get('state')
        if state == 'absent':
            out.append(f'removes {path}: it may hold the connecting user\'s sudo rule')
        if state in ('link', 'hard'):
            out.append(f'replaces {path} with a link')
        if _mode_writable_by_others(args.get('mode')):
            out.append(f'makes {path} writable by group or others: sudo then refuses to run at all')
        owner = args.get('owner')
        if owner is not None and str(owner) not in ('root', '0'):
            out.append(f'gives {path} to {owner}: sudo then refuses to run at all')
        return out
    if fqcn not in _SUDOERS_EDITORS:
        return [f'{fqcn} changes {path}: sudoers may only be changed with lineinfile, blockinfile, replace or copy']
    validate = args.get('validate')
    if not (isinstance(validate, str) and 'visudo' in validate and '%s' in validate):
        out.append(f'changes {path} without validate: visudo -cf %s (a syntax error there stops sudo for everyone,'
                   ' the controller included)')
    if fqcn == 'ansible.builtin.copy':
        if path == '/etc/sudoers':
            out.append('replaces the whole of /etc/sudoers, with the rules and includes the connecting user\'s sudo'
                       ' comes from; change Defaults lines with lineinfile')
        elif _as_bool(args.get('force')) is not False:
            out.append(f'may overwrite {path}, which can hold the connecting user\'s sudo rule; use force: false'
                       ' (create only) or lineinfile')
    if _mentions_user(path.rsplit('/', 1)[-1], user):
        out.append(f'changes {path}, the file named after the connecting user {user}')
    matchers = {k: args.get(k) for k in ('regexp', 'regex', 'search_string') if isinstance(args.get(k), str)}
    absent = str(args.get('state')) == 'absent'
    if fqcn == 'ansible.builtin.lineinfile' and absent and isinstance(args.get('line', args.get('value')), str):
        matchers['line'] = args.get('line', args.get('value'))
    for key, text in matchers.items():
        if _mentions_user(text, user) or 'nopasswd' in text.lower() or re.search(r'%(sudo|wheel|admin)\b', text):
            out.append(f'{key} {text!r} in {path} matches the connecting user\'s sudo rule (its name, NOPASSWD or'
                       ' its sudo group)')
        elif 'Defaults' not in text:
            out.append(f'{key} {text!r} in {path} may match user rules; model-written tasks may only match'
                       ' Defaults lines')
    written = []
    if not absent:
        for key in ('line', 'value', 'content', 'block', 'replace'):
            if isinstance(args.get(key), str):
                written.append(args[key])
    for text in written:
        for line in text.splitlines():
            line = line.strip()
            if not line or (line.startswith('#') and not line.startswith('#include')) or _BACKREF_RE.match(line):
                continue
            if not _DEFAULTS_LINE_RE.match(line):
                out.append(f'writes {line!r} to {path}: model-written tasks may only add or change sudo Defaults lines')
            elif _mentions_user(line, user) or 'nopasswd' in line.lower():
                out.append(f'writes {line!r} to {path}: it changes the connecting user\'s own sudo settings')
            elif _SUDO_BREAKING_RE.search(line):
                out.append(f'writes {line!r} to {path}: requiretty and noexec break privilege escalation through'
                           ' sudo (case sudo-noexec-breaks-become)')
    return out


def _mode_writable_by_others(mode: t.Any) -> bool:
    if mode is None or isinstance(mode, bool):
        return False
    if isinstance(mode, int):
        return bool(mode & 0o022)
    text = str(mode).strip()
    if re.fullmatch(r'[0-7]{3,4}', text):
        return bool(int(text, 8) & 0o022)
    for clause in text.split(','):
        m = re.fullmatch(r'([ugoa]*)([-+=])([rwxXst]*)', clause.strip())
        if m and m.group(2) in '+=' and 'w' in m.group(3) and (not m.group(1) or set(m.group(1)) & set('goa')):
            return True
    return False


# ---------------------------------------------------------------------------- command lines

_MARK = '\x01'          # not whitespace to str.strip(); refused in the checked text itself
_W = _MARK + 'W'        # write redirection; the next word is its target
_WDUP = _MARK + 'D'     # >& : the next word is a file unless it is a descriptor number or -
_R = _MARK + 'R'        # read redirection, here-document or here-string; the next word is not an argument
_SUB = _MARK + 'S'      # command substitution placeholder: _SUB <index> _MARK
_MAX_NESTING = 4
_RESERVED = frozenset({'!', '{', '}', 'if', 'then', 'else', 'elif', 'fi', 'do', 'done', 'while', 'until'})


class ShellParseError(ValueError):
    """Raised when a shell or command line cannot be split with confidence (the gate refuses it)."""


@dataclasses.dataclass
class ShellCommand:
    """One simple command of a shell line: argv (quotes removed) and the redirection targets it writes."""

    argv: list
    writes: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Frame:
    kind: str                      # top | sub ($( ) or `) | paren (subshell, process substitution)
    start: int
    index: int | None = None       # the substitution this frame fills, if any
    buf: list = dataclasses.field(default_factory=list)
    dq: bool = False               # inside double quotes


def split_shell(text: str) -> list[ShellCommand]:
    """Split a shell line into the simple commands sh would run, in order.

    Separators (outside quotes): ``;``, ``&``, ``&&``, ``|``, ``||``, ``|&``, newlines, ``(``
    and ``)``.  The commands inside ``$( )`` and backticks (also within double quotes) and
    process substitutions are listed too; in the word they stand in they become
    ``$(text)``.  Redirection targets of ``>``, ``>>``, ``>|``, ``&>``, ``>&`` and ``<>`` go to
    ``writes``; operands of ``<``, ``<<`` and ``<<<`` are dropped; here-document bodies are
    data.  Comments are dropped.  Words are split with :func:`shlex.split`.

    Raises ShellParseError for unbalanced quotes or brackets, ``case`` patterns, an
    unterminated here-document, an unquoted here-document holding ``$(`` or a backtick, and
    control characters: text the gate cannot split with confidence.
    """
    if not isinstance(text, str):
        raise ShellParseError(f'a command line must be a string, got {type(text).__name__}')
    if _MARK in text or '\x00' in text:
        raise ShellParseError('it holds control characters')
    segments, subs = _shell_segments(text)
    out = []
    for seg in segments:
        try:
            words = shlex.split(seg, comments=False, posix=True)
        except ValueError as ex:
            raise ShellParseError(str(ex)) from None
        out.append(_words_to_command([_fill_subs(w, subs) for w in words]))
    return out


def _fill_subs(word: str, subs: list) -> str:
    def name(m: re.Match) -> str:
        inner = _fill_subs(subs[int(m.group(1))], subs)
        return '$(' + ' '.join(re.sub(r'[^\w./@:%+=,${}()-]+', ' ', inner).split()) + ')'
    return re.sub(re.escape(_SUB) + r'(\d+)' + re.escape(_MARK), name, word)


def _words_to_command(words: list) -> ShellCommand:
    cmd = ShellCommand(argv=[])
    i = 0
    while i < len(words):
        word = words[i]
        if word in (_W, _WDUP, _R):
            if i + 1 >= len(words):
                raise ShellParseError('a redirection without a target')
            target = words[i + 1]
            if word == _W or (word == _WDUP and not re.fullmatch(r'\d+-?|-', target)):
                cmd.writes.append(target)
            i += 2
            continue
        cmd.argv.append(word)
        i += 1
    return cmd


def _shell_segments(text: str) -> tuple[list, list]:
    """Cut text into simple-command strings (quotes kept, redirections marked) and substitution texts."""
    segments: list[str] = []
    subs: list[str] = []
    frames = [_Frame('top', 0)]
    heredocs: list[tuple] = []
    i, n = 0, len(text)

    def flush(fr: _Frame) -> None:
        seg = ''.join(fr.buf).strip()
        if seg:
            segments.append(seg)
        fr.buf = []

    def open_sub(fr: _Frame, kind: str, start: int) -> None:
        subs.append('')
        fr.buf.append(f'{_SUB}{len(subs) - 1}{_MARK}')
        frames.append(_Frame(kind, start, index=len(subs) - 1))

    def close(fr: _Frame, end: int) -> None:
        flush(fr)
        frames.pop()
        if fr.index is not None:
            subs[fr.index] = text[fr.start:end]

    while i < n:
        fr = frames[-1]
        c, nxt = text[i], text[i + 1:i + 2]
        if fr.dq:
            if c == '\\':
                fr.buf.append(text[i:i + 2])
                i += 2
            elif c == '"':
                fr.dq = False
                fr.buf.append(c)
                i += 1
            elif c == '`':
                open_sub(fr, 'bt', i + 1)
                i += 1
            elif c == '$' and nxt == '(':
                open_sub(fr, 'sub', i + 2)
                i += 2
            else:
                fr.buf.append(c)
                i += 1
            continue
        if c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                raise ShellParseError('an unterminated single quote')
            fr.buf.append(text[i:j + 1])
            i = j + 1
        elif c == '"':
            fr.dq = True
            fr.buf.append(c)
            i += 1
        elif c == '\\':
            if nxt != '\n':
                fr.buf.append(text[i:i + 2])
            i += 2
        elif c == '#' and (not fr.buf or fr.buf[-1][-1:].isspace()):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif c == '`':
            if fr.kind == 'bt':
                close(fr, i)
            else:
                open_sub(fr, 'bt', i + 1)
            i += 1
        elif c == '$' and nxt == '(':
            open_sub(fr, 'sub', i + 2)
            i += 2
        elif c == '(':
            if ''.join(fr.buf).rstrip().endswith((_W, _WDUP, _R)):  # <( ) >( ) stand in for a file name
                open_sub(fr, 'paren', i + 1)
            else:
                flush(fr)
                frames.append(_Frame('paren', i + 1))
            i += 1
        elif c == ')':
            if fr.kind not in ('sub', 'paren'):
                raise ShellParseError("an unbalanced ')' (case patterns are not supported)")
            close(fr, i)
            i += 1
        elif c == '\n':
            flush(fr)
            i = _skip_heredocs(text, i + 1, heredocs)
            heredocs = []
        elif c == ';':
            flush(fr)
            i += 1
        elif c == '&':
            if nxt == '>':  # &> and &>>: stdout and stderr to a file
                fr.buf.append(f' {_W} ')
                i += 3 if text[i + 2:i + 3] == '>' else 2
            else:
                flush(fr)
                i += 2 if nxt == '&' else 1
        elif c == '|':
            flush(fr)
            i += 2 if nxt in ('|', '&') else 1
        elif c == '>':
            _strip_fd_number(fr.buf)
            op = _WDUP if nxt == '&' else _W
            i += 2 if nxt in ('>', '|', '&') else 1
            fr.buf.append(f' {op} ')
        elif c == '<':
            _strip_fd_number(fr.buf)
            if text.startswith('<<<', i):
                fr.buf.append(f' {_R} ')
                i += 3
            elif nxt == '<':
                i += 2
                strip_tabs = text[i:i + 1] == '-'
                i += 1 if strip_tabs else 0
                m = re.match(r'[ \t]*((?:[^\s;&|<>()\'"\\]|\\.|\'[^\']*\'|"[^"]*")+)', text[i:])
                if not m:
                    raise ShellParseError('a here-document without a delimiter')
                word = m.group(1)
                heredocs.append((re.sub(r'[\'"\\]', '', word), strip_tabs, any(q in word for q in '\'"\\')))
                fr.buf.append(f' {_R} heredoc ')
                i += m.end()
            elif nxt == '>':  # <> opens the file for reading and writing
                fr.buf.append(f' {_W} ')
                i += 2
            else:
                fr.buf.append(f' {_R} ')
                i += 2 if nxt == '&' else 1
        else:
            fr.buf.append(c)
            i += 1
    if len(frames) != 1 or frames[0].dq:
        raise ShellParseError('unbalanced quotes, brackets or backticks')
    if heredocs:
        raise ShellParseError('an unterminated here-document')
    flush(frames[0])
    return segments, subs


def _strip_fd_number(buf: list) -> None:
    """Drop the descriptor number of a redirection such as ``2>`` from the word buffer."""
    text = ''.join(buf)
    m = re.search(r'(?:^|(?<=\s))\d+$', text)
    if m:
        buf[:] = [text[:m.start()]]


def _skip_heredocs(text: str, i: int, heredocs: list) -> int:
    """Skip the bodies of the here-documents begun on the line that ended at i; return the new index."""
    for delim, strip_tabs, quoted in heredocs:
        body = []
        while True:
            if i >= len(text):
                raise ShellParseError(f'the here-document {delim!r} is not terminated')
            j = text.find('\n', i)
            line = text[i:] if j < 0 else text[i:j]
            i = len(text) if j < 0 else j + 1
            if (line.lstrip('\t') if strip_tabs else line) == delim:
                break
            body.append(line)
        if not quoted and any('$(' in line or '`' in line for line in body):
            raise ShellParseError('an unquoted here-document runs command substitutions')
    return i


# Wrappers: short options that take a value, long options that take one, operands before the command.
_WRAPPERS = {
    'sudo': ('ugChpDrtUTR', {'--user', '--group', '--close-from', '--host', '--prompt', '--chdir', '--role',
                             '--type', '--other-user', '--command-timeout', '--chroot'}, 0),
    'doas': ('uC', set(), 0),
    'env': ('uCS', {'--unset', '--chdir', '--split-string'}, 0),
    'nohup': ('', set(), 0),
    'nice': ('n', {'--adjustment'}, 0),
    'ionice': ('cnpPtu', {'--class', '--classdata', '--pid', '--pgid', '--uid'}, 0),
    'timeout': ('sk', {'--signal', '--kill-after'}, 1),
    'setsid': ('', set(), 0),
    'exec': ('a', set(), 0),
    'command': ('', set(), 0),
    'builtin': ('', set(), 0),
    'time': ('fo', {'--format', '--output'}, 0),
    'stdbuf': ('ioe', {'--input', '--output', '--error'}, 0),
    'chroot': ('', {'--userspec', '--groups'}, 1),
    'flock': ('wEc', {'--timeout', '--conflict-exit-code', '--command'}, 1),
    'systemd-run': ('upEMHtG', {'--unit', '--property', '--setenv', '--machine', '--host', '--uid', '--gid',
                                '--nice', '--working-directory', '--description', '--slice', '--on-active',
                                '--on-boot', '--on-calendar', '--timer-property', '--path-property'}, 0),
    'xargs': ('adEILnPs', {'--arg-file', '--delimiter', '--max-lines', '--max-args', '--max-procs',
                           '--max-chars', '--process-slot-var'}, 0),
    'watch': ('nd', {'--interval'}, 0),
    'busybox': ('', set(), 0),
}


def _unwrap(name: str, args: list) -> tuple[list, dict]:
    """Split a wrapper's arguments: (the command it runs, {option: value} it was given)."""
    short_vals, long_vals, positional = _WRAPPERS[name]
    opts: dict = {}
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == '--':
            i += 1
            break
        if tok.startswith('--'):
            key, eq, val = tok.partition('=')
            if not eq and key in long_vals and i + 1 < len(args):
                val, i = args[i + 1], i + 1
            opts[key] = val
            i += 1
            continue
        if tok.startswith('-') and len(tok) > 1 and not (name == 'nice' and tok[1:].isdigit()):
            for k, ch in enumerate(tok[1:], start=1):
                if ch in short_vals:
                    val = tok[k + 1:]
                    if not val and i + 1 < len(args):
                        val, i = args[i + 1], i + 1
                    opts['-' + ch] = val
                    break
                opts['-' + ch] = ''
            i += 1
            continue
        if name in ('env', 'sudo') and re.match(r'[A-Za-z_][A-Za-z0-9_]*=', tok):
            i += 1
            continue
        break
    return args[i + positional:], opts


def _shell_script(args: list) -> tuple[str | None, bool]:
    """For ``sh ARGS``: (the -c command string or None, whether a script file operand is given)."""
    has_c = False
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == '--':
            i += 1
            break
        if tok[:1] in ('-', '+') and len(tok) > 1:
            has_c = has_c or 'c' in tok[1:]
            if tok[-1] in 'oO' and tok[0] in '-+':  # -o OPTION / -O SHOPT take a value
                i += 1
            i += 1
            continue
        break
    if i < len(args):
        return (args[i], False) if has_c else (None, True)
    return None, False


def _find_parts(args: list) -> tuple[list, list, bool]:
    """``find`` arguments: (start paths, argvs of -exec/-execdir/-ok/-okdir, whether it has -delete)."""
    paths, execs, delete = [], [], False
    i = 0
    while i < len(args) and not args[i].startswith('-') and args[i] not in ('(', '!', ')'):
        paths.append(args[i])
        i += 1
    while i < len(args):
        tok = args[i]
        if tok == '-delete':
            delete = True
        if tok in ('-exec', '-execdir', '-ok', '-okdir'):
            j = i + 1
            while j < len(args) and args[j] not in (';', '+'):
                j += 1
            execs.append(args[i + 1:j])
            i = j
        i += 1
    return paths, execs, delete


def _expand(cmd: ShellCommand, depth: int, stdin: str | None = None) -> list[ShellCommand]:
    """The command and every command it has run: wrappers (sudo, env, xargs...), ``sh -c``,
    ``su -c``, ``eval``, ``find -exec`` (once with ``{}``, once per start path in its place)."""
    if depth > _MAX_NESTING:
        raise ShellParseError('commands are nested too deeply')
    argv = list(cmd.argv)
    while argv and (argv[0] in _RESERVED or re.match(r'[A-Za-z_][A-Za-z0-9_]*=', argv[0])):
        argv.pop(0)
    out = [ShellCommand(argv, list(cmd.writes))]
    if not argv:
        return out
    name, args = posixpath.basename(argv[0]), argv[1:]
    inner: list[list] = []
    scripts: list[str] = []
    if name == 'busybox' and args and args[0] in _SHELLS:
        name, args = args[0], args[1:]
    if name in _SHELLS:
        script, has_file = _shell_script(args)
        if script is not None:
            scripts.append(script)
        elif not has_file and stdin is not None:
            scripts.append(stdin)
    elif name == 'eval':
        scripts.append(' '.join(args))
    elif name in ('su', 'runuser'):
        for k, tok in enumerate(args):
            if tok in ('-c', '--command') and k + 1 < len(args):
                scripts.append(args[k + 1])
            elif tok.startswith('--command='):
                scripts.append(tok.split('=', 1)[1])
        if '--' in args:
            inner.append(args[args.index('--') + 1:])
    elif name == 'find':
        paths, execs, _delete = _find_parts(args)
        for ex in execs:
            inner.append(ex)
            inner += [[p if a == '{}' else a for a in ex] for p in paths]
    elif name in _WRAPPERS:
        rest, opts = _unwrap(name, args)
        if name == 'env' and ('-S' in opts or '--split-string' in opts):
            rest = shlex.split(opts.get('-S') or opts.get('--split-string') or '') + rest
        if name == 'flock' and ('-c' in opts or '--command' in opts):
            scripts.append(opts.get('-c') or opts.get('--command') or '')
        elif name == 'watch':
            scripts.append(' '.join(rest))
        elif name == 'command' and ('-v' in opts or '-V' in opts):
            rest = []
        elif name == 'xargs' and rest:
            rest = rest + ['$(stdin)']
        elif name == 'xargs':
            rest = ['echo']
        if rest and name not in ('watch',):
            inner.append(rest)
    for argv_ in inner:
        out += _expand(ShellCommand(list(argv_)), depth + 1)
    for script in scripts:
        for sub in split_shell(script):
            out += _expand(sub, depth + 1)
    return out


def _shell_text_reasons(text: str, policy: GatePolicy, stdin: str | None = None) -> list[str]:
    """Banned-pattern reasons for a shell line (shell module, cron job)."""
    try:
        cmds = [c for top in split_shell(text) for c in _expand(top, 0, stdin)]
    except ShellParseError as ex:
        return [f'cannot check this shell command ({ex}): {_short(text)}']
    return _commands_reasons(cmds, policy)


def _argv_text_reasons(text: str, policy: GatePolicy, stdin: str | None = None) -> list[str]:
    """Banned-pattern reasons for a command line run without a shell (command module, validate)."""
    try:
        cmds = _expand(ShellCommand(shlex.split(text)), 0, stdin)
    except (ShellParseError, ValueError) as ex:
        return [f'cannot check this command ({ex}): {_short(text)}']
    return _commands_reasons(cmds, policy)


def _command_module_reasons(fqcn: str, args: dict, policy: GatePolicy) -> list[str]:
    raw = args.get('_raw_params')
    if raw in (None, ''):
        raw = args.get('cmd')
    stdin = args.get('stdin') if isinstance(args.get('stdin'), str) else None
    if fqcn == 'ansible.builtin.shell':
        exe = args.get('executable')
        if exe is not None and not (isinstance(exe, str) and posixpath.dirname(exe) in _SHELL_DIRS
                                    and posixpath.basename(exe) in _SHELLS):
            return [f'executable {exe!r} is not a known shell (use /bin/sh or /bin/bash)']
        if not isinstance(raw, str):
            return ['cannot check this shell command: no command line given']
        return _shell_text_reasons(raw, policy, stdin)
    argv = args.get('argv')
    if argv is not None:
        if not isinstance(argv, list) or not argv or not all(isinstance(a, (str, int, float)) for a in argv):
            return ['argv must be a non-empty list of strings']
        try:
            cmds = _expand(ShellCommand([str(a) for a in argv]), 0, stdin)
        except ShellParseError as ex:
            return [f'cannot check this command ({ex})']
        return _commands_reasons(cmds, policy)
    if not isinstance(raw, str):
        return ['cannot check this command: no command line given']
    return _argv_text_reasons(raw, policy, stdin)


def _short(text: t.Any, limit: int = 100) -> str:
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _commands_reasons(cmds: list, policy: GatePolicy) -> list[str]:
    out: list[str] = []
    for cmd in cmds:
        out += _command_reasons(cmd, policy)
    return list(dict.fromkeys(out))


# Commands that only read: arguments naming sudoers or authorized_keys are fine for them.
_READ_ONLY_COMMANDS = frozenset({
    'cat', 'grep', 'egrep', 'fgrep', 'zgrep', 'head', 'tail', 'less', 'more', 'wc', 'stat', 'ls', 'file',
    'sha256sum', 'sha1sum', 'sha512sum', 'md5sum', 'cksum', 'test', '[', '[[', 'diff', 'cmp', 'readlink',
    'realpath', 'basename', 'dirname', 'echo', 'printf', 'lsattr', 'getfacl', 'id', 'getent', 'true',
    'false', 'find', 'pgrep', 'sshd', 'dpkg-query',
})


def _command_reasons(cmd: ShellCommand, policy: GatePolicy) -> list[str]:
    out: list[str] = []
    shown = _short(shlex.join(cmd.argv) if cmd.argv else '', 80)
    for target in cmd.writes:
        root = _special_tree(target)
        if root:
            out.append(f'`{shown}` writes {target}, under {root}')
        if _is_sudoers_path(target):
            out.append(f'`{shown}` writes {target} through a redirection: sudoers may only be changed with'
                       ' lineinfile, blockinfile or replace and validate: visudo -cf %s')
        if _is_ssh_access_path(target, policy):
            out.append(f'`{shown}` writes {target}: the SSH access (authorized_keys) the controller logs in with')
    argv = cmd.argv
    if not argv:
        return out
    if any(m in argv[0] for m in ('$', '`', _MARK)):
        return out + [f'cannot check this shell command: the command name in `{shown}` comes from a variable'
                      ' or a substitution']
    name, args = posixpath.basename(argv[0]), argv[1:]
    if argv[0].startswith(('/etc/init.d/', '/etc/rc.d/init.d/')):
        out += _init_script_reasons(name, args[:1], shown)
    check = _COMMAND_CHECKS.get(name)
    if check is not None:
        out += check(name, args, policy, shown)
    paths, metadata_only = _command_targets(name, args)
    for path in paths:
        root = _special_tree(path)
        if root and not (root == '/boot' and metadata_only):
            out.append(f'`{shown}` writes {path}, under {root}')
    if _mutates(name, args):
        for arg in args:
            for path in (arg, arg.split('=', 1)[1] if '=' in arg else None):
                if path is None:
                    continue
                if _is_sudoers_path(path):
                    out.append(f'`{shown}` changes {path} from a command: sudoers may only be changed with lineinfile,'
                               ' blockinfile or replace and validate: visudo -cf %s')
                elif _is_ssh_access_path(path, policy):
                    out.append(f'`{shown}` touches {path}: the SSH access (authorized_keys) the controller'
                               ' logs in with')
    return out


def _mutates(name: str, args: list) -> bool:
    if name in _READ_ONLY_COMMANDS:
        return False
    if name == 'sed':
        return _sed_in_place(args)
    if name == 'visudo':
        return not any(a == '--check' or (a.startswith('-') and not a.startswith('--') and 'c' in a) for a in args)
    return True


def _sed_in_place(args: list) -> bool:
    for a in args:
        if a.startswith('--in-place'):
            return True
        if a.startswith('-') and not a.startswith('--'):
            for ch in a[1:]:
                if ch == 'i':
                    return True
                if ch in 'efl':  # takes a value: the rest of the word or the next one
                    break
    return False


def _operands(args: list, short_vals: str = '', long_vals: tuple = ()) -> list:
    """Arguments that are not options or option values (``--`` ends the options)."""
    out, i = [], 0
    while i < len(args):
        tok = args[i]
        if tok == '--':
            return out + args[i + 1:]
        if tok.startswith('--'):
            if '=' not in tok and tok in long_vals:
                i += 1
        elif tok.startswith('-') and len(tok) > 1:
            for k, ch in enumerate(tok[1:], start=1):
                if ch in short_vals:
                    if k == len(tok) - 1:
                        i += 1
                    break
        else:
            out.append(tok)
        i += 1
    return out


def _command_targets(name: str, args: list) -> tuple[list, bool]:
    """Paths a file-writing command writes: (paths, True when it changes only owner/mode/attributes)."""
    if name == 'tee':
        return _operands(args), False
    if name == 'dd':
        return [a[3:] for a in args if a.startswith('of=')], False
    if name in ('cp', 'install', 'ln'):
        ops = _operands(args, 'tSgmo' if name == 'install' else 'tS', ('--target-directory', '--suffix'))
        target = [a.split('=', 1)[1] for a in args if a.startswith('--target-directory=')]
        for k, a in enumerate(args):
            if a == '-t' and k + 1 < len(args):
                target.append(args[k + 1])
        if name == 'install' and any(a == '-d' or a == '--directory' for a in args):
            return ops, False
        return target or ops[-1:], False
    if name in ('mv', 'touch', 'mkdir', 'rmdir', 'shred', 'unlink', 'rm'):
        return _operands(args, 'tSmrd' if name in ('touch', 'mv') else 'm' if name == 'mkdir' else ''), False
    if name == 'truncate':
        return _operands(args, 'sr', ('--size', '--reference')), False
    if name == 'sed' and _sed_in_place(args):
        ops = _operands(args, 'efl', ('--expression', '--file', '--line-length'))
        scripted = any(a in ('-e', '-f', '--expression', '--file') or a.startswith(('--expression=', '--file='))
                       for a in args)
        return ops if scripted else ops[1:], False
    if name == 'perl' and any(a.startswith('-') and not a.startswith('--') and 'i' in a[1:] for a in args):
        return _operands(args, 'eEIMm'), False
    if name in ('chmod', 'chown', 'chgrp'):
        ops = _operands(args)
        return (ops if any(a.startswith('--reference') for a in args) else ops[1:]), True
    if name in ('chattr', 'setfacl'):
        return [a for a in _operands(args, 'vpmMxX') if a.startswith('/')], True
    return [], False


def _reboot_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    return [f'`{shown}` would reboot or power off the host']


def _init_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    if name == 'telinit' or (args and args[0] in ('0', '6', '1', 's', 'S', 'single', 'emergency')):
        return [f'`{shown}` changes the runlevel: it would reboot, halt or drop the host to single-user mode']
    return []


_SYSTEMCTL_SHORT_VALUES = 'tspPHMon'
_SYSTEMCTL_LONG_VALUES = frozenset({
    '--type', '--state', '--property', '--signal', '--kill-whom', '--kill-value', '--host', '--machine',
    '--root', '--image', '--output', '--lines', '--job-mode', '--what', '--timestamp', '--boot-loader-entry',
    '--boot-loader-menu', '--reboot-argument', '--message', '--when', '--preset-mode', '--check-inhibitors',
    '--drop-in',
})


def _systemctl_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    ops = _operands(args, _SYSTEMCTL_SHORT_VALUES, tuple(_SYSTEMCTL_LONG_VALUES))
    if not ops:
        return []
    verb, units = ops[0], ops[1:]
    now = '--now' in args
    out = []
    if verb in _SHUTDOWN_VERBS:
        out.append(f'`{shown}` would reboot, power off or suspend the host')
    if verb == 'isolate':
        out.append(f'`{shown}` isolates a target: every service it lacks stops, sshd among them')
    starting = verb in ('start', 'restart', 'try-restart', 'reload-or-restart', 'try-reload-or-restart') \
        or (verb == 'enable' and now)
    if starting and any(_is_shutdown_unit(u) for u in units):
        out.append(f'`{shown}` would reboot or power off the host')
    for unit in units:
        if _is_ssh_unit(unit):
            if verb in ('stop', 'kill', 'freeze') or (verb in ('disable', 'mask') and now):
                out.append(f'`{shown}` stops {unit}: no new SSH login (the health check, the next run) would get in')
            elif verb in ('disable', 'mask'):
                out.append(f'`{shown}` {verb}s {unit}: sshd would not start again after a reboot')
            elif verb in ('restart', 'try-restart', 'condrestart'):
                out.append(f'`{shown}` restarts {unit}: with a broken configuration sshd then stays stopped;'
                           ' use `systemctl reload ssh` (ssh.service checks the file with sshd -t first)')
        if _is_network_unit(unit) and verb in ('stop', 'kill', 'disable', 'mask'):
            out.append(f'`{shown}` would take the network, and the SSH connection, down')
    return out


def _service_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    ops = [a for a in args if not a.startswith('-')]
    if name == 'update-rc.d':
        if ops and _is_ssh_unit(ops[0]) and any(a in ('remove', 'disable', 'stop') for a in ops[1:]):
            return [f'`{shown}` disables sshd at boot']
        return []
    if name == 'chkconfig':
        if any(_is_ssh_unit(a) for a in ops) and ('off' in ops or '--del' in args):
            return [f'`{shown}` disables sshd at boot']
        return []
    if not ops:
        return []
    action = ops[1] if len(ops) > 1 else ('restart' if '--full-restart' in args else '')
    return _init_script_reasons(ops[0], [action], shown)


def _init_script_reasons(unit: str, actions: list, shown: str) -> list[str]:
    action = actions[0] if actions else ''
    if _is_ssh_unit(unit) and action in ('stop', 'force-stop'):
        return [f'`{shown}` stops sshd: no new SSH login (the health check, the next run) would get in']
    if _is_ssh_unit(unit) and action in ('restart', 'try-restart', 'condrestart'):
        return [f'`{shown}` restarts sshd: with a broken configuration sshd then stays stopped; use reload']
    if _is_network_unit(unit) and action in ('stop', 'force-stop'):
        return [f'`{shown}` would take the network, and the SSH connection, down']
    return []


def _kill_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    out = []
    if any('ssh' in a.lower() for a in args):
        out.append(f'`{shown}` signals sshd: SSH logins would stop; use `systemctl reload ssh`')
    user = policy.remote_user
    if user and name != 'kill' and any(a == user or a.endswith(('=' + user, '-u' + user, '-U' + user))
                                       or a.split(',').count(user) for a in args):
        out.append(f'`{shown}` kills the processes of the connecting user {user}, the Ansible session among them')
    if name == 'kill':
        rest = args[2:] if args[:1] in (['-s'], ['-n']) else args[1:] if args[:1] and args[0].startswith('-') else args
        if '-1' in rest or (rest[:1] == ['--'] and '-1' in rest[1:]):
            out.append(f'`{shown}` signals every process of the host')
    if name == 'loginctl' and args:
        if args[0] in ('terminate-session', 'kill-session', 'terminate-seat'):
            out.append(f'`{shown}` ends login sessions, perhaps the Ansible one')
        if args[0] in ('terminate-user', 'kill-user') and user and user in args[1:]:
            out.append(f'`{shown}` ends every session of the connecting user {user}')
    return out


def _user_command_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    user = policy.remote_user
    if not user or not any(user in a for a in args):
        return []
    who = f'the connecting user {user}'
    if name in ('userdel', 'deluser'):
        ops = _operands(args, 'RP', ('--root', '--prefix', '--conf', '--backup-to'))
        return [f'`{shown}` removes {who} (or its group membership)'] if ops[:1] == [user] else []
    if name == 'gpasswd':
        for k, a in enumerate(args):
            if a in ('-d', '--delete') and k + 1 < len(args) and args[k + 1] == user:
                return [f'`{shown}` removes {who} from a group (its sudo group perhaps)']
        return []
    specs = {
        'usermod': ('abc:d:e:f:g:G:hl:Lmop:R:P:s:u:UZ:v:V:w:W:',
                    ['append', 'badname', 'comment=', 'home=', 'expiredate=', 'inactive=', 'gid=', 'groups=', 'help',
                     'login=', 'lock', 'move-home', 'non-unique', 'password=', 'prefix=', 'root=', 'shell=', 'uid=',
                     'unlock', 'add-subuids=', 'del-subuids=', 'add-subgids=', 'del-subgids=', 'selinux-user=']),
        'passwd': ('adehi:kln:qr:R:P:Suw:x:',
                   ['all', 'delete', 'expire', 'help', 'keep-tokens', 'inactive=', 'lock', 'mindays=', 'quiet',
                    'repository=', 'root=', 'prefix=', 'status', 'unlock', 'warndays=', 'maxdays=', 'stdin']),
        'chage': ('d:E:hiI:lm:M:R:P:W:',
                  ['lastday=', 'expiredate=', 'help', 'iso8601', 'inactive=', 'list', 'mindays=', 'maxdays=', 'root=',
                   'prefix=', 'warndays=']),
    }
    shortopts, longopts = specs[name]
    try:
        opts, ops = getopt.gnu_getopt(args, shortopts, longopts)
    except getopt.GetoptError as ex:
        return [f'cannot check `{shown}` ({ex}) and it names the connecting user {user}']
    if ops[-1:] != [user]:
        return []
    given = {}
    for opt, val in opts:
        given[opt] = val
    out = []
    if name == 'usermod':
        if '-L' in given or '--lock' in given:
            out.append(f'`{shown}` locks {who}')
        expiry = given.get('-e', given.get('--expiredate'))
        if expiry is not None and expiry not in ('', '-1'):
            out.append(f'`{shown}` sets an account expiry date on {who}')
        shell = given.get('-s', given.get('--shell'))
        if shell in _NOLOGIN_SHELLS:
            out.append(f'`{shown}` gives {who} the shell {shell}: its logins would be refused')
        password = given.get('-p', given.get('--password'))
        if password is not None and password.startswith(('!', '*')):
            out.append(f'`{shown}` locks the password of {who}')
        if '-l' in given or '--login' in given:
            out.append(f'`{shown}` renames {who}: the controller logs in by that name')
        if ('-G' in given or '--groups' in given) and not ('-a' in given or '--append' in given):
            out.append(f'`{shown}` replaces the groups of {who} (its sudo/wheel membership may go); use -aG')
    if name == 'passwd':
        if '-l' in given or '--lock' in given:
            out.append(f'`{shown}` locks the password of {who}')
        if '-e' in given or '--expire' in given:
            out.append(f'`{shown}` expires the password of {who}: its non-interactive logins would fail')
    if name == 'chage':
        expiry = given.get('-E', given.get('--expiredate'))
        if expiry is not None and expiry != '-1':
            out.append(f'`{shown}` sets an account expiry date on {who}')
        if given.get('-d', given.get('--lastday')) == '0':
            out.append(f'`{shown}` forces a password change on {who}: its non-interactive logins would fail')
    return out


_PACKAGE_REMOVE_VERBS = {
    'apt': {'remove', 'purge', 'autoremove', 'autopurge'}, 'apt-get': {'remove', 'purge', 'autoremove'},
    'aptitude': {'remove', 'purge'}, 'dnf': {'remove', 'erase', 'autoremove'}, 'dnf5': {'remove', 'autoremove'},
    'yum': {'remove', 'erase', 'autoremove'}, 'microdnf': {'remove'},
}


def _package_command_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    ops = [a for a in args if not a.startswith('-')]
    removing: list = []
    if name in _PACKAGE_REMOVE_VERBS:
        verbs = [k for k, a in enumerate(ops) if a in _PACKAGE_REMOVE_VERBS[name] or a in ('install', 'reinstall')]
        if verbs:
            k = verbs[0]
            if ops[k] in ('install', 'reinstall'):
                removing = [p[:-1] for p in ops[k + 1:] if p.endswith('-')]
            else:
                removing = ops[k + 1:]
    elif name == 'rpm':
        if any(a == '--erase' or (a.startswith('-') and not a.startswith('--') and 'e' in a[1:]) for a in args):
            removing = ops
    elif name == 'dpkg':
        if any(a in ('-r', '-P', '--remove', '--purge') for a in args):
            removing = ops
    hit = sorted({p for p in removing if _package_base(p) in _ACCESS_PACKAGES})
    if hit:
        return [f'`{shown}` removes {", ".join(hit)}: the host would lose SSH, sudo or the Python Ansible needs']
    return []


def _rm_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    recursive, ops, done = False, [], False
    out = []
    for a in args:
        if not done and a == '--':
            done = True
        elif not done and a.startswith('--'):
            recursive = recursive or a == '--recursive'
            if a == '--no-preserve-root':
                out.append(f'`{shown}`: --no-preserve-root is never allowed')
        elif not done and a.startswith('-') and len(a) > 1:
            recursive = recursive or 'r' in a or 'R' in a
        else:
            ops.append(a)
    return out + _removal_command_reasons(shown, ops, recursive, policy)


def _removal_command_reasons(shown: str, ops: list, recursive: bool, policy: GatePolicy) -> list[str]:
    out = []
    for op in ops:
        if recursive:
            problem = _explicit_path_problem(op)
            if problem:
                out.append(f'`{shown}` removes {op!r} recursively and {problem}: recursive removal takes only'
                           ' explicit absolute paths at least two levels deep, without globs or variables')
                continue
        norm = _norm(op)
        if norm and not _is_sudoers_path(norm) and not _is_ssh_access_path(norm, policy):
            out += [f'`{shown}` {r}' for r in _removal_reasons(norm, policy)]
    return out


def _find_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    paths, _execs, delete = _find_parts(args)
    if not delete:
        return []
    return _removal_command_reasons(shown, paths or ['.'], True, policy)


def _sysctl_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    for a in args:
        write = a == '--write' or (a.startswith('-') and not a.startswith('--') and 'w' in a[1:]) \
            or (not a.startswith('-') and '=' in a)
        if write:
            return [f'`{shown}` writes kernel parameters under /proc/sys at once; persist them in /etc/sysctl.d'
                    ' (ansible.posix.sysctl) and let its reload apply the file']
    return []


def _umount_reasons(name: str, args: list, policy: GatePolicy, shown: str) -> list[str]:
    return [f'`{shown}` unmounts a filesystem: remediation changes mount options, it does not unmount']


_COMMAND_CHECKS: dict = {
    **dict.fromkeys(_SHUTDOWN_COMMANDS, _reboot_reasons),
    'init': _init_reasons, 'telinit': _init_reasons,
    'systemctl': _systemctl_reasons,
    'service': _service_reasons, 'invoke-rc.d': _service_reasons, 'update-rc.d': _service_reasons,
    'chkconfig': _service_reasons,
    'kill': _kill_reasons, 'pkill': _kill_reasons, 'killall': _kill_reasons, 'skill': _kill_reasons,
    'loginctl': _kill_reasons,
    'userdel': _user_command_reasons, 'deluser': _user_command_reasons, 'usermod': _user_command_reasons,
    'passwd': _user_command_reasons, 'chage': _user_command_reasons, 'gpasswd': _user_command_reasons,
    **dict.fromkeys(list(_PACKAGE_REMOVE_VERBS) + ['rpm', 'dpkg'], _package_command_reasons),
    'rm': _rm_reasons, 'find': _find_reasons, 'sysctl': _sysctl_reasons, 'umount': _umount_reasons,
}
