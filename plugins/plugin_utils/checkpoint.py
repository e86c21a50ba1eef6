# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checkpoints: save what a fix may change on the target, put it back, prove it.

Every remediation attempt must be undoable (DESIGN "One host, one run", step 4: checkpoint
of what the tasks will touch). Before each task of a fix runs, the loop asks
:func:`paths_touched` what the task can change, and :meth:`Checkpoint.cover` saves those
paths on the target (first save of a path wins, so what is kept is the state before the
attempt). A failed, ineffective or unhealthy attempt is undone with
:meth:`Checkpoint.restore`, whose :class:`RestoreResult` says whether the host now matches
the checkpoint (digests and metadata read back on the target).

Providers (:data:`PROVIDERS`, built with :func:`make_provider`; a user picks one with a
name and an options dict, e.g. the role's ``scapforge_checkpoint_provider`` and its options):

- ``files`` (:class:`FilesProvider`, the default): the target-side module
  ``scapforge.remediation.checkpoint`` on the action plugin's own connection saves each path
  a task can touch (content, mode, owner, ACLs, extended attributes, SELinux context) and
  restores and verifies them. Only this provider has a target-side dead-man switch
  (:meth:`Checkpoint.arm`): a restore the target runs by itself unless disarmed in time.
  Options: ``root``, ``max_file_bytes``, ``max_total_bytes``, ``max_entries``, ``link_targets``.
- ``command`` (:class:`CommandProvider`): the user's own snapshot, restore and verify
  commands (LVM, libvirt, a cloud API), run on the target with become; ``{id}`` and
  ``{host}`` are substituted. A restore is verified when the verify command exits 0.
  Options: ``snapshot``, ``restore``, ``verify`` (required), ``discard``, ``timeout``, ``become``.
- ``lab`` (``lab/checkpoint_provider.py``, in the checkout only): the lab's hosts; the restore is a command run on the
  CONTROLLER (default ``{python} lab/lab.py reset {host}``: the host's overlay is wiped back
  to the lab's baseline), verified by a fresh SSH login with become. Options:
  ``restore_command``, ``snapshot_command``, ``cwd``, ``timeout``.

``command`` and ``lab`` checkpoints are whole-host (:attr:`Checkpoint.whole_host`): one
snapshot before the first change covers every path and what files cannot hold (packages,
services), and a restore also undoes what happened since for other reasons.

What a checkpoint does not cover is said, never hidden: ``Checkpoint.uncovered`` (paths the
target could not save, with why) and ``Touched.unknown`` (changes that are not files at all:
packages, service state, runtime kernel parameters). The caller decides what to do about them.
"""
from __future__ import annotations

import abc
import dataclasses
import importlib.util
import pathlib
import posixpath
import re
import shlex
import sys
import time
import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy import effects
from ansible_collections.scapforge.remediation.plugins.plugin_utils.shell_split import (
    ShellCommand, ShellParseError, expand_command, split_shell,
)

MODULE = 'scapforge.remediation.checkpoint'
DEFAULT_ROOT = '/var/lib/scapforge/checkpoints'
ID_RE = re.compile(r'^[A-Za-z0-9._-]{1,128}$')


class CheckpointError(ScapforgeError):
    """A checkpoint operation that could not be done (module failure, connection lost,
    bad id, a checkpoint already restored). ``kind``: the module's ``error_kind`` when it
    gave one (``missing``, ``exists``, ``root_unsafe``, ``corrupt``, ``io_error``,
    ``bad_id``), or ``connection``, ``closed``, ``unsupported``, ``bad_options``,
    ``snapshot_failed``, ``discard_failed``; ``module_failed`` when the module gave none."""

    def __init__(self, msg: str, kind: str | None = None):
        super().__init__(msg, kind=kind or 'module_failed')


@dataclasses.dataclass
class RestoreResult:
    """Outcome of one restore.

    verified: the host matches the checkpoint again (kind, mode, uid, gid, sha256, symlink
      target and directory entries of every saved path, re-read after the restore).
    restored: paths written back or whose owner/mode was put back.
    removed: paths deleted (absent when saved, or new entries of a saved directory).
    mismatches: "path: what differs" for everything that still differs (empty when verified).
    seconds: wall-clock seconds of the restore on the controller (module call included).
    detail: one human line (counts, what was never covered, why it failed).
    missing: nothing was restored because the checkpoint does not exist on the target (never
      saved, already discarded or restored: the module's ``error_kind`` ``missing``); then
      ``verified`` is False and nothing on the host was touched.
    """

    verified: bool
    restored: list = dataclasses.field(default_factory=list)
    removed: list = dataclasses.field(default_factory=list)
    mismatches: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    detail: str = ''
    missing: bool = False

    def to_dict(self) -> dict:
        """A plain JSON-serialisable dict of the fields above (``missing`` only when True, so
        the reports' restore entries keep their keys)."""
        out = dataclasses.asdict(self)
        if not self.missing:
            del out['missing']
        return out


NEVER_ARMED = 'no dead-man switch was armed'


@dataclasses.dataclass
class DeadmanState:
    """A checkpoint's dead-man switch as the target reports it (the module's ``deadman``).

    armed: its timer or process is waiting to fire. fired: it restored the checkpoint by
      itself; ``result`` is that restore. cancelled: this disarm stopped it before it fired.
    lost: armed, never disarmed, never fired, and nothing is scheduled any more (the target
      rebooted, or someone stopped it). firing: its program runs right now.
    method: ``systemd`` (transient timer ``unit``.timer) or ``sleep`` (detached process ``pid``);
      method_why: why that one. armed_at, fires_at: epoch seconds on the TARGET's clock;
      fires_in: seconds from the call to the firing; timeout: seconds it was armed for.
    result: the fired restore as a RestoreResult (seconds: the target's), else None.
    seconds: wall-clock seconds of the call on the controller. detail: one human line.
    """

    armed: bool
    fired: bool = False
    cancelled: bool = False
    lost: bool = False
    firing: bool = False
    method: str | None = None
    method_why: str | None = None
    unit: str | None = None
    pid: int | None = None
    armed_at: float | None = None
    fires_at: float | None = None
    fires_in: float | None = None
    timeout: int | None = None
    result: RestoreResult | None = None
    seconds: float = 0.0
    detail: str = ''

    @classmethod
    def from_module(cls, deadman: dict, seconds: float) -> 'DeadmanState':
        """From the module's ``deadman`` return value (see plugins/modules/checkpoint.py)."""
        deadman = deadman or {}
        fired = deadman.get('result')
        result = fired_restore_result(fired, deadman.get('method')) if fired else None
        state = cls(armed=bool(deadman.get('armed')), fired=bool(deadman.get('fired')),
                    cancelled=bool(deadman.get('cancelled')), lost=bool(deadman.get('lost')),
                    firing=bool(deadman.get('firing')), method=deadman.get('method'),
                    method_why=deadman.get('method_why'), unit=deadman.get('unit'), pid=deadman.get('pid'),
                    armed_at=deadman.get('armed_at'), fires_at=deadman.get('fires_at'),
                    fires_in=deadman.get('fires_in'), timeout=deadman.get('timeout'), result=result,
                    seconds=seconds)
        how = ('systemd timer %s.timer' % state.unit if state.method == 'systemd'
               else 'process %s' % state.pid if state.method == 'sleep' else 'nothing')
        if state.fired:
            state.detail = result.detail
        elif state.cancelled:
            state.detail = 'dead-man switch disarmed before it fired (%s stopped)' % how
        elif state.armed:
            state.detail = 'dead-man switch armed: %s fires in %.0f s' % (how, state.fires_in or 0)
        elif state.firing:
            state.detail = 'dead-man switch firing now (%s)' % how
        elif state.lost:
            state.detail = ('dead-man switch armed, but nothing is scheduled any more (%s gone: the target '
                            'rebooted?)' % how)
        elif deadman.get('was_armed'):
            state.detail = 'dead-man switch disarmed'
        else:
            state.detail = NEVER_ARMED
        return state

    def to_dict(self) -> dict:
        """A plain JSON-serialisable dict (``result`` as RestoreResult.to_dict() or None)."""
        out = dataclasses.asdict(self)
        out['result'] = self.result.to_dict() if self.result is not None else None
        return out


def fired_restore_result(result: dict, method: str | None = None) -> RestoreResult:
    """A RestoreResult from a fired dead-man switch's result.json (the target's record)."""
    mismatches = list(result.get('mismatches') or [])
    if result.get('error'):
        mismatches.append('restore failed: %s' % result['error'])
    verified = bool(result.get('verified')) and not mismatches
    when = time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(result['fired_at'])) if result.get('fired_at') else '?'
    detail = 'restored on the target by the dead-man switch (%s) at %s UTC: restored %d, removed %d, %s' % (
        method or result.get('method') or '?', when, len(result.get('restored') or []),
        len(result.get('removed') or []), 'verified' if verified else '%d mismatch(es)' % len(mismatches))
    for post in result.get('post_restore') or []:
        detail += '; %s exited %s' % (post.get('command'), post.get('rc'))
    if not result.get('lock_acquired', True):
        detail += '; it ran without the checkpoint lock (a module call held it too long)'
    return RestoreResult(verified, list(result.get('restored') or []), list(result.get('removed') or []),
                         mismatches, float(result.get('seconds') or 0.0), detail)


class Checkpoint(abc.ABC):
    """One undo record on one host, filled task by task.

    id: the checkpoint id ([A-Za-z0-9._-]+); provider: the provider's name.
    covered: paths saved (or covered by a saved parent), in the order they were covered.
    uncovered: path -> why it could not be saved (not restorable by this checkpoint).
    whole_host (class attribute): a restore brings back the whole host or volume (a
      snapshot), not only the covered paths; what files cannot hold is covered too.
    supports_deadman (class attribute): :meth:`arm`, :meth:`disarm` and
      :meth:`deadman_status` work (a target-side restore that fires unless disarmed).
    """

    whole_host: bool = False
    supports_deadman: bool = False

    def __init__(self, checkpoint_id: str, provider: str):
        self.id = checkpoint_id
        self.provider = provider
        self.covered: list[str] = []
        self.uncovered: dict[str, str] = {}

    @abc.abstractmethod
    def cover(self, paths: t.Iterable[str], shallow: t.Iterable[str] = ()) -> list[str]:
        """Save the paths not covered yet; return the paths newly covered by this call.

        shallow: paths whose directory is to be saved without its entries (see
        :attr:`Touched.shallow`). Raises CheckpointError when the save itself failed (then
        the task must not run)."""

    @abc.abstractmethod
    def restore(self) -> RestoreResult:
        """Put everything covered back and verify it. Never raises for a target-side failure:
        that is ``verified=False`` with the reason in ``detail``."""

    @abc.abstractmethod
    def discard(self) -> None:
        """Drop the checkpoint (the attempt is kept). Raises CheckpointError on failure."""

    def arm(self, timeout: int, method: str = 'auto', post_restore: t.Sequence[str] = ()) -> DeadmanState:
        """Arm the dead-man switch: the target restores this checkpoint by itself in ``timeout``
        seconds unless :meth:`disarm` runs first. Call it before the change (before the first
        cover() is fine: the checkpoint is created empty and restores what it holds when it
        fires). method: auto | systemd | sleep. post_restore: shell commands the target runs
        after the restore (``systemctl reload ssh``). Raises CheckpointError (kind
        ``unsupported`` for providers without one, or the module's error_kind)."""
        raise CheckpointError('the %s checkpoint provider has no dead-man switch' % self.provider, 'unsupported')

    def disarm(self) -> DeadmanState:
        """Cancel the switch, or learn that it fired (``fired``, ``result``). Idempotent.
        Raises CheckpointError (``connection`` when the host cannot be reached: then the
        switch is still armed and fires)."""
        raise CheckpointError('the %s checkpoint provider has no dead-man switch' % self.provider, 'unsupported')

    def deadman_status(self) -> DeadmanState:
        """What the switch does now, changing nothing. Raises CheckpointError."""
        raise CheckpointError('the %s checkpoint provider has no dead-man switch' % self.provider, 'unsupported')

    def to_dict(self) -> dict:
        """For events: id, provider, covered, uncovered."""
        return {'id': self.id, 'provider': self.provider, 'covered': list(self.covered),
                'uncovered': dict(self.uncovered)}


class CheckpointProvider(abc.ABC):
    """Makes checkpoints of one kind on one host. ``name`` is the key in :data:`PROVIDERS`."""

    name: str = ''

    @abc.abstractmethod
    def open(self, checkpoint_id: str) -> Checkpoint:
        """A new, empty checkpoint (nothing runs on the target until the first cover)."""

    def attach(self, checkpoint_id: str) -> Checkpoint:
        """The checkpoint ``checkpoint_id`` an earlier controller process made (a resume after
        a crash): taken as existing, so restore(), discard() and, for ``files``, disarm()
        and deadman_status() act on what the target (or the snapshot) holds. Its
        ``covered`` is empty: this process never saw the covers."""
        checkpoint = self.open(checkpoint_id)
        checkpoint._attach()
        return checkpoint


def _check_id(checkpoint_id: str) -> str:
    if not isinstance(checkpoint_id, str) or not ID_RE.match(checkpoint_id) or not checkpoint_id.strip('.'):
        raise CheckpointError('checkpoint id %r: use 1 to 128 of A-Z a-z 0-9 . _ - (not only dots)' % (checkpoint_id,),
                              'bad_id')
    return checkpoint_id


class FilesProvider(CheckpointProvider):
    """Checkpoints of files, directories and symlinks, kept on the target by the module
    ``scapforge.remediation.checkpoint`` (run through ``session.execute_module`` on the
    action's own connection and become, as :mod:`.scanner` runs oscap_eval).

    action: the running ActionBase; task_vars: its task vars. root: directory of the
    checkpoints on the target. options: extra module options for every save (max_file_bytes,
    max_total_bytes, max_entries, link_targets).

    In check mode (the calling task's) the module changes nothing: cover() reports what it
    would save, restore() is a verified no-op.
    """

    name = 'files'

    def __init__(self, session, task_vars: dict, root: str = DEFAULT_ROOT, options: dict | None = None):
        self.session = session
        self.task_vars = task_vars or {}
        self.root = root
        self.options = dict(options or {})

    @property
    def check_mode(self) -> bool:
        return bool(self.session.check_mode)

    def open(self, checkpoint_id: str) -> 'FilesCheckpoint':
        return FilesCheckpoint(self, _check_id(checkpoint_id))

    def run_module(self, args: dict) -> tuple[dict, float]:
        """Run the module with ``args`` (root added); return (result, controller seconds).

        Raises CheckpointError (with the module's error_kind) when it failed or the host
        could not be reached."""
        args = dict(args, root=self.root)
        started = time.monotonic()
        try:
            result = self.session.execute_module(name=MODULE, args=args, task_vars=self.task_vars,
                                                 wrap_async=False)
        except AnsibleError as ex:
            raise CheckpointError('checkpoint %s %s: %s' % (args.get('id'), args.get('state'), ex), 'connection')
        seconds = round(time.monotonic() - started, 3)
        if result.get('unreachable'):
            raise CheckpointError('checkpoint %s %s: host unreachable: %s' % (args.get('id'), args.get('state'),
                                                                              result.get('msg')), 'connection')
        if result.get('failed'):
            msg = result.get('msg') or result.get('module_stderr') or 'module failed'
            raise CheckpointError('checkpoint %s %s: %s' % (args.get('id'), args.get('state'), msg),
                                  result.get('error_kind'))
        return result, seconds


class FilesCheckpoint(Checkpoint):
    """A :class:`Checkpoint` of the ``files`` provider. ``calls`` lists every module call
    (state, seconds on the controller, elapsed on the target) for events and timings.
    ``deadman``: the last DeadmanState an arm, disarm, status, restore or discard reported
    (a verified restore or a discard disarms a switch still armed), or None."""

    supports_deadman = True

    def __init__(self, provider: FilesProvider, checkpoint_id: str):
        super().__init__(checkpoint_id, provider.name)
        self._provider = provider
        self._full: set[str] = set()       # covered with entries (or not a directory)
        self._shallow: set[str] = set()    # covered without entries
        self._containers: set[str] = set()  # saved directories and absent paths: cover all below
        self._saved = False                 # a save call succeeded (the checkpoint exists on the target)
        self._closed = False
        self.absent: set[str] = set()      # covered paths that did not exist when saved
        self.calls: list[dict] = []
        self.deadman: DeadmanState | None = None

    def _attach(self) -> None:
        self._saved = True

    def _known(self, path: str, shallow: bool) -> bool:
        if path in self.uncovered or path in self._full or (shallow and path in self._shallow):
            return True
        return any(parent in self._containers for parent in _parents(path))

    def _call(self, args: dict) -> dict:
        result, seconds = self._provider.run_module(dict(args, id=self.id))
        self.calls.append({'state': args['state'], 'seconds': seconds, 'target_seconds': result.get('elapsed')})
        return result

    def cover(self, paths: t.Iterable[str], shallow: t.Iterable[str] = ()) -> list[str]:
        if self._closed:
            raise CheckpointError('checkpoint %s was already restored or discarded; open a new one' % self.id, 'closed')
        want_full, want_shallow = [], []
        for bucket, values, is_shallow in ((want_full, paths, False), (want_shallow, shallow, True)):
            for value in values:
                try:
                    path = normalise_path(value)
                except ValueError as ex:
                    self.uncovered[str(value)] = str(ex)
                    continue
                if not self._known(path, is_shallow) and path not in want_full and path not in bucket:
                    bucket.append(path)
        want_shallow = [p for p in want_shallow if p not in want_full]
        if not want_full and not want_shallow:
            return []
        result = self._call({'state': 'save', 'paths': want_full, 'shallow': want_shallow,
                             'fresh': not self._saved, **self._provider.options})
        if not self._provider.check_mode:
            self._saved = True
        kinds = result.get('kinds') or {}
        self.absent |= {p for p, kind in kinds.items() if kind == 'absent'}
        shallow_dirs = set(result.get('shallow') or [])
        # directories saved with their entries, and absent paths, cover everything below them
        self._containers |= {p for p, kind in kinds.items() if kind in ('dir', 'absent') and p not in shallow_dirs}
        self._containers |= set((result.get('within') or {}).values())
        uncovered = result.get('uncovered') or {}
        resolved = result.get('resolved') or {}
        done = set(result.get('saved') or []) | set(result.get('already') or []) | set(result.get('within') or {})
        newly = []
        for path in want_full + want_shallow:
            if path in uncovered or path not in done:
                continue
            newly.append(path)
            for covered in (path, resolved.get(path)):
                if covered:
                    (self._full if path in want_full else self._shallow).add(covered)
                    if covered not in self.covered:
                        self.covered.append(covered)
        for link, target in (result.get('link_targets') or {}).items():
            (self._full if link in self._full else self._shallow).add(target)
            if target not in self.covered:
                self.covered.append(target)
        self.uncovered.update(uncovered)
        return newly

    def restore(self) -> RestoreResult:
        if self._provider.check_mode:
            return RestoreResult(True, detail='check mode: nothing was changed, nothing to restore')
        if not self._saved:
            return RestoreResult(True, detail='nothing was saved, nothing to restore' + self._uncovered_note())
        started = time.monotonic()
        try:
            result = self._call({'state': 'restore', 'discard_after': True})
        except CheckpointError as ex:
            return RestoreResult(False, seconds=round(time.monotonic() - started, 3),
                                 detail='restore failed: %s' % ex, missing=ex.kind == 'missing')
        seconds = round(time.monotonic() - started, 3)
        restored = list(result.get('restored') or [])
        removed = list(result.get('removed') or [])
        mismatches = list(result.get('mismatches') or [])
        verified = bool(result.get('verified')) and not mismatches
        detail = 'restored %d, removed %d' % (len(restored), len(removed))
        if verified:
            detail += ', verified'
            self._closed = True
        else:
            detail += '; %d mismatch(es), checkpoint kept at %s' % (len(mismatches), result.get('checkpoint_dir'))
        detail += self._deadman_note(result, seconds)
        detail += self._uncovered_note()
        return RestoreResult(verified, restored, removed, mismatches, seconds, detail)

    def _deadman_note(self, result: dict, seconds: float) -> str:
        """Record the ``deadman`` a restore or discard reported (it disarmed a switch); a note."""
        if not (result.get('deadman') or {}).get('was_armed'):
            return ''
        self.deadman = DeadmanState.from_module(result['deadman'], seconds)
        return '; ' + self.deadman.detail

    def arm(self, timeout: int, method: str = 'auto', post_restore: t.Sequence[str] = ()) -> DeadmanState:
        if self._closed:
            raise CheckpointError('checkpoint %s was already restored or discarded; open a new one' % self.id, 'closed')
        result = self._call({'state': 'arm', 'timeout': int(timeout), 'method': method,
                             'post_restore': [str(c) for c in post_restore], 'fresh': not self._saved})
        if not self._provider.check_mode:
            self._saved = True  # arm created the checkpoint (empty) when it did not exist
        self.deadman = DeadmanState.from_module(result.get('deadman'), self.calls[-1]['seconds'])
        return self.deadman

    def disarm(self) -> DeadmanState:
        if not self._saved:
            self.deadman = DeadmanState(armed=False, detail=NEVER_ARMED)
            return self.deadman
        result = self._call({'state': 'disarm'})
        self.deadman = DeadmanState.from_module(result.get('deadman'), self.calls[-1]['seconds'])
        return self.deadman

    def deadman_status(self) -> DeadmanState:
        if not self._saved:
            return DeadmanState(armed=False, detail=NEVER_ARMED)
        result = self._call({'state': 'status'})
        self.deadman = DeadmanState.from_module(result.get('deadman'), self.calls[-1]['seconds'])
        return self.deadman

    def _uncovered_note(self) -> str:
        if not self.uncovered:
            return ''
        items = ['%s (%s)' % (p, why) for p, why in sorted(self.uncovered.items())]
        return '; never covered: ' + ', '.join(items)

    def discard(self) -> None:
        if self._saved and not self._closed and not self._provider.check_mode:
            result = self._call({'state': 'discard'})
            self._deadman_note(result, self.calls[-1]['seconds'])
        self._closed = True

    def to_dict(self) -> dict:
        out = super().to_dict()
        out['calls'] = list(self.calls)
        return out


# ====================================================================== command and lab providers

def _tail(text: t.Any, limit: int = 400) -> str:
    """The last ``limit`` characters of text (bytes decoded, CRLF of a tty as LF),
    whitespace-trimmed, '...' marking a cut."""
    if isinstance(text, bytes):
        text = text.decode('utf-8', 'replace')
    text = str(text or '').replace('\r\n', '\n').strip()
    return text if len(text) <= limit else '...' + text[-limit:]


def _output(stdout: t.Any, stderr: t.Any) -> str:
    """stdout then stderr of a command, each trimmed, as one text cut to its last 400 characters."""
    parts = [_tail(part, 1 << 20) for part in (stdout, stderr)]
    return _tail('\n'.join(part for part in parts if part))


def _substitute(template: str, values: dict[str, str]) -> str:
    """``{name}`` -> value for the given names only (a shell's ``${VAR}`` or awk's ``{print}``
    are left alone, so not str.format)."""
    for name, value in values.items():
        template = template.replace('{%s}' % name, value)
    return template


def _need_command(options: dict, key: str, provider: str) -> str:
    value = options.get(key)
    if not isinstance(value, str) or not value.strip():
        raise CheckpointError('the %s checkpoint provider needs option %r (a command line)' % (provider, key),
                              'bad_options')
    return value


class CommandProvider(CheckpointProvider):
    """Checkpoints made by the user's own commands, run on the target through the action's
    connection (``session.run_command``, with become unless ``become: false``).

    snapshot: taken once, before the first change of an attempt (e.g. ``lvcreate -s -n
      scapforge-{id} -L 2G vg0/root``, ``virsh snapshot-create-as ...`` through a helper,
      a cloud CLI). restore: puts the snapshot back. verify: exits 0 when the host matches
      the snapshot again (a restore is verified only then). discard: drops the snapshot
      (optional). ``{id}`` is the checkpoint id ([A-Za-z0-9._-], safe unquoted), ``{host}``
      the inventory hostname. timeout: seconds each command may run (``timeout`` on the
      target; default 600). Their output (stderr merged into stdout on the target, so the ssh
      client's own messages stay out) is trimmed to its last 400 characters into the details.
    Raises CheckpointError(kind ``bad_options``) for a missing or empty command.
    """

    name = 'command'

    def __init__(self, session, task_vars: dict, snapshot: str | None = None, restore: str | None = None,
                 verify: str | None = None, discard: str | None = None, timeout: int = 600, become: bool = True):
        options = {'snapshot': snapshot, 'restore': restore, 'verify': verify}
        self.snapshot = _need_command(options, 'snapshot', self.name)
        self.restore = _need_command(options, 'restore', self.name)
        self.verify = _need_command(options, 'verify', self.name)
        if discard is not None and not (isinstance(discard, str) and discard.strip()):
            raise CheckpointError('the command checkpoint provider: option discard must be a command line', 'bad_options')
        self.discard = discard
        if not isinstance(timeout, int) or timeout < 1:
            raise CheckpointError('the command checkpoint provider: timeout must be a positive number of seconds',
                                  'bad_options')
        self.timeout = timeout
        self.become = bool(become)
        self.session = session
        self.task_vars = task_vars or {}

    @property
    def check_mode(self) -> bool:
        return bool(self.session.check_mode)

    def open(self, checkpoint_id: str) -> 'CommandCheckpoint':
        return CommandCheckpoint(self, _check_id(checkpoint_id))

    def run(self, what: str, template: str, checkpoint_id: str) -> dict:
        """Run one of the commands on the target; returns {what, command, rc, output, seconds}.
        Raises CheckpointError (``connection``) when the host cannot be reached."""
        command = _substitute(template, {'id': checkpoint_id,
                                         'host': str(self.task_vars.get('inventory_hostname', ''))})
        wrapped = 'timeout -k 10 %d /bin/sh -c %s 2>&1' % (self.timeout, shlex.quote(command))
        started = time.monotonic()
        try:
            res = self.session.run_command(wrapped, sudoable=self.become)
        except AnsibleError as ex:
            raise CheckpointError('checkpoint %s %s command: %s' % (checkpoint_id, what, ex), 'connection')
        rc = res.get('rc')
        # the command's stderr comes on stdout (2>&1 on the target): the connection's stderr also
        # carries the ssh client's own lines ("Warning: Permanently added ...", "Shared connection ... closed.")
        output = _tail(res.get('stdout'))
        if rc == 124:
            output = ('killed after %d s; ' % self.timeout) + output
        return {'what': what, 'command': command, 'rc': rc, 'output': output,
                'seconds': round(time.monotonic() - started, 3)}


class CommandCheckpoint(Checkpoint):
    """A :class:`Checkpoint` of the ``command`` provider: one snapshot at the first cover().
    ``calls``: every command run ({what, command, rc, output, seconds})."""

    whole_host = True

    def __init__(self, provider: CommandProvider, checkpoint_id: str):
        super().__init__(checkpoint_id, provider.name)
        self._provider = provider
        self._snapshot_taken = False
        self._closed = False
        self.calls: list[dict] = []

    def _attach(self) -> None:
        self._snapshot_taken = True

    def _run(self, what: str, template: str) -> dict:
        call = self._provider.run(what, template, self.id)
        self.calls.append(call)
        return call

    def cover(self, paths: t.Iterable[str], shallow: t.Iterable[str] = ()) -> list[str]:
        if self._closed:
            raise CheckpointError('checkpoint %s was already restored or discarded; open a new one' % self.id, 'closed')
        newly = _not_yet_covered(list(paths) + list(shallow), self.covered, self.uncovered)
        if not self._snapshot_taken and not self._provider.check_mode:
            call = self._run('snapshot', self._provider.snapshot)
            if call['rc'] != 0:
                raise CheckpointError('checkpoint %s: the snapshot command exited %s: %s'
                                      % (self.id, call['rc'], call['output']), 'snapshot_failed')
            self._snapshot_taken = True
        self.covered.extend(newly)
        return newly

    def restore(self) -> RestoreResult:
        if self._provider.check_mode:
            return RestoreResult(True, detail='check mode: nothing was changed, nothing to restore')
        if not self._snapshot_taken:
            return RestoreResult(True, detail='no snapshot was taken (nothing changed), nothing to restore')
        started = time.monotonic()
        try:
            restore = self._run('restore', self._provider.restore)
            verify = self._run('verify', self._provider.verify) if restore['rc'] == 0 else None
        except CheckpointError as ex:
            return RestoreResult(False, seconds=round(time.monotonic() - started, 3), detail='restore failed: %s' % ex)
        seconds = round(time.monotonic() - started, 3)
        mismatches = []
        if restore['rc'] != 0:
            mismatches.append('restore command exited %s: %s' % (restore['rc'], restore['output']))
        elif verify['rc'] != 0:
            mismatches.append('verify command exited %s: %s' % (verify['rc'], verify['output']))
        verified = not mismatches
        detail = 'snapshot restored by command (exit %s%s)' % (restore['rc'], restore['output'] and ': ' + restore['output'])
        if verify is not None:
            detail += '; verify exited %s%s' % (verify['rc'], verify['output'] and ': ' + verify['output'])
        if verified:
            self._closed = True
        return RestoreResult(verified, list(self.covered) if verified else [], [], mismatches, seconds, detail)

    def discard(self) -> None:
        if self._snapshot_taken and not self._closed and self._provider.discard and not self._provider.check_mode:
            call = self._run('discard', self._provider.discard)
            if call['rc'] != 0:
                raise CheckpointError('checkpoint %s: the discard command exited %s: %s'
                                      % (self.id, call['rc'], call['output']), 'discard_failed')
        self._closed = True

    def to_dict(self) -> dict:
        out = super().to_dict()
        out['calls'] = list(self.calls)
        return out


#: provider name -> class; a user picks one by name (``make_provider``)
PROVIDERS: dict[str, type[CheckpointProvider]] = {'files': FilesProvider, 'command': CommandProvider}
#: options each provider accepts (beyond action and task_vars)
PROVIDER_OPTIONS: dict[str, tuple[str, ...]] = {
    'files': ('root', 'max_file_bytes', 'max_total_bytes', 'max_entries', 'link_targets'),
    'command': ('snapshot', 'restore', 'verify', 'discard', 'timeout', 'become'),
    'lab': ('restore_command', 'snapshot_command', 'cwd', 'timeout'),
}


#: the collection's root directory (in a checkout: where lab/ lives)
COLLECTION_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
#: providers that live outside the built collection: name -> (file under the root, class)
EXTERNAL_PROVIDERS: dict[str, tuple[str, str]] = {'lab': ('lab/checkpoint_provider.py', 'LabProvider')}


def provider_class(name: str) -> type[CheckpointProvider]:
    """The provider class ``name``: a built-in one, or one loaded by name from the checkout
    (the lab's). CheckpointError(``bad_options``) when it is unknown or not installed."""
    if name in PROVIDERS:
        return PROVIDERS[name]
    if name not in EXTERNAL_PROVIDERS:
        raise CheckpointError('unknown checkpoint provider %r (known: %s)'
                              % (name, ', '.join(sorted(set(PROVIDERS) | set(EXTERNAL_PROVIDERS)))), 'bad_options')
    relative, class_name = EXTERNAL_PROVIDERS[name]
    path = pathlib.Path(COLLECTION_ROOT) / relative
    if not path.is_file():
        raise CheckpointError('the %s checkpoint provider is part of the checkout (%s), not of the built collection'
                              % (name, relative), 'bad_options')
    module_name = 'scapforge_%s_checkpoint_provider' % name
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise CheckpointError('cannot load the %s checkpoint provider from %s' % (name, path), 'bad_options')
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return getattr(module, class_name)


def make_provider(name: str, session, task_vars: dict, options: dict | None = None) -> CheckpointProvider:
    """The provider ``name`` (a key of PROVIDERS) for one host, with ``options`` (a dict, e.g.
    the role's provider options): files - root, max_file_bytes, max_total_bytes,
    max_entries, link_targets; command - snapshot, restore, verify, discard, timeout,
    become; lab - restore_command, snapshot_command, cwd, timeout.

    Raises CheckpointError(kind ``bad_options``) for an unknown provider or option, or a
    missing required one."""
    cls = provider_class(name)
    options = dict(options or {})
    unknown = sorted(set(options) - set(PROVIDER_OPTIONS[name]))
    if unknown:
        raise CheckpointError('checkpoint provider %s: unknown option(s) %s (known: %s)'
                              % (name, ', '.join(unknown), ', '.join(PROVIDER_OPTIONS[name])), 'bad_options')
    if name == 'files':
        root = options.pop('root', None) or DEFAULT_ROOT
        return FilesProvider(session, task_vars, root=root, options=options)
    return cls(session, task_vars, **options)


# ====================================================================== what a task touches

@dataclasses.dataclass
class Touched:
    """What one task can change on the target, as far as the checkpoint can capture it.

    paths: absolute, normalised paths to save in full (a directory with all its entries).
    unknown: why some of what the task changes cannot be captured as files ("packages
      (ansible.builtin.apt)", "service state (ansible.builtin.systemd)"), '; '-joined; None
      when the paths say it all.
    read_only: the task changes nothing on the target (facts, probes); nothing to save.
    shallow: directories whose own kind/mode/owner the task changes, but not their entries
      (``file: state=directory`` without recurse): save and restore them without entries.
    heuristic: the paths were guessed from a command line (command/shell); the command may
      change files it does not name.
    """

    paths: list = dataclasses.field(default_factory=list)
    unknown: str | None = None
    read_only: bool = False
    shallow: list = dataclasses.field(default_factory=list)
    heuristic: bool = False


def normalise_path(value: t.Any) -> str:
    """An absolute, normalised POSIX path ('//x', '/a/../b', trailing '/' folded).

    Raises ValueError when value is not a str, is relative, or depends on the target's
    environment (``~``, ``$VAR``), which the controller cannot resolve."""
    if not isinstance(value, str) or not value:
        raise ValueError('not a path: %r' % (value,))
    if '\x00' in value:
        raise ValueError('path contains a NUL byte')
    if value.startswith('~') or '$' in value:
        raise ValueError('path %s depends on the target environment (~ or $VAR)' % value)
    if not value.startswith('/'):
        raise ValueError('path %s is not absolute' % value)
    path = posixpath.normpath(value)
    if path.startswith('//'):
        path = '/' + path.lstrip('/')
    return path


def _not_yet_covered(values: t.Iterable[t.Any], covered: t.Sequence[str], uncovered: dict) -> list[str]:
    """The normalised paths among ``values`` that ``covered`` does not hold yet, in order,
    each once; a value :func:`normalise_path` refuses goes to ``uncovered`` ({value: why})."""
    newly: list[str] = []
    for value in values:
        try:
            path = normalise_path(value)
        except ValueError as ex:
            uncovered[str(value)] = str(ex)
            continue
        if path not in covered and path not in newly:
            newly.append(path)
    return newly


def _parents(path: str) -> list[str]:
    out = []
    parent = posixpath.dirname(path)
    while parent not in ('/', ''):
        out.append(parent)
        parent = posixpath.dirname(parent)
    return out


def _flag(args: dict, key: str, default: bool) -> bool:
    value = args.get(key, default)
    if value is None:
        return default
    try:
        return boolean(value, strict=True)
    except TypeError:
        return default


def _first(args: dict, keys: t.Sequence[str]) -> t.Any:
    for key in keys:
        if args.get(key) is not None:
            return args[key]
    return None


class _Collector:
    """Accumulates a Touched: paths, shallow paths and unknown reasons, deduplicated in order."""

    def __init__(self, module: str):
        self.module = module
        self.paths: list[str] = []
        self.shallow: list[str] = []
        self.unknown: list[str] = []
        self.heuristic = False

    def add(self, value: t.Any, option: str, shallow: bool = False) -> None:
        if value is None:
            self.note('%s: no %s given' % (self.module, option))
            return
        try:
            path = normalise_path(value)
        except ValueError as ex:
            self.note('%s %s: %s' % (self.module, option, ex))
            return
        bucket = self.shallow if shallow else self.paths
        if path not in bucket:
            bucket.append(path)

    def note(self, why: str) -> None:
        if why not in self.unknown:
            self.unknown.append(why)

    def touched(self) -> Touched:
        shallow = [p for p in self.shallow if p not in self.paths]
        return Touched(paths=self.paths, unknown='; '.join(self.unknown) or None, shallow=shallow,
                       heuristic=self.heuristic)


Handler = t.Callable[[str, dict], Touched]
ACCOUNT_FILES = effects.ACCOUNT_FILES
GROUP_FILES = ('/etc/group', '/etc/gshadow')


def _written(module: str, args: dict) -> tuple[t.Any, str]:
    """(the value of the module's write argument, its option name) by the gate's table
    (effects.MODULE_WRITES): the first of its keys given, else the module's default."""
    spec = effects.MODULE_WRITES[module]
    value = _first(args, spec.keys)
    if spec.default is not None and not value:
        value = spec.default
    return value, spec.keys[0]


def _edit_file(module: str, args: dict) -> Touched:
    """lineinfile, blockinfile, replace, ini_file, assemble, get_url, kernel_blacklist: one file
    named by the write argument (get_url: a directory dest is saved in full, the file lands in it)."""
    c = _Collector(module)
    c.add(*_written(module, args))
    return c.touched()


def _copy(module: str, args: dict) -> Touched:
    """copy/template: ``dest``; a dest ending in '/' is a directory, and the file (or, for
    copy, a directory without trailing '/') lands at dest/basename(src)."""
    c = _Collector(module)
    (dest, _option), src = _written(module, args), args.get('src')
    if isinstance(dest, str) and dest.endswith('/') and isinstance(src, str) and src and not src.endswith('/'):
        dest = dest + posixpath.basename(src)
    c.add(dest, 'dest')
    return c.touched()


def _file(module: str, args: dict) -> Touched:
    """file: path/dest/name. absent, link, hard and recurse can change what is below a
    directory (saved in full); directory, touch, file and attribute changes only change the
    path itself (saved shallow: a directory's own kind/mode/owner)."""
    c = _Collector(module)
    state = args.get('state')
    full = state in ('absent', 'link', 'hard') or _flag(args, 'recurse', False)
    c.add(*_written(module, args), shallow=not full)
    return c.touched()


def _unarchive(module: str, args: dict) -> Touched:
    """unarchive: the ``dest`` directory, in full (the archive's files land below it)."""
    c = _Collector(module)
    c.add(*_written(module, args))
    return c.touched()


def _cron(module: str, args: dict) -> Touched:
    """cron: ``cron_file`` (relative: under /etc/cron.d, as the module does); without it the
    user's crontab, which crontab(1) writes as a file in the spool: Debian's
    /var/spool/cron/crontabs/<user> and the Red Hat family's /var/spool/cron/<user>, both
    saved (the one a distribution lacks is saved absent and stays so). ``user`` defaults to
    root: the loop's tasks run with become (issue 17: the entry was left after a rollback)."""
    c = _Collector(module)
    cron_file, option = _written(module, args)
    if cron_file:
        if isinstance(cron_file, str) and not cron_file.startswith('/') and not cron_file.startswith('~'):
            cron_file = effects.MODULE_WRITES[module].relative_dir + '/' + cron_file
        c.add(cron_file, option)
        return c.touched()
    user = args.get('user') or 'root'
    if not isinstance(user, str) or not re.match(r'^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$', user):
        c.note('crontab of user %r (%s without cron_file)' % (user, module))
        return c.touched()
    for spool in ('/var/spool/cron/crontabs', '/var/spool/cron'):
        c.add(spool + '/' + user, 'crontab of user %s' % user)
    return c.touched()


def _user(module: str, args: dict) -> Touched:
    """user: the account files, plus /etc/subuid and /etc/subgid (useradd on Debian 12 adds
    subordinate ids). shadow-utils' own backups (/etc/passwd- ...) are left: they hold the
    pre-change copy anyway. A home directory (create_home, default true, move_home) is
    covered when ``home`` is given, else unknown; remove and generate_ssh_key are unknown."""
    c = _Collector(module)
    for path in ACCOUNT_FILES + ('/etc/subuid', '/etc/subgid'):
        c.add(path, 'account file')
    name = _first(args, ('name', 'user')) or '?'
    if args.get('state', 'present') == 'absent':
        if _flag(args, 'remove', False):
            c.note('home directory and mail spool of user %s removed (remove)' % name)
        return c.touched()
    if _flag(args, 'create_home', _flag(args, 'createhome', True)) or _flag(args, 'move_home', False):
        if args.get('home'):
            c.add(args['home'], 'home')
        else:
            c.note('home directory of user %s (create_home/move_home without home)' % name)
    if _flag(args, 'move_home', False):
        c.note('previous home directory of user %s (move_home)' % name)
    if _flag(args, 'generate_ssh_key', False):
        c.note('SSH key of user %s (generate_ssh_key)' % name)
    return c.touched()


def _group(module: str, args: dict) -> Touched:
    c = _Collector(module)
    for path in GROUP_FILES:
        c.add(path, 'group file')
    return c.touched()


def _sysctl(module: str, args: dict) -> Touched:
    """ansible.posix.sysctl: ``sysctl_file`` (default /etc/sysctl.conf); with reload (default
    true) or sysctl_set the running kernel's value changes too: unknown."""
    c = _Collector(module)
    c.add(*_written(module, args))
    if _flag(args, 'reload', True) or _flag(args, 'sysctl_set', False):
        c.note('runtime value of kernel parameter %s (%s reload)' % (_first(args, ('name', 'key')) or '?', module))
    return c.touched()


def _mount(module: str, args: dict) -> Touched:
    """ansible.posix.mount: ``fstab`` (default /etc/fstab, ignored by ephemeral); mounted,
    unmounted, remounted, ephemeral and absent change what is mounted: unknown. The mount
    point itself is not saved (when mounted, it is another filesystem's root)."""
    c = _Collector(module)
    state = args.get('state')
    if state not in ('ephemeral', 'unmounted', 'remounted'):
        c.add(*_written(module, args))
    if state in ('mounted', 'unmounted', 'remounted', 'ephemeral', 'absent'):
        c.note('mount state of %s (%s state=%s)' % (_first(args, ('path', 'name')) or '?', module, state))
    return c.touched()


def _authorized_key(module: str, args: dict) -> Touched:
    """ansible.posix.authorized_key: ``path`` when given (and its directory, shallow, which
    manage_dir creates or chmods); else the user's ~/.ssh/authorized_keys: unknown."""
    c = _Collector(module)
    path, option = _written(module, args)
    if path:
        c.add(path, option)
        if _flag(args, 'manage_dir', True) and isinstance(path, str) and path.startswith('/'):
            c.add(posixpath.dirname(normalise_path(path)), 'path directory', shallow=True)
    else:
        c.note('authorized_keys of user %s (%s without path)' % (args.get('user') or '?', module))
    return c.touched()


def _joined(module: str, args: dict) -> Touched:
    """pamd (path + name), sudoers (sudoers_path + name): a file in a directory."""
    c = _Collector(module)
    spec = effects.MODULE_WRITES[module]
    name = args.get(spec.directory_of)
    if not isinstance(name, str) or not name or '/' in name:
        c.note('%s: name %r does not name a file' % (module, name))
        return c.touched()
    directory, option = _written(module, args)
    c.add(posixpath.join(directory, name), '%s/%s' % (option, spec.directory_of))
    return c.touched()


def _unknown(what: str) -> Handler:
    def handler(module: str, args: dict) -> Touched:
        return Touched(unknown='%s (%s)' % (what, module))
    return handler


# ---------------------------------------------------------------------- command and shell

# Executables are not what a fix edits (brief: these prefixes are left out of the paths).
_PROGRAM_DIRS = ('/bin/', '/sbin/', '/usr/bin/', '/usr/sbin/', '/usr/local/bin/')
# Tokens naming these are never files a fix edits (the module would refuse them anyway).
_VIRTUAL = ('/dev/', '/proc/', '/sys/')
# Directories other processes keep writing to: saved shallow, never policed entry by entry.
VOLATILE_DIRS = ('/tmp', '/var/tmp', '/dev/shm', '/run', '/var/run', '/var/log', '/var/cache', '/var/spool')
_PATH_TOKEN = re.compile(r'^/[^\s\'"`$(){}<>|;&!\\^]*$')
_GLOB = re.compile(r'[*?\[]')
_VAR_PATH = re.compile(r'(^\$\{?[A-Za-z_]|/\$\{?[A-Za-z_]|^~)')
_DISCARD = ('/dev/null', '&1', '&2', '1', '2')  # redirection targets that write no file


def _path_tokens(prog: str, args: list[str]) -> list[str]:
    """Arguments of a simple command that look like paths (``--opt=/x`` gives /x). awk, sed
    and grep programs are patterns, not paths: only their later arguments count."""
    out = []
    skip_program_text = prog in ('awk', 'gawk', 'mawk', 'sed', 'grep', 'egrep', 'fgrep', 'perl')
    seen_text = False
    for arg in args:
        if skip_program_text and not seen_text and not arg.startswith('-'):
            seen_text = True
            continue
        value = arg.split('=', 1)[1] if arg.startswith('-') and '=' in arg else arg
        out.append(value)
    return out


def _command(module: str, args: dict) -> Touched:
    """command/shell: ``creates``/``removes`` and their directories, plus every absolute path
    token of the commands that write, not under /bin /sbin /usr/bin /usr/sbin /usr/local/bin.
    The line is split as the gate splits it (shell_split), and what each command does is
    the gate's table too (_policy.effects): the paths it writes, what it writes without
    naming it, what it changes that is not a file.

    A HEURISTIC (``heuristic=True``): a command can change files it does not name (a script,
    a daemon's state file) and name files it only reads. Refinements: a command line made
    only of read-only probes (find without -exec/-delete, grep, awk without system(), sed
    without -i, systemctl list-*/is-*, ... with no output redirection but to /dev/null) is
    ``read_only``; a glob covers its directory (/etc/audit/rules.d/*.rules ->
    /etc/audit/rules.d); a volatile directory (/tmp, /var/log, ...) is covered shallow and
    noted; known programs add what they write (update-grub -> /boot/grub/grub.cfg, passwd ->
    the account files) or what they change that is not a file (apt-get -> packages,
    systemctl start -> service state, sysctl -w -> runtime kernel parameters); paths built
    from shell variables ($f, ~) are noted as unknown. ``sh -c 'text'`` is read as text.
    Relative paths (with ``chdir``) are not resolved.
    """
    c = _Collector(module)
    c.heuristic = True
    for key in ('creates', 'removes'):
        value = args.get(key)
        if value:
            c.add(value, key)
            if isinstance(value, str) and value.startswith('/') and not _GLOB.search(value):
                parent = posixpath.dirname(normalise_path(value))
                if parent != '/':
                    c.add(parent, key + ' directory')
    argv = args.get('argv')
    if isinstance(argv, (list, tuple)) and argv:
        commands = [ShellCommand([str(a) for a in argv])]
    else:
        text = args.get('cmd') or args.get('_raw_params') or ''
        if not isinstance(text, str) or not text.strip():
            c.note('%s: no command line given' % module)
            return c.touched()
        try:
            commands = split_shell(text)
        except ShellParseError as ex:  # unbalanced quotes: the module would fail too
            c.note('%s: command line cannot be split (%s)' % (module, _split_error(text, ex)))
            return c.touched()
    try:
        expanded = [sub for cmd in commands for sub in expand_command(cmd)]
    except ShellParseError:
        c.note('%s: inner command line cannot be split' % module)
        return c.touched()
    read_only = _scan_commands(c, module, expanded)
    touched = c.touched()
    touched.read_only = read_only and not touched.paths and not touched.shallow and not touched.unknown
    return touched


def _split_error(text: str, ex: ShellParseError) -> str:
    """Why text cannot be split: shlex's words when shlex fails too (the module's own splitter)."""
    try:
        shlex.split(text)
    except ValueError as shlex_ex:
        return str(shlex_ex)
    return str(ex)


def _scan_commands(c: _Collector, module: str, commands: list[ShellCommand]) -> bool:
    """Add what each simple command touches to ``c`` (effects.command_effect); return True
    when all only read. Commands a wrapper, ``sh -c`` or ``find -exec`` runs are in the list
    after it (shell_split.expand_command)."""
    all_read_only = True
    for cmd in commands:
        for target in cmd.writes:
            _add_token(c, module, target, written=True)
        redirected = any(target not in _DISCARD for target in cmd.writes)
        if not cmd.argv:
            all_read_only = all_read_only and not redirected
            continue
        prog, prog_args = posixpath.basename(cmd.argv[0]), cmd.argv[1:]
        effect = effects.command_effect(cmd.argv)
        if effect.kind == effects.WRAPS and not effect.state or effect.read_only and not redirected:
            all_read_only = all_read_only and not redirected
            continue
        all_read_only = False
        for path in effect.implied:
            c.add(path, prog)
        if effect.state:
            c.note('%s (%s in %s)' % (effect.state, prog, module))
        for path in effect.writes:
            _add_token(c, module, path, written=True)
        for token in _path_tokens(prog, prog_args):
            _add_token(c, module, token)
    return all_read_only


def _add_token(c: _Collector, module: str, token: str, written: bool = False) -> None:
    """Cover a path-like token (see :func:`_command`). ``written``: a path the command writes
    (a redirection, the table's writes), covered whatever characters it holds (a quoted path
    with a space); other tokens only when they look like a plain path."""
    if _VAR_PATH.search(token) or (written and ('$' in token or '`' in token)):
        c.note('paths built from shell variables (%s in %s)' % (token, module))
        return
    if not token.startswith('/') or token.startswith(_PROGRAM_DIRS) or token.startswith(_VIRTUAL):
        return
    if token in ('/dev', '/proc', '/sys'):
        return
    if _GLOB.search(token):
        head = token[:_GLOB.search(token).start()]
        token = head if head.endswith('/') else posixpath.dirname(head)
        if token in ('', '/'):
            c.note('glob over the root directory (%s)' % module)
            return
    if not written and not _PATH_TOKEN.match(token):
        return
    path = normalise_path(token)
    if path == '/':
        c.note('the root directory / (%s): cannot be saved' % module)
        return
    if path in VOLATILE_DIRS:
        c.add(path, 'command path', shallow=True)
        c.note('entries of %s, a directory other processes write to, are not saved (%s)' % (path, module))
        return
    c.add(path, 'command path')


# ---------------------------------------------------------------------- the table

READ_ONLY_MODULES = frozenset((
    'ansible.builtin.stat', 'ansible.builtin.slurp', 'ansible.builtin.find', 'ansible.builtin.getent',
    'ansible.builtin.package_facts', 'ansible.builtin.service_facts', 'ansible.builtin.set_fact',
    'ansible.builtin.debug', 'ansible.builtin.assert', 'ansible.builtin.setup', 'ansible.builtin.gather_facts',
    'ansible.builtin.fail', 'ansible.builtin.ping', 'ansible.builtin.mount_facts', 'ansible.builtin.set_stats',
    'ansible.builtin.include_vars', 'ansible.builtin.validate_argument_spec',
))

_HANDLERS: dict[str, Handler] = {
    'ansible.builtin.lineinfile': _edit_file,
    'ansible.builtin.blockinfile': _edit_file,
    'ansible.builtin.replace': _edit_file,
    'ansible.builtin.copy': _copy,
    'ansible.builtin.template': _copy,
    'ansible.builtin.file': _file,
    'ansible.builtin.assemble': _edit_file,
    'ansible.builtin.unarchive': _unarchive,
    'ansible.builtin.get_url': _edit_file,
    'ansible.builtin.cron': _cron,
    'ansible.builtin.user': _user,
    'ansible.builtin.group': _group,
    'ansible.builtin.command': _command,
    'ansible.builtin.shell': _command,
    'ansible.posix.sysctl': _sysctl,
    'ansible.posix.mount': _mount,
    'ansible.posix.authorized_key': _authorized_key,
    'community.general.ini_file': _edit_file,
    'community.general.pamd': _joined,
    'community.general.sudoers': _joined,
    'community.general.kernel_blacklist': _edit_file,
    'ansible.builtin.debconf': _unknown('debconf database'),
    'ansible.builtin.apt': _unknown('packages'),
    'ansible.builtin.dnf': _unknown('packages'),
    'ansible.builtin.dnf5': _unknown('packages'),
    'ansible.builtin.yum': _unknown('packages'),
    'ansible.builtin.package': _unknown('packages'),
    'ansible.builtin.service': _unknown('service state'),
    'ansible.builtin.systemd': _unknown('service state'),
    'ansible.builtin.systemd_service': _unknown('service state'),
    'ansible.builtin.sysvinit': _unknown('service state'),
}

# short names (``lineinfile``, ``sysctl``) -> FQCN, builtin first, as Ansible routes them
_SHORT: dict[str, str] = {}
for _name in sorted(set(_HANDLERS) | READ_ONLY_MODULES, key=lambda n: (not n.startswith('ansible.builtin.'), n)):
    _SHORT.setdefault(_name.rsplit('.', 1)[1], _name)


def canonical_module(fqcn: str) -> str:
    """``ansible.legacy.X`` -> ``ansible.builtin.X``; a short name known here -> its FQCN."""
    name = str(fqcn or '')
    if name.startswith('ansible.legacy.'):
        name = 'ansible.builtin.' + name[len('ansible.legacy.'):]
    if '.' not in name:
        name = _SHORT.get(name, 'ansible.builtin.' + name)
    return name


def paths_touched(fqcn: str, args: dict) -> Touched:
    """What a task (module FQCN + its already-templated arguments) can change, as paths.

    Returns a :class:`Touched`: paths to save in full, shallow directories, ``unknown``
    (what cannot be captured as files, with why), ``read_only``. Option names and defaults
    are the modules' own (their DOCUMENTATION in ansible-core 2.19, ansible.posix and
    community.general). Any module not listed here gives
    ``unknown="module X: files it changes are not known"``. Never raises.
    """
    name = canonical_module(fqcn)
    if not isinstance(args, dict):
        args = {}
    if name in READ_ONLY_MODULES:
        return Touched(read_only=True)
    handler = _HANDLERS.get(name)
    if handler is None:
        return Touched(unknown='module %s: files it changes are not known' % name)
    return handler(name, args)
