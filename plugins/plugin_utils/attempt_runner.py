"""One attempt on the host, vendor or Worker: run it under a checkpoint, check the host's
health, let OpenSCAP judge it, undo it when it did not pass.

Used by both phases of ``plugin_utils.loop`` (the vendor fixes, batched for verification)
and by ``plugin_utils.agent_loop`` (the Worker's attempts, one at a time). The files a task
can touch are saved right before it runs (``executor.TaskListExecutor``'s ``before_change``
hook, ``checkpoint.paths_touched`` on its templated arguments); an attempt that fails, has
no effect, changes the host without passing, or leaves it unhealthy is restored and the
restore verified (digests, modes and owners equal the checkpoint). What a files checkpoint
cannot undo (packages, services, the running kernel) is named in the attempt's detail.
"""

from __future__ import annotations

import re
import time
import typing as t

from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import health, ledger, outcomes, safety, scope, task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import CheckpointError, paths_touched
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import PackageFactsCache, TaskListExecutor
from ansible_collections.scapforge.remediation.plugins.plugin_utils.state_checkpoint import StateCheckpoint

#: run after a dead-man restore of sshd's files: the restored file only counts once sshd reads it.
RELOAD_SSHD = "systemctl reload ssh 2>/dev/null || systemctl reload sshd 2>/dev/null || true"
#: restored paths under these need ``systemctl daemon-reload`` before systemd runs them (a
#: removed drop-in stays loaded otherwise).
SYSTEMD_DIRS = ("/etc/systemd/", "/lib/systemd/", "/usr/lib/systemd/", "/run/systemd/system/")
#: seconds a reloaded sshd has to answer a login again: on SIGHUP it executes itself anew, and
#: a login in between is refused (seen on a loaded host as the health check's "Connection refused").
SSHD_SETTLE = 15.0
#: seconds to wait past a switch's firing time before logging in again.
DEADMAN_GRACE = 10.0


def named_in_the_text(tasks: t.Any) -> tuple[list[str], list[str]]:
    """The files a task list will change that its text already names: ``(paths, shallow)``,
    from ``checkpoint.paths_touched`` of every task without a loop (blocks flattened), in task
    order, leaving out any path that holds Jinja (``{{ item.path }}``: known only when the task
    runs). Never raises; a task that cannot be read adds nothing.

    Issue 9: an attempt's first save covers these together with its first task's own paths,
    in one checkpoint call instead of one call per changing task (the demo run of 2026-11-30
    made 281 saves, 0.25 s each, for 136 vendor fixes). A file named by a task that then does
    not run (its ``when`` is false) is saved needlessly and, on a rollback, put back as it was.
    """
    paths: list[str] = []
    shallow: list[str] = []

    def walk(entries: t.Any) -> None:
        for ds in entries if isinstance(entries, list) else []:
            if not isinstance(ds, dict):
                continue
            if "block" in ds:
                for key in ("block", "rescue", "always"):
                    walk(ds.get(key))
                continue
            if "loop" in ds or any(str(k).startswith("with_") for k in ds):
                continue
            try:
                module, args, problem = task_gate.split_task(ds)
            except Exception:  # pylint: disable=broad-except  # a task the gate refuses later
                continue
            if problem or not module:
                continue
            touched = paths_touched(module, args)
            paths.extend(p for p in touched.paths if p not in paths and not task_gate.contains_jinja(p))
            shallow.extend(p for p in touched.shallow if p not in shallow and not task_gate.contains_jinja(p))

    walk(tasks)
    return paths, shallow


def reloads_after(paths: t.Sequence[str]) -> list[str]:
    """What to run once ``paths`` were restored or removed so the host runs as before, not only
    matches on disk: ``systemctl daemon-reload`` for a unit file or drop-in (a removed drop-in
    stays loaded otherwise), sshd's reload for its configuration. PAM is read by each new
    session: nothing to reload."""
    out = []
    if any(p.startswith(SYSTEMD_DIRS) for p in paths):
        out.append("systemctl daemon-reload")
    if any(p.startswith("/etc/ssh/") for p in paths):
        out.append(RELOAD_SSHD)
    return out


