"""Report writers from a typed host report (issue 10 items 3 and 4), pure logic.

The STIG checklist is built over the real RHEL 9 datastream (SSG 0.1.76, the STIG profile
with DISA ids) and checked against the structure DISA STIG Viewer 2.x writes; junit.xml is
read back with junitparser; report.html is parsed as XML-ish HTML with lxml.
"""

from __future__ import annotations

import datetime

import lxml.html
import pytest
from junitparser import Failure, JUnitXml, Skipped
from lxml import etree

from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils import report_ckl, report_html, report_junit
from ansible_collections.scapforge.remediation.plugins.plugin_utils import skills
from ansible_collections.scapforge.remediation.plugins.plugin_utils import waivers as W
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import unified_diff

from test_catalog import lab_datastream

STIG = "xccdf_org.ssgproject.content_profile_stig"
P = "xccdf_org.ssgproject.content_rule_"


@pytest.fixture(scope="module")
def rhel9():
    return Catalog.from_path(lab_datastream("ssg-rhel9-ds.xml"))


@pytest.fixture(scope="module")
def stig_report(rhel9) -> HR.HostReport:
    """A host report as the loop writes it, over four STIG rules of the real content."""
    skill = skills.load_skill("stig-rhel9")
    profile = rhel9.profile(STIG)
    before = {P + "accounts_tmout": "fail", P + "sshd_disable_root_login": "fail",
              P + "package_telnet-server_removed": "pass", P + "grub2_audit_argument": "fail",
              P + "sshd_disable_empty_passwords": "notapplicable"}
    after = dict(before, **{P + "sshd_disable_root_login": "pass"})
    rules = {
        "sshd_disable_root_login": {"rule": "sshd_disable_root_login", "outcome": "remediated", "reason": "verified",
                                    "attempts": 1, "detail": "", "changed_tasks": ["Disable root login (lineinfile)"],
                                    "attempt_log": [{"attempt": 1, "source": "vendor", "verdict": "passed",
                                                     "reason": "verified", "rolled_back": None,
                                                     "tasks": "- name: x\n  lineinfile: {path: /etc/ssh/sshd_config}\n",
                                                     "diffs": [{"task": "Disable root login", "module": "lineinfile",
                                                                "diff": "--- before\n+++ after\n-PermitRootLogin yes\n"
                                                                        "+PermitRootLogin no\n"}]}]},
        "accounts_tmout": {"rule": "accounts_tmout", "outcome": "skipped", "reason": "waived", "attempts": 0,
                           "detail": "waived until 2099-01-31: <b>kiosk</b> sessions",
                           "waiver": {"rule": "accounts_tmout", "reason": "<b>kiosk</b> sessions",
                                      "expires": "2099-01-31"}},
        "grub2_audit_argument": {"rule": "grub2_audit_argument", "outcome": "escalated", "reason": "fix_ineffective",
                                 "attempts": 2, "detail": "still fails <script>alert(1)</script>"},
    }
    for short in rules:
        rules[short].update(HR.rule_meta(rhel9.rule(P + short), profile))
    return {"host": "rhel9-a", "run_id": "r1", "profile": STIG,
            "content": {"sha256": rhel9.sha256, "benchmark_version": rhel9.benchmark_version},
            "before": {"pass": 1, "fail": 3, "notapplicable": 1}, "after": {"pass": 2, "fail": 2, "notapplicable": 1},
            "rules": rules, "scan_results": HR.scan_results(rhel9, skill, before, after, profile),
            "waivers": [rules["accounts_tmout"]["waiver"]],
            "expired_waivers": [{"rule": "sshd_disable_empty_passwords", "reason": "old", "expires": "2020-01-01"}],
            "arf": {"before": "arf/rhel9-a-before.xml", "after": "arf/rhel9-a-after.xml"}, "regressions": []}


def test_rule_meta_carries_title_severity_and_stig_ids(stig_report):
    row = stig_report["rules"]["sshd_disable_root_login"]
    assert row["title"] == "Disable SSH Root Login"
    assert row["severity"] == "medium"
    assert row["identifiers"]["stig_id"] == ["RHEL-09-255045"]
    assert row["identifiers"]["cce"][0].startswith("CCE-")
    assert HR.vuln_id(row["identifiers"]) == "V-" + row["identifiers"]["stig_rule"][0][3:].split("r")[0]


