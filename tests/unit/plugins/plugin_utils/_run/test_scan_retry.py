"""A hung or crashed scan (issue 17 item 8): the Verifier runs it under a timeout that follows
the host's baseline scan, kills and runs it once more, and a rescan that fails twice does not
stop the host (the engine's ``_scan_after`` and ``_unworked``). The scanner is a script of
oscap_eval results; every other part is the real one."""

from __future__ import annotations

import types

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.engine import RemediationLoop
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.state import RunState, Sinks
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.verifier import ScanError, Verifier
from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A

P = "xccdf_org.ssgproject.content_rule_"
HUNG = {"failed": True, "error_kind": "timeout", "msg": "oscap did not finish within 120 s; it was killed.",
        "elapsed": 120.0}
CRASHED = {"failed": True, "error_kind": "scanner_crashed", "msg": "scanner crashed: oscap was killed by SIGSEGV"}
REFUSED = {"failed": True, "error_kind": "oscap_error", "msg": "No space left on device"}


class Events:
    def __init__(self):
        self.seen = []

    def emit(self, event, **data):
        self.seen.append((event, data))

    def named(self, name):
        return [d for e, d in self.seen if e == name]


class Scanner:
    """oscap_eval's answers in order; records each call's rules and the timeout it ran under."""

    def __init__(self, *answers):
        self.answers = [dict(a) for a in answers]
        self.calls = []
        self.timeout = None

    def scan(self, rules=(), evidence=False, arf_path=None):
        self.calls.append((list(rules), self.timeout))
        return dict(self.answers.pop(0))


def verifier(scanner, override=0):
    catalog = types.SimpleNamespace(expand_requires=list)
    return Verifier(scanner, catalog, Events(), override)


def test_the_timeout_follows_the_baseline_scan():
    scanner = Scanner({"rules": {P + "a": "fail"}, "elapsed": 31.5}, {"rules": {P + "a": "pass"}})
    v = verifier(scanner)
    assert scanner.timeout == 900  # before the baseline: oscap_eval's default
    v.scan([], "baseline")
    assert scanner.timeout == 315  # ten times 31.5 s
    v.check([P + "a"])
    assert [t for _rules, t in scanner.calls] == [900, 315]
    scan = v.events.named("scan")[0]
    assert (scan["timeout"], scan["next_timeout"], scan["elapsed"], scan["tries"]) == (900, 315, 31.5, 1)


def test_a_short_baseline_gets_the_two_minute_floor_and_an_override_wins():
    scanner = Scanner({"rules": {}, "elapsed": 1.2})
    v = verifier(scanner)
    v.scan([], "baseline")
    assert scanner.timeout == 120
    scanner = Scanner({"rules": {}, "elapsed": 31.5}, {"rules": {}})
    v = verifier(scanner, override=20)
    v.scan([], "baseline")
    v.scan([], "rescan")
    assert [t for _rules, t in scanner.calls] == [20, 20]
    assert v.follow({"label": "baseline"}) == 20  # a resumed baseline without its seconds
    assert verifier(Scanner()).follow({"label": "baseline"}) == 900
    assert verifier(Scanner()).follow({"elapsed": 50}) == 500


def test_a_hung_rescan_is_run_once_more_and_its_result_used():
    scanner = Scanner({"rules": {}, "elapsed": 2.0}, HUNG, {"rules": {P + "a": "pass", P + "b": "fail"}, "elapsed": 2.1})
    v = verifier(scanner)
    v.scan([], "baseline")
    result = v.scan([], "rescan")
    assert result["rules"] == {P + "a": "pass", P + "b": "fail"}
    assert (result["tries"], result["label"]) == (2, "rescan")
    assert len(scanner.calls) == 3 and scanner.calls[1] == scanner.calls[2] == ([], 120)
    retry = v.events.named("scan_retry")
    assert retry == [{"label": "rescan", "error_kind": "timeout", "msg": HUNG["msg"], "timeout": 120,
                      "elapsed": 120.0, "tries": 1}]
    assert [s["label"] for s in v.events.named("scan")] == ["baseline", "rescan"]
    assert v.events.named("scan_failed") == []


def test_a_scan_that_fails_twice_raises_scan_error_with_its_reason_and_tries():
    v = verifier(Scanner(HUNG, CRASHED))
    with pytest.raises(ScanError) as caught:
        v.scan([], "rescan")
    exc = caught.value
    assert (exc.reason, exc.label, exc.error_kind, exc.tries) == ("scanner_crash", "rescan", "scanner_crashed", 2)
    assert str(exc).startswith("rescan scan failed (scanner_crashed, twice): scanner crashed")
    assert exc.record() == {"label": "rescan", "reason": "scanner_crash", "error_kind": "scanner_crashed", "tries": 2,
                            "msg": str(exc)}
    assert len(v.events.named("scan_retry")) == 1
    assert v.events.named("scan_failed")[0]["tries"] == 2


def test_a_refused_scan_is_not_run_again():
    scanner = Scanner(REFUSED)
    v = verifier(scanner)
    with pytest.raises(ScanError) as caught:
        v.scan([], "baseline")
    assert (caught.value.reason, caught.value.tries) == ("environment:disk_full", 1)  # named from msg
    assert len(scanner.calls) == 1 and v.events.named("scan_retry") == []