def only_side_effects(status: health.HealthReport) -> bool:
    """The host is healthy but for what the attempt changed beyond its rule: every check
    passed except ``side_effects`` (the fresh login had to pass for those checks to run)."""
    checks = status.checks or {}
    return (not (checks.get("side_effects") or {}).get("ok", True)
            and all(v.get("ok") for k, v in checks.items() if k != "side_effects"))


def checkpoint_base(run_id: str, short_rule: str, number: int, start: int) -> str:
    """``<run id>-<rule>-<attempt>-s<start>``, within the checkpoint id's alphabet and 128
    characters: the run id's characters outside ``A-Za-z0-9._-`` become ``_`` and it keeps
    at most 40 of them; without a run id, ``<rule>-<attempt>-s<start>``."""
    tail = "%s-%d-s%d" % (short_rule, number, start)
    run = re.sub(r"[^A-Za-z0-9._-]", "_", run_id or "")[:40].strip(".")
    return ("%s-%s" % (run, tail) if run else tail)[:120]


class AttemptRunner:
    """Runs, judges and undoes attempts on one host.

    action/task_vars: the running action plugin and its host's vars; catalog: the parsed
    datastream; verifier: the run's ``_run.verifier.Verifier``; checkpoints: a checkpoint provider
    (``checkpoint.FilesProvider``); events: the run's ``EventLog``; gate_policy: the gate's
    policy for untrusted tasks; health_check: check a fresh login after each attempt;
    stop_host: called with a detail when the host can no longer be managed; want_evidence:
    ask oscap for the failing OVAL evidence when verifying (the agents read it, and memory keeps
    it as the cause of a failed fix); progress: the
    host's ``progress.Progress`` (an attempt is ``open`` from before its first change until it
    is judged and, where due, rolled back); start: which start of this run id this is (part of
    checkpoint ids, so a resumed run never reuses an interrupted run's checkpoint); parent: a
    ``host_setup.ParentWatch`` (no task runs once ansible-playbook is gone); baseline: the
    ``health.HostBaseline`` taken before any change (None: the fresh login only);
    health_commands: the user's commands that must exit 0; deadman_seconds: how long an armed
    dead-man switch waits before it restores by itself (0: never armed); home: the connecting
    user's home directory (its .ssh is access).
    ``changed`` turns True once an attempt changed the host.
    """

    def __init__(self, session, task_vars: dict, catalog, verifier, checkpoints, events, gate_policy,
                 health_check: bool, stop_host: t.Callable[[str], None], want_evidence: bool = False,
                 progress=None, start: int = 1, parent=None, baseline=None, health_commands: t.Sequence[str] = (),
                 deadman_seconds: int = 600, home: str | None = None,
                 classify: t.Callable[[str, str], str | None] | None = None,
                 facts_cache: PackageFactsCache | None = None, run_id: str = "") -> None:
        self.session = session
        self.run_id = run_id
        self.facts_cache = facts_cache
        self.classify = classify
        self.task_vars = task_vars
        self.catalog = catalog
        self.verifier = verifier
        self.checkpoints = checkpoints
        self.events = events
        self.gate_policy = gate_policy
        self.health_check = health_check
        self._stop_host = stop_host
        self.want_evidence = want_evidence
        self.changed = False
        self.progress = progress
        self.start = start
        self.parent = parent
        self.baseline = baseline
        self.health_commands = list(health_commands)
        self.deadman_seconds = int(deadman_seconds or 0)
        self.home = home
        self._checkpoints: dict[tuple[str, int], t.Any] = {}  # (rule, attempt number) -> Checkpoint
        self._states: dict[tuple[str, int], StateCheckpoint] = {}  # its package set and service states
        self._ids_used: set[str] = set()
        #: (rule, attempt number) -> paths its checkpoint saw absent, for an attempt whose
        #: health check waits for its batch (``run(defer_health=True)``)
        self._created: dict[tuple[str, int], list[str]] = {}

    def checkpoint_id(self, item: A.WorkItem, attempt: A.Attempt) -> str:
        """``<run id>-<rule>-<attempt>-s<start>``: unique within the run, across resumed
        starts, and apart from another run's (the dead-man switch's systemd unit is
        ``scapforge-deadman-<checkpoint id>``). An attempt applied again alone, after its batch
        failed the health check, reuses its number: its checkpoint gets ``-<n>`` appended."""
        base = checkpoint_base(self.run_id, item.short_id, attempt.number, self.start)
        checkpoint_id, again = base, 1
        while checkpoint_id in self._ids_used:
            again += 1
            checkpoint_id = "%s-%d" % (base, again)
        self._ids_used.add(checkpoint_id)
        return checkpoint_id

    def close(self, item: A.WorkItem, attempt: A.Attempt) -> None:
        """The attempt is settled (judged and, where due, rolled back): it leaves the progress
        file's open attempts. One whose restore failed stays open, for a resumed run to retry."""
        if self.progress is None or (attempt.restore and not attempt.restore.get("verified")):
            return
        self.progress.append("close", rule=item.rule, attempt=attempt.number)

    def run(self, item: A.WorkItem, attempt: A.Attempt, tasks: list, trusted: bool,
            variables: dict | None = None, defer_health: bool = False) -> None:
        """Run ``tasks`` as ``attempt`` under a checkpoint, then check the host's health.

        Fills the attempt's report, checkpoint, gate, health and side effects; gives it its
        verdict when it is decided before verification (refused; unhealthy, rolled back or
        not). Before its first change to something the controller's access depends on
        (sshd, PAM, sudoers, accounts, network, firewall: ``safety.touches_access``) the
        checkpoint's dead-man switch is armed: the target restores it by itself unless the
        controller confirms health through a fresh login in time (issue 7 item 1). A lost
        connection, or an unhealthy host that neither a restore nor the switch heals, stops
        the host. ``variables``: extra variables for the tasks (a skill fix's XCCDF Values).

        ``defer_health``: leave the health check to the attempt's batch (``batch_health``),
        unless the attempt armed the dead-man switch, changed an ssh rule or ran a task that
        ``safety.needs_own_health`` names (a command, a package, a service, a login file):
        those are checked now, since the switch waits for the controller's word, an sshd
        change needs its own login and a broken shell would fail the batch's later fixes. A
        deferred attempt has ``health == {"deferred": True}``.
        """
        checkpoint = self.checkpoints.open(self.checkpoint_id(item, attempt))
        self._checkpoints[(item.rule, attempt.number)] = checkpoint
        if self.progress is not None:
            self.progress.append("open", rule=item.rule, attempt=attempt.number, checkpoint=checkpoint.id)
        state = self._states[(item.rule, attempt.number)] = StateCheckpoint(self.session)
        guard = _ChangeGuard(self, item, attempt, checkpoint, named_in_the_text(tasks) if trusted else None, state)
        attempt.tasks = tasks
        executor = TaskListExecutor(self.session, self.task_vars, trusted=trusted,
                                    policy=None if trusted else self.gate_policy, before_change=guard.before_change,
                                    facts_cache=self.facts_cache, diff=True,
                                    cover_ahead=guard.cover_ahead if trusted else None)
        report = executor.run(tasks, variables)
        try:
            state.after_run()
        except AnsibleError as exc:  # the connection: the health check that follows says more
            state.problems["packages"] = str(exc)[:200]
        attempt.report = report.to_dict()
        attempt.checkpoint = dict(checkpoint.to_dict(), not_covered=guard.uncovered, deadman=bool(guard.switch),
                                  changing=guard.changing, state=state.summary())
        self.changed = self.changed or report.changed
        self.events.emit(
            "fix_applied", rule=item.short_id, attempt=attempt.number, source=attempt.source, ok=report.ok,
            changed=report.changed, refused=report.refused, failed_task=report.failed_task, error=report.error,
            modules=report.modules, tasks=report.task_results, checkpoint=attempt.checkpoint,
        )
        self._after_run(item, attempt, report, checkpoint, guard, defer_health)

    def _after_run(self, item: A.WorkItem, attempt: A.Attempt, report, checkpoint, guard: "_ChangeGuard",
                   defer_health: bool) -> None:
        """What the attempt's run comes to before verification: refused, connection lost,
        health deferred to its batch, healthy (the switch disarmed), or unhealthy and healed."""
        short, switch = item.short_id, guard.switch
        if report.refused:
            attempt.gate = report.refused
            attempt.gate_refusals = list(report.refusals)
            attempt.verdict, attempt.reason = A.judge(report.refused, None, None, None)
            attempt.say(report.refused[:500])
            self.close(item, attempt)
            return
        if report.unreachable:  # the connection dropped: the switch, if armed, restores by itself
            attempt.verdict, attempt.reason = A.UNHEALTHY, "unhealthy"
            attempt.say("connection lost during the attempt: %s" % report.error)
            self._stop_host("connection lost during %s: %s%s" % (
                short, report.error, "; its dead-man switch restores it by itself" if switch else ""))
            return
        if not self.health_check:
            self._disarm(item, attempt, checkpoint, switch)
            return
        if defer_health and not switch and not guard.own_health and item.category != "ssh":
            attempt.health = {"deferred": True}
            self._created[(item.rule, attempt.number)] = list(getattr(checkpoint, "absent", ()))
            return
        status = self.health(report.changed, item, getattr(checkpoint, "absent", ()))
        attempt.health = status.to_dict()
        attempt.side_effects = list(status.side_effects)
        self.events.emit("health", rule=short, attempt=attempt.number, **status.to_dict())
        if status.healthy:
            if self._disarm(item, attempt, checkpoint, switch):
                return
            status = health.HealthReport(False, "the dead-man switch fired before the controller confirmed health",
                                         status.seconds, codes=[health.DEADMAN_FIRED])
        attempt.verdict, attempt.reason = A.UNHEALTHY, "unhealthy"
        attempt.say(status.detail[:500])
        self._heal(item, attempt, checkpoint, switch, status)

    def _arm(self, item: A.WorkItem, attempt: A.Attempt, checkpoint, paths: list, switch: dict) -> str | None:
        """Arm the checkpoint's dead-man switch before the first change that touches access;
        returns a reason to refuse the change when it cannot be armed."""
        post = reloads_after(paths)[::-1]  # sshd's reload first: the controller's way back in
        try:
            state = checkpoint.arm(self.deadman_seconds, post_restore=post)
        except CheckpointError as exc:  # no access change without the net under it
            return "the dead-man switch could not be armed: %s" % exc
        switch.update(state.to_dict())
        self.events.emit("deadman", rule=item.short_id, attempt=attempt.number, step="armed", paths=paths[:10],
                         **state.to_dict())
        return None

    def _disarm(self, item: A.WorkItem, attempt: A.Attempt, checkpoint, switch: dict) -> bool:
        """Cancel an armed switch once the controller saw the host healthy; False when it had
        already fired (it restored the checkpoint: the attempt is gone from the host)."""
        if not switch:
            return True
        try:
            state = checkpoint.disarm()
        except CheckpointError as exc:
            self.events.emit("deadman", rule=item.short_id, attempt=attempt.number, step="disarm_failed",
                             msg=str(exc)[:300])
            return True  # a healthy host and a switch still armed: it may fire; the verify decides
        self.events.emit("deadman", rule=item.short_id, attempt=attempt.number, step="disarmed", **state.to_dict())
        return not state.fired

    def _heal(self, item: A.WorkItem, attempt: A.Attempt, checkpoint, switch: dict, status) -> None:
        """An unhealthy attempt: restore it over the open connection; when that cannot be done
        (become is what broke) and a switch is armed, wait for it to fire; then log in afresh.
        Healthy again: ``unhealthy_rolled_back``; else the host stops (reason ``unhealthy``)."""
        short = item.short_id
        findings = [f for f in attempt.side_effects if f.get("kind") == "sensitive_file"]
        if findings and self.baseline is not None:  # a chown through a symlink: no checkpoint covered it
            undone = health.undo_sensitive_changes(self.session, findings, self.baseline)
            self.events.emit("side_effects_undone", rule=short, attempt=attempt.number, **undone)
        restored = self.roll_back(item, attempt)
        by = "restore"
        if not restored and switch:
            by = "dead-man switch"
            wait = float(switch.get("fires_in") or self.deadman_seconds) + DEADMAN_GRACE
            self.events.emit("deadman", rule=short, attempt=attempt.number, step="waiting", seconds=round(wait, 1))
            time.sleep(max(0.0, wait))
        after = self.health(False, item)
        self.events.emit("health", rule=short, attempt=attempt.number, after_restore=True, by=by, **after.to_dict())
        if after.healthy and not restored and switch:
            try:
                state = checkpoint.deadman_status()
                self.events.emit("deadman", rule=short, attempt=attempt.number, step="status", **state.to_dict())
                restored = bool(state.fired and state.result and state.result.verified)
                attempt.restore = state.result.to_dict() if state.result else attempt.restore
            except CheckpointError as exc:
                self.events.emit("deadman", rule=short, attempt=attempt.number, step="status_failed",
                                 msg=str(exc)[:300])
            attempt.rolled_back = restored
        if restored and after.healthy:
            attempt.reason = "side_effect_rolled_back" if only_side_effects(status) else "unhealthy_rolled_back"
            attempt.add_note("rolled back by the %s, verified, healthy again" % by)
            self.close(item, attempt)
        else:
            self._stop_host("stopped after %s: %s%s" % (short, status.detail,
                                                        "" if restored else "; the rollback failed, restore by hand"))

    def batch_health(self, attempts: t.Sequence[tuple[A.WorkItem, A.Attempt]]) -> health.HealthReport:
        """One health check for several attempts whose check was deferred (``run(defer_health=
        True)``): the fresh login with become, then the checks against the baseline with the
        paths all of them created. Issue 9: a check per batch of vendor fixes instead of one
        per fix; the loop applies the attempts alone again when the batch is unhealthy."""
        created: set[str] = set()
        for item, attempt in attempts:
            created.update(self._created.pop((item.rule, attempt.number), ()))
        return self.health(False, None, created)

    def health(self, changed: bool, item: A.WorkItem | None, created: t.Iterable[str] = ()) -> health.HealthReport:
        """A fresh login with become; after a change to an ssh rule, a login to a check sshd
        running the new configuration too; then, on the open connection, the checks against
        the run's baseline (``sshd -t``, ``visudo -c``, the package database, units that
        failed since, the user's ``scapforge_health_commands``) and the side effects beyond
        the rule (login shells, owner and mode of sensitive files, files ``created`` whose
        mode the umask decided): ``plugin_utils.health``."""
        status = health.check_host(self.session)
        if status.healthy and changed and item is not None and item.category == "ssh":
            status = health.check_sshd_config(self.session)
        if not status.healthy or self.baseline is None:
            return status
        after = health.check_after(self.session, self.baseline, self.health_commands, created=sorted(created))
        if after.healthy:
            after.detail = "%s; %s" % (status.detail, after.detail) if after.detail else status.detail
            after.codes = list(status.codes) + after.codes  # a caveat of the login check (sshd_check_unproven)
        return after

    def roll_back(self, item: A.WorkItem, attempt: A.Attempt) -> bool:
        """Restore the attempt's checkpoint and verify it; record the restore on the attempt
        (``restore``, ``rolled_back``) and as an event. Returns True when verified."""
        checkpoint = self._checkpoints.get((item.rule, attempt.number))
        if checkpoint is None:
            return False
        if self.facts_cache is not None:  # a restore can put back a package database file
            self.facts_cache.invalidate()
        try:
            result = checkpoint.restore()
            data = result.to_dict()
            verified = bool(result.verified)
        except (CheckpointError, AnsibleError) as exc:
            data, verified = {"verified": False, "detail": str(exc)[:500]}, False
        data.update(self._undo_state(item, attempt, data))
        not_covered = (attempt.checkpoint or {}).get("not_covered") or {}
        if not_covered:  # the running kernel, a command's unknown writes: nothing here undoes them
            data["not_undone"] = dict(not_covered)
        attempt.restore = data
        entries = ledger.attempt_ledger(item.short_id, attempt)
        left = [e for e in entries if e["state"] != ledger.UNDONE or not e["verified"]]
        attempt.rolled_back = verified and not left  # one meaning: every change undone, each verified
        self.events.emit("restore", rule=item.short_id, attempt=attempt.number, rolled_back=attempt.rolled_back,
                         left=["%s %s" % (e["kind"], e["target"]) for e in left][:20], **data)
        if attempt.rolled_back and entries:
            attempt.add_note("rolled back: %d change(s) undone, each verified" % len(entries))
        if verified and left:
            attempt.add_note("rolled back, but left on the host: %s" % "; ".join(
                "%s %s (%s)" % (e["kind"], e["target"], e["change"]) for e in left)[:300])
        if not verified:
            attempt.add_note("ROLLBACK NOT VERIFIED: %s" % (data.get("detail") or
                                                            "; ".join(data.get("mismatches") or []))[:400])
        return verified

    def _undo_state(self, item: A.WorkItem, attempt: A.Attempt, restored: dict) -> dict:
        """After the files' restore: reload systemd (and sshd) when a restored or removed file
        is theirs, purge the packages the attempt installed, put its services back
        (``state_checkpoint``). Returns the keys to add to the restore's record."""
        out: dict = {}
        reloads = reloads_after(list(restored.get("restored") or []) + list(restored.get("removed") or []))
        try:
            for command in reloads:
                self.session.run_command(command)
                if command == RELOAD_SSHD:
                    out["sshd_answered_after"] = self._sshd_answers()
            state = self._states.get((item.rule, attempt.number))
            if state is not None and state.saved():
                out.update(state.undo())
        except AnsibleError as exc:
            out["state_error"] = str(exc)[:300]
        if reloads:
            out["reloaded"] = reloads
        return out

    def _sshd_answers(self) -> float:
        """Wait, at most SSHD_SETTLE seconds, until a fresh login is no longer refused after
        sshd's reload; returns the seconds waited (what the login then says is the health
        check's to judge)."""
        started = time.monotonic()
        while True:
            status = health.check_host(self.session)
            waited = time.monotonic() - started
            if "Connection refused" not in status.detail or waited >= SSHD_SETTLE:
                return round(waited, 2)
            time.sleep(0.5)

    def evaluate(self, rule_id: str, evidence: bool = False, label: str = "verify",
                 attempt: int | None = None) -> tuple[str, dict | None]:
        """Evaluate one rule (with the rules it requires) now: (result, OVAL evidence or None).
        The result is oscap's, or ``missing``, ``scan_failed`` or ``scanner_crash``."""
        values, found, _result = self.verifier.check([rule_id], evidence=evidence, attempts={rule_id: attempt},
                                                     label=label)
        return values[rule_id], found.get(rule_id)

    def verify_one(self, item: A.WorkItem, attempt: A.Attempt) -> None:
        """Verify a Worker attempt on its own and give it its verdict."""
        value, evidence = self.evaluate(item.rule, evidence=self.want_evidence, attempt=attempt.number)
        self.judge(item, attempt, value, evidence, reboot=False)

    def judge(self, item: A.WorkItem, attempt: A.Attempt, value: str, evidence: dict | None, reboot: bool) -> None:
        """Give an attempt that ran its verdict, reason and detail from the rule's OpenSCAP
        result ``value`` (see ``attempts.judge``); keep the evidence on the attempt and item."""
        attempt.result = value
        if evidence:
            attempt.evidence = item.evidence = evidence
        healthy = None if not attempt.health else attempt.health.get("healthy")
        attempt.verdict, attempt.reason = A.judge(None, attempt.report, healthy, value, reboot)
        report = attempt.report or {}
        error = (report.get("error") or "")[:500]
        if attempt.reason == "fix_failed" and self.classify is not None:
            kind = self.classify(item.rule, report.get("error") or "")
            if isinstance(kind, str) and kind and not any(ch.isspace() for ch in kind):
                attempt.reason = outcomes.environment_reason(kind)  # the skill knows this failure: the host, not the rule
        if attempt.verdict == A.PASSED:
            attempt.say("a task failed but the rule passes: %s" % error if not report.get("ok", True) else "")
            attempt.warnings = self.scope_warnings(item, attempt)
        elif attempt.verdict == A.FAILED and not report.get("ok", True):
            attempt.say("%s: %s" % (report.get("failed_task"), error))
        elif attempt.reason == "reboot_required":
            attempt.say("the fix ran; its metadata says reboot")
        elif attempt.verdict == A.INEFFECTIVE:
            attempt.say("the fix ran; oscap still reports fail")
        elif attempt.verdict == A.NO_EFFECT:
            attempt.say("the fix changed nothing; oscap still reports fail")
        else:
            attempt.say("oscap result after the fix: %s" % value)

    def scope_warnings(self, item: A.WorkItem, attempt: A.Attempt) -> list[str]:
        """The scope warnings of an attempt that passed (``scope.warnings_for``): one
        read-only grep of the configuration of the services whose files it wrote; none when
        it wrote none or the read fails (the warning is advice, never a verdict)."""
        wrote = scope.written((attempt.report or {}).get("changes") or [])
        command = scope.read_command(wrote)
        if command is None:
            return []
        try:
            result = self.session.run_command(command)
        except AnsibleError as exc:
            self.events.emit("scope_read_failed", rule=item.short_id, attempt=attempt.number, error=str(exc)[:300])
            return []
        found = scope.warnings_for(wrote, scope.parse_read(str(result.get("stdout") or "")))
        if found:
            self.events.emit("scope_warning", rule=item.short_id, attempt=attempt.number, warnings=found)
        return found

    # -- the vendor phase ------------------------------------------------------------------