def test_checklist_has_stig_viewer_structure_and_statuses(stig_report, tmp_path):
    written = report_ckl.write(str(tmp_path), {"rhel9-a": stig_report})
    text = (tmp_path / "checklists" / "rhel9-a.ckl").read_bytes()
    assert written == {"rhel9-a": str(tmp_path / "checklists" / "rhel9-a.ckl")}
    root = etree.fromstring(text)
    assert root.tag == "CHECKLIST" and [c.tag for c in root] == ["ASSET", "STIGS"]
    assert [c.tag for c in root.find("ASSET")] == list(report_ckl.ASSET_KEYS)
    assert root.findtext("ASSET/HOST_NAME") == "rhel9-a"
    info = root.find("STIGS/iSTIG/STIG_INFO")
    assert [d.findtext("SID_NAME") for d in info.findall("SI_DATA")] == list(report_ckl.SI_KEYS)
    vulns = {}
    for vuln in root.findall("STIGS/iSTIG/VULN"):
        tags = [c.tag for c in vuln]
        n = tags.count("STIG_DATA")
        assert tags[:n] == ["STIG_DATA"] * n and tags[n:] == list(report_ckl.VULN_TAIL)
        data = {}
        for pair in vuln.findall("STIG_DATA"):
            assert [c.tag for c in pair] == ["VULN_ATTRIBUTE", "ATTRIBUTE_DATA"]
            data.setdefault(pair.findtext("VULN_ATTRIBUTE"), pair.findtext("ATTRIBUTE_DATA"))
        assert [k for k in data if k != "CCI_REF"] == list(report_ckl.VULN_KEYS)
        vulns[data["Group_Title"]] = (data, vuln)
    assert set(vulns) == {"sshd_disable_root_login", "accounts_tmout", "package_telnet-server_removed",
                          "grub2_audit_argument", "sshd_disable_empty_passwords"}
    data, vuln = vulns["sshd_disable_root_login"]
    ids = stig_report["rules"]["sshd_disable_root_login"]["identifiers"]
    assert data["Vuln_Num"].startswith("V-") and data["Rule_ID"] == ids["stig_rule"][0]
    assert data["Rule_ID"].startswith("SV-") and data["Rule_Ver"] == "RHEL-09-255045"
    assert data["Severity"] == "medium" and data["Rule_Title"] == "Disable SSH Root Login"
    assert vuln.findtext("STATUS") == "NotAFinding"
    assert "remediated/verified" in vuln.findtext("FINDING_DETAILS")
    assert "CAT II" in vuln.findtext("FINDING_DETAILS")
    assert vulns["grub2_audit_argument"][1].findtext("STATUS") == "Open"
    assert vulns["grub2_audit_argument"][0]["Severity"] == "low"  # SSG 0.1.76's STIG profile
    assert "CAT III" in vulns["grub2_audit_argument"][1].findtext("FINDING_DETAILS")
    assert vulns["package_telnet-server_removed"][1].findtext("STATUS") == "NotAFinding"
    assert vulns["package_telnet-server_removed"][0]["Severity"] == "high"
    assert "CAT I " in vulns["package_telnet-server_removed"][1].findtext("FINDING_DETAILS")
    assert vulns["sshd_disable_empty_passwords"][1].findtext("STATUS") == "Not_Applicable"
    waived = vulns["accounts_tmout"][1]
    assert waived.findtext("STATUS") == "Open"
    assert waived.findtext("COMMENTS") == "Waived (risk accepted) until 2099-01-31: <b>kiosk</b> sessions"
    assert report_ckl.status_of("error") == report_ckl.status_of(None) == "Not_Reviewed"


def test_no_checklist_for_content_without_stig_ids(stig_report, tmp_path):
    plain = dict(stig_report, scan_results={k: dict(v, identifiers={"cce": ["CCE-1-1"]})
                                            for k, v in stig_report["scan_results"].items()})
    assert report_ckl.write(str(tmp_path), {"deb": plain}) == {}
    assert not (tmp_path / "checklists").exists()


def test_junit_has_one_case_per_rule_with_the_right_result(stig_report, tmp_path):
    report_junit.write(str(tmp_path), {"rhel9-a": stig_report})
    xml = JUnitXml.fromfile(str(tmp_path / "junit.xml"))
    suites = list(xml)
    assert [s.name for s in suites] == ["rhel9-a"]
    cases = {c.name: c for c in suites[0]}
    assert set(cases) == set(stig_report["scan_results"])
    assert all(c.classname == "rhel9-a" for c in cases.values())
    assert cases["sshd_disable_root_login"].is_passed and cases["package_telnet-server_removed"].is_passed
    failure = cases["grub2_audit_argument"].result[0]
    assert isinstance(failure, Failure) and failure.message == "fix_ineffective"
    assert "<script>" in failure.text  # text in XML, escaped by the writer, read back intact
    skipped = cases["accounts_tmout"].result[0]
    assert isinstance(skipped, Skipped)
    assert skipped.message == "waived: <b>kiosk</b> sessions (until 2099-01-31)"
    assert isinstance(cases["sshd_disable_empty_passwords"].result[0], Skipped)
    assert (suites[0].tests, suites[0].failures, suites[0].skipped) == (5, 1, 2)


