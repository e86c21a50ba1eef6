# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a task list (a vendor fix or LLM-written tasks) inside a running action plugin.

DESIGN decision 1: the tasks run on the action plugin's own connection, loaded and
evaluated by Ansible's own classes: ``Block``/``Task`` loading (which uses
ModuleArgsParser), plugin routing for module names, the template engine (2.19+) for
arguments, loops and ``when``/``failed_when``/``changed_when``, the action loader for
every task (controller-side action plugins such as copy/template/set_fact/package/
command, and ``ansible.legacy.normal`` -> the module itself for plain modules), exactly
as ``TaskExecutor`` picks a handler. What differs between ansible-core 2.19, 2.20 and 2.21
(conditionals, action exceptions, register, where an action's variables go) is behind
:mod:`.ansible_private`.  Check mode reaches a module only through the Task
object each handler is given (``_update_module_args`` reads ``task.check_mode``); the
executor never writes ``_ansible_check_mode`` into arguments and never mutates the calling
action's own Task.

Trust (DESIGN decision 2): with ``trusted=True`` every string of the task list is tagged
TrustedAsTemplate, so vendor ``{{ }}`` render as in a playbook.  With ``trusted=False`` the
strings stay untrusted: ansible-core (2.19+) does not render them, and the gate
(:mod:`.task_gate`) refuses any Jinja before anything runs; conditionals of untrusted tasks
pass a safe-expression check before they are evaluated.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import shlex
import time
import typing as t

from ansible import constants as C
from ansible.errors import AnsibleAction, AnsibleConnectionFailure, AnsibleError
from ansible.playbook.block import Block
from ansible.playbook.task import Task
from ansible.template import trust_as_template
from ansible.utils.vars import combine_vars
from ansible.vars.clean import clean_facts, namespace_facts, strip_internal_keys

from ansible_collections.scapforge.remediation.plugins.plugin_utils import ansible_private, ledger, task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils.redact import redact

MSG_LIMIT = 500
_CONDITIONAL_KEYS = ('when', 'failed_when', 'changed_when')
# Keywords accepted by the gate but not handed to Ansible's Task loader: tags are ignored;
# become is the host's (the action's connection already carries its become plugin).
_STRIPPED_KEYWORDS = ('tags', 'become')
#: actions only the loop itself runs (``TaskListExecutor.run_loop_action``), never a fix: the
#: reboot of deferred fixes, and fetching the scans' ARF results to the controller.
LOOP_ACTIONS = frozenset({'ansible.builtin.reboot', 'ansible.builtin.fetch'})
#: the most characters of one task's diff kept in a report (a rewritten large file says so).
DIFF_LIMIT = 20000
#: the failed service task's unit journal, its last lines (read-only; no pager, no colour).
JOURNAL_TAIL = 'journalctl -u %s -n 20 --no-pager -o short-monotonic 2>&1 | tail -c 2000'
JOURNAL_LIMIT = 1500


#: modules whose change can install, remove or upgrade packages: after one of them changed
#: something, the next package_facts gathers again (commands included: `apt-get install`).
PACKAGE_CHANGING = frozenset({
    'ansible.builtin.apt', 'ansible.builtin.package', 'ansible.builtin.dnf', 'ansible.builtin.dnf5',
    'ansible.builtin.yum', 'ansible.builtin.apt_rpm', 'ansible.builtin.dpkg_selections', 'ansible.builtin.pip',
    'ansible.builtin.command', 'ansible.builtin.shell', 'ansible.builtin.script', 'ansible.builtin.raw',
    'community.general.zypper', 'community.general.pacman', 'community.general.apk', 'community.general.snap',
    'community.general.flatpak', 'community.general.rpm_ostree_pkg',
})
PACKAGE_FACTS = 'ansible.builtin.package_facts'


class PackageFactsCache:
    """A host's package facts for one run: the first ``package_facts`` a fix runs gathers them;
    every later one (same arguments) is answered from here, until a task of PACKAGE_CHANGING
    changes something or a checkpoint is restored (``invalidate``). Issue 9: every SSG fix
    starts with ``package_facts`` (about 140 module runs a run on the lab, each a round trip
    and a package database read).

    gathered / served: how many package_facts ran for real / were answered from the cache.
    """

    def __init__(self) -> None:
        self._facts: dict[str, dict] = {}  # the task's arguments (JSON) -> its ansible_facts
        self.gathered = 0
        self.served = 0

    @staticmethod
    def key(args: dict) -> str:
        """The task's own arguments as JSON (the module runner adds ``_ansible_*`` keys to a
        task's args while it runs: they are left out)."""
        own = {k: v for k, v in (args or {}).items() if not str(k).startswith('_ansible_')}
        return json.dumps(own, sort_keys=True, default=str)

    def get(self, args: dict) -> dict | None:
        facts = self._facts.get(self.key(args))
        return copy.deepcopy(facts) if facts is not None else None

    def put(self, args: dict, facts: dict) -> None:
        self._facts[self.key(args)] = copy.deepcopy(facts)

    def invalidate(self) -> None:
        self._facts.clear()

    def serve(self, fqcn: str, args: dict) -> dict | None:
        """The result of a package_facts task from this cache, or None to run it."""
        if fqcn != PACKAGE_FACTS:
            return None
        facts = self.get(args)
        if facts is None:
            return None
        self.served += 1
        return dict(changed=False, ansible_facts=facts, msg='package facts of this run, unchanged since gathered')

    def remember(self, fqcn: str, args: dict, result: dict, check_mode: bool) -> None:
        """Keep what a package_facts task gathered; forget it when a task changed packages."""
        if fqcn == PACKAGE_FACTS and not result.get('failed') and isinstance(result.get('ansible_facts'), dict):
            self.gathered += 1
            self.put(args, result['ansible_facts'])
        elif fqcn in PACKAGE_CHANGING and (result.get('changed') or result.get('failed')) and not check_mode:
            self.invalidate()


@dataclasses.dataclass
class ExecutionReport:
    """Outcome of one task-list run on one host.

    ok: True when no task failed (ignored failures do not count) and nothing was refused.
    changed: any executed task not in check mode reported changed.
    refused: the gate's reason(s) when nothing ran (YAML error, unknown keyword/module,
      bad argument, Jinja in untrusted tasks); None when the list passed the gate.
    failed_task: name of the first task that failed (not ignored); None otherwise.
    error: that task's message (module msg plus stderr), trimmed to ~500 characters.
    unreachable: the connection failed during the run (the host may be cut off).
    modules: canonical FQCNs of modules/actions actually executed, in first-run order.
    task_results: one dict per task reached, in order: name, module (FQCN), changed,
      failed, skipped, ignored (failed but ignore_errors), check_mode (ran as a check:
      its changed is what it would change, and does not count in ``changed``), msg (trimmed),
      seconds (wall time of the task, its loop included, without the ``before_change`` hook's);
      a failed service task's entry also has ``journal``, the last lines of its unit's journal,
      and a command or shell task's ``stdout`` (its last 600 characters, redacted).
    results: the raw results of the tasks reached (internal keys stripped), only when the run
      asked for them (``keep_results``; read-only probes need what the module returned).
    diffs: with the executor's ``diff`` on, one dict per task that changed the host and whose
      module returned a diff (Ansible's diff mode, ``--diff``: lineinfile, copy, template,
      blockinfile, replace, file...): {task, module, diff (unified diff text, at most
      DIFF_LIMIT characters, secrets redacted: ``redact.redact``)}. Modules without diff
      support (command, shell) give none.
    refusals: the gate's refusals behind ``refused``, each ``Refusal.to_dict()`` (code, task,
      problem, subject); [] when the list passed or was refused before the gate (YAML error).
      Not in :meth:`to_dict`: the attempt keeps them (``Attempt.gate_refusals``).
    changes: what the tasks changed, one dict per change of each changed execution (loop
      items one by one; ``ledger.task_changes``): {task, module, kind (file, package, service,
      cron, user, group), target, change}, file entries with their task's ``diff`` when it
      gave one; the change ledger's source (issue 17).
    """

    ok: bool = True
    changed: bool = False
    refused: str | None = None
    failed_task: str | None = None
    error: str | None = None
    unreachable: bool = False
    modules: list = dataclasses.field(default_factory=list)
    task_results: list = dataclasses.field(default_factory=list)
    results: list = dataclasses.field(default_factory=list)
    diffs: list = dataclasses.field(default_factory=list)
    refusals: list = dataclasses.field(default_factory=list)
    changes: list = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        """Return a plain JSON-serialisable dict with the fields above (``results`` and ``refusals`` left out)."""
        data = dataclasses.asdict(self)
        del data['results'], data['refusals']
        return data

    @classmethod
    def refusal(cls, reason: str, refusals: t.Sequence[task_gate.Refusal] = ()) -> 'ExecutionReport':
        """A report for a list refused before anything ran; refusals: the gate's, with their codes."""
        return cls(ok=False, refused=reason, refusals=[r.to_dict() for r in refusals])


def _trim(text: t.Any, limit: int = MSG_LIMIT) -> str:
    """At most ``limit`` characters, keeping the head and the tail: tools such as
    ``sysctl -p`` print the cause of a failure last, after pages of output."""
    text = str(text).strip()
    if len(text) <= limit:
        return text
    head = limit * 2 // 5
    return text[:head] + ' ... ' + text[-(limit - head - 5):]


def _deep_trust(value: t.Any) -> t.Any:
    """Return a copy of value with every str tagged TrustedAsTemplate (keys left as they are)."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _deep_trust(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_trust(v) for v in value]
    return value


def _diff_lines(text: t.Any) -> list[str]:
    if text is None:
        text = ''
    elif not isinstance(text, str):  # file's {path, mode, state...}: one key a line
        text = json.dumps(text, indent=2, sort_keys=True, default=str) + '\n'
    lines = text.splitlines(True)
    if lines and not lines[-1].endswith('\n'):
        lines[-1] += '\n\\ No newline at end of file\n'
    return lines


def unified_diff(diff: t.Any) -> str:
    """A module's ``diff`` return value (a dict or a list of dicts with ``before``/``after``
    and optional ``before_header``/``after_header``, or ``prepared`` text) as unified diff
    text, as ansible-core's callbacks print it under ``--diff`` (CallbackBase._get_diff,
    without colour). Binary and oversized files are named, not diffed."""
    parts: list[str] = []
    for entry in diff if isinstance(diff, list) else [diff]:
        if not isinstance(entry, dict):
            continue
        for key, what in (('dst_binary', 'destination file appears to be binary'),
                          ('src_binary', 'source file appears to be binary'),
                          ('dst_larger', 'destination file is too large'), ('src_larger', 'source file is too large')):
            if key in entry:
                parts.append('diff skipped: %s\n' % what)
        if 'before' in entry and 'after' in entry:
            before = 'before: %s' % entry['before_header'] if 'before_header' in entry else 'before'
            after = 'after: %s' % entry['after_header'] if 'after_header' in entry else 'after'
            parts.extend(difflib.unified_diff(_diff_lines(entry['before']), _diff_lines(entry['after']),
                                              fromfile=before, tofile=after, n=C.DIFF_CONTEXT))
        if entry.get('prepared'):
            parts.append(str(entry['prepared']))
    return ''.join(parts)


def _result_message(result: dict) -> str:
    """One line for a failed (or skipped) result: msg, then stderr/stdout detail, then item failures."""
    parts = []
    for key in ('msg', 'stderr', 'module_stderr', 'failed_when_result', 'changed_when_result', 'skip_reason'):
        val = result.get(key)
        if val not in (None, '', [], True, False) and str(val) not in parts:
            parts.append(str(val))
    if not result.get('stderr') and result.get('failed') and result.get('stdout'):
        parts.append(str(result['stdout']))
    for item in result.get('results') or []:
        if isinstance(item, dict) and item.get('failed'):
            parts.append(f"item {_trim(item.get(item.get('ansible_loop_var', 'item')), 80)}: {_result_message(item)}")
            break
    return ': '.join(parts)


#: modules whose stdout says what a task found (a check the Worker ran as evidence).
COMMAND_MODULES = frozenset(('ansible.builtin.command', 'ansible.builtin.shell'))
STDOUT_LIMIT = 600


def command_output(fqcn: str, result: dict) -> dict:
    """``{'stdout': ...}`` of a command or shell task (its last ``STDOUT_LIMIT`` characters,
    redacted), else {}: a relay trial's Worker ran ``systemctl show`` as evidence and the next
    prompt said only "ok"."""
    if fqcn not in COMMAND_MODULES:
        return {}
    found = [result] + [r for r in result.get('results') or [] if isinstance(r, dict)]
    text = '\n'.join(str(r.get('stdout')) for r in found if r.get('stdout')).strip()
    if not text:
        return {}
    text = redact(text)[0]
    return {'stdout': text if len(text) <= STDOUT_LIMIT else '[...] ' + text[-STDOUT_LIMIT:]}


def journal_tail(session, fqcn: str, task: Task) -> str:
    """The last lines of a failed service task's unit journal (systemd's own message says
    only "see journalctl"); "" for any other task or when it cannot be read."""
    unit = task.args.get('name') if fqcn in ledger.SERVICE_MODULES and isinstance(task.args, dict) else None
    if not isinstance(unit, str) or not unit or task_gate.contains_jinja(unit):
        return ''
    try:
        result = session.run_command(JOURNAL_TAIL % shlex.quote(unit))
    except AnsibleError:
        return ''
    return redact(str(result.get('stdout') or '').strip()[-JOURNAL_LIMIT:])[0]


class TaskListExecutor:
    """Run task lists on the host of a running action plugin, with Ansible's own machinery.

    session: the run's ``_host.session.HostSession`` (its Ansible objects, ``parts()``, load
      and run the tasks; the running task itself is never modified).
    task_vars: the host's task vars as the action received them (facts, hostvars...).
    trusted: True only for vendor content the controller trusts (see module docstring).
    policy: the gate's ``task_gate.GatePolicy`` for untrusted lists (connecting user, module
      allowlist additions); None for the gate's defaults.
    before_change: called as ``before_change(fqcn, args)`` with a task's canonical FQCN and
      its templated arguments (one call per loop item) right before it runs for real (not in
      check mode); it returns None to let the task run, or a reason, and then the task fails
      with that reason and does not run. The loop uses it to checkpoint the files a task can
      touch before they change (``plugin_utils.checkpoint``).
    cover_ahead: called once before a loop's first item, as ``cover_ahead([(fqcn, args), ...])``
      with every item whose ``when`` holds, its arguments templated, so the checkpoint can
      save all the loop's files in one call (issue 9: SSG's sysctl fixes loop over the files
      ``find`` returned). Advisory: ``before_change`` still runs for each item; an item that
      cannot be rendered ahead is left out. Its time counts as the hook's.
    facts_cache: the run's :class:`PackageFactsCache` for this host (None: every
      package_facts runs).
    diff: run the tasks in Ansible's diff mode (the task keyword ``diff: true``) and keep
      the diffs of the tasks that changed the host in the report's ``diffs``.

    One executor may run several lists; variables set by one run (set_fact, register,
    facts) do not leak into the next.
    """

    def __init__(self, session, task_vars: dict, trusted: bool, policy: t.Any = None,
                 before_change: t.Callable[[str, dict], str | None] | None = None,
                 facts_cache: PackageFactsCache | None = None, diff: bool = False,
                 cover_ahead: t.Callable[[list], None] | None = None):
        self._session = session
        self._diff = bool(diff)
        self._facts_cache = facts_cache
        self._task_vars = task_vars or {}
        self.trusted = bool(trusted)
        self.policy = policy
        self._before_change = before_change
        self._cover_ahead = cover_ahead
        self._hook_seconds = 0.0  # spent in before_change so far (not a task's own time)
        self._pending_changes: list[dict] = []  # the running task's changes (ledger.task_changes)
        self._keep_results = False
        self._data_loader = session.parts().loader
        base_check = session.check_mode
        self._force_check = bool(base_check) and base_check is not None

    # ----------------------------------------------------------------- public API
    def validate(self, tasks: t.Any) -> list[str]:
        """Gate this executor's trust level applies; see :func:`task_gate.validate`. Empty list = OK."""
        return [r.message for r in self.refusals(tasks)]

    def refusals(self, tasks: t.Any) -> list[task_gate.Refusal]:
        """:meth:`validate` with the refusals' codes (:func:`task_gate.refusals`)."""
        return task_gate.refusals(tasks, trusted=self.trusted, policy=self.policy)

    def run_yaml(self, text: str, variables: dict | None = None, source: str = '<task text>') -> ExecutionReport:
        """Parse YAML text with Ansible's DataLoader (trusted as template when this executor is trusted), then :meth:`run`.

        A parse error is returned as ``refused`` with the parser's message (line and column); nothing runs.
        """
        try:
            tasks = task_gate.parse_task_text(text, trusted=self.trusted, source=source)
        except task_gate.TaskParseError as ex:
            return ExecutionReport.refusal(str(ex))
        return self.run(tasks, variables)

    def run(self, tasks: t.Any, variables: dict | None = None, keep_results: bool = False) -> ExecutionReport:
        """Gate, then run ``tasks`` in order on the action's host; return an ExecutionReport.

        tasks: list of task/block mappings (yaml.safe_load or :func:`task_gate.parse_task_text`
          output).  variables: extra variables layered over task_vars for this run only
          (e.g. XCCDF Values).  keep_results: also return each task's raw result in
          ``report.results``.  Stops at the first failed task that does not ignore errors.
        Never raises for bad input or failing tasks (they are in the report); only
        programming errors propagate.
        """
        found = self.refusals(tasks)
        if found:
            return ExecutionReport.refusal('; '.join(r.message for r in found), found)
        ds_list = self._prepare(tasks)
        try:
            play = self._play()
            # Each entry sits in an explicit block with ignore_errors false, so a play-level
            # ignore_errors cannot hide a failed fix; module_defaults/environment of the play apply.
            blocks = [Block.load({'block': [ds], 'ignore_errors': False}, play=play, loader=self._data_loader)
                      for ds in ds_list]
        except AnsibleError as ex:
            return ExecutionReport.refusal(task_gate._error_text(ex))

        report = ExecutionReport()
        self._keep_results = keep_results
        run_vars = dict(self._task_vars)
        if variables:
            run_vars.update(variables)
        for block in blocks:
            if not self._run_block(block, run_vars, report):
                break
        return report

    def run_loop_action(self, name: str, args: dict, task_name: str = '') -> dict:
        """Run one action the loop itself decides on between fixes (``LOOP_ACTIONS``: the
        reboot of deferred fixes), with the same handler choice, connection, become and
        check-mode handling as a fix's task. Fixes may never run these (the gate's
        ``DENIED_MODULES``); this is the only way in, and it takes no task list.

        name: the action's FQCN; args: its arguments (plain data, never templated text from
        content or a model). Returns the action's result dict (``failed``/``unreachable``
        set when it failed). Raises ValueError for an action outside ``LOOP_ACTIONS``.
        """
        if name not in LOOP_ACTIONS:
            raise ValueError('%r is not an action the loop runs itself (%s)' % (name, ', '.join(sorted(LOOP_ACTIONS))))
        ds = {'name': task_name or name, name: dict(args)}
        try:
            block = Block.load({'block': [ds], 'ignore_errors': False}, play=self._play(), loader=self._data_loader)
        except AnsibleError as ex:
            return dict(failed=True, changed=False, msg=task_gate._error_text(ex))
        run_vars = dict(self._task_vars)
        result = self._execute_once(block.block[0], dict(run_vars), run_vars)
        result.pop('_scapforge_not_run', None)
        result.pop('_scapforge_changes', None)
        return result

    # ----------------------------------------------------------------- preparation
    def _play(self):
        """The calling task's Play (module_defaults, action groups, play keywords), else an empty Play."""
        play = None
        try:
            play = self._session.parts().task.get_play()
        except AttributeError:
            play = None
        if play is None:
            from ansible.playbook.play import Play
            play = Play()
        return play

    def _prepare(self, tasks: list) -> list:
        """Deep-copy tasks, drop ignored keywords, tag strings trusted (trusted lists) or tag only the
        gate-checked expressions trusted (untrusted lists: conditionals, assert's ``that``,
        debug's ``var``) so Ansible will evaluate them."""
        return [self._prepare_one(copy.deepcopy(ds)) for ds in tasks]

    def _prepare_one(self, ds: dict) -> dict:
        for key in _STRIPPED_KEYWORDS:
            ds.pop(key, None)
        if 'block' in ds:
            ds['block'] = [self._prepare_one(child) for child in ds['block']]
        if self.trusted:
            return {k: (v if k == 'block' else _deep_trust(v)) for k, v in ds.items()}
        for key in _CONDITIONAL_KEYS:
            if key in ds:
                val = ds[key]
                ds[key] = [_deep_trust(v) for v in val] if isinstance(val, list) else _deep_trust(val)
        for key, args in ds.items():  # assert's that, debug's var: expressions the gate checked
            ref = task_gate.resolve_module(key) if isinstance(key, str) and isinstance(args, dict) else None
            for arg in task_gate.EXPRESSION_ARGS.get(ref.fqcn if ref else '', ()):
                if arg in args:
                    args[arg] = _deep_trust(args[arg])
        return ds

    # ----------------------------------------------------------------- execution
    def _run_block(self, block: Block, run_vars: dict, report: ExecutionReport) -> bool:
        """Run a block's tasks (recursing into nested blocks). Returns False when the run must stop."""
        for entry in block.block:
            if isinstance(entry, Block):
                if not self._run_block(entry, run_vars, report):
                    return False
                continue
            started, hooks = time.monotonic(), self._hook_seconds
            self._pending_changes = []
            result, fqcn, ran = self._run_task(entry, run_vars)
            # the task's own time: the before_change hook's (the checkpoint's save) is the caller's
            seconds = time.monotonic() - started - (self._hook_seconds - hooks)
            if not self._record(entry, result, fqcn, ran, report, seconds):
                return False
        return True

    def _record(self, task: Task, result: dict, fqcn: str, ran: bool, report: ExecutionReport,
                seconds: float = 0.0) -> bool:
        name = task.get_name()
        failed = bool(result.get('failed')) or bool(result.get('unreachable'))
        ignored = failed and bool(task.ignore_errors) and not result.get('unreachable')
        skipped = bool(result.get('skipped'))
        check_mode = bool(task.check_mode) or self._force_check
        if ran and fqcn not in report.modules:
            report.modules.append(fqcn)
        # a check-mode task's "changed" says what it would change; the host did not change
        report.changed = report.changed or (bool(result.get('changed')) and not check_mode)
        msg = _result_message(result) if (failed or skipped) else str(result.get('msg') or '')
        if self._keep_results:
            report.results.append(strip_internal_keys(copy.deepcopy(result)))
        journal = journal_tail(self._session, fqcn, task) if failed and not ignored and not result.get('unreachable') else ''
        report.task_results.append(dict(
            name=str(name), module=fqcn, changed=bool(result.get('changed')), failed=failed, skipped=skipped,
            ignored=ignored, check_mode=check_mode, msg=_trim(msg), seconds=round(seconds, 3),
            **({'journal': journal} if journal else {}), **command_output(fqcn, result)))
        text = ''
        if self._diff and result.get('changed') and not check_mode:
            found = [result.get('diff')] + [r.get('diff') for r in result.get('results') or []
                                            if isinstance(r, dict) and r.get('changed')]
            text = redact(''.join(unified_diff(d) for d in found if d))[0]  # a shadow line's hash stays home
            if text:
                if len(text) > DIFF_LIMIT:
                    text = text[:DIFF_LIMIT] + '\n[diff cut at %d characters]\n' % DIFF_LIMIT
                report.diffs.append(dict(task=str(name), module=fqcn, diff=text))
        self._ledger_changes(report, str(name), fqcn, text)
        if failed and not ignored:
            report.ok = False
            report.failed_task = str(name)
            report.error = _trim(msg or 'task failed')
            report.unreachable = bool(result.get('unreachable'))
            return False
        return True

    def _ledger_changes(self, report: ExecutionReport, name: str, fqcn: str, diff: str) -> None:
        """Move the task's changes (its executions') into the report, file entries with the task's diff."""
        for change in self._pending_changes:
            entry = dict(change, task=name, module=fqcn)
            if diff and change.get('kind') == 'file':
                entry['diff'] = diff[:ledger.DIFF_LIMIT]
            report.changes.append(entry)
        self._pending_changes = []

    def _engine(self, variables: dict):
        # the engine Task/TaskExecutor use
        return ansible_private.TemplateEngine(loader=self._data_loader, variables=variables)

    def _run_task(self, task: Task, run_vars: dict) -> tuple[dict, str, bool]:
        """Run one task (all loop items). Updates run_vars (register, facts). Returns (result, fqcn, ran)."""
        ref = task_gate.resolve_module(task.action)
        fqcn = ref.fqcn if ref else str(task.action)
        task_vars = run_vars
        if task.get_vars():
            task_vars = dict(run_vars)
            task_vars.update(task.get_vars())
        try:
            items = loop_items(self._engine(task_vars), task)
        except AnsibleError as ex:
            # Ansible raises a loop error only if the task is not skipped by its when
            try:
                if not ansible_private.when_result(task, task_vars)[0]:
                    result = dict(changed=False, skipped=True, skip_reason='Conditional result was False')
                    self._register(task, result, run_vars)
                    return result, fqcn, False
            except AnsibleError:
                pass
            result = dict(failed=True, changed=False, msg=task_gate._error_text(ex))
            self._register(task, result, run_vars)
            return result, fqcn, False

        if items is None:
            result = self._execute_once(task, task_vars, run_vars)
        elif not items:
            result = dict(changed=False, skipped=True, skip_reason='No items in the list', results=[])
        else:
            result = self._run_loop(task, items, task_vars, run_vars)
        result.setdefault('changed', False)
        ran = not result.get('skipped') and not result.get('_scapforge_not_run')
        result.pop('_scapforge_not_run', None)
        result.pop('_scapforge_changes', None)
        self._register(task, result, run_vars)
        return result, fqcn, ran

    def _run_loop(self, task: Task, items: list, task_vars: dict, run_vars: dict) -> dict:
        """Run each item with ``item`` set, aggregating as TaskExecutor.run does."""
        results = []
        loop_vars = dict(task_vars)
        if self._cover_ahead is not None and len(items) > 1:
            self._render_ahead(task, items, loop_vars)
        for item in items:
            loop_vars['item'] = item
            loop_vars['ansible_loop_var'] = 'item'
            res = self._execute_once(task, loop_vars, loop_vars)
            res.pop('_scapforge_not_run', None)
            changes = res.pop('_scapforge_changes', None)
            res['item'] = item
            res['ansible_loop_var'] = 'item'
            results.append(res)
            # As the strategy applies each item's facts to the host in order (set_fact in a
            # loop accumulates, e.g. SSG's audit fixes counting paths in found_paths_dict).
            if changes is not None:
                apply_changes(changes, run_vars)
        out: dict = dict(results=results, skipped=True, changed=False)
        for res in results:
            if res.get('changed'):
                out['changed'] = True
            if not res.get('skipped'):
                out['skipped'] = False
            if res.get('failed') and not out.get('failed'):
                out['failed'] = True
                out['msg'] = 'One or more items failed'
            if res.get('unreachable'):
                out['unreachable'] = True
        if not out.get('failed'):
            out['msg'] = 'All items skipped' if out['skipped'] else 'All items completed'
        return out

    def _render_ahead(self, task: Task, items: list, loop_vars: dict) -> None:
        """Give ``cover_ahead`` every item's (fqcn, templated args) whose ``when`` holds, as
        :meth:`_execute_once` will render them (not in check mode). Never raises."""
        started = time.monotonic()
        pairs = []
        for item in items:
            variables = dict(loop_vars, item=item, ansible_loop_var='item')
            try:
                if not ansible_private.when_result(task, variables)[0]:
                    continue
                tmp_task, fqcn = self._rendered(task, variables)
                if tmp_task.check_mode:
                    return
                pairs.append((fqcn, dict(tmp_task.args or {})))
            except Exception:  # pylint: disable=broad-except  # the item renders again when it runs
                continue
        try:
            if pairs:
                self._cover_ahead(pairs)
        finally:
            self._hook_seconds += time.monotonic() - started

    def _rendered(self, task: Task, variables: dict) -> tuple[Task, str]:
        """A copy of ``task`` post-validated (templated) with ``variables``, its check and diff
        mode set as this executor runs it, and its module's canonical FQCN."""
        tmp_task = task.copy(exclude_parent=True, exclude_tasks=True)
        tmp_task._parent = task._parent
        tmp_task.post_validate(templar=self._engine(variables))
        tmp_task.check_mode = bool(tmp_task.check_mode) or self._force_check
        if self._diff:
            tmp_task.diff = True
        ref = task_gate.resolve_module(tmp_task.action)
        return tmp_task, (ref.fqcn if ref else str(tmp_task.action))

    def _execute_once(self, task: Task, variables: dict, run_vars: dict) -> dict:
        """One execution of a task (one loop item): when, post_validate, handler run,
        facts, failed/changed normalisation, changed_when/failed_when.  Facts update run_vars."""
        started = False
        try:
            holds, false_condition = ansible_private.when_result(task, variables)
            if not holds:
                return dict(changed=False, skipped=True, skip_reason='Conditional result was False',
                            false_condition=false_condition)
            tmp_task, fqcn = self._rendered(task, variables)
            if self._before_change is not None and not tmp_task.check_mode:
                hook_started = time.monotonic()
                problem = self._before_change(fqcn, dict(tmp_task.args or {}))
                self._hook_seconds += time.monotonic() - hook_started
                if problem:
                    return dict(failed=True, changed=False, msg='not run: %s' % problem, _scapforge_not_run=True)
            vars_copy = dict(variables)
            started = True
            own_args = dict(tmp_task.args or {})  # before the handler adds its own keys
            result = self._facts_cache.serve(fqcn, own_args) if self._facts_cache is not None else None
            if result is None:
                result, changes = run_handler(self._session, tmp_task, vars_copy)
                if self._facts_cache is not None:
                    self._facts_cache.remember(fqcn, own_args, result, tmp_task.check_mode)
            else:
                changes = ansible_private.changes_from_result(tmp_task.action, result)
        except AnsibleConnectionFailure as ex:
            return dict(failed=True, unreachable=True, changed=False, msg=task_gate._error_text(ex))
        except AnsibleError as ex:
            res = dict(failed=True, changed=False, msg=task_gate._error_text(ex))
            if not started:
                res['_scapforge_not_run'] = True
            return res

        if changes.facts or changes.variables:
            apply_changes(changes, vars_copy)
            apply_changes(changes, run_vars)
            if variables is not run_vars:
                apply_changes(changes, variables)
            result['_scapforge_changes'] = changes
        if 'failed' not in result:
            result['failed'] = 'rc' in result and result['rc'] not in (0, '0')
        result.setdefault('changed', False)
        if result.get('unreachable'):
            result['failed'] = True
            return result
        for name in ansible_private.register_names(task):
            vars_copy[name] = registered(result)
        if 'skipped' not in result:
            condname = 'changed'
            try:
                # the post-validated task's, as TaskExecutor reads them (2.21 makes them lists only there)
                if tmp_task.changed_when:
                    result['changed'] = ansible_private.conditional(tmp_task, tmp_task.changed_when, vars_copy)
                condname = 'failed'
                if tmp_task.failed_when:
                    result['failed_when_result'] = result['failed'] = ansible_private.conditional(
                        tmp_task, tmp_task.failed_when, vars_copy)
            except AnsibleError as ex:
                result['failed'] = True
                result[f'{condname}_when_result'] = task_gate._error_text(ex)
        if result.get('changed') and not tmp_task.check_mode:
            self._pending_changes.extend(ledger.task_changes(fqcn, own_args))
        return result

    def _register(self, task: Task, result: dict, run_vars: dict) -> None:
        for name in ansible_private.register_names(task):
            run_vars[name] = registered(result)


