"""bench/agents.py's figures from a host report (pure)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_agents", ROOT / "bench" / "agents.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fix_rate_attempts_and_tokens_per_remediated_rule():
    report = {"llm": {"tokens": 9000}, "rules": {
        "a": {"outcome": "remediated", "reason": "verified", "attempt_log": [
            {"source": "vendor", "tokens": 0, "seconds": 2.0}, {"source": "worker", "tokens": 3000, "seconds": 4.5}]},
        "b": {"outcome": "escalated", "reason": "environment:no_sys_time", "attempt_log": [
            {"source": "worker", "tokens": 2000, "seconds": 1.0}]},
        "c": {"outcome": "remediated", "reason": "verified", "attempt_log": [
            {"source": "worker", "tokens": 1000, "seconds": 1.0}, {"source": "worker", "tokens": 1500, "seconds": 2.0}]},
        "d": {"outcome": "escalated", "reason": "needs_human", "attempt_log": []}}}
    got = _bench().figures(report)
    assert (got["worked"], got["remediated"], got["fix_rate"], got["worker_attempts"]) == (4, 2, 0.5, 4)
    assert (got["tokens"], got["tokens_per_remediated"]) == (9000, 4500)  # the host's own count, Architect included
    assert got["per_rule"]["a"] == {"outcome": "remediated", "reason": "verified", "attempts": 2, "worker_attempts": 1,
                                    "tokens": 3000, "seconds": 6.5}
    none = _bench().figures({"rules": {"b": report["rules"]["b"]}})
    assert (none["fix_rate"], none["tokens_per_remediated"], none["tokens"]) == (0.0, None, 2000)
