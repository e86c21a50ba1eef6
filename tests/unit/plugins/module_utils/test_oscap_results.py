"""Unit tests for plugins/module_utils/oscap_results.py (pure logic) on real oscap output.

Fixtures in tests/fixtures/oscap were captured from oscap 1.3.7 with SSG 0.1.76
ssg-debian12-ds.xml in a plain chroot of the lab's Debian 12 root (see README.md there).
"""

import importlib.util
import signal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.scapforge.remediation.plugins.module_utils import oscap_results as o

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "oscap"
R = o.SSG_RULE_PREFIX
PROFILE = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"


def stderr_of(name):
    return (FIX / "stderr" / (name + ".txt")).read_text()


# ------------------------------------------------------------------ ids


def test_full_rule_id_expands_short_and_keeps_full():
    assert o.full_rule_id("sshd_set_keepalive") == R + "sshd_set_keepalive"
    assert o.full_rule_id(" " + R + "sshd_set_keepalive ") == R + "sshd_set_keepalive"
    assert o.full_rule_id("xccdf_com.example_rule_x") == "xccdf_com.example_rule_x"
    with pytest.raises(ValueError):
        o.full_rule_id("  ")


def test_full_profile_id_expands_short_and_keeps_tailoring_ids():
    assert o.full_profile_id("anssi_bp28_high") == PROFILE
    assert o.full_profile_id(PROFILE) == PROFILE
    assert o.full_profile_id("xccdf_scapforge_profile_extra") == "xccdf_scapforge_profile_extra"
    with pytest.raises(ValueError):
        o.full_profile_id("")


def test_short_id_and_dedupe():
    assert o.short_id(R + "sshd_set_keepalive") == "sshd_set_keepalive"
    assert o.short_id(PROFILE) == "anssi_bp28_high"
    assert o.short_id("xccdf_com.example_rule_x") == "xccdf_com.example_rule_x"
    assert o.full_rule_ids(["a", R + "a", "b", "a"]) == [R + "a", R + "b"]


# ------------------------------------------------------------------ parsing


def test_service_rules_in_chroot_keep_error_apart_from_fail():
    """Case service-rules-in-chroot: no running systemd -> the service checks return error."""
    parsed = o.parse_xccdf_results((FIX / "chroot-service-rules.results.xml").read_bytes())
    assert parsed["rules"] == {
        R + "service_rsyslog_enabled": "error",
        R + "service_cron_enabled": "error",
        R + "package_audit_installed": "fail",
        R + "service_auditd_enabled": "notapplicable",
    }
    assert parsed["counts"]["error"] == 2
    assert parsed["counts"]["fail"] == 1
    assert parsed["counts"]["notapplicable"] == 1
    assert parsed["counts"]["pass"] == 0
    # notselected rules are counted, not listed (the fixture keeps 3 of 587)
    assert parsed["counts"]["notselected"] == 3
    assert not any(v == "notselected" for v in parsed["rules"].values())
    assert set(parsed["counts"]) == set(o.RESULT_VALUES)
    assert parsed["benchmark_id"] == "xccdf_org.ssgproject.content_benchmark_DEBIAN-12"
    assert parsed["content_version"] == "0.1.76"
    assert parsed["profile"] == PROFILE
    assert parsed["scanner_version"] == "1.3.7"
    assert parsed["start_time"] == "2026-11-30T07:09:36+00:00"
    assert parsed["end_time"] == "2026-11-30T07:09:36+00:00"
    # classified as environmental, not as a finding
    assert o.result_class("error") == "environment"
    assert o.result_class("fail") == "finding"


def test_parsed_results_agree_with_what_oscap_printed():
    """The same run's stdout (Rule/Result lines) and the XCCDF file say the same thing."""
    printed = {}
    rule = None
    # oscap prints "Rule\r\t<id>": a carriage return before the tab
    for line in (FIX / "chroot-service-rules.stdout.txt").read_bytes().decode().split("\n"):
        fields = line.split()
        if fields[:1] == ["Rule"]:
            rule = fields[1]
        elif fields[:1] == ["Result"]:
            printed[rule] = fields[1]
    parsed = o.parse_xccdf_results((FIX / "chroot-service-rules.results.xml").read_bytes())
    assert printed == parsed["rules"]


