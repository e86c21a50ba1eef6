"""The steps the oscap_eval module's scan is made of, each pinned on its own: the oscap
command line, the failure it reports, the tailoring it writes, the keys it returns."""

import importlib.util
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "oscap"
R = "xccdf_org.ssgproject.content_rule_"
P = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"


@pytest.fixture(scope="module")
def mod():
    path = Path(__file__).resolve().parents[4] / "plugins" / "modules" / "oscap_eval.py"
    spec = importlib.util.spec_from_file_location("scapforge_oscap_eval_parts", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def params(**over):
    base = dict(datastream="/ds.xml", profile=P, tailoring_file=None, tailoring_content=None, rules=[],
                results_path=None, arf_path=None, timeout=900, oscap_path=None, evidence=False,
                skip_validation=False, results_source="results_file")
    base.update(over)
    return base


def test_oscap_command_orders_its_options_as_oscap_reads_them(mod):
    cmd = mod.oscap_command("/bin/oscap", params(skip_validation=True, arf_path="/a.xml.gz", evidence=True), P,
                            [R + "a", R + "b"], "/w/t.xml", "/w/results.xml", "/w/arf.xml")
    assert cmd == ["/bin/oscap", "xccdf", "eval", "--tailoring-file", "/w/t.xml", "--skip-validation",
                   "--profile", P, "--rule", R + "a", "--rule", R + "b", "--results", "/w/results.xml",
                   "--results-arf", "/w/arf.xml", "--oval-results", "/ds.xml"]
    assert mod.oscap_command("oscap", params(results_source="progress"), P, [], None, "r", "a") == [
        "oscap", "xccdf", "eval", "--profile", P, "--progress", "/ds.xml"]


def test_scan_failure_names_tailoring_content_not_the_temporary_path(mod):
    stderr = (FIX / "stderr" / "tail_missing.txt").read_text().replace("/ds/nope-tailoring.xml", "/w/tailoring.xml")
    assert mod.scan_failure(1, stderr, params(tailoring_content="<x/>"), "/w/tailoring.xml", False) == (
        "oscap_error", "The tailoring_content cannot be opened (missing or unreadable).")
    assert mod.scan_failure(1, stderr, params(tailoring_file="/w/tailoring.xml"), "/w/tailoring.xml", False) == (
        "oscap_error", "Tailoring file /w/tailoring.xml cannot be opened (missing or unreadable).")


def test_scan_failure_passes_a_finished_scan_and_fails_any_other_exit(mod):
    assert mod.scan_failure(2, "", params(), None, False) == (None, None)
    assert mod.scan_failure(0, "", params(), None, False) == (None, None)
    assert mod.scan_failure(3, "", params(), None, False) == ("oscap_error", "oscap failed (exit 3): no message on stderr")
    assert mod.scan_failure(0, "", params(timeout=5), None, True)[0] == "timeout"


def test_write_tailoring_writes_the_content_or_keeps_the_file(mod, tmp_path):
    assert mod.write_tailoring(params(tailoring_file="/t.xml"), str(tmp_path)) == "/t.xml"
    assert mod.write_tailoring(params(), str(tmp_path)) is None
    written = mod.write_tailoring(params(tailoring_content="<é/>"), str(tmp_path))
    assert written == str(tmp_path / "tailoring.xml") and Path(written).read_bytes() == "<é/>".encode("utf-8")


def test_read_results_fails_for_a_missing_or_unreadable_document(mod, tmp_path):
    with pytest.raises(mod.ScanFailed, match="exited 2 but wrote no results file"):
        mod.read_results(str(tmp_path / "none.xml"), 2)
    (tmp_path / "bad.xml").write_bytes(b"<Benchmark/>")
    with pytest.raises(mod.ScanFailed, match="exited 0 but its results cannot be read: .*no TestResult"):
        mod.read_results(str(tmp_path / "bad.xml"), 0)


def test_record_results_fills_the_document_keys_only_from_a_document(mod):
    parsed = {"rules": {R + "a": "fail"}, "counts": {"fail": 1}, "unexpected": {R + "q": "odd"},
              "content_version": "0.1.76", "benchmark_id": "b", "start_time": "s", "end_time": "e",
              "score": 50.0, "profile": P}
    result = {"requested_rules": [R + "a", R + "b"], "profile": "x"}
    mod.record_results(result, parsed)
    assert result == {"requested_rules": [R + "a", R + "b"], "profile": P, "rules": {R + "a": "fail"},
                      "counts": {"fail": 1}, "missing": [R + "b"], "content_version": "0.1.76",
                      "benchmark_id": "b", "start_time": "s", "end_time": "e", "score": 50.0,
                      "unexpected_results": {R + "q": "odd"}}
    progress = {"requested_rules": [], "profile": "x"}
    mod.record_results(progress, {"rules": {}, "counts": {}, "unexpected": {}})
    assert progress == {"requested_rules": [], "profile": "x", "rules": {}, "counts": {}, "missing": []}


# ------------------------------------------------------------------ the files the check reads (issue 18)


def test_describe_file_tells_a_missing_file_from_one_without_the_line(mod, tmp_path):
    assert mod.describe_file(str(tmp_path / "securetty")) == {"exists": False}
    assert mod.describe_file(str(tmp_path / "securetty" / "below")) == {"exists": False}
    small = tmp_path / "login.defs"
    small.write_text("UMASK\t\t022\n")
    small.chmod(0o640)
    facts = mod.describe_file(str(small))
    assert facts["exists"] is True and facts["type"] == "file" and facts["size"] == 11
    assert facts["mode"] == "0640" and facts["content"] == "UMASK\t\t022\n"
    assert facts["owner"] and facts["group"]
    (tmp_path / "empty").write_text("")
    assert mod.describe_file(str(tmp_path / "empty"))["content"] == ""


def test_describe_file_keeps_large_binary_and_secret_files_to_their_facts(mod, tmp_path):
    big = tmp_path / "big.conf"
    big.write_text("x" * (mod.MAX_FILE_BYTES + 1))
    assert mod.describe_file(str(big))["content_omitted"] == "larger than 4096 bytes, even without its comments"
    huge = tmp_path / "huge.conf"
    huge.write_text("#\n" * (8 * mod.MAX_FILE_BYTES + 1))
    assert mod.describe_file(str(huge))["content_omitted"] == "larger than 4096 bytes"
    defs = tmp_path / "login.defs"  # 12 KB of comments around a few settings, as Debian's
    defs.write_text(("# a comment about the setting below\n" * 120) + "\nENCRYPT_METHOD SHA512\n  # ENCRYPT_METHOD MD5\nUMASK\t\t022\n")
    facts = mod.describe_file(str(defs))
    assert facts["content"] == "ENCRYPT_METHOD SHA512\nUMASK\t\t022\n"
    assert facts["content_note"] == "comment and blank lines left out" and facts["size"] > mod.MAX_FILE_BYTES
    whole = tmp_path / "whole.conf"
    whole.write_text("y" * mod.MAX_FILE_BYTES)
    assert len(mod.describe_file(str(whole))["content"]) == 4096
    binary = tmp_path / "wtmp"
    binary.write_bytes(b"ab\0cd")
    assert mod.describe_file(str(binary))["content_omitted"] == "binary"
    key = tmp_path / "server.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    facts = mod.describe_file(str(key))
    assert facts["content_omitted"] == "may hold secrets" and "content" not in facts
    folder = tmp_path / "sudoers.d"
    folder.mkdir()
    for n in range(mod.MAX_DIR_NAMES + 2):
        (folder / ("f%02d" % n)).write_text("")
    facts = mod.describe_file(str(folder))
    assert facts["type"] == "directory" and facts["names"][0] == "f00" and facts["names_left_out"] == 2
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    assert mod.describe_file(str(link)) == {"exists": False, "dangling_link": True}
