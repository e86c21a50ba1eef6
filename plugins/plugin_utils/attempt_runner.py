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

import typing as t

from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import health, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import CheckpointError, paths_touched
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import TaskListExecutor
from ansible_collections.scapforge.remediation.plugins.plugin_utils.scanner import CRASH_KINDS


class AttemptRunner:
    """Runs, judges and undoes attempts on one host.

    action/task_vars: the running action plugin and its host's vars; catalog: the parsed
    datastream; scanner: the run's ``Scanner``; checkpoints: a checkpoint provider
    (``checkpoint.FilesProvider``); events: the run's ``EventLog``; gate_policy: the gate's
    policy for untrusted tasks; health_check: check a fresh login after each attempt;
    stop_host: called with a detail when the host can no longer be managed; want_evidence:
    ask oscap for the failing OVAL evidence when verifying (the agents read it).
    ``changed`` turns True once an attempt changed the host.
    """

    def __init__(self, action, task_vars: dict, catalog, scanner, checkpoints, events, gate_policy,
                 health_check: bool, stop_host: t.Callable[[str], None], want_evidence: bool = False) -> None:
        self.action = action
        self.task_vars = task_vars
        self.catalog = catalog
        self.scanner = scanner
        self.checkpoints = checkpoints
        self.events = events
        self.gate_policy = gate_policy
        self.health_check = health_check
        self._stop_host = stop_host
        self.want_evidence = want_evidence
        self.changed = False
        self._checkpoints: dict[tuple[str, int], t.Any] = {}  # (rule, attempt number) -> Checkpoint

    def run(self, item: A.WorkItem, attempt: A.Attempt, tasks: list, trusted: bool) -> None:
        """Run ``tasks`` as ``attempt`` under a checkpoint, then check the host's health.

        Fills the attempt's report, checkpoint, gate and health; gives it its verdict when it
        is decided before verification (refused; unhealthy, rolled back or not). A lost
        connection or an unhealthy host that a restore cannot heal stops the host.
        """
        short = item.short_id
        checkpoint = self.checkpoints.open("%s-%d" % (short, attempt.number))
        self._checkpoints[(item.rule, attempt.number)] = checkpoint
        uncovered: dict[str, str] = {}

        def before_change(fqcn: str, args: dict) -> str | None:
            touched = paths_touched(fqcn, args)
            if touched.read_only:
                return None
            if touched.unknown:
                uncovered[fqcn] = touched.unknown
            if touched.paths or touched.shallow:
                try:
                    checkpoint.cover(touched.paths, touched.shallow)
                except CheckpointError as exc:  # no change without a way back
                    return "the checkpoint of %s failed: %s" % (", ".join(touched.paths)[:200], exc)
            return None

        attempt.tasks = tasks
        executor = TaskListExecutor(self.action, self.task_vars, trusted=trusted,
                                    policy=None if trusted else self.gate_policy, before_change=before_change)
        report = executor.run(tasks)
        attempt.report = report.to_dict()
        attempt.checkpoint = dict(checkpoint.to_dict(), not_covered=uncovered)
        self.changed = self.changed or report.changed
        self.events.emit(
            "fix_applied", rule=short, attempt=attempt.number, source=attempt.source, ok=report.ok,
            changed=report.changed, refused=report.refused, failed_task=report.failed_task, error=report.error,
            modules=report.modules, tasks=report.task_results, checkpoint=attempt.checkpoint,
        )
        if report.refused:
            attempt.gate = report.refused
            attempt.verdict, attempt.reason = A.judge(report.refused, None, None, None)
            attempt.say(report.refused[:500])
            return
        if report.unreachable:  # the connection dropped during the fix: nothing can be restored now
            attempt.verdict, attempt.reason = A.UNHEALTHY, "unhealthy"
            attempt.say("connection lost during the attempt: %s" % report.error)
            self._stop_host("connection lost during %s: %s" % (short, report.error))
            return
        if not self.health_check:
            return
        status = self.health(report.changed, item)
        attempt.health = status.to_dict()
        self.events.emit("health", rule=short, attempt=attempt.number, **status.to_dict())
        if status.healthy:
            return
        attempt.verdict, attempt.reason = A.UNHEALTHY, "unhealthy"
        attempt.say(status.detail[:500])
        restored = self.roll_back(item, attempt)
        after = self.health(False, item) if restored else None
        if after is not None:
            self.events.emit("health", rule=short, attempt=attempt.number, after_restore=True, **after.to_dict())
        if restored and after.healthy:
            attempt.reason = "unhealthy_rolled_back"
            attempt.add_note("rolled back, restore verified, healthy again")
        else:
            self._stop_host("stopped after %s: %s%s" % (short, status.detail,
                                                   "" if restored else "; the rollback failed, restore by hand"))

    def health(self, changed: bool, item: A.WorkItem) -> health.HealthReport:
        """A fresh login with become; after a change to an ssh rule, a login to a check sshd
        running the new configuration too (``plugin_utils.health``)."""
        status = health.check_host(self.action)
        if status.healthy and changed and item.category == "ssh":
            status = health.check_sshd_config(self.action)
        return status

    def roll_back(self, item: A.WorkItem, attempt: A.Attempt) -> bool:
        """Restore the attempt's checkpoint and verify it; record the restore on the attempt
        (``restore``, ``rolled_back``) and as an event. Returns True when verified."""
        checkpoint = self._checkpoints.get((item.rule, attempt.number))
        if checkpoint is None:
            return False
        try:
            result = checkpoint.restore()
            data = result.to_dict()
            verified = bool(result.verified)
        except (CheckpointError, AnsibleError) as exc:
            data, verified = {"verified": False, "detail": str(exc)[:500]}, False
        not_covered = (attempt.checkpoint or {}).get("not_covered") or {}
        if not_covered:  # packages, services, the running kernel: no file checkpoint undoes them
            data["not_undone"] = dict(not_covered)
        attempt.restore = data
        attempt.rolled_back = verified
        self.events.emit("restore", rule=item.short_id, attempt=attempt.number, **data)
        if verified and not_covered:
            attempt.add_note("rolled back its files, not: %s" % "; ".join(sorted(set(not_covered.values())))[:300])
        if not verified:
            attempt.add_note("ROLLBACK NOT VERIFIED: %s" % (data.get("detail") or
                                                            "; ".join(data.get("mismatches") or []))[:400])
        return verified

    def evaluate(self, rule_id: str, evidence: bool = False, label: str = "verify") -> tuple[str, dict | None]:
        """Evaluate one rule (with the rules it requires) now: (result, OVAL evidence or None).
        The result is oscap's, or ``missing``, ``scan_failed`` or ``scanner_crash``."""
        batch = self.catalog.expand_requires([rule_id])
        result = self.scanner.scan(batch, evidence=evidence)
        shorts = [safety.short_rule_id(r) for r in batch]
        if result.get("failed"):
            kind = result.get("error_kind", "oscap_error")
            self.events.emit("verify", rule=safety.short_rule_id(rule_id), label=label, failed=True, error_kind=kind,
                             msg=result.get("msg"), batch=shorts)
            return ("scanner_crash" if kind in CRASH_KINDS else "scan_failed"), None
        value = result.get("rules", {}).get(rule_id, "missing")
        self.events.emit("verify", rule=safety.short_rule_id(rule_id), label=label, result=value, batch=shorts)
        return value, (result.get("evidence") or {}).get(rule_id)

    def verify_one(self, item: A.WorkItem, attempt: A.Attempt) -> None:
        """Verify a Worker attempt on its own and give it its verdict."""
        value, evidence = self.evaluate(item.rule, evidence=self.want_evidence)
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
        if attempt.verdict == A.PASSED:
            attempt.say("a task failed but the rule passes: %s" % error if not report.get("ok", True) else "")
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

    # -- the vendor phase ------------------------------------------------------------------