def test_whole_profile_counts():
    parsed = o.parse_xccdf_results((FIX / "chroot-whole-anssi_bp28_high.results.xml").read_bytes())
    counts = parsed["counts"]
    assert (counts["pass"], counts["fail"], counts["notapplicable"], counts["notchecked"], counts["error"]) == (
        105,
        167,
        118,
        1,
        0,
    )
    assert len(parsed["rules"]) == 105 + 167 + 118 + 1
    assert parsed["rules"][R + "security_patches_up_to_date"] == "notchecked"
    assert parsed["rules"][R + "service_rsyslog_enabled"] == "fail"
    assert parsed["score"] == pytest.approx(35.262524)
    with_ns = o.parse_xccdf_results(
        (FIX / "chroot-whole-anssi_bp28_high.results.xml").read_bytes(), include_notselected=True
    )
    assert len(with_ns["rules"]) == len(parsed["rules"]) + 3


def test_rule_with_requires_missing_result_is_never_pass():
    """Case rule-with-requires: only sshd_set_idle_timeout was passed with --rule."""
    parsed = o.parse_xccdf_results((FIX / "requires-alone.results.xml").read_bytes())
    requested = [R + "sshd_set_idle_timeout", R + "sshd_set_keepalive"]
    assert parsed["rules"] == {R + "sshd_set_idle_timeout": "fail"}
    assert o.missing_rules(requested, parsed["rules"]) == [R + "sshd_set_keepalive"]
    # a notselected result counts as missing too
    assert o.missing_rules([R + "a", R + "b"], {R + "a": "notselected", R + "b": "pass"}) == [R + "a"]
    assert o.missing_rules([], parsed["rules"]) == []
    assert o.unmet_requires(stderr_of("req_alone")) == [
        (R + "sshd_set_idle_timeout", R + "sshd_set_keepalive")
    ]
    warnings = o.scanner_warnings(stderr_of("req_alone"))
    assert len(warnings) == 1
    assert "requires rule '%ssshd_set_keepalive', but it hasn't been specified" % R in warnings[0]


SYNTHETIC = b"""<?xml version="1.0"?>
<Benchmark xmlns="http://checklists.nist.gov/xccdf/1.2" id="xccdf_b_x">
  <version>9.9</version>
  <Group id="xccdf_g_1"><Rule id="xccdf_r_a"><title>a</title></Rule></Group>
  <TestResult id="first" start-time="s1" end-time="e1"><profile idref="xccdf_p_old"/>
    <rule-result idref="xccdf_r_a"><result>pass</result></rule-result>
  </TestResult>
  <TestResult id="last" start-time="s2" end-time="e2" test-system="cpe:/a:redhat:openscap:1.3.7">
    <profile idref="xccdf_p_new"/>
    <rule-result idref="xccdf_r_a"><result>pass</result></rule-result>
    <rule-result idref="xccdf_r_a"><result>fail</result></rule-result>
    <rule-result idref="xccdf_r_b"><result>notapplicable</result></rule-result>
    <rule-result idref="xccdf_r_b"><result>error</result></rule-result>
    <rule-result idref="xccdf_r_c"><result>weird</result></rule-result>
    <rule-result idref="xccdf_r_d"><result>fixed</result></rule-result>
    <rule-result idref="xccdf_r_e"><result>informational</result></rule-result>
    <rule-result idref="xccdf_r_f"><result>unknown</result></rule-result>
  </TestResult>
</Benchmark>"""


def test_last_test_result_wins_and_multi_check_keeps_the_worst():
    parsed = o.parse_xccdf_results(SYNTHETIC)
    assert parsed["test_result_id"] == "last"
    assert parsed["profile"] == "xccdf_p_new"
    assert parsed["start_time"] == "s2"
    assert parsed["content_version"] == "9.9"
    assert parsed["rules"] == {
        "xccdf_r_a": "fail",
        "xccdf_r_b": "error",
        "xccdf_r_d": "fixed",
        "xccdf_r_e": "informational",
        "xccdf_r_f": "unknown",
    }
    assert parsed["unexpected"] == {"xccdf_r_c": "weird"}
    assert parsed["counts"]["fail"] == 1 and parsed["counts"]["pass"] == 0


def test_bare_test_result_and_xccdf_1_1():
    doc = b"""<TestResult xmlns="http://checklists.nist.gov/xccdf/1.1" id="t" version="0.1.65">
      <benchmark id="xccdf_b_rhel9"/><profile idref="p"/>
      <rule-result idref="r1"><result>pass</result></rule-result></TestResult>"""
    parsed = o.parse_xccdf_results(doc)
    assert parsed["rules"] == {"r1": "pass"}
    assert parsed["benchmark_id"] == "xccdf_b_rhel9"
    assert parsed["content_version"] == "0.1.65"


