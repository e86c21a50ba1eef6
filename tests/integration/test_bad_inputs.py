"""A bad datastream never reaches the host (issue 17 item 3), real playbook, lab host.

A truncated datastream, a file that is not XML and a tailoring file given as
``scapforge_datastream_src``, and a good one with a truncated ``scapforge_tailoring_src``, each
stop the host on the controller with the file and the problem named, before preflight: the distribution package's datastream keeps its sha256 and
inode, and no copy of ours was written. A good one is copied to a path of our own
(``/var/lib/scapforge/content/<sha256>.xml``), which the scans use, and the package's file is
left as it was.
"""

from __future__ import annotations

import hashlib
import json

import pytest

PACKAGE_DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
OURS = "/var/lib/scapforge/content"
RULE = "accounts_umask_etc_login_defs"

TAILORING = b"""<?xml version="1.0" encoding="UTF-8"?>
<xccdf:Tailoring xmlns:xccdf="http://checklists.nist.gov/xccdf/1.2" id="xccdf_site_tailoring_t">
  <xccdf:version time="2026-12-01T00:00:00">1</xccdf:version>
  <xccdf:Profile id="xccdf_org.ssgproject.content_profile_anssi_bp28_high_customized"
                 extends="xccdf_org.ssgproject.content_profile_anssi_bp28_high">
    <xccdf:title>site</xccdf:title>
    <xccdf:select idref="xccdf_org.ssgproject.content_rule_accounts_umask_etc_login_defs" selected="false"/>
  </xccdf:Profile>
</xccdf:Tailoring>
"""


@pytest.fixture
def host_content(lab_host):
    """() -> (sha256 and inode of the package's datastream, the files under our content dir)."""
    def state():
        package = lab_host.ssh("sudo sha256sum %s && sudo stat -c %%i %s" % (PACKAGE_DS, PACKAGE_DS)).stdout.split()
        ours = lab_host.ssh("sudo find %s -type f 2>/dev/null | sort; true" % OURS).stdout.split()
        return (package[0], package[2]), ours
    return state


def _bad_input(kind: str, lab, folder) -> tuple:
    """(extra vars, the file at fault, the reason, words the message must hold) of one bad input."""
    path = folder / ("%s.xml" % kind)
    if kind == "truncated":
        path.write_bytes(lab.datastream.read_bytes()[:400000])
        return {"scapforge_datastream_src": str(path)}, path, "content", "is not well-formed XML"
    if kind == "not_xml":
        path.write_bytes(b"#!/bin/sh\necho this is a script, not a datastream\n")
        return {"scapforge_datastream_src": str(path)}, path, "content", "is not well-formed XML"
    if kind == "tailoring_as_datastream":
        path.write_bytes(TAILORING)
        return ({"scapforge_datastream_src": str(path)}, path, "content",
                "it is an XCCDF tailoring file; give it as scapforge_tailoring_src")
    # a good datastream with a tailoring file cut short
    path.write_bytes(TAILORING[:300])
    return ({"scapforge_datastream_src": str(lab.datastream), "scapforge_tailoring_src": str(path),
             "scapforge_profile": "anssi_bp28_high_customized"}, path, "tailoring", "is not well-formed XML")


@pytest.mark.parametrize("kind", ["truncated", "not_xml", "tailoring_as_datastream", "truncated_tailoring"])
def test_a_bad_input_stops_the_host_before_it_reaches_it(lab, lab_host, lab_inventory, tmp_path, remediate,
                                                         host_content, kind):
    before = host_content()
    extra, path, reason, words = _bad_input(kind, lab, tmp_path)
    proc = remediate(lab_inventory, lab_host.name, tmp_path / "runs", dict(extra, scapforge_rules=[RULE]))
    assert proc.returncode != 0
    assert "(reason: %s)" % reason in proc.stdout and "Check the inputs on the controller" in proc.stdout
    # failed on the controller, before preflight's first task reached the host
    assert "Check that privilege escalation works" not in proc.stdout
    summary = json.loads((tmp_path / "runs" / "latest" / "summary.json").read_text())
    error = summary["errors"][lab_host.name]
    assert error["reason"] == reason, error
    assert str(path) in error["msg"] and words in error["msg"], error["msg"]
    assert host_content() == before  # the package's file, byte for byte and inode; no file of ours


def test_a_good_datastream_src_is_scanned_from_a_path_of_our_own(lab, lab_host, lab_inventory, tmp_path, remediate,
                                                                 host_content):
    (package_before, _inode), _ours = host_content()
    digest = hashlib.sha256(lab.datastream.read_bytes()).hexdigest()
    proc = remediate(lab_inventory, lab_host.name, tmp_path, {"scapforge_datastream_src": str(lab.datastream),
                                                              "scapforge_rules": [RULE]})
    assert proc.returncode == 0, proc.stdout[-3000:]
    (package_after, _inode), ours = host_content()
    assert package_after == package_before
    assert "%s/%s.xml" % (OURS, digest) in ours
    assert lab_host.ssh("sudo sha256sum %s/%s.xml" % (OURS, digest)).stdout.split()[0] == digest
    events = [json.loads(x) for x in (tmp_path / "latest" / "events.jsonl").read_text().splitlines()]
    start = next(e for e in events if e["event"] == "run_start")["data"]
    assert start["datastream"] == "%s/%s.xml" % (OURS, digest)
    assert start["content_sha256"] == digest
    rules = json.loads((tmp_path / "latest" / "summary.json").read_text())["hosts"][lab_host.name]["rules"]
    assert rules[RULE]["outcome"] == "remediated", rules[RULE]


def test_after_a_bad_input_the_next_run_trusts_the_hosts_own_content(lab, lab_host, lab_inventory, tmp_path, remediate):
    # what was seen: the bad file had replaced the package's datastream, and the next run
    # (no controller copy) stopped with untrusted_content
    extra, _path, _reason, _words = _bad_input("not_xml", lab, tmp_path)
    assert remediate(lab_inventory, lab_host.name, tmp_path / "bad", extra).returncode != 0
    proc = remediate(lab_inventory, lab_host.name, tmp_path / "next",
                     {"scapforge_datastream_src": "", "scapforge_rules": ["file_permissions_etc_passwd"]})
    assert proc.returncode == 0, proc.stdout[-3000:]
    events = [json.loads(x) for x in (tmp_path / "next" / "latest" / "events.jsonl").read_text().splitlines()]
    start = next(e for e in events if e["event"] == "run_start")["data"]
    assert (start["content_source"], start["trusted"]) == ("target:" + PACKAGE_DS, True)
