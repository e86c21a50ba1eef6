"""Progress lines on the console while a host's loop runs (issue 10 item 2).

The loop runs inside ``scapforge.remediation.ralph``'s action plugin, in an Ansible worker
process. ``ansible.utils.display.Display`` methods called there are proxied to the main
process over the task queue manager's final queue (``Display._final_q``, ansible-core
2.14+), so lines written here appear in ``ansible-playbook``'s output while the task is
still running. Under AWX / Automation Controller (ansible-runner's ``awx_display``
callback) the same lines become ``verbose`` events of the job and show in its stdout. A
callback plugin would not do: it sees task-level events only, not what happens inside one
long task.

What is written, every line prefixed with the inventory host name:

- default verbosity: one header line once the baseline scan is known (how many rules the
  host will work), one line per rule when it gets its outcome
  (``lab1: rule 12/136 sysctl_kernel_kptr_restrict attempt 1 (vendor): remediated
  [verified] 2.1 s``; in check mode the line ends with the plan: ``skipped [check_mode]:
  vendor fix would run 2 tasks: ...``), a line when the rescan adds rules, and a closing
  line with the counts; a rule whose outcome changes later (``regressed`` after the final scan, settled
  after a reboot) gets one more line, marked ``now``;
- a line when memory is degraded (a corrupt table moved aside, a fresh one started) or
  turned off (``memory off: ...``), whatever the verbosity: memory must not fail in silence;
- ``-v``: scans with their counts, and per attempt what the fix did, the health check,
  OpenSCAP's verdict and the rollback.

A line that cannot be written never stops the loop: the events log and the host report are
the record, these lines are a view of them.
"""

from __future__ import annotations

import time
import typing as t

from ansible.utils.display import Display


