"""OpenSCAP's word on the host: whole scans and re-checks, each rule's value, and what a
failed or crashed scan means (``decisions``). The one place scans are judged."""

from __future__ import annotations

import time
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import LoopError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.scanner import counts_of


class Verifier:
    """Scans through the run's ``Scanner``; events go to ``events``."""

    def __init__(self, scanner, catalog, events) -> None:
        self.scanner = scanner
        self.catalog = catalog
        self.events = events

    def scan(self, rules: t.Sequence[str], label: str, arf_path: str | None = None) -> dict:
        """A whole scan (baseline, rescan, final) of ``rules`` (empty: the profile): the
        scanner's result with ``label``; event ``scan``. A failed one raises LoopError with
        its reason (``decisions.whole_scan_failure``); event ``scan_failed``."""
        started = time.monotonic()
        result = self.scanner.scan(list(rules), arf_path=arf_path)
        if result.get("failed"):
            kind = result.get("error_kind", "oscap_error")
            self.events.emit("scan_failed", label=label, error_kind=kind, msg=result.get("msg"))
            code, said = decisions.whole_scan_failure(result, safety.environment_kind)
            raise LoopError(code, "%s scan failed (%s): %s%s" % (label, kind, result.get("msg"),
                                                                 " oscap said: %s" % said if said else ""))
        result["label"] = label
        self.events.emit("scan", label=label, counts=counts_of(result.get("rules", {})),
                         seconds=round(time.monotonic() - started, 2), oscap_version=result.get("oscap_version"),
                         content_version=result.get("content_version"), missing=result.get("missing", []))
        return result

    def check(self, rules: t.Sequence[str], evidence: bool = False, attempts: t.Mapping[str, int] | None = None,
              **fields: t.Any) -> tuple[dict, dict, dict]:
        """Re-check ``rules`` with the rules they require, in ONE oscap call: ({rule: value}
        for each of ``rules``, {rule: OVAL evidence}, the scanner's result). A value is
        oscap's result, ``missing`` (never a pass) or the failed scan's value. Events
        ``verify``: one for a failed scan, else one per rule, with its ``attempts`` number and
        ``fields`` (a label)."""
        batch = self.catalog.expand_requires(list(rules))
        shorts = [safety.short_rule_id(r) for r in batch]
        result = self.scanner.scan(batch, evidence=evidence)
        values = {rule: decisions.rule_value(result, rule) for rule in rules}
        attempts = attempts or {}
        if result.get("failed"):
            alone = {"rule": safety.short_rule_id(rules[0]), "attempt": attempts.get(rules[0])} if len(rules) == 1 else {}
            self.events.emit("verify", **alone, **fields, failed=True,
                             error_kind=result.get("error_kind", "oscap_error"), msg=result.get("msg"), batch=shorts)
        else:
            for rule in rules:
                self.events.emit("verify", rule=safety.short_rule_id(rule), attempt=attempts.get(rule), **fields,
                                 result=values[rule], batch=shorts)
        return values, (result.get("evidence") or {}), result
