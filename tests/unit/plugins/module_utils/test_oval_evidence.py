"""Unit tests for plugins/module_utils/oval_evidence.py on real oscap output.

Fixtures in tests/fixtures/oscap/oval were captured on lab2 with oscap 1.3.7 and SSG 0.1.76
(``--oval-results``), then trimmed (see README.md there). Why the evidence exists: seed 004.
"""

import json
from pathlib import Path

import pytest

from ansible_collections.scapforge.remediation.plugins.module_utils import oval_evidence as ev

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "oscap" / "oval"
R = "xccdf_org.ssgproject.content_rule_"
OVAL_FILE = "ssg-debian12-oval.xml.result.xml"
FAILING = [
    R + "no_direct_root_logins",
    R + "accounts_umask_etc_login_defs",
    R + "mount_option_nodev_nonroot_local_partitions",
    R + "sshd_set_keepalive",
    R + "sshd_set_idle_timeout",
]


@pytest.fixture(scope="module")
def xccdf():
    return (FIX / "results.xml").read_bytes()


@pytest.fixture(scope="module")
def oval():
    return (FIX / OVAL_FILE).read_bytes()


@pytest.fixture(scope="module")
def doc(oval):
    return ev.OvalResults(oval)


@pytest.fixture(scope="module")
def evidence(xccdf, oval):
    checks = ev.failing_checks(xccdf)
    return ev.build_evidence(checks, {OVAL_FILE: oval})


# ------------------------------------------------------------------ XCCDF side


def test_failing_checks_link_each_failing_rule_to_its_oval_definition(xccdf):
    checks = ev.failing_checks(xccdf)
    assert list(checks) == FAILING  # document order; package_telnetd_removed passed
    umask = checks[R + "accounts_umask_etc_login_defs"]
    assert umask == {
        "system": "http://oval.mitre.org/XMLSchema/oval-definitions-5",
        "name": "oval:ssg-accounts_umask_etc_login_defs:def:1",
        "href": "ssg-debian12-oval.xml",
        "exports": {"oval:ssg-var_accounts_user_umask:var:1": "xccdf_org.ssgproject.content_value_var_accounts_user_umask"},
    }
    assert ev.needed_files(checks) == [OVAL_FILE]  # never the CPE OVAL results


def test_failing_checks_keep_only_the_requested_rules(xccdf):
    checks = ev.failing_checks(xccdf.decode(), [R + "sshd_set_keepalive", R + "package_telnetd_removed"])
    assert list(checks) == [R + "sshd_set_keepalive"]


def test_failing_checks_reject_what_is_no_xccdf_result():
    with pytest.raises(ValueError, match="not well-formed"):
        ev.failing_checks(b"<Benchmark><TestResult>")
    with pytest.raises(ValueError, match="no TestResult"):
        ev.failing_checks(b"<Benchmark/>")


def test_oval_results_name_is_the_component_plus_result_xml():
    assert ev.oval_results_name("ssg-debian12-oval.xml") == OVAL_FILE
    assert ev.oval_results_name("#scap_x_comp_ssg-debian12-oval.xml") == "scap_x_comp_ssg-debian12-oval.xml.result.xml"
    assert ev.oval_results_name("/some/dir/a.xml") == "a.xml.result.xml"
    assert ev.oval_results_name("") == ""


# ------------------------------------------------------------------ evidence of real rules


