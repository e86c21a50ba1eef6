"""The lab's checkpoint provider (``checkpoint_provider: lab``): lives in the checkout's lab/,
not in the built collection (galaxy.yml leaves lab/ out); ``checkpoint.make_provider`` loads
it by name from here. A lab host is an overlay on the lab's read-only root, so its restore
is a reset of the overlay, run on the controller."""

from __future__ import annotations

import pathlib
import shlex
import subprocess
import sys
import time
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointProvider,
    RestoreResult,
    _check_id,
    _need_command,
    _not_yet_covered,
    _output,
    _substitute,
    _tail,
)

#: the collection's root directory (the checkout, where lab/lab.py lives)
COLLECTION_ROOT = str(pathlib.Path(__file__).resolve().parents[1])


class LabProvider(CheckpointProvider):
    """Checkpoints of the lab's own hosts (lab/; DESIGN "The lab"): a host is an overlay on
    the lab's read-only root, so the restore is a reset of the host's overlay, run on the
    CONTROLLER, and the verification a fresh SSH login with become to the host.

    restore_command: argv template, split with shlex, ``{python}`` (this Python), ``{host}``
      (inventory hostname) and ``{id}`` substituted in each word, run without a shell in
      ``cwd`` (default the collection root). Default ``{python} lab/lab.py reset {host}``:
      the host goes back to the lab's BASELINE, so every change since it booted is gone
      (what earlier attempts fixed too); the detail says so.
    snapshot_command: run the same way at the first cover() (default none: the baseline is
      the snapshot).
    timeout: seconds each command may run (default 600).
    verify: callable(action) -> an object with ``healthy`` and ``detail`` (default
      ``health.check_host``: a fresh login plus become).
    """

    name = 'lab'
    DEFAULT_RESTORE = '{python} lab/lab.py reset {host}'

    def __init__(self, session, task_vars: dict, restore_command: str = DEFAULT_RESTORE,
                 snapshot_command: str | None = None, cwd: str | None = None, timeout: int = 600,
                 verify: t.Callable | None = None):
        self.restore_command = _need_command({'restore_command': restore_command}, 'restore_command', self.name)
        if snapshot_command is not None:
            _need_command({'snapshot_command': snapshot_command}, 'snapshot_command', self.name)
        self.snapshot_command = snapshot_command
        self.cwd = cwd or COLLECTION_ROOT
        if not isinstance(timeout, int) or timeout < 1:
            raise CheckpointError('the lab checkpoint provider: timeout must be a positive number of seconds',
                                  'bad_options')
        self.timeout = timeout
        self.session = session
        self.task_vars = task_vars or {}
        if verify is None:
            from ansible_collections.scapforge.remediation.plugins.plugin_utils import health
            verify = health.check_host
        self.verify = verify

    @property
    def check_mode(self) -> bool:
        return bool(self.session.check_mode)

    def open(self, checkpoint_id: str) -> 'LabCheckpoint':
        return LabCheckpoint(self, _check_id(checkpoint_id))

    def argv(self, template: str, checkpoint_id: str) -> list[str]:
        """The argv of a command template for this host and checkpoint."""
        values = {'python': sys.executable, 'host': str(self.task_vars.get('inventory_hostname', '')),
                  'id': checkpoint_id}
        return [_substitute(word, values) for word in shlex.split(template)]

    def run(self, what: str, template: str, checkpoint_id: str) -> dict:
        """Run a controller-side command; {what, argv, rc, output, seconds} (rc None: it
        could not start or ran over ``timeout``)."""
        argv = self.argv(template, checkpoint_id)
        started = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=self.cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=self.timeout, check=False)
            rc, output = proc.returncode, _output(proc.stdout, proc.stderr)
        except subprocess.TimeoutExpired as ex:
            rc, output = None, 'killed after %d s: %s' % (self.timeout, _tail(ex.stderr or ex.stdout or ''))
        except OSError as ex:
            rc, output = None, 'cannot run %s: %s' % (argv[0], ex)
        return {'what': what, 'argv': argv, 'rc': rc, 'output': output,
                'seconds': round(time.monotonic() - started, 3)}


class LabCheckpoint(Checkpoint):
    """A :class:`Checkpoint` of the ``lab`` provider. ``calls``: commands run and checks."""

    whole_host = True

    def __init__(self, provider: LabProvider, checkpoint_id: str):
        super().__init__(checkpoint_id, provider.name)
        self._provider = provider
        self._changed = False   # cover() was called: something may have changed since
        self._closed = False
        self.calls: list[dict] = []

    def _attach(self) -> None:
        self._changed = True

    def cover(self, paths: t.Iterable[str], shallow: t.Iterable[str] = ()) -> list[str]:
        if self._closed:
            raise CheckpointError('checkpoint %s was already restored or discarded; open a new one' % self.id, 'closed')
        newly = _not_yet_covered(list(paths) + list(shallow), self.covered, self.uncovered)
        if not self._changed and self._provider.snapshot_command and not self._provider.check_mode:
            call = self._provider.run('snapshot', self._provider.snapshot_command, self.id)
            self.calls.append(call)
            if call['rc'] != 0:
                raise CheckpointError('checkpoint %s: the lab snapshot command exited %s: %s'
                                      % (self.id, call['rc'], call['output']), 'snapshot_failed')
        self._changed = True
        self.covered.extend(newly)
        return newly

    def restore(self) -> RestoreResult:
        if self._provider.check_mode:
            return RestoreResult(True, detail='check mode: nothing was changed, nothing to restore')
        if not self._changed:
            return RestoreResult(True, detail='nothing was covered (nothing changed), nothing to restore')
        started = time.monotonic()
        call = self._provider.run('restore', self._provider.restore_command, self.id)
        self.calls.append(call)
        mismatches = []
        detail = 'lab host reset by %s (exit %s)' % (shlex.join(call['argv'])[-200:], call['rc'])
        if self._provider.restore_command == LabProvider.DEFAULT_RESTORE:
            detail += ', back to the lab baseline: every change since the host booted is gone'
        if call['rc'] != 0:
            mismatches.append('restore command exited %s: %s' % (call['rc'], call['output']))
        else:
            try:  # the run's persistent connection went down with the host
                self._provider.session.parts().connection.reset()
            except Exception:  # noqa: BLE001 - a dead ControlMaster (or a session without one) is expected here
                pass
            check = self._provider.verify(self._provider.session)
            self.calls.append({'what': 'verify', 'healthy': bool(check.healthy), 'detail': check.detail})
            detail += '; %s' % check.detail
            if not check.healthy:
                mismatches.append('after the reset: %s' % check.detail)
        verified = not mismatches
        if verified:
            self._closed = True
        return RestoreResult(verified, list(self.covered) if verified else [], [], mismatches,
                             round(time.monotonic() - started, 3), detail)

    def discard(self) -> None:
        self._closed = True

    def to_dict(self) -> dict:
        out = super().to_dict()
        out['calls'] = list(self.calls)
        return out