def run_handler(session, task: Task, task_vars: dict) -> tuple[dict, ansible_private.VariableChanges]:
    """Pick the handler as TaskExecutor does (module's action plugin, same-named action, else
    ansible.legacy.normal) and run it on the action's own connection. Returns (its result,
    the variables it gives the host)."""
    parts = session.parts()
    shared = parts.shared_loader_obj
    module = shared.module_loader.find_plugin_with_context(task.action, collection_list=task.collections)
    if module.resolved and module.action_plugin:
        handler_name, collections = module.action_plugin, task.collections
    elif shared.action_loader.has_plugin(task.action, collection_list=task.collections):
        handler_name, collections = task.action, task.collections
    else:
        handler_name, collections = 'ansible.legacy.normal', None
    play_context = parts.play_context.copy()
    play_context.check_mode = task.check_mode
    handler = shared.action_loader.get(
        handler_name,
        task=task,
        connection=parts.connection,
        play_context=play_context,
        loader=parts.loader,
        templar=parts.templar.copy_with_new_env(available_variables=task_vars),
        shared_loader_obj=shared,
        collection_list=collections,
    )
    if handler is None:
        raise AnsibleError(f'the handler {handler_name!r} was not found')
    changes = ansible_private.VariableChanges()
    host_name = str(task_vars.get('inventory_hostname', ''))
    try:
        result, changes = ansible_private.run_action(handler, task, task_vars, host_name)
    except AnsibleConnectionFailure:
        raise
    except AnsibleAction as ex:  # AnsibleActionFail/Skip/_ActionDone carry their result
        result = ansible_private.action_exception_result(ex)
    except AnsibleError:
        raise
    except Exception as ex:  # a plugin bug must fail the task, not the remediation loop
        result = dict(failed=True, msg=f'Unexpected failure during task execution: {type(ex).__name__}: {ex}')
    finally:
        handler.cleanup()
    return result, changes