def test_umask_evidence_shows_the_login_defs_line_and_the_required_value(evidence):
    """accounts_umask_etc_login_defs: a variable_test on a number computed from the UMASK
    line of /etc/login.defs; the evidence follows the variable back to the file."""
    e = evidence["evidence"][R + "accounts_umask_etc_login_defs"]
    assert e["definition"] == "oval:ssg-accounts_umask_etc_login_defs:def:1"
    assert e["title"] == "Ensure the Default Umask is Set Correctly in login.defs"
    assert e["result"] == "false" and e["truncated"] is False
    assert "error" not in e
    [test] = e["tests"]  # the extended var_accounts_user_umask_as_number definition is true: not a cause
    assert test["id"] == "oval:ssg-tst_accounts_umask_etc_login_defs:tst:1"
    assert (test["type"], test["result"], test["negate"]) == ("variable_test", "false", False)
    assert (test["check"], test["check_existence"]) == ("all", "at_least_one_exists")
    obj = test["object"]
    assert (obj["type"], obj["flag"]) == ("variable_object", "complete")
    var = obj["fields"]["var_ref"]
    assert var["var_ref"] == "oval:ssg-var_etc_login_defs_umask_as_number:var:1"
    assert var["type"] == "local_variable" and var["values"] == ["18"]  # 022 as a number
    [source] = var["from"]
    assert source["object"]["fields"] == {"filepath": "/etc/login.defs", "pattern": r"^[\s]*UMASK[\s]+([^#\s]*)", "instance": "1"}
    assert source["object"]["operations"] == {"pattern": "pattern match", "instance": "greater than or equal"}
    assert source["object"]["flag"] == "complete"
    [line] = source["items"]
    assert line["status"] == "exists"
    assert line["fields"]["text"] == "UMASK\t\t022"
    assert line["fields"]["subexpression"] == "022"
    assert line["fields"]["filepath"] == "/etc/login.defs"
    state = test["state"]
    assert state["operations"] == {"value": "bitwise and"}
    wanted = state["fields"]["value"]
    assert wanted["values"] == ["63"]  # 077
    assert wanted["from_variables"] == [{
        "var_ref": "oval:ssg-var_accounts_user_umask:var:1",
        "type": "external_variable",
        "comment": "Value of var_accounts_user_umask (the required umask) as string",
        "values": ["077"],
        "xccdf_value": "xccdf_org.ssgproject.content_value_var_accounts_user_umask",
    }]
    [item] = test["items"]
    assert item == {"id": "10143210", "status": "exists", "result": "false",
                    "fields": {"var_ref": "oval:ssg-var_etc_login_defs_umask_as_number:var:1", "value": "18"}}


def test_missing_file_shows_as_an_object_that_does_not_exist(evidence):
    """no_direct_root_logins: /etc/securetty is not on Debian 12."""
    e = evidence["evidence"][R + "no_direct_root_logins"]
    assert e["result"] == "false"
    assert [t["id"] for t in e["tests"]] == ["oval:ssg-test_no_direct_root_logins:tst:1",
                                             "oval:ssg-test_etc_securetty_exists:tst:1"]
    for test in e["tests"]:
        assert test["type"] == "textfilecontent54_test" and test["result"] == "false"
        assert test["check_existence"] == "all_exist"
        assert test["object"]["fields"]["filepath"] == "/etc/securetty"
        assert test["object"]["flag"] == "does not exist"
        assert test["state"] is None and test["items"] == []
    assert e["tests"][1]["object"]["fields"]["pattern"] == "^.*$"


def test_extend_definition_is_followed_and_true_branches_are_left_out(evidence):
    """sshd_set_keepalive: OR(sshd not wanted AND openssh-server removed, sshd wanted AND
    installed AND ClientAliveCountMax set). Only the false leaves of the false branches are
    causes: the removed-package test (reached through extend_definition) and the
    ClientAliveCountMax test; the sshd_required variable tests (false, but under true
    extended definitions) and the true keepalive value test are not."""
    e = evidence["evidence"][R + "sshd_set_keepalive"]
    assert [t["id"] for t in e["tests"]] == [
        "oval:ssg-test_package_openssh-server_removed:tst:1",
        "oval:ssg-test_ClientAliveCountMax_present_sshd_set_keepalive:tst:1",
    ]
    package, present = e["tests"]
    assert package["check_existence"] == "none_exist"
    assert package["items"][0]["fields"]["name"] == "openssh-server"
    assert present["object"]["flag"] == "does not exist"
    assert present["object"]["fields"] == {"set": "UNION of oval:ssg-obj_sshd_set_keepalive:obj:1"}
    [member] = present["object"]["set_objects"]
    assert member["fields"]["filepath"] == "/etc/ssh/sshd_config"
    assert member["fields"]["pattern"].startswith("^[ \\t]*(?i)ClientAliveCountMax")


