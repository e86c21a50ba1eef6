"""OpenSCAP scans from the controller: one ``oscap_eval`` call per scan or verify batch."""

from __future__ import annotations

import typing as t

OSCAP_EVAL = "scapforge.remediation.oscap_eval"


class Scanner:
    """Runs ``oscap_eval`` through the action plugin; one call per scan or verify batch.

    The first scan that succeeds validates the datastream (and tailoring); later ones skip
    oscap's schema validation (``skip_validation``, issue 9: 0.3 to 0.8 s a call on the lab),
    since the file on the host is the one the run checked by digest and already validated.
    A later re-check of some rules that wants neither evidence nor an ARF reads oscap's
    ``--progress`` lines (``results_source=progress``) instead of the 6.6 MB results document
    oscap writes for the Debian 12 content even for one rule (issue 9: about 0.3 s a call).
    ``timeout``: the seconds oscap may run (oscap_eval's ``timeout``; None: its default); the
    ``Verifier`` sets it from the host's baseline scan (``decisions.scan_timeout``).
    """

    def __init__(self, session, task_vars: dict, datastream: str, profile: str, tailoring: str | None):
        self.session = session
        self.task_vars = task_vars
        self.base_args = {"datastream": datastream, "profile": profile}
        self.validated = False
        self.timeout: int | None = None
        if tailoring:
            self.base_args["tailoring_content"] = tailoring

    def scan(self, rules: t.Sequence[str] = (), evidence: bool = False, arf_path: str | None = None) -> dict:
        """Return oscap_eval's result dict (``rules``, ``counts``, ``missing``, ``failed``...);
        with ``evidence``, also the failing rules' OVAL evidence (``evidence`` {rule: ...});
        with ``arf_path`` (a path on the target, ``.gz`` for a compressed copy), the scan's
        ARF results are kept there."""
        args = dict(self.base_args)
        if arf_path:
            args["arf_path"] = arf_path
        if rules:
            args["rules"] = list(rules)
        if evidence:
            args["evidence"] = True
        if self.timeout:
            args["timeout"] = int(self.timeout)
        if self.validated:
            args["skip_validation"] = True
            if rules and not evidence and not arf_path:
                args["results_source"] = "progress"
        result = self.session.execute_module(
            name=OSCAP_EVAL, args=args, task_vars=self.task_vars, wrap_async=False
        )
        if not result.get("failed"):
            self.validated = True
        return result


def counts_of(results: dict) -> dict:
    """Counts by result value of a ``{rule: result}`` map (notselected excluded)."""
    counts: dict[str, int] = {}
    for value in results.values():
        if value != "notselected":
            counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items()))