class ConsoleProgress:
    """Writes one host's progress lines through Ansible's ``Display``.

    ``host``: the inventory host name that starts every line; ``display``: an object with
    ``display(msg)`` and ``verbose(msg, caplevel=0)`` (Ansible's ``Display`` singleton by
    default). ``event`` is the listener for :class:`events.EventLog`; ``planned``,
    ``rule_done`` and ``finished`` are called by the loop.
    """

    def __init__(self, host: str, display: t.Any = None) -> None:
        self.host = host
        self.display = display if display is not None else Display()
        self.total = 0
        self.done: set[str] = set()
        self.started = time.monotonic()

    # -- what the loop calls -------------------------------------------------------------
    def planned(self, total: int, profile: str, finished_before: int = 0, check_mode: bool = False) -> None:
        """The header: ``total`` rules to work under ``profile`` (an XCCDF profile id);
        ``finished_before``: rules an interrupted start of the same run already finished."""
        self.total = total
        more = ", %d finished by an earlier start of this run" % finished_before if finished_before else ""
        plan = " (check mode: planned, not applied)" if check_mode else ""
        self._say("%d failing rule%s to work, profile %s%s%s" % (
            total, "" if total == 1 else "s", short_profile(profile), more, plan))

    def added(self, count: int, why: str) -> None:
        """``count`` more rules to work (the rescan's): the total grows."""
        self.total += count
        self._say("%s: %d more rule%s, %d in all" % (why, count, "" if count == 1 else "s", self.total))

    def rule_done(self, short_id: str, outcome: dict) -> None:
        """One line for a rule's outcome (a RuleOutcome dict: outcome, reason, attempts,
        attempt_log, from_memory, detail). The first outcome of a rule counts it as done;
        a later one (regressed, after a reboot) is marked ``now``."""
        log = outcome.get("attempt_log") or []
        seconds = sum(float(entry.get("seconds") or 0) for entry in log)
        attempts = outcome.get("attempts") or 0
        if attempts:
            source = log[-1].get("source", "") if log else ""
            tried = " attempt %d%s" % (attempts, " (%s)" % source if source else "")
        elif outcome.get("from_memory"):
            tried = " from memory %s" % outcome["from_memory"]
        else:
            tried = ""
        verdict = "%s [%s]" % (outcome.get("outcome"), outcome.get("reason"))
        took = " %.1f s" % seconds if log else ""
        if short_id in self.done:
            self._say("rule %s%s: now %s%s" % (short_id, tried, verdict, took))
            return
        self.done.add(short_id)
        self.total = max(self.total, len(self.done))
        detail = str(outcome.get("detail") or "").strip()
        # check mode's answer is the plan: the tasks that would run, at default verbosity
        plan = ": %s" % one_line(detail, 400) if outcome.get("reason") == "check_mode" and detail else ""
        warned = outcome.get("warnings") or []
        warn = " (%d warning%s: %s)" % (len(warned), "s" if len(warned) > 1 else "", one_line(warned[0], 160)) if warned else ""
        self._say("rule %d/%d %s%s: %s%s%s%s" % (len(self.done), self.total, short_id, tried, verdict, took, plan, warn))
        if detail and not plan and outcome.get("outcome") != "remediated":
            self._verbose("  %s: %s" % (short_id, one_line(detail, 300)))

    def finished(self, counts: dict, stopped: str | None) -> None:
        """The closing line: ``counts`` {"outcome/reason": n}, the host's stop reason if any."""
        by_outcome: dict[str, int] = {}
        for key, number in counts.items():
            name = key.split("/", 1)[0]
            by_outcome[name] = by_outcome.get(name, 0) + int(number)
        said = ", ".join("%d %s" % (n, name) for name, n in sorted(by_outcome.items())) or "no rule worked"
        self._say("done in %.0f s: %s%s" % (time.monotonic() - self.started, said,
                                            "; STOPPED: %s" % one_line(stopped, 200) if stopped else ""))

    # -- the events listener (-v detail) -----------------------------------------------
    def event(self, record: dict) -> None:
        """Listener of the host's EventLog: per-attempt detail at ``-v``."""
        try:
            self._event(record)
        except Exception:  # a view of the log must never break the loop
            pass

    def _event(self, record: dict) -> None:
        kind, rule, attempt, data = record["event"], record.get("rule"), record.get("attempt"), record["data"]
        where = "  %s attempt %s" % (rule, attempt) if rule else ""
        if kind == "scan":
            counts = data.get("counts") or {}
            self._verbose("%s scan: %s in %.1f s" % (data.get("label"), ", ".join(
                "%d %s" % (n, k) for k, n in sorted(counts.items())), float(data.get("seconds") or 0)))
        elif kind == "scan_retry":
            self._verbose("%s scan %s (%s), run once more: %s" % (
                data.get("label"), "hung past %s s" % data.get("timeout") if data.get("error_kind") == "timeout"
                else "crashed", data.get("error_kind"), one_line(data.get("msg"), 200)))
        elif kind == "fix_applied":
            if data.get("refused"):
                self._verbose("%s (%s): refused: %s" % (where, data.get("source"), one_line(data["refused"], 200)))
            else:
                self._verbose("%s (%s): %d task(s), changed %s%s" % (
                    where, data.get("source"), len(data.get("tasks") or []), bool(data.get("changed")),
                    ", failed: %s" % one_line(data.get("error"), 200) if not data.get("ok") else ""))
        elif kind == "health":
            state = "ok" if data.get("healthy") else "UNHEALTHY: %s" % one_line(data.get("detail"), 200)
            self._verbose("%s: health%s %s (%.1f s)" % (
                where, " after restore" if data.get("after_restore") else "", state, float(data.get("seconds") or 0)))
        elif kind == "verify":
            if data.get("failed"):
                self._verbose("verification failed (%s): %s" % (data.get("error_kind"), one_line(data.get("msg"), 200)))
            elif rule:
                self._verbose("%s: OpenSCAP %s%s" % (where, data.get("result"),
                                                     " (after the reboot)" if data.get("label") == "after_reboot" else ""))
        elif kind == "restore":
            self._verbose("%s: rolled back, %s" % (where, "verified" if data.get("verified") else "NOT verified"))
        elif kind == "attempt_start":
            self._verbose("%s (%s): started" % (where, data.get("source")))
        elif kind == "attempt_end":
            self._verbose("%s (%s): %s [%s]" % (where, data.get("source"), data.get("verdict"), data.get("reason")))
        elif kind == "memory_degraded":
            self._say("memory degraded: %s" % one_line(data.get("reason"), 400))
        elif kind == "memory_error":
            self._say("memory off: %s" % one_line(data.get("msg"), 400))
        elif kind == "host_stopped":
            self._say("STOPPED: %s" % one_line(data.get("detail"), 300))
        elif kind == "reboot":
            self._say("rebooted for %d deferred rule(s): %s in %s s" % (
                len(data.get("rules") or []), "ok" if data.get("ok") else "FAILED", data.get("seconds")))

    # -- output --------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        try:
            self.display.display("%s: %s" % (self.host, text))
        except Exception:  # the console is a view; the events log is the record
            pass

    def _verbose(self, text: str) -> None:
        try:
            self.display.verbose("%s: %s" % (self.host, text), caplevel=0)
        except Exception:
            pass


def short_profile(profile: str) -> str:
    """``xccdf_org.ssgproject.content_profile_anssi_bp28_high`` -> ``anssi_bp28_high``."""
    return profile.split("_profile_", 1)[-1] if profile else "?"


def one_line(text: t.Any, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."