def test_junit_error_case_for_a_host_that_could_not_start(tmp_path):
    report_junit.write(str(tmp_path), {"h": {"host": "h", "error": {"reason": "rule", "msg": "unknown rule x"}}})
    case = next(iter(next(iter(JUnitXml.fromfile(str(tmp_path / "junit.xml"))))))
    assert case.name == "run" and case.result[0].message == "rule"


def test_html_escapes_host_text_and_draws_counts(stig_report, tmp_path):
    path = report_html.write(str(tmp_path), {"rhel9-a": stig_report}, "r1", "2026-11-30T00:00:00Z",
                             {"rhel9-a": "checklists/rhel9-a.ckl"})
    text = open(path, encoding="utf-8").read()
    assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<b>kiosk" not in text
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    page = lxml.html.fromstring(text)
    group = page.xpath("//table[@data-reason='fix_ineffective']//td/a/text()")
    assert group == ["grub2_audit_argument"]
    row = page.xpath("//tr[@data-rule='sshd_disable_root_login']")[0]
    assert row.get("data-outcome") == "remediated"
    assert "+PermitRootLogin no" in row.xpath(".//pre[@class='diff']/text()")[0]
    assert "lineinfile" in row.xpath(".//pre[@class='tasks']/text()")[0]
    assert page.xpath("//table[@class='waivers']/tr[@data-state='expired']/td/text()")[0] == "sshd_disable_empty_passwords"
    svg = page.xpath("//svg")[0]
    scale = float(svg.get("data-scale"))
    expected = HR.category_counts(stig_report, "before")
    bars = svg.xpath(".//rect")
    assert bars and sum(int(b.get("data-count")) for b in bars) == 4 + 4  # pass and fail, before and after
    for rect in bars:
        assert float(rect.get("width")) == pytest.approx(int(rect.get("data-count")) * scale, abs=0.01)
        if rect.get("data-scan") == "before":
            assert int(rect.get("data-count")) == expected[rect.get("data-category")][rect.get("data-result")]
    assert "checklists/rhel9-a.ckl" in page.xpath("//a/@href")


def test_waivers_validate_and_expire():
    parsed = W.parse([{"rule": "accounts_tmout", "reason": "kiosk", "expires": "2027-01-31"},
                      {"rule": "sshd_x", "reason": "r", "expires": datetime.date(2020, 1, 1)}])
    assert parsed[0].active(datetime.date(2027, 1, 31)) and not parsed[0].active(datetime.date(2027, 2, 1))
    assert parsed[1].to_dict() == {"rule": "sshd_x", "reason": "r", "expires": "2020-01-01"}
    assert W.detail(parsed[0]) == "waived until 2027-01-31: kiosk"
    for bad, said in (
        ([{"rule": "a", "reason": "", "expires": "2027-01-31"}], r"scapforge_waivers\[0\] \(rule a\): reason"),
        ([{"rule": "a", "reason": "r", "expires": "31/01/2027"}], r"\(rule a\): expires must be a YYYY-MM-DD"),
        ([{"rule": "a", "reason": "r"}], "expires must be"),
        ([{"reason": "r", "expires": "2027-01-31"}], r"\[0\]: rule must be"),
        ([{"rule": "a", "reason": "r", "expires": "2027-01-31", "until": 1}], "unknown key"),
        ([{"rule": "a", "reason": "r", "expires": "2027-01-31"}] * 2, r"\[1\] \(rule a\): the rule is waived twice"),
        ("a", "must be a list"),
    ):
        with pytest.raises(W.WaiverError, match=said):
            W.parse(bad)


def test_unified_diff_of_module_diffs():
    text = unified_diff({"before": "a\nUMASK 022\n", "after": "a\nUMASK 077\n",
                         "before_header": "/etc/login.defs (content)", "after_header": "/etc/login.defs (content)"})
    assert text.splitlines()[:2] == ["--- before: /etc/login.defs (content)", "+++ after: /etc/login.defs (content)"]
    assert "-UMASK 022" in text and "+UMASK 077" in text
    assert '-  "mode": "0644"' in unified_diff([{"before": {"mode": "0644"}, "after": {"mode": "0600"}}])
    assert unified_diff({"dst_binary": 1}) == "diff skipped: destination file appears to be binary\n"