def test_a_negated_criterion_is_a_cause_when_its_test_is_true(evidence):
    """mount_option_nodev_nonroot_local_partitions: criterion negate="true" over a
    partition_test that is true (partitions without nodev exist); three items."""
    e = evidence["evidence"][R + "mount_option_nodev_nonroot_local_partitions"]
    [test] = e["tests"]
    assert test["id"] == "oval:ssg-test_nodev_nonroot_local_partitions:tst:1"
    assert (test["result"], test["negate"]) == ("true", True)
    assert test["state"]["operations"] == {"device": "pattern match", "mount_options": "not equal"}
    assert [(i["id"], i["fields"]["mount_point"], i["result"]) for i in test["items"]] == [
        ("10143212", "/run/host/os-release", "true"),
        ("10143211", "/run/host/incoming", "true"),
        ("10143213", "/run/host/incoming", "true"),
    ]
    assert test["items"][1]["fields"]["mount_options"] == [
        "ro", "relatime", "discard", "resv_strict", "resuid=65534", "resgid=65534", "bind"]
    assert e["truncated"] is False


def test_a_passing_definition_gives_the_tests_that_made_it_true(doc):
    e = ev.rule_evidence(doc, "oval:ssg-package_telnetd_removed:def:1")
    assert e["result"] == "true"
    assert [t["id"] for t in e["tests"]] == ["oval:ssg-test_package_telnetd_removed:tst:1"]
    assert e["tests"][0]["object"]["flag"] == "does not exist"


def test_passing_rules_get_no_evidence(evidence):
    assert R + "package_telnetd_removed" not in evidence["evidence"]
    assert list(evidence["evidence"]) == FAILING
    assert evidence["omitted"] == []


# ------------------------------------------------------------------ caps and truncation


def test_caps_on_tests_items_and_values(doc):
    e = ev.rule_evidence(doc, "oval:ssg-sshd_set_idle_timeout:def:1")
    assert len(e["tests"]) == 3 and e["truncated"] is False
    e = ev.rule_evidence(doc, "oval:ssg-sshd_set_idle_timeout:def:1", max_tests=1)
    assert [t["id"] for t in e["tests"]] == ["oval:ssg-test_package_openssh-server_removed:tst:1"]
    assert e["truncated"] is True
    e = ev.rule_evidence(doc, "oval:ssg-mount_option_nodev_nonroot_local_partitions:def:1", max_items=2)
    assert [i["id"] for i in e["tests"][0]["items"]] == ["10143212", "10143211"]
    e = ev.rule_evidence(doc, "oval:ssg-accounts_umask_etc_login_defs:def:1", max_value_chars=10)
    line = e["tests"][0]["object"]["fields"]["var_ref"]["from"][0]["items"][0]["fields"]
    assert line["text"] == "UMASK\t\t022"  # 10 characters: kept whole
    assert line["pattern"] == "^[\\s]*U..." and len(line["pattern"]) == 10
    assert e["title"] == "Ensure ..."
    assert e["truncated"] is True


def test_repeated_fields_are_capped(doc, monkeypatch):
    monkeypatch.setattr(ev, "MAX_REPEATED", 3)
    e = ev.rule_evidence(doc, "oval:ssg-mount_option_nodev_nonroot_local_partitions:def:1")
    assert e["tests"][0]["items"][1]["fields"]["mount_options"] == ["ro", "relatime", "discard"]
    assert e["truncated"] is True


def test_whole_evidence_stays_within_max_bytes(xccdf, oval):
    checks = ev.failing_checks(xccdf)
    full = ev.build_evidence(checks, {OVAL_FILE: oval})
    assert full["truncated"] is False and full["omitted"] == []
    size = len(json.dumps(full["evidence"]))
    assert 12000 < size < 16000  # with the criteria trees

    small = ev.build_evidence(checks, {OVAL_FILE: oval}, max_bytes=4000)
    assert len(json.dumps(small["evidence"], sort_keys=True)) <= 4000
    assert small["truncated"] is True
    kept = small["evidence"]
    assert list(kept)[:2] == FAILING[:2]
    # the first rules fit whole; later ones are shrunk or left out, and say so
    assert kept[R + "no_direct_root_logins"]["truncated"] is False
    assert all(kept[r]["truncated"] for r in list(kept)[2:])
    assert small["omitted"] == [r for r in FAILING if r not in kept]
    assert small["omitted"]

    capped = ev.build_evidence(checks, {OVAL_FILE: oval}, max_rules=2)
    assert list(capped["evidence"]) == FAILING[:2]
    assert capped["omitted"] == FAILING[2:] and capped["truncated"] is True