def test_a_crashed_recheck_is_run_once_more():
    scanner = Scanner(CRASHED, {"rules": {P + "a": "pass"}})
    v = verifier(scanner)
    values, _evidence, result = v.check([P + "a"], label="verify")
    assert values == {P + "a": "pass"} and result["tries"] == 2
    assert [d["label"] for d in v.events.named("scan_retry")] == ["verify"]
    values, _evidence, result = verifier(Scanner(CRASHED, CRASHED)).check([P + "a"])
    assert values == {P + "a": "scanner_crash"} and result["tries"] == 2


# -- the engine: a rescan that fails twice ----------------------------------------------------
class Console:
    def rule_done(self, short, outcome):
        pass


def engine(scanner, agents=None):
    events = Events()
    state = RunState(Sinks(events, Console()), lambda rule: "misc")
    v = Verifier(scanner, types.SimpleNamespace(expand_requires=list), events)
    ctx = types.SimpleNamespace(verifier=v, scan_rules=(), agents=agents, emit=events.emit)
    loop = RemediationLoop.__new__(RemediationLoop)
    loop.ctx, loop.state = ctx, state
    return loop, state, events


ARF = types.SimpleNamespace(path=lambda label: None)


def test_a_rescan_that_fails_twice_does_not_stop_the_host():
    loop, state, events = engine(Scanner(HUNG, HUNG))
    state.finish(P + "done", "verified", detail="")
    queued = state.item(P + "queued")
    queued.attempts.append(A.Attempt(number=1, source="vendor"))
    state.queue = [P + "queued"]
    assert loop._scan_after(ARF, "rescan") is None
    assert state.stopped is None
    assert state.scan_failed is not None and (state.scan_failed["label"], state.scan_failed["reason"],
                                              state.scan_failed["tries"]) == ("rescan", "scanner_crash", 2)
    assert events.named("scan_gave_up")[0]["error_kind"] == "timeout"
    assert loop._unworked([P + "held"]) == []
    # worked before: kept; held for last: the scanner's reason, not attempted; no agents: the
    # queue stays for the Worker phase, which finishes it from its vendor attempt
    assert state.outcomes[P + "done"].reason == "verified"
    held = state.outcomes[P + "held"]
    assert (held.outcome, held.reason, held.attempts) == ("escalated", "scanner_crash", 0)
    assert held.detail.startswith("not worked: rescan scan failed (timeout, twice): oscap did not finish")
    assert state.queue == [P + "queued"] and P + "queued" not in state.outcomes


def test_with_agents_the_queue_is_named_too():
    loop, state, _events = engine(Scanner(CRASHED, CRASHED), agents=object())
    queued = state.item(P + "queued")
    queued.attempts.append(A.Attempt(number=1, source="vendor"))
    state.queue = [P + "queued"]
    loop._scan_after(ARF, "rescan")
    loop._unworked([])
    assert state.queue == []
    outcome = state.outcomes[P + "queued"]
    assert (outcome.reason, outcome.attempts) == ("scanner_crash", 1)


def test_a_refused_rescan_is_not_run_again_and_does_not_stop_the_host_either():
    scanner = Scanner({"failed": True, "error_kind": "oscap_error", "msg": "x"})
    loop, state, _events = engine(scanner)
    assert loop._scan_after(ARF, "rescan") is None
    assert len(scanner.calls) == 1
    assert state.stopped is None and (state.scan_failed["reason"], state.scan_failed["tries"]) == ("scan_failed", 1)
    loop._unworked([P + "held"])
    assert state.outcomes[P + "held"].reason == "verify_error"


def test_an_unreachable_host_still_stops():
    from ansible.errors import AnsibleError

    class Gone(Scanner):
        def scan(self, rules=(), evidence=False, arf_path=None):
            raise AnsibleError("Failed to connect to the host via ssh")

    loop, state, _events = engine(Gone())
    assert loop._scan_after(ARF, "rescan") is None
    assert state.stopped.startswith("rescan scan failed: Failed to connect") and state.scan_failed is None


def test_report_html_and_the_console_line_name_the_failed_scan():
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_summary, report_html

    failed = {"label": "rescan", "reason": "scanner_crash", "error_kind": "timeout", "tries": 2,
              "msg": "rescan scan failed (timeout, twice): oscap did not finish within 120 seconds and was killed."}
    said = report_html.warnings({"scan_failed": failed, "stopped": None})
    assert said == ["The rescan scan failed even when run again (timeout): rescan scan failed (timeout, twice): oscap "
                    "did not finish within 120 seconds and was killed. The rules worked before it keep their verified "
                    "results; the rules not worked yet end scanner_crash"]
    assert report_html.warnings({"scan_failed": None}) == []
    report = {"before": {"pass": 1, "fail": 2}, "after": None, "stopped": None, "scan_failed": failed,
              "outcomes": {"remediated/verified": 1, "escalated/scanner_crash": 1}, "rules": {}}
    first = host_summary.console_lines("lab5", report)[0]
    assert first == "lab5: pass 1, fail 2 at baseline; no final scan (rescan scan failed (timeout, twice): oscap did " \
                    "not finish within 120 seconds and was killed.)"