@pytest.mark.parametrize(
    "doc",
    [b"not xml at all", b"", b"<Benchmark xmlns='http://checklists.nist.gov/xccdf/1.2'><version>1</version></Benchmark>",
     (FIX / "chroot-service-rules.results.xml").read_bytes()[:1500]],
)
def test_unreadable_results_raise_value_error(doc):
    with pytest.raises(ValueError):
        o.parse_xccdf_results(doc)


# ------------------------------------------------------------------ classification


@pytest.mark.parametrize(
    "name, datastream, tailoring, kind, in_msg",
    [
        ("unknown_profile", "/ds/ssg-debian12-ds.xml", None, "unknown_profile", "xccdf_org.ssgproject.content_profile_nope"),
        ("unknown_rule", "/ds/ssg-debian12-ds.xml", None, "unknown_rule", R + "nope_not_a_rule"),
        ("unknown_rule_mixed", "/ds/ssg-debian12-ds.xml", None, "unknown_rule", R + "nope_not_a_rule"),
        ("ds_missing", "/ds/missing.xml", None, "datastream_missing", "/ds/missing.xml"),
        ("ds_garbage", "/ds/garbage.xml", None, "datastream_invalid", "/ds/garbage.xml"),
        ("ds_foo", "/ds/foo.xml", None, "datastream_invalid", "/ds/foo.xml"),
        ("ds_trunc", "/ds/trunc.xml", None, "datastream_invalid", "Premature end of data"),
        ("ds_empty", "/ds/empty.xml", None, "datastream_invalid", "/ds/empty.xml"),
        ("ds_dir", "/ds", None, "datastream_invalid", "/ds"),
        ("tail_missing", "/ds/ssg-debian12-ds.xml", "/ds/nope-tailoring.xml", "oscap_error", "Tailoring file /ds/nope-tailoring.xml"),
        ("tail_garbage", "/ds/ssg-debian12-ds.xml", "/ds/garbage.xml", "oscap_error", "Tailoring file /ds/garbage.xml"),
        ("results_dir_missing", "/ds/ssg-debian12-ds.xml", None, "results_unwritable", "/nonexist/dir/r.xml"),
    ],
)
def test_classify_real_oscap_messages(name, datastream, tailoring, kind, in_msg):
    """Each stderr file is what oscap 1.3.7 printed (exit 1) for that fault."""
    got_kind, msg = o.classify_oscap_failure(1, stderr_of(name), datastream=datastream, tailoring_file=tailoring)
    assert got_kind == kind
    assert in_msg in msg
    assert got_kind in o.ERROR_KINDS


@pytest.mark.parametrize(
    "rc, kind, words",
    [
        (-signal.SIGSEGV, "scanner_crashed", "SIGSEGV"),
        (139, "scanner_crashed", "SIGSEGV"),
        (-signal.SIGABRT, "scanner_crashed", "SIGABRT"),
        (134, "scanner_crashed", "SIGABRT"),
        (-signal.SIGKILL, "oom_killed", "out of memory"),
        (137, "oom_killed", "out of memory"),
    ],
)
def test_classify_signals(rc, kind, words):
    stderr = "E: oscap:     some probe message\n*** stack smashing detected ***: terminated\n"
    got_kind, msg = o.classify_oscap_failure(rc, stderr)
    assert got_kind == kind
    assert words in msg
    assert "stack smashing detected" in msg  # the stderr travels in the message
    if kind == "scanner_crashed":
        assert msg.startswith("scanner crashed")


def test_classify_timeout_wins_over_the_kill_signal():
    kind, msg = o.classify_oscap_failure(-signal.SIGKILL, "", timed_out=True, timeout=30)
    assert kind == "timeout"
    assert "30 seconds" in msg


def test_classify_finished_scans_and_other_errors():
    # rc 0 / 2 with only the usual notices: not a failure (rule results are read elsewhere)
    assert o.classify_oscap_failure(2, stderr_of("svc_chroot")) == (None, None)
    assert o.classify_oscap_failure(0, stderr_of("whole_profile")) == (None, None)
    kind, msg = o.classify_oscap_failure(1, "OpenSCAP Error: something new [x.c:1]\n")
    assert kind == "oscap_error"
    assert "something new" in msg and "exit 1" in msg


def test_noise_is_kept_out_of_warnings_and_tail():
    stderr = stderr_of("whole_profile")
    assert o.scanner_warnings(stderr) == []
    assert o.stderr_tail(stderr) == ""
    assert o.scanner_warnings(stderr_of("svc_chroot")) == []


def test_parse_oscap_version():
    assert o.parse_oscap_version("OpenSCAP command line tool (oscap) 1.3.7\nCopyright 2009--2021\n") == "1.3.7"
    assert o.parse_oscap_version("") is None


