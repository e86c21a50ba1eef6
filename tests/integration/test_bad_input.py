"""Bad input gets a clear error, changes nothing, and still leaves a report (real playbook, lab host)."""

from __future__ import annotations

import json
import os
import shutil

import pytest


@pytest.fixture
def login_defs(lab_host):
    def digest():
        return lab_host.ssh("sha256sum /etc/login.defs").stdout.split()[0]
    return digest


@pytest.mark.parametrize("extra, reason, words", [
    ({"scapforge_profile": "no_such_profile"}, "profile", "anssi_bp28_high"),
    ({"scapforge_rules": ["accounts_umask_etc_login_defs"], "scapforge_skip_rules": ["accounts_umask_etc_login_def"]},
     "rule", "accounts_umask_etc_login_def"),
    ({"scapforge_rules": ["accounts_umask_etc_login_defs"], "scapforge_allow_access_impacting": ["sudo_remove_nopaswd"]},
     "rule", "sudo_remove_nopaswd"),
])
def test_unknown_names_stop_the_host_before_any_change(lab_host, lab_inventory, tmp_path, login_defs, remediate,
                                                       extra, reason, words):
    before = login_defs()
    proc = remediate(lab_inventory, lab_host.name, tmp_path, extra)
    assert proc.returncode != 0
    summary = json.loads((tmp_path / "latest" / "summary.json").read_text())
    error = summary["errors"][lab_host.name]
    assert error["reason"] == reason and words in error["msg"], error
    assert summary["hosts"][lab_host.name]["rules"] == {}
    assert login_defs() == before


def test_an_unknown_skill_fails_naming_the_skills_there(lab_host, lab_inventory, tmp_path, login_defs, remediate):
    before = login_defs()
    proc = remediate(lab_inventory, lab_host.name, tmp_path, {"scapforge_skill": "stig-rhel8"})
    assert proc.returncode != 0
    assert "no skill named stig-rhel8: the collection has anssi-debian12, stig-rhel9" in proc.stdout
    assert login_defs() == before


def test_controller_content_that_differs_from_the_hosts_is_refused(lab, lab_host, lab_inventory, tmp_path, login_defs,
                                                                   remediate):
    changed = tmp_path / "other-ds.xml"
    shutil.copyfile(lab.datastream, changed)
    with open(changed, "a") as handle:
        handle.write("<!-- not the host's file -->\n")
    before = login_defs()
    # --check: the role does not copy it over the host's file, so the two differ
    proc = remediate(lab_inventory, lab_host.name, tmp_path / "runs",
                     {"scapforge_datastream_src": str(changed), "scapforge_rules": ["accounts_umask_etc_login_defs"]}, "--check")
    assert proc.returncode != 0
    summary = json.loads((tmp_path / "runs" / "latest" / "summary.json").read_text())
    error = summary["errors"][lab_host.name]
    assert error["reason"] == "content_mismatch" and "sha256" in error["msg"]
    assert login_defs() == before


def test_unreachable_host_is_listed_without_report(lab_host, lab_inventory, tmp_path, remediate):
    inventory = tmp_path / "inv.yml"
    inventory.write_text(lab_inventory.read_text().replace(
        # loopback, a port nothing listens on: unreachable without sending anything off this machine
        "      hosts:\n", "      hosts:\n        ghost:\n          ansible_host: 127.0.0.1\n          ansible_port: 9\n", 1))
    proc = remediate(inventory, "ghost,%s" % lab_host.name, tmp_path / "runs",
                     {"scapforge_rules": ["file_permissions_etc_passwd"]})
    assert proc.returncode != 0
    summary = json.loads((tmp_path / "runs" / "latest" / "summary.json").read_text())
    assert summary["without_report"] == ["ghost"]
    assert summary["hosts"][lab_host.name]["before"] == {"pass": 1}


NO_FIX = ["set_password_hashing_algorithm_logindefs", "accounts_password_set_max_life_root"]