def test_shrinking_drops_items_then_tests_then_everything(evidence):
    """Issue 18: caps drop collected items before they drop tests."""
    entry = evidence["evidence"][R + "mount_option_nodev_nonroot_local_partitions"]
    one = ev._shrunk(entry, 1)["tests"][0]
    assert len(one["items"]) == 1 and one["items_left_out"] == 2
    assert ev._shrunk(entry, 2)["tests"][0]["items"] == []
    assert ev._shrunk(entry, 2)["tests"][0]["items_left_out"] == 3
    idle = evidence["evidence"][R + "sshd_set_idle_timeout"]
    assert len(idle["tests"]) == 3 and len(ev._shrunk(idle, 2)["tests"]) == 3  # every test survives level 2
    wide = dict(idle, tests=idle["tests"] * 2)
    assert len(ev._shrunk(wide, 3)["tests"]) == 3 and ev._shrunk(wide, 3)["tests_left_out"] == 3
    assert ev._shrunk(entry, 3)["criteria"] == entry["criteria"]
    gone = ev._shrunk(entry, 4)
    assert gone["tests"] == [] and gone["criteria"] is None and gone["truncated"] is True
    assert len(entry["tests"][0]["items"]) == 3  # the original is left alone


# ------------------------------------------------------------------ criteria tree (issue 18 item 3)


def test_the_criteria_tree_keeps_the_or_branches_and_opens_only_what_did_not_hold(evidence):
    """sshd_set_keepalive fails on its OR: either sshd is not wanted and removed, or it is wanted,
    installed and ClientAliveCountMax is set. The tree says so; the culprit list alone named the
    package-removed test as if it had to pass."""
    tree = evidence["evidence"][R + "sshd_set_keepalive"]["criteria"]
    assert (tree["operator"], tree["result"]) == ("OR", "false")
    unwanted, wanted = tree["nodes"]
    assert [n.get("definition") for n in unwanted["nodes"]] == [
        "oval:ssg-sshd_not_required_or_unset:def:1", "oval:ssg-package_openssh-server_removed:def:1"]
    assert "criteria" not in unwanted["nodes"][0]  # it read true: not why the rule fails
    assert unwanted["nodes"][1]["criteria"]["nodes"] == [
        {"test": "oval:ssg-test_package_openssh-server_removed:tst:1", "result": "false"}]
    assert unwanted["nodes"][1]["title"] == "Remove the OpenSSH Server Package"
    inner = wanted["nodes"][2]
    assert (inner["operator"], inner["result"]) == ("AND", "false")
    assert inner["nodes"][1] == {"test": "oval:ssg-test_ClientAliveCountMax_present_sshd_set_keepalive:tst:1",
                                 "result": "false"}


def test_a_negated_criterion_keeps_its_not_and_its_result_after_it(evidence):
    tree = evidence["evidence"][R + "mount_option_nodev_nonroot_local_partitions"]["criteria"]
    assert tree["nodes"][0] == {"test": "oval:ssg-test_nodev_nonroot_local_partitions:tst:1", "result": "false",
                                "negate": True}
    assert "negate" not in tree["nodes"][1]


def test_the_tree_is_capped_in_nodes_and_says_how_many_it_left_out(doc, monkeypatch):
    monkeypatch.setattr(ev, "MAX_NODES", 3)
    e = ev.rule_evidence(doc, "oval:ssg-sshd_set_keepalive:def:1")
    first = e["criteria"]["nodes"][0]
    assert len(first["nodes"]) == 1 and first["more"] == 1
    assert e["criteria"]["more"] == 1 and e["truncated"] is True


# ------------------------------------------------------------------ files the check reads


def test_check_paths_follow_sets_and_variables_to_the_files_read(evidence):
    paths = {r: ev.check_paths(e) for r, e in evidence["evidence"].items()}
    assert paths[R + "no_direct_root_logins"] == ["/etc/securetty"]
    assert paths[R + "sshd_set_keepalive"] == ["/etc/ssh/sshd_config"]  # through the object's set
    assert paths[R + "accounts_umask_etc_login_defs"] == ["/etc/login.defs"]  # through the local variable
    assert paths[R + "mount_option_nodev_nonroot_local_partitions"] == []  # partitions, no file
    pattern = {"tests": [{"object": {"fields": {"filepath": "^/etc/x.*$"}, "operations": {"filepath": "pattern match"}}},
                         {"object": {"fields": {"path": "/etc/sudoers.d", "filename": None}}},
                         {"object": {"fields": {"path": "/etc/ssh/", "filename": "sshd_config"}}}]}
    assert ev.check_paths(pattern) == ["/etc/sudoers.d", "/etc/ssh/sshd_config"]