class _ChangeGuard:
    """Runs before each change of one attempt (the executor's ``before_change`` and
    ``cover_ahead``): saves what the task will change in the attempt's checkpoint, arms the
    dead-man switch before the first change that touches access, and records what no file
    checkpoint covers (``uncovered``), the files the tasks ran to change (``changing``) and
    why the attempt's health cannot wait for its batch (``own_health``). ``named``: the
    files a trusted text names (``named_in_the_text``), saved with its first change."""

    def __init__(self, runner: "AttemptRunner", item: A.WorkItem, attempt: A.Attempt, checkpoint,
                 named: tuple[list[str], list[str]] | None, state: StateCheckpoint | None = None) -> None:
        self.runner, self.item, self.attempt, self.checkpoint = runner, item, attempt, checkpoint
        self.state = state
        self.named = None if named == ([], []) else named
        self.uncovered: dict[str, str] = {}
        self.switch: dict = {}
        self.own_health: list[str] = []
        self.changing: list[str] = []

    def _cover_with_named(self, full: t.Sequence[str], shallow: t.Sequence[str]) -> bool:
        """Save ``full``/``shallow`` and, the first time, the files the text names, in one
        checkpoint call; False when that call failed (then nothing is assumed saved)."""
        full, shallow = list(full), list(shallow)
        if self.named:
            full, shallow, self.named = full + self.named[0], shallow + self.named[1], None
        if not full and not shallow:
            return True
        try:
            self.checkpoint.cover(full, shallow)
            return True
        except CheckpointError:
            return False

    def before_change(self, fqcn: str, args: dict) -> str | None:
        runner = self.runner
        if runner.parent is not None and runner.parent.gone():  # killed playbook: change nothing more
            return "ansible-playbook is gone; the attempt stops before this change"
        touched = paths_touched(fqcn, args)
        if touched.read_only:
            return None
        if touched.unknown and not self._save_state(fqcn, args, touched.unknown):
            self.uncovered[fqcn] = touched.unknown
        paths = list(touched.paths) + list(touched.shallow)
        self.changing.extend(p for p in paths if p not in self.changing)
        if safety.needs_own_health(fqcn, paths):
            self.own_health.append(fqcn)
        if not self.switch and runner.deadman_seconds and safety.touches_access(fqcn, args, paths, runner.home):
            problem = runner._arm(self.item, self.attempt, self.checkpoint, paths, self.switch)
            if problem:
                return problem
        if not paths:
            return None
        if self.named and self._cover_with_named(touched.paths, touched.shallow):
            return None
        try:  # else a later task's file could not be saved ahead: this task's own, alone
            self.checkpoint.cover(touched.paths, touched.shallow)
        except CheckpointError as exc:  # no change without a way back
            return "the checkpoint of %s failed: %s" % (", ".join(paths)[:200], exc)
        return None

    def _save_state(self, fqcn: str, args: dict, unknown: str) -> bool:
        """Save the package set or the unit's state before the change; True when that is all
        ``unknown`` names (then it is covered)."""
        if self.state is None:
            return False
        try:
            return self.state.before(fqcn, args, unknown)
        except AnsibleError as exc:
            self.state.problems[fqcn] = str(exc)[:200]
            return False

    def cover_ahead(self, pairs: list) -> None:
        """A loop's files (and those the text names), in one save; on failure each item
        saves its own files before it runs."""
        full: list[str] = []
        shallow: list[str] = []
        for fqcn, args in pairs:
            touched = paths_touched(fqcn, args)
            if not touched.read_only:
                full.extend(touched.paths)
                shallow.extend(touched.shallow)
        self._cover_with_named(full, shallow)
