"""The run's inputs checked on the controller before anything reaches the host (issue 17
item 3): each bad datastream, tailoring file, profile, rule name or waiver gives its own
reason and a message naming the file and the problem; the real Debian 12 datastream passes
and is given a host path of our own, never a package's."""

import hashlib

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import inputs
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import LoopError

from test_tailoring import debian12_datastream
from test_tailoring_user import CUSTOM, tailoring_xml

NAMED = {"rules": [], "skip_rules": [], "allow_access_impacting": []}
RULE = "accounts_umask_etc_login_defs"
WAIVER = {"rule": RULE, "reason": "site policy", "expires": "2099-01-31"}


@pytest.fixture(scope="module")
def real_ds():
    return str(debian12_datastream())


def refused(*args, **kwargs) -> LoopError:
    with pytest.raises(LoopError) as info:
        inputs.check_inputs(*args, **kwargs)
    return info.value


def test_the_real_datastream_passes_and_goes_to_a_path_of_our_own(real_ds):
    checked = inputs.check_inputs(real_ds, None, "anssi_bp28_high", dict(NAMED, rules=[RULE]), [WAIVER])
    digest = hashlib.sha256(open(real_ds, "rb").read()).hexdigest()
    assert checked.sha256 == digest
    assert checked.host_path == "/var/lib/scapforge/content/%s.xml" % digest
    assert checked.benchmark.startswith("xccdf_org.ssgproject.content_benchmark_DEBIAN-12 0.1.")
    assert checked.profile == "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
    assert checked.tailoring is None


def test_a_truncated_datastream_is_refused_naming_the_file(real_ds, tmp_path):
    cut = tmp_path / "cut-ds.xml"
    cut.write_bytes(open(real_ds, "rb").read()[:200000])
    error = refused(str(cut), None, "anssi_bp28_high", NAMED, [])
    assert error.reason == "content"
    assert str(cut) in str(error) and "not well-formed XML" in str(error)
    assert "nothing was copied to the host" in str(error)


@pytest.mark.parametrize("data, words", [
    (b"PK\x03\x04 a zip, not XML\n", "not well-formed XML"),
    (b"", "is empty (0 bytes)"),
    (b"  \n", "is empty (3 bytes)"),
    (b"<?xml version='1.0'?><html><body>login page</body></html>", "root element is <html>"),
])
def test_a_file_that_is_no_datastream_is_refused(tmp_path, data, words):
    path = tmp_path / "not-ds.xml"
    path.write_bytes(data)
    error = refused(str(path), None, "", NAMED, [])
    assert (error.reason, str(path) in str(error), words in str(error)) == ("content", True, True), str(error)


def test_a_tailoring_file_given_as_the_datastream_says_what_it_is(tmp_path):
    path = tmp_path / "tailoring.xml"
    path.write_bytes(tailoring_xml('<xccdf:select idref="xccdf_org.ssgproject.content_rule_%s" selected="false"/>' % RULE))
    error = refused(str(path), None, "", NAMED, [])
    assert error.reason == "content"
    message = str(error)
    assert "is not a SCAP source datastream: root element is <Tailoring>" in message
    assert "it is an XCCDF tailoring file; give it as scapforge_tailoring_src" in message


def test_a_bare_benchmark_is_refused(tmp_path):
    path = tmp_path / "xccdf.xml"
    path.write_bytes(b'<Benchmark xmlns="http://checklists.nist.gov/xccdf/1.2" id="xccdf_x_benchmark_b"/>')
    assert "it is a bare XCCDF 1.2 Benchmark" in str(refused(str(path), None, "", NAMED, []))


def test_a_missing_datastream_is_refused(tmp_path):
    error = refused(str(tmp_path / "nope.xml"), None, "", NAMED, [])
    assert error.reason == "content" and "cannot read datastream_src %s" % (tmp_path / "nope.xml") in str(error)


