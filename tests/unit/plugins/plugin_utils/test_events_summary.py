import json
import multiprocessing
import os

from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog, read_events
from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import write_host_report
from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import write_summary  # noqa: E402


def _writer(path, host, count):
    log = EventLog(path, host)
    for i in range(count):
        log.emit("tick", rule="r%d" % i, attempt=i, payload="x" * 2000)


def test_forks_appending_to_one_log_never_interleave(tmp_path):
    path = str(tmp_path / "run" / "events.jsonl")
    procs = [multiprocessing.Process(target=_writer, args=(path, "h%d" % n, 200)) for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    events = read_events(path)
    assert len(events) == 800
    assert {e["host"] for e in events} == {"h0", "h1", "h2", "h3"}
    assert all(e["data"]["payload"] == "x" * 2000 for e in events)


def test_corrupt_event_line_is_named(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "a"}\n{not json\n')
    try:
        read_events(str(path))
    except ValueError as exc:
        assert "line 2" in str(exc)
    else:
        raise AssertionError("a corrupt line must be reported")


def test_summary_merges_hosts_and_sums_counts(tmp_path):
    run_dir = str(tmp_path / "scapforge-runs" / "R1")
    for host, before, after, regress in (("a", 5, 8, []), ("b", 3, 4, ["rule_x"])):
        write_host_report(run_dir, host, {
            "host": host, "run_id": "R1", "before": {"pass": before, "fail": 10 - before},
            "after": {"pass": after, "fail": 10 - after}, "outcomes": {"remediated/verified": after - before},
            "regressions": regress, "rules": {},
            "memory": {"shown": before, "created": 2, "reinforced": 1, "retired": 0}
            if host == "a" else {"shown": 0, "created": 0, "reinforced": 0, "retired": 0, "error": "lessons corrupt"},
        })
    # a truncated report must not abort the merge
    with open(os.path.join(run_dir, "hosts", "c.json"), "w") as handle:
        handle.write('{"host": ')
    path, summary = write_summary(run_dir)
    assert summary["totals"]["before"] == {"fail": 12, "pass": 8}
    assert summary["totals"]["after"] == {"fail": 8, "pass": 12}
    assert summary["totals"]["outcomes"] == {"remediated/verified": 4}
    assert summary["totals"]["memory"] == {"created": 2, "reinforced": 1, "retired": 0, "shown": 5}
    assert summary["regressions"] == {"b": ["rule_x"]}
    assert list(summary["unreadable"]) == ["c.json"]
    assert json.load(open(path))["run_id"] == "R1"
    assert os.readlink(str(tmp_path / "scapforge-runs" / "latest")) == "R1"
