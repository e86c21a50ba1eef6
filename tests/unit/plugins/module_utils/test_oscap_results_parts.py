"""The parts parse_xccdf_results and classify_oscap_failure are made of, each pinned on its
own with real oscap 1.3.7 stderr (tests/fixtures/oscap/stderr) or minimal elements."""

import signal
import xml.etree.ElementTree as ET
from pathlib import Path

from ansible_collections.scapforge.remediation.plugins.module_utils import oscap_results as o

STDERR = Path(__file__).resolve().parents[3] / "fixtures" / "oscap" / "stderr"
DS = "/ds/missing.xml"


def stderr_of(name):
    return (STDERR / (name + ".txt")).read_text()


def test_scanner_version_reads_the_openscap_cpe():
    assert o._scanner_version("cpe:/a:redhat:openscap:1.3.7") == "1.3.7"
    assert o._scanner_version("cpe:/a:redhat:openscap:1.4.0:beta") == "1.4.0"
    assert o._scanner_version("cpe:/a:other:scanner:2.0") is None
    assert o._scanner_version(None) is None


def test_rules_and_counts_count_notselected_and_keep_it_only_when_asked():
    per_rule = {"a": "pass", "b": "notselected", "c": "fail", "d": "pass"}
    rules, counts = o._rules_and_counts(per_rule, False)
    assert rules == {"a": "pass", "c": "fail", "d": "pass"}
    assert counts == dict(dict.fromkeys(o.RESULT_VALUES, 0), notselected=1, fail=1, **{"pass": 2})
    assert o._rules_and_counts(per_rule, True)[0] == per_rule


def test_the_reader_keeps_the_worst_result_of_a_rule_and_sets_apart_unknown_values():
    reader = o._ResultsReader()
    reader.start("TestResult", ET.Element("TestResult", {"id": "t", "test-system": "cpe:/a:redhat:openscap:1.3.7"}))
    for value in ("pass", "fail", "pass"):
        result = ET.Element("rule-result", {"idref": "r"})
        ET.SubElement(result, "result").text = value
        reader._rule_result(result)
    odd = ET.Element("rule-result", {"idref": "q"})
    ET.SubElement(odd, "result").text = "maybe"
    reader._rule_result(odd)
    assert reader.per_rule == {"r": "fail"} and reader.unexpected == {"q": "maybe"}
    assert reader.info["test_result_id"] == "t" and reader.info["scanner_version"] == "1.3.7"
    assert reader.depth == 1 and reader.root_local == "TestResult" and reader.found_test_result


def test_killed_names_our_timeout_the_oom_killer_and_a_crash():
    assert o._killed(0, "", True, 30) == ("timeout", "oscap did not finish within 30 seconds and was killed.")
    assert o._killed(-signal.SIGKILL, "t", False, None)[0] == "oom_killed"
    assert o._killed(137, "", False, None)[0] == "oom_killed"
    assert o._killed(139, "boom", False, None) == (
        "scanner_crashed", "scanner crashed: oscap was killed by SIGSEGV (exit 139). stderr: boom")
    assert o._killed(1, "", False, None) is None and o._killed(2, "", False, None) is None


def test_named_failure_reads_profile_rule_and_results_file_messages():
    assert o._named_failure(stderr_of("unknown_profile"), DS, None)[0] == "unknown_profile"
    assert o._named_failure(stderr_of("unknown_rule_mixed"), DS, None) == (
        "unknown_rule", "Rule xccdf_org.ssgproject.content_rule_nope_not_a_rule is not in the datastream's "
        "benchmark (oscap: not found in selected profile).")
    assert o._named_failure(stderr_of("results_dir_missing"), DS, None) == (
        "results_unwritable", "oscap could not write its results file /nonexist/dir/r.xml: No such file or directory.")
    assert o._named_failure(stderr_of("ds_missing"), DS, None) is None


def test_file_named_tells_the_datastream_from_the_tailoring_file():
    missing = stderr_of("tail_missing")  # names /ds/nope-tailoring.xml
    assert o._file_named(o._UNABLE_TO_OPEN_RE, missing, DS, "/ds/nope-tailoring.xml") == "tailoring"
    assert o._file_named(o._UNABLE_TO_OPEN_RE, missing, DS, "/other.xml") == "tailoring"
    assert o._file_named(o._UNABLE_TO_OPEN_RE, missing, DS, None) == "datastream"
    assert o._file_named(o._UNABLE_TO_OPEN_RE, "", DS, None) is None


def test_unusable_file_maps_open_and_parse_errors_to_the_file_at_fault():
    assert o._unusable_file(stderr_of("ds_missing"), DS, None) == (
        "datastream_missing", "Datastream /ds/missing.xml cannot be opened (missing or unreadable).")
    assert o._unusable_file(stderr_of("tail_missing"), DS, "/ds/nope-tailoring.xml") == (
        "oscap_error", "Tailoring file /ds/nope-tailoring.xml cannot be opened (missing or unreadable).")
    kind, msg = o._unusable_file(stderr_of("ds_garbage"), "/ds/garbage.xml", None)
    assert kind == "datastream_invalid" and msg.endswith("Start tag expected, '<' not found")
    assert o._unusable_file("nothing useful", DS, None) is None
