"""OpenSCAP scans from the controller: one ``oscap_eval`` call per scan or verify batch."""

from __future__ import annotations

import typing as t

OSCAP_EVAL = "scapforge.remediation.oscap_eval"
#: oscap_eval error kinds that mean the scanner itself died (shared/cases scanner-crash).
CRASH_KINDS = frozenset({"scanner_crashed", "oom_killed", "timeout"})


class Scanner:
    """Runs ``oscap_eval`` through the action plugin; one call per scan or verify batch."""

    def __init__(self, action, task_vars: dict, datastream: str, profile: str, tailoring: str | None):
        self.action = action
        self.task_vars = task_vars
        self.base_args = {"datastream": datastream, "profile": profile}
        if tailoring:
            self.base_args["tailoring_content"] = tailoring

    def scan(self, rules: t.Sequence[str] = (), evidence: bool = False) -> dict:
        """Return oscap_eval's result dict (``rules``, ``counts``, ``missing``, ``failed``...);
        with ``evidence``, also the failing rules' OVAL evidence (``evidence`` {rule: ...})."""
        args = dict(self.base_args)
        if rules:
            args["rules"] = list(rules)
        if evidence:
            args["evidence"] = True
        return self.action._execute_module(
            module_name=OSCAP_EVAL, module_args=args, task_vars=self.task_vars, wrap_async=False
        )


def counts_of(results: dict) -> dict:
    """Counts by result value of a ``{rule: result}`` map (notselected excluded)."""
    counts: dict[str, int] = {}
    for value in results.values():
        if value != "notselected":
            counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items()))