def test_result_classes_cover_all_nine_values():
    classes = dict((v, o.result_class(v)) for v in o.RESULT_VALUES)
    assert classes == {
        "pass": "compliant",
        "fixed": "compliant",
        "fail": "finding",
        "error": "environment",
        "unknown": "environment",
        "notchecked": "not_checked",
        "notapplicable": "not_applicable",
        "notselected": "not_evaluated",
        "informational": "informational",
    }
    with pytest.raises(ValueError):
        o.result_class("bogus")


# ------------------------------------------------------------------ module helpers


def _load_module():
    path = Path(__file__).resolve().parents[4] / "plugins" / "modules" / "oscap_eval.py"
    spec = importlib.util.spec_from_file_location("scapforge_oscap_eval_module", str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_module_output_path_checks(tmp_path):
    mod = _load_module()
    mod.check_output_path(str(tmp_path / "r.xml"), "results_path")  # fine
    missing = str(tmp_path / "nope" / "r.xml")
    with pytest.raises(mod.ScanFailed) as exc:
        mod.check_output_path(missing, "results_path")
    assert exc.value.error_kind == "results_unwritable"
    assert missing in exc.value.msg and "does not exist" in exc.value.msg
    with pytest.raises(mod.ScanFailed) as exc:
        mod.check_output_path(str(tmp_path), "arf_path")
    assert exc.value.error_kind == "results_unwritable"


def test_module_datastream_checks(tmp_path):
    mod = _load_module()
    with pytest.raises(mod.ScanFailed) as exc:
        mod.check_datastream(str(tmp_path / "missing-ds.xml"))
    assert exc.value.error_kind == "datastream_missing"
    with pytest.raises(mod.ScanFailed) as exc:
        mod.check_datastream(str(tmp_path))
    assert exc.value.error_kind == "datastream_invalid"


# ------------------------------------------------------------------ --progress lines


def test_progress_lines_agree_with_the_results_document_of_the_same_run():
    """One real whole-profile run (lab host) with --progress and --results: the same result
    for every selected rule; notselected rules print no line, so they count 0 there."""
    printed = o.parse_progress((FIX / "lab-whole-anssi_bp28_high.progress.txt").read_bytes())
    written = o.parse_xccdf_results((FIX / "lab-whole-anssi_bp28_high.results.xml").read_bytes())
    assert printed["rules"] == written["rules"]
    assert len(printed["rules"]) == 391
    assert printed["rules"][R + "package_aide_installed"] == "fail"
    assert {k: v for k, v in printed["counts"].items() if v} == {
        "pass": 105, "fail": 169, "notapplicable": 116, "notchecked": 1}
    assert printed["counts"]["notselected"] == 0  # (the trimmed document keeps 3 of its 200)
    assert written["counts"]["notselected"] == 3
    assert printed["unexpected"] == {}


def test_progress_keeps_the_worst_of_repeated_lines_and_ignores_other_shapes():
    text = "\n".join([
        "--- Starting Evaluation ---",           # oscap's normal-mode banner: not a result
        "xccdf_r_a:pass",
        "xccdf_r_a:fail",                         # multi-check: the worst wins
        "xccdf_r_b:notapplicable\r",              # a carriage return is tolerated
        "Rule\txccdf_r_c",                        # normal-mode block: ignored
        "Result\tpass",
        "xccdf_r_d:weird",
        "xccdf_r_e:notselected",
        "  xccdf_r_f:error  ",
        "something_else:pass",                    # not an XCCDF id
        "xccdf_r_g:pass:extra",
    ])
    parsed = o.parse_progress(text.encode())
    assert parsed["rules"] == {"xccdf_r_a": "fail", "xccdf_r_b": "notapplicable", "xccdf_r_f": "error"}
    assert parsed["unexpected"] == {"xccdf_r_d": "weird"}
    assert parsed["counts"]["notselected"] == 1 and parsed["counts"]["fail"] == 1
    # a requested rule that printed nothing is missing, never a pass
    assert o.missing_rules(["xccdf_r_c", "xccdf_r_e", "xccdf_r_a"], parsed["rules"]) == ["xccdf_r_c", "xccdf_r_e"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_progress_never_raises_and_only_reads_whole_lines(text):
    parsed = o.parse_progress(text)
    assert set(parsed["counts"]) == set(o.RESULT_VALUES)
    lines = {line.strip() for line in text.splitlines()}
    for rule, value in parsed["rules"].items():
        assert value in o.RESULT_VALUES and value != "notselected"
        assert rule.startswith("xccdf_") and any(line.startswith(rule + ":") for line in lines)