def test_a_tailoring_of_this_benchmark_passes_and_its_profile_is_the_run_profile(real_ds, tmp_path):
    path = tmp_path / "site.xml"
    data = tailoring_xml('<xccdf:select idref="xccdf_org.ssgproject.content_rule_%s" selected="false"/>' % RULE)
    path.write_bytes(data)
    checked = inputs.check_inputs(real_ds, str(path), "anssi_bp28_high_customized", NAMED, [])
    assert (checked.profile, checked.tailoring) == (CUSTOM, hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize("body, words", [
    ('<xccdf:select idref="xccdf_org.ssgproject.content_rule_no_such_rule" selected="true"/>', "no_such_rule"),
    ("<oops", "not well-formed XML"),
])
def test_a_bad_tailoring_file_is_refused_naming_it(real_ds, tmp_path, body, words):
    path = tmp_path / "bad-tailoring.xml"
    path.write_bytes(tailoring_xml(body) if not body.startswith("<oops") else b"<oops")
    error = refused(real_ds, str(path), "anssi_bp28_high_customized", NAMED, [])
    assert (error.reason, str(path) in str(error), words in str(error)) == ("tailoring", True, True), str(error)


def test_a_datastream_given_as_the_tailoring_file_is_refused(real_ds):
    error = refused(real_ds, real_ds, "anssi_bp28_high", NAMED, [])
    assert error.reason == "tailoring" and "root element is <data-stream-collection>" in str(error)


@pytest.mark.parametrize("profile, named, waivers, reason, words", [
    ("no_such_profile", NAMED, [], "profile", "no_such_profile"),
    ("anssi_bp28_high", dict(NAMED, rules=["accounts_umask_etc_login_def"]), [], "rule", "rules: "),
    ("anssi_bp28_high", dict(NAMED, skip_rules=["nope_rule"]), [], "rule", "skip_rules: "),
    ("anssi_bp28_high", dict(NAMED, allow_access_impacting=["all", "sudo_remove_nopaswd"]), [], "rule",
     "allow_access_impacting: "),
    ("anssi_bp28_high", NAMED, [{"rule": RULE, "reason": "x"}], "waiver", "scapforge_waivers[0]"),
    ("anssi_bp28_high", NAMED, [WAIVER, dict(WAIVER, rule="no_such_rule")], "waiver", "scapforge_waivers[1] (rule no_such_rule)"),
])
def test_names_the_content_lacks_are_refused(real_ds, profile, named, waivers, reason, words):
    error = refused(real_ds, None, profile, named, waivers)
    assert (error.reason, words in str(error)) == (reason, True), str(error)


def test_allow_all_is_no_rule_name(real_ds):
    assert inputs.check_inputs(real_ds, None, "", dict(NAMED, allow_access_impacting=["all"]), []).profile is None


def test_without_a_controller_datastream_only_shapes_are_checked(tmp_path):
    # rule names cannot be checked without the content: the loop does it, read-only, on the host's
    assert inputs.check_inputs(None, None, "anything", dict(NAMED, rules=["whatever"]), [WAIVER]) == inputs.CheckedInputs()
    assert refused(None, None, "", NAMED, [{"rule": RULE}]).reason == "waiver"
    not_xml = tmp_path / "t.xml"
    not_xml.write_bytes(b"not xml")
    error = refused(None, str(not_xml), "", NAMED, [])
    assert error.reason == "tailoring" and str(not_xml) in str(error)


@pytest.mark.parametrize("folder, expected", [
    ("/var/lib/scapforge/content", "/var/lib/scapforge/content/abc.xml"),
    ("/var/lib/scapforge/content/", "/var/lib/scapforge/content/abc.xml"),
    ("/srv/scap", "/srv/scap/abc.xml"),
    ("/usr/share/xml/scap/ssg/content", None),
    ("/var/../usr/share", None),
    ("/etc/scap", None),
    ("/usr", None),
    ("relative/dir", None),
    ("", None),
])
def test_the_host_path_is_never_in_a_tree_packages_own(folder, expected):
    if expected is not None:
        assert inputs.host_content_path(folder, "abc") == expected
        return
    with pytest.raises(LoopError) as info:
        inputs.host_content_path(folder, "abc")
    assert info.value.reason == "content"


def test_a_content_dir_packages_own_is_refused_before_the_copy(real_ds):
    error = refused(real_ds, None, "", NAMED, [], content_dir="/usr/share/xml/scap/ssg/content")
    assert error.reason == "content" and "which the distribution's packages own" in str(error)


@pytest.mark.parametrize("base_url, model, allow_remote, refused_with", [
    ("http://8.8.8.8/v1", "m", False, "llm_remote"),
    ("ftp://127.0.0.1/v1", "m", False, "llm_remote"),
    ("http://8.8.8.8/v1", "m", True, None),
    ("http://127.0.0.1:8000/v1", "m", False, None),
    ("http://10.1.2.3:8000/v1", "m", False, None),
    ("http://8.8.8.8/v1", None, False, None),  # no model: no endpoint configured, the agents stay off
    (None, None, False, None),
])
def test_the_agents_endpoint_is_checked_before_the_host(base_url, model, allow_remote, refused_with):
    if refused_with is None:
        inputs.check_endpoint(base_url, model, allow_remote)
        return
    with pytest.raises(LoopError) as info:
        inputs.check_endpoint(base_url, model, allow_remote)
    assert info.value.reason == refused_with


def test_the_role_checks_the_inputs_before_preflight_and_copies_only_to_the_checked_path():
    from pathlib import Path

    import yaml

    tasks_dir = Path(__file__).resolve().parents[2] / "roles" / "remediate" / "tasks"
    block = next(t for t in yaml.safe_load((tasks_dir / "main.yml").read_text()) if "block" in t)["block"]
    names = [next(k for k in t if k.startswith(("scapforge.", "ansible."))) for t in block]
    assert names[:3] == ["scapforge.remediation.check_inputs", "ansible.builtin.set_fact", "ansible.builtin.import_tasks"]
    assert block[1]["ansible.builtin.set_fact"] == {"scapforge_ds_path": "{{ scapforge_inputs.host_path }}"}
    copies = [t for t in yaml.safe_load((tasks_dir / "preflight.yml").read_text()) if "ansible.builtin.copy" in t]
    assert len(copies) == 1
    assert copies[0]["ansible.builtin.copy"]["dest"] == "{{ scapforge_ds_path }}"
    assert copies[0]["when"] == "scapforge_inputs.host_path is truthy"
