"""STIG checklists that merge right (issue 20 item 3), over the real RHEL 9 datastream (SSG
0.1.76, the stig profile with DISA ids): one VULN per V- id, the group's status from all its
rules, a rule with two SV- ids in both groups, STIG_INFO naming scanner and content, and an
empty export refused; tools/checklist.py run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lxml import etree

from ansible_collections.scapforge.remediation.plugins.plugin_utils import report_ckl
from ansible_collections.scapforge.remediation.plugins.plugin_utils import stig_groups as SG
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog

from test_catalog import lab_datastream

ROOT = Path(__file__).resolve().parents[2]
P = "xccdf_org.ssgproject.content_rule_"


@pytest.fixture(scope="module")
def stig_map():
    return SG.from_catalog(Catalog.from_path(lab_datastream("ssg-rhel9-ds.xml")), "stig")


@pytest.mark.parametrize("results, status", [
    (["fail", "pass"], "Open"),
    (["pass", "fail", "notchecked"], "Open"),
    (["pass", "notchecked"], "Not_Reviewed"),
    (["pass", None], "Not_Reviewed"),            # a rule without a result is notselected
    (["pass", "notselected"], "Not_Reviewed"),
    (["pass", "error"], "Not_Reviewed"),
    (["notapplicable", "notapplicable"], "Not_Applicable"),
    (["pass", "pass"], "NotAFinding"),
    (["pass", "notapplicable"], "NotAFinding"),  # what does not apply is no finding
    (["fixed"], "NotAFinding"),
    ([], "Not_Reviewed"),
])
def test_group_status(results, status):
    assert SG.group_status(results) == status


def test_the_stig_profile_maps_490_rules_onto_448_vulns(stig_map):
    assert len(stig_map.groups) == len(stig_map.expected) == 448
    assert len(stig_map.rules_with_ids) == 490
    assert sum(1 for g in stig_map.groups.values() if len(g.rules) > 1) == 18
    aide = stig_map.groups["V-258134"]
    assert aide.rules == ("package_aide_installed", "aide_build_database")
    assert (aide.rule_id, aide.stig_id) == ("SV-258134r1045265_rule", "RHEL-09-651010")
    # a rule with two SV- ids answers for both V- ids, each with its own STIG ID
    assert stig_map.vulns_of("dconf_gnome_disable_restart_shutdown") == ["V-258029", "V-258030"]
    assert (stig_map.groups["V-258029"].stig_id, stig_map.groups["V-258030"].stig_id) == (
        "RHEL-09-271095", "RHEL-09-271100")
    dual = [r for r in stig_map.rules_with_ids if len(stig_map.vulns_of(r)) == 2]
    assert len(dual) == 10
    fips = stig_map.groups["V-258230"]
    assert "configure_crypto_policy" in fips.rules and fips.stig_id == "RHEL-09-671010"


def test_a_failing_and_a_passing_rule_of_one_group_read_open(stig_map):
    results = {"package_aide_installed": "pass", P + "aide_build_database": "fail",
               "aide_periodic_cron_checking": "pass", "aide_scan_notification": "notchecked",
               "dconf_gnome_disable_restart_shutdown": "fail", "file_sshd_50_redhat_exists": "pass",
               "sshd_include_crypto_policy": "pass"}
    checklist = report_ckl.build(stig_map, results, host="rhel9-a", scanner="OpenSCAP 1.3.7")
    by = {v.group.vuln: v for v in checklist.vulns}
    assert len(checklist.vulns) == 448
    assert by["V-258134"].status == "Open"
    assert by["V-258134"].details.splitlines()[1:] == ["- package_aide_installed: pass", "- aide_build_database: fail"]
    assert by["V-258135"].status == "Not_Reviewed"  # pass + notchecked, none failed
    assert by["V-258029"].status == by["V-258030"].status == "Open"  # the two-id rule counts in both
    assert by["V-257987"].status == by["V-257988"].status == "NotAFinding"
    counts = checklist.counts()
    assert counts == {"Open": 3, "Not_Reviewed": 443, "NotAFinding": 2}
    root = etree.fromstring(report_ckl.to_ckl(checklist))
    assert len(root.findall("STIGS/iSTIG/VULN")) == 448
    assert len({v.findtext("STIG_DATA[1]/ATTRIBUTE_DATA") for v in root.findall("STIGS/iSTIG/VULN")}) == 448
    si = {d.findtext("SID_NAME"): d.findtext("SID_DATA") for d in root.findall("STIGS/iSTIG/STIG_INFO/SI_DATA")}
    assert si["version"] == "0.1.76" and si["filename"] == "ssg-rhel9-ds.xml"
    assert "scanner OpenSCAP 1.3.7" in si["releaseinfo"] and stig_map.sha256 in si["source"]


def test_empty_or_misnamed_results_are_refused(stig_map):
    with pytest.raises(report_ckl.ChecklistError, match="zero results"):
        report_ckl.build(stig_map, {})
    with pytest.raises(report_ckl.ChecklistError, match="zero results"):
        report_ckl.build(stig_map, {"package_aide_installed": "notselected"})
    with pytest.raises(report_ckl.ChecklistError, match="zero results"):  # a rule without STIG ids only
        report_ckl.build(stig_map, {stig_map.without_ids[0]: "pass"})
    with pytest.raises(report_ckl.ChecklistError, match="as oscap names them"):
        report_ckl.build(stig_map, {"package_aide_installed": "PASS"})
    empty = SG.StigMap(groups={}, rules_with_ids=(), without_ids=("x",), profile="p", profile_title="",
                       benchmark_version="", sha256="", source="")
    with pytest.raises(report_ckl.ChecklistError, match="no rule with a DISA SV- id"):
        report_ckl.build(empty, {"x": "pass"})
    partial = SG.StigMap(**dict(vars(stig_map), expected=stig_map.expected | {"V-1"}))
    with pytest.raises(report_ckl.ChecklistError, match="incomplete: 448 VULN"):
        report_ckl.build(partial, {"package_aide_installed": "pass"})


def _tool(*args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "checklist.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_tools_checklist_writes_ckl_and_cklb_and_refuses_an_empty_export(tmp_path):
    ds = lab_datastream("ssg-rhel9-ds.xml")
    results = tmp_path / "results.json"
    results.write_text(json.dumps({P + "package_aide_installed": "fail", "aide_build_database": "pass"}))
    for name in ("host.ckl", "host.cklb"):
        proc = _tool(ds, "xccdf_org.ssgproject.content_profile_stig", results, tmp_path / name, "--host", "web1")
        assert proc.returncode == 0, proc.stderr
        assert "448 VULNs (Not_Reviewed 447, Open 1)" in proc.stdout
    cklb = json.loads((tmp_path / "host.cklb").read_text())
    rules = {r["group_id"]: r for r in cklb["stigs"][0]["rules"]}
    assert rules["V-258134"]["status"] == "open" and cklb["target_data"]["host_name"] == "web1"
    vulns = etree.parse(str(tmp_path / "host.ckl")).getroot().findall("STIGS/iSTIG/VULN")
    assert len(vulns) == 448
    (tmp_path / "empty.json").write_text("{}")
    proc = _tool(ds, "stig", tmp_path / "empty.json", tmp_path / "empty.ckl")
    assert proc.returncode == 1 and "refused: zero results" in proc.stderr
    assert not (tmp_path / "empty.ckl").exists()
    (tmp_path / "typo.json").write_text(json.dumps({"package_aide_instaled": "pass"}))
    proc = _tool(ds, "stig", tmp_path / "typo.json", tmp_path / "typo.ckl")
    assert proc.returncode == 1 and "rules the datastream lacks: package_aide_instaled" in proc.stderr
    proc = _tool(ds, "no_such_profile", results, tmp_path / "x.ckl")
    assert proc.returncode == 1 and "no_such_profile" in proc.stderr
