"""Bad input gets a clear error, changes nothing, and still leaves a report (real playbook, lab host)."""

from __future__ import annotations

import json
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