def test_an_endpoint_outside_the_network_is_refused_before_any_change(lab_host, lab_inventory, tmp_path, login_defs,
                                                                      remediate):
    # a public address without scapforge_llm_allow_remote: refused before anything is sent
    # (the check resolves and compares addresses; it never connects)
    before = login_defs()
    proc = remediate(lab_inventory, lab_host.name, tmp_path,
                     {"scapforge_rules": NO_FIX, "scapforge_llm_base_url": "http://8.8.8.8/v1",
                      "scapforge_llm_model": "m"})
    assert proc.returncode != 0
    error = json.loads((tmp_path / "latest" / "summary.json").read_text())["errors"][lab_host.name]
    assert error["reason"] == "llm_remote" and "allow_remote" in error["msg"], error
    assert login_defs() == before


def test_without_an_endpoint_rules_without_a_fix_say_so(lab_host, lab_inventory, tmp_path, remediate):
    proc = remediate(lab_inventory, lab_host.name, tmp_path, {"scapforge_rules": NO_FIX})
    assert proc.returncode == 0, proc.stdout[-3000:]
    rules = json.loads((tmp_path / "latest" / "summary.json").read_text())["hosts"][lab_host.name]["rules"]
    for rule in NO_FIX:
        assert (rules[rule]["outcome"], rules[rule]["reason"], rules[rule]["attempts"]) == (
            "escalated", "llm_unavailable", 0), rules[rule]


def test_an_endpoint_that_does_not_answer_ends_the_rules_with_llm_error(lab_host, lab_inventory, tmp_path, login_defs,
                                                                        remediate):
    # loopback, a port nothing listens on: the client retries, then the rule says llm_error
    # and the next rule is not even tried against the dead endpoint
    before = login_defs()
    proc = remediate(lab_inventory, lab_host.name, tmp_path,
                     {"scapforge_rules": NO_FIX, "scapforge_llm_base_url": "http://127.0.0.1:9/v1",
                      "scapforge_llm_model": "m"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    rules = json.loads((tmp_path / "latest" / "summary.json").read_text())["hosts"][lab_host.name]["rules"]
    assert {r: (o["reason"], o["attempts"]) for r, o in rules.items()} == {r: ("llm_error", 0) for r in NO_FIX}
    events = [json.loads(x) for x in (tmp_path / "latest" / "events.jsonl").read_text().splitlines()]
    calls = [e for e in events if e["event"] == "llm_call"]
    assert len(calls) == 1 and calls[0]["data"]["error_kind"] == "connection"
    assert login_defs() == before


def test_the_controller_itself_is_refused_before_anything_runs(lab, lab_host, lab_inventory, tmp_path, remediate):
    # a lab host that claims the controller's machine id, and a local connection: both refused
    # by preflight, before it installs or creates anything
    host = lab.reset([lab_host.name])[0]
    try:
        mine = open("/etc/machine-id").read().strip()
        host.ssh("echo %s | sudo tee /etc/machine-id >/dev/null" % mine)
        before = host.ssh("sudo find /etc /run -newer /etc/machine-id 2>/dev/null | sort").stdout
        proc = remediate(lab_inventory, host.name, tmp_path / "same-id", {"scapforge_rules": ["file_permissions_etc_passwd"]})
        assert proc.returncode != 0
        assert "is the controller itself" in proc.stdout and mine in proc.stdout
        summary = json.loads((tmp_path / "same-id" / "latest" / "summary.json").read_text())
        assert summary["without_report"] == [host.name]
        assert host.ssh("sudo find /etc /run -newer /etc/machine-id 2>/dev/null | sort").stdout == before
    finally:
        lab.reset([lab_host.name])
    inventory = tmp_path / "local.yml"
    inventory.write_text("all:\n  hosts:\n    controller:\n      ansible_connection: local\n")
    had_oscap = os.path.exists("/usr/bin/oscap")
    proc = remediate(inventory, "controller", tmp_path / "local", {"scapforge_rules": ["file_permissions_etc_passwd"]})
    assert proc.returncode != 0 and "connection local" in proc.stdout
    assert os.path.exists("/usr/bin/oscap") == had_oscap  # preflight installed nothing here