def test_build_evidence_describes_the_files_and_drops_their_content_first(xccdf, oval):
    seen = []

    def inspect(path):
        seen.append(path)
        return {"exists": path != "/etc/securetty", "content": "x" * 1500} if path != "/etc/securetty" else {"exists": False}

    out = ev.build_evidence(ev.failing_checks(xccdf), {OVAL_FILE: oval}, inspect=inspect)
    e = out["evidence"]
    assert e[R + "no_direct_root_logins"]["files"] == {"/etc/securetty": {"exists": False}}
    assert e[R + "sshd_set_keepalive"]["files"]["/etc/ssh/sshd_config"]["content"] == "x" * 1500
    assert "files" not in e[R + "mount_option_nodev_nonroot_local_partitions"]
    assert seen.count("/etc/ssh/sshd_config") == 2  # keepalive and idle timeout
    room = len(json.dumps({R + "sshd_set_keepalive": e[R + "sshd_set_keepalive"]}, sort_keys=True)) - 500
    checks = dict((r, c) for r, c in ev.failing_checks(xccdf).items() if r == R + "sshd_set_keepalive")
    small = ev.build_evidence(checks, {OVAL_FILE: oval}, max_bytes=room, inspect=inspect)["evidence"][R + "sshd_set_keepalive"]
    assert small["files"] == {"/etc/ssh/sshd_config": {"exists": True}}  # content gone, facts kept
    assert len(small["tests"]) == 2


def test_secret_paths_are_never_read():
    for path in ("/etc/shadow", "/etc/gshadow-", "/etc/ssh/ssh_host_ed25519_key", "/etc/ssl/private/x.pem",
                 "/root/.ssh/authorized_keys", "/home/u/.ssh/id_rsa", "/etc/pki/tls/private/server.key",
                 "/etc/security/opasswd", "/proc/sys/kernel/dmesg_restrict"):
        assert ev.secret_path(path) is True, path
    for path in ("/etc/login.defs", "/etc/ssh/sshd_config", "/etc/pam.d/common-password",
                 "/etc/ssh/ssh_host_ed25519_key.pub", "/etc/shells"):
        assert ev.secret_path(path) is False, path


# ------------------------------------------------------------------ bad input never raises


def test_missing_oval_results_file_gives_an_error_per_rule(xccdf):
    out = ev.build_evidence(ev.failing_checks(xccdf), {})
    assert list(out["evidence"]) == FAILING
    for entry in out["evidence"].values():
        assert entry["error"] == "oscap wrote no OVAL results file " + OVAL_FILE
        assert entry["tests"] == []
    assert out["evidence"][R + "sshd_set_keepalive"]["definition"] == "oval:ssg-sshd_set_keepalive:def:1"


def test_malformed_oval_results_file_gives_an_error_per_rule(xccdf, oval):
    out = ev.build_evidence(ev.failing_checks(xccdf), {OVAL_FILE: oval[: len(oval) // 2]})
    errors = {entry["error"] for entry in out["evidence"].values()}
    assert len(errors) == 1
    assert errors.pop().startswith("OVAL results file %s cannot be read: OVAL results are not well-formed XML" % OVAL_FILE)
    out = ev.build_evidence(ev.failing_checks(xccdf), {OVAL_FILE: (FIX / "results.xml").read_bytes()})
    assert "not an OVAL results document (root element Benchmark)" in out["evidence"][FAILING[0]]["error"]


def test_unknown_definition_and_non_oval_check_give_errors(doc, oval):
    e = ev.rule_evidence(doc, "oval:ssg-no_such_rule:def:1")
    assert e["error"] == "OVAL definition oval:ssg-no_such_rule:def:1 has no result in the OVAL results"
    checks = {R + "x": {"system": "http://scap.nist.gov/schema/ocil/2", "name": "ocil:x:questionnaire:1",
                        "href": "x-ocil.xml", "exports": {}},
              R + "y": {"system": ev.OVAL_SYSTEM, "name": None, "href": None, "exports": {}}}
    assert ev.needed_files(checks) == []
    out = ev.build_evidence(checks, {OVAL_FILE: oval})
    assert out["evidence"][R + "x"]["error"] == "the rule's check system is http://scap.nist.gov/schema/ocil/2, not OVAL"
    assert "names no OVAL definition" in out["evidence"][R + "y"]["error"]
