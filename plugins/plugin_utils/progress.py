"""A host's progress through a run, written as it happens, so a killed run can resume.

``<run_dir>/progress/<host>.jsonl``: one JSON line per step, appended with a single
``os.write`` on an O_APPEND descriptor (as ``events.EventLog`` does), so a controller killed
with SIGKILL loses at most the step it was writing:

- ``start``: the loop started (once per run of the playbook with this run id);
- ``baseline``: the baseline scan's result (the ``before`` of the report);
- ``open``: an attempt is about to change the host (rule, attempt number, checkpoint id);
- ``close``: that attempt is judged and, where due, rolled back;
- ``outcome``: a rule's final outcome (the RuleOutcome dict).

Re-running the playbook with the same ``scapforge_run_id`` reads it back
(:func:`load`): the finished rules keep their outcomes, the baseline is not taken again
(the host has changed since), and attempts opened but never closed are the ones a crash
interrupted: the loop rolls them back first, newest first (issue 7, "Resume").
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import utc_now


@dataclasses.dataclass
class ResumeState:
    """What an earlier, interrupted run of the same run id left: ``starts`` (how many times
    the loop started before), ``baseline`` (the scan result dict, or None), ``outcomes``
    ({full rule id: RuleOutcome dict}), ``open`` (the attempts opened and not closed, oldest
    first: {"rule", "attempt", "checkpoint"}), ``damaged`` (lines that could not be read:
    the last one when the controller died while writing it)."""

    starts: int = 0
    baseline: dict | None = None
    outcomes: dict = dataclasses.field(default_factory=dict)
    open: list = dataclasses.field(default_factory=list)
    damaged: list = dataclasses.field(default_factory=list)


class Progress:
    """Appends the steps of ``host`` to ``<run_dir>/progress/<host>.jsonl``.

    Raises OSError when the directory cannot be created or the file written.
    """

    def __init__(self, run_dir: str, host: str) -> None:
        folder = os.path.join(run_dir, "progress")
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, "%s.jsonl" % host)

    def append(self, kind: str, **data: t.Any) -> None:
        """Write one step (``kind`` and its data) as one line."""
        line = (json.dumps(dict(data, kind=kind, time=utc_now()), default=str) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def load(self) -> ResumeState:
        """Read back what earlier starts of this run wrote (an empty state when none)."""
        state = ResumeState()
        try:
            with open(self.path, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except FileNotFoundError:
            return state
        opened: dict[tuple[str, int], dict] = {}
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                step = json.loads(line)
                kind = step["kind"]
            except (ValueError, KeyError, TypeError):
                state.damaged.append("%s line %d: %r" % (self.path, number, line[:120]))
                continue
            if kind == "start":
                state.starts += 1
            elif kind == "baseline":
                state.baseline = step.get("scan")
            elif kind == "open":
                opened[(step["rule"], int(step["attempt"]))] = {
                    "rule": step["rule"], "attempt": int(step["attempt"]), "checkpoint": step.get("checkpoint")}
            elif kind == "close":
                opened.pop((step["rule"], int(step["attempt"])), None)
            elif kind == "outcome":
                state.outcomes[step["rule"]] = step["outcome"]
        state.open = list(opened.values())
        return state
