"""OpenSCAP's word on the host: whole scans and re-checks, each rule's value, and what a
failed or crashed scan means (``decisions``). The one place scans are judged."""

from __future__ import annotations

import time
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import LoopError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.scanner import counts_of


class ScanError(LoopError):
    """A whole scan that failed (after its retry, for a hung or crashed one): ``reason`` as
    ``decisions.whole_scan_failure`` gives it; ``label``, oscap_eval's ``error_kind`` and how
    many ``tries`` it had."""

    def __init__(self, reason: str, message: str, label: str, error_kind: str, tries: int) -> None:
        super().__init__(reason, message)
        self.label, self.error_kind, self.tries = label, error_kind, tries

    def record(self) -> dict:
        """What the host report keeps of it (``scan_failed``)."""
        return {"label": self.label, "reason": self.reason, "error_kind": self.error_kind, "tries": self.tries,
                "msg": str(self)[:600]}


class Verifier:
    """Scans through the run's ``Scanner``; events go to ``events``.

    Every scan runs under ``decisions.scan_timeout``: ``timeout_override`` (the
    ``scan_timeout`` option) or, once the host's baseline scan took its time, ten times
    that (never under two minutes). A scan that hung or crashed is killed (by oscap_eval, at
    the timeout) and run once more (``decisions.retry_scan``); event ``scan_retry``."""

    def __init__(self, scanner, catalog, events, timeout_override: int = 0) -> None:
        self.scanner = scanner
        self.catalog = catalog
        self.events = events
        self.timeout_override = timeout_override
        self.scanner.timeout = decisions.scan_timeout(None, timeout_override)

    def follow(self, baseline: t.Mapping) -> int:
        """Set the scans' timeout from the host's baseline scan (its ``elapsed``: oscap's own
        seconds; a resumed start's baseline may lack it); returns the timeout."""
        elapsed = baseline.get("elapsed")
        self.scanner.timeout = decisions.scan_timeout(elapsed if isinstance(elapsed, (int, float)) else None,
                                                      self.timeout_override)
        return self.scanner.timeout

    def _scan(self, label: str, rules: list, **kwargs: t.Any) -> dict:
        """The scanner's result for one scan, run once more when it hung or crashed."""
        tries, result = 1, self.scanner.scan(rules, **kwargs)
        while decisions.retry_scan(result, tries):
            self.events.emit("scan_retry", label=label, error_kind=result.get("error_kind"), msg=result.get("msg"),
                             timeout=self.scanner.timeout, elapsed=result.get("elapsed"), tries=tries)
            tries, result = tries + 1, self.scanner.scan(rules, **kwargs)
        result["tries"] = tries
        return result

    def scan(self, rules: t.Sequence[str], label: str, arf_path: str | None = None) -> dict:
        """A whole scan (baseline, rescan, final) of ``rules`` (empty: the profile): the
        scanner's result with ``label`` and ``tries``; event ``scan``. A failed one (run twice
        when it hung or crashed) raises LoopError with its reason
        (``decisions.whole_scan_failure``); event ``scan_failed``. The baseline sets the
        later scans' timeout (``follow``)."""
        started = time.monotonic()
        result = self._scan(label, list(rules), arf_path=arf_path)
        if result.get("failed"):
            kind = result.get("error_kind", "oscap_error")
            self.events.emit("scan_failed", label=label, error_kind=kind, msg=result.get("msg"), tries=result["tries"])
            code, said = decisions.whole_scan_failure(result, safety.environment_kind)
            raise ScanError(code, "%s scan failed (%s%s): %s%s" % (
                label, kind, ", twice" if result["tries"] > 1 else "", result.get("msg"),
                " oscap said: %s" % said if said else ""), label, kind, result["tries"])
        result["label"] = label
        timeout = self.scanner.timeout
        if label == "baseline":
            self.follow(result)
        self.events.emit("scan", label=label, counts=counts_of(result.get("rules", {})),
                         seconds=round(time.monotonic() - started, 2), oscap_version=result.get("oscap_version"),
                         content_version=result.get("content_version"), missing=result.get("missing", []),
                         elapsed=result.get("elapsed"), timeout=timeout, tries=result["tries"],
                         next_timeout=self.scanner.timeout)
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
        result = self._scan(str(fields.get("label", "verify")), batch, evidence=evidence)
        values = {rule: decisions.rule_value(result, rule) for rule in rules}
        attempts = attempts or {}
        if result.get("failed"):
            alone = {"rule": safety.short_rule_id(rules[0]), "attempt": attempts.get(rules[0])} if len(rules) == 1 else {}
            self.events.emit("verify", **alone, **fields, failed=True, error_kind=result.get("error_kind", "oscap_error"),
                             msg=result.get("msg"), batch=shorts, tries=result["tries"])
        else:
            for rule in rules:
                self.events.emit("verify", rule=safety.short_rule_id(rule), attempt=attempts.get(rule), **fields,
                                 result=values[rule], batch=shorts)
        return values, (result.get("evidence") or {}), result