def apply_changes(changes: ansible_private.VariableChanges, variables: dict) -> None:
    """Apply an action's variables to ``variables`` exactly as TaskExecutor does: facts first
    (into ``ansible_facts`` without the ansible_ prefix, as VariableManager builds host vars, and
    as top-level ``ansible_*`` vars when INJECT_FACTS_AS_VARS), then plain variables."""
    if changes.facts:
        variables['ansible_facts'] = combine_vars(variables.get('ansible_facts', {}),
                                                  namespace_facts(changes.facts)['ansible_facts'])
        if C.INJECT_FACTS_AS_VARS:
            variables.update(clean_facts(changes.facts))
    variables.update(changes.variables)


def registered(result: dict) -> dict:
    """A result as ``register`` stores it (internal keys and the executor's own keys left out)."""
    value = strip_internal_keys(copy.copy(result))
    value.pop('_scapforge_changes', None)
    value.pop('_scapforge_not_run', None)
    return value


def loop_items(engine, task: Task) -> list | None:
    """The loop items as TaskExecutor._get_loop_items computes them with ``engine`` (the
    task's template engine) (None: no loop)."""
    if task.loop_with:
        terms = task.loop
        if isinstance(terms, str):
            # str_problematic_strip keeps the trust tag
            terms = engine.resolve_to_container(ansible_private.str_problematic_strip(terms))
        if not isinstance(terms, list):
            terms = [terms]
        # exactly TaskExecutor._get_loop_items: the lookup runs inside the template engine, so
        # (trusted) templates in the terms render lazily as they do in a play
        loop_with = task.loop_with

        @ansible_private._DirectCall.mark
        def invoke_lookup() -> t.Any:
            return ansible_private._invoke_lookup(plugin_name=loop_with, lookup_terms=terms,
                                                  lookup_kwargs=dict(wantlist=True), invoked_as_with=True)

        items = engine.evaluate_expression(expression=trust_as_template('invoke_lookup()'),
                                           local_variables=dict(invoke_lookup=invoke_lookup))
        if not isinstance(items, list):
            raise AnsibleError(f'with_{loop_with} must produce a list, not {type(items).__name__}.')
        return list(items)
    if task.loop is not None:
        items = engine.template(task.loop)
        if not isinstance(items, list):
            raise AnsibleError(f'The `loop` value must resolve to a list, not {type(items).__name__}.')
        return items
    return None
