"""Report writers from a typed host report (issue 10 items 3 and 4), pure logic.

The STIG checklist is built over the real RHEL 9 datastream (SSG 0.1.76, the STIG profile
with DISA ids) and checked against the structure DISA STIG Viewer 2.x writes; junit.xml is
read back with junitparser; report.html is parsed as XML-ish HTML with lxml.
"""

from __future__ import annotations

import datetime
import json
import re
import typing as t
from pathlib import Path

import lxml.html
import pytest
from junitparser import Failure, JUnitXml, Skipped
from lxml import etree

from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_summary as HS
from ansible_collections.scapforge.remediation.plugins.plugin_utils import report_ckl, report_html, report_junit
from ansible_collections.scapforge.remediation.plugins.plugin_utils import report_oscal
from ansible_collections.scapforge.remediation.plugins.plugin_utils import skills
from ansible_collections.scapforge.remediation.plugins.plugin_utils import waivers as W
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import unified_diff

from test_catalog import lab_datastream
import report_samples

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
            "content": {"sha256": rhel9.sha256, "benchmark_version": rhel9.benchmark_version, "oscap_version": "1.3.7"},
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


def _catalogs(rhel9):
    return lambda sha: rhel9 if sha == rhel9.sha256 else None


def _vulns(root):
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
        assert data["Vuln_Num"] not in vulns, "one VULN per V- id"
        vulns[data["Vuln_Num"]] = (data, vuln)
    return vulns


def test_checklist_has_stig_viewer_structure_and_statuses(stig_report, rhel9, tmp_path):
    written, refused = report_ckl.write(str(tmp_path), {"rhel9-a": stig_report}, _catalogs(rhel9))
    assert refused == {}
    assert written == {"rhel9-a": {"ckl": str(tmp_path / "checklists" / "rhel9-a.ckl"),
                                   "cklb": str(tmp_path / "checklists" / "rhel9-a.cklb")}}
    root = etree.fromstring((tmp_path / "checklists" / "rhel9-a.ckl").read_bytes())
    assert root.tag == "CHECKLIST" and [c.tag for c in root] == ["ASSET", "STIGS"]
    assert [c.tag for c in root.find("ASSET")] == list(report_ckl.ASSET_KEYS)
    assert root.findtext("ASSET/HOST_NAME") == "rhel9-a"
    info = root.find("STIGS/iSTIG/STIG_INFO")
    assert [d.findtext("SID_NAME") for d in info.findall("SI_DATA")] == list(report_ckl.SI_KEYS)
    si = {d.findtext("SID_NAME"): d.findtext("SID_DATA") for d in info.findall("SI_DATA")}
    assert si["version"] == "0.1.76" and "OpenSCAP 1.3.7" in si["releaseinfo"] and "OpenSCAP 1.3.7" in si["source"]
    assert rhel9.sha256 in si["source"]
    vulns = _vulns(root)
    assert len(vulns) == 448  # every V- id of the stig profile, not only the five rules scanned
    rules = stig_report["rules"]
    vid = HR.vuln_id(rules["sshd_disable_root_login"]["identifiers"])
    data, vuln = vulns[vid]
    ids = rules["sshd_disable_root_login"]["identifiers"]
    assert data["Rule_ID"] == ids["stig_rule"][0] and data["Rule_Ver"] == "RHEL-09-255045"
    assert data["Severity"] == "medium" and data["Rule_Title"] == "Disable SSH Root Login"
    assert data["Group_Title"].startswith("SRG-OS-")
    assert vuln.findtext("STATUS") == "NotAFinding"
    assert "- sshd_disable_root_login: pass (baseline: fail); scapforge remediated/verified" in vuln.findtext(
        "FINDING_DETAILS")
    assert "CAT II" in vuln.findtext("FINDING_DETAILS")
    grub = vulns[HR.vuln_id(rules["grub2_audit_argument"]["identifiers"])]
    assert grub[1].findtext("STATUS") == "Open" and grub[0]["Severity"] == "low"  # SSG 0.1.76's STIG profile
    telnet = vulns[HR.vuln_id(stig_report["scan_results"]["package_telnet-server_removed"]["identifiers"])]
    assert telnet[1].findtext("STATUS") == "NotAFinding" and telnet[0]["Severity"] == "high"
    assert "CAT I " in telnet[1].findtext("FINDING_DETAILS")
    empty = vulns[HR.vuln_id(stig_report["scan_results"]["sshd_disable_empty_passwords"]["identifiers"])]
    assert empty[1].findtext("STATUS") == "Not_Applicable"
    waived = vulns[HR.vuln_id(rules["accounts_tmout"]["identifiers"])][1]
    assert waived.findtext("STATUS") == "Open"
    assert waived.findtext("COMMENTS") == "accounts_tmout waived (risk accepted) until 2099-01-31: <b>kiosk</b> sessions"
    statuses = [v.findtext("STATUS") for _d, v in vulns.values()]
    assert statuses.count("Not_Reviewed") == 448 - 5  # rules without a result: notselected
    cklb = json.loads((tmp_path / "checklists" / "rhel9-a.cklb").read_text())
    assert cklb["cklb_version"] == "1.0" and cklb["target_data"]["host_name"] == "rhel9-a"
    stig = cklb["stigs"][0]
    assert stig["size"] == len(stig["rules"]) == 448
    by_group = {r["group_id"]: r for r in stig["rules"]}
    assert by_group[vid]["status"] == "not_a_finding" and by_group[grub[0]["Vuln_Num"]]["status"] == "open"
    assert by_group[vid]["rule_id_src"] == ids["stig_rule"][0] and not by_group[vid]["rule_id"].endswith("_rule")
    assert all(r["stig_uuid"] == stig["uuid"] for r in stig["rules"])
    assert sorted({r["status"] for r in stig["rules"]}) == ["not_a_finding", "not_applicable", "not_reviewed", "open"]


def test_no_checklist_for_content_without_stig_ids(stig_report, tmp_path):
    debian = Catalog.from_path(lab_datastream("ssg-debian12-ds.xml"))
    plain = dict(stig_report, profile="xccdf_org.ssgproject.content_profile_anssi_bp28_high",
                 content=dict(stig_report["content"], sha256=debian.sha256),
                 scan_results={k: dict(v, identifiers={"cce": ["CCE-1-1"]}) for k, v in stig_report["scan_results"].items()})
    assert report_ckl.write(str(tmp_path), {"deb": plain}, lambda sha: debian) == ({}, {})
    assert not (tmp_path / "checklists").exists()


def test_a_checklist_without_its_content_or_results_is_refused_not_written(stig_report, rhel9, tmp_path):
    written, refused = report_ckl.write(str(tmp_path), {"a": stig_report}, lambda sha: None)
    assert written == {} and "is not on the controller" in refused["a"]
    nothing = dict(stig_report, scan_results={})
    written, refused = report_ckl.write(str(tmp_path), {"b": nothing}, _catalogs(rhel9))
    assert written == {} and refused["b"].startswith("zero results: none of the 490 rule(s)")
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


def _page(tmp_path, hosts, **kwargs):
    path = report_html.write(str(tmp_path), hosts, "r1", "2026-11-30T00:00:00Z", **kwargs)
    text = open(path, encoding="utf-8").read()
    return text, lxml.html.fromstring(text)


def _summary_counts(page, host):
    card = page.xpath("//section[@id='summary']/div[@data-host='%s']" % host)[0]
    return ({e.get("data-outcome"): int(e.get("data-count")) for e in card.xpath(".//*[@data-outcome]")},
            {e.get("data-bucket"): int(e.get("data-count")) for e in card.xpath(".//*[@data-bucket]")},
            card)


def test_html_escapes_host_text_and_draws_counts(stig_report, tmp_path):
    text, page = _page(tmp_path, {"rhel9-a": stig_report},
                       checklists={"rhel9-a": {"ckl": "checklists/rhel9-a.ckl", "cklb": "checklists/rhel9-a.cklb"}})
    assert "<script" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<b>kiosk" not in text
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert page.xpath("//body/section")[0].get("id") == "summary"
    outcomes, buckets, _card = _summary_counts(page, "rhel9-a")
    assert outcomes == {"remediated/verified": 1, "skipped/waived": 1, "escalated/fix_ineffective": 1}
    # accounts_tmout (waived) and grub2_audit_argument (escalated) fail at the end
    assert buckets == {"human": 1, "waived": 1}
    assert page.xpath("//*[@data-final-fail]/@data-final-fail") == ["2"]
    row = page.xpath("//tr[@data-rule='sshd_disable_root_login']")[0]
    assert row.get("data-outcome") == "remediated"
    assert "medium (CAT II)" in row.text_content()  # the content carries DISA ids
    assert "+PermitRootLogin no" in row.xpath(".//pre[@class='diff']/text()")[0]
    assert "lineinfile" in row.xpath(".//pre[@class='tasks']/text()")[0]
    assert page.xpath("//table[@class='rules']//th[.='identifiers']")
    assert page.xpath("//tr[@data-reason='fix_ineffective']/following-sibling::tr[1]/@data-rule") == ["grub2_audit_argument"]
    warnings = page.xpath("//section[@id='warnings']//li/text()")
    assert any("sshd_disable_empty_passwords expired on 2020-01-01" in w for w in warnings)
    svg = page.xpath("//svg")[0]
    scale = float(svg.get("data-scale"))
    expected = HR.category_counts(stig_report, "before")
    bars = svg.xpath(".//rect")
    assert bars and sum(int(b.get("data-count")) for b in bars) == 4 + 4  # pass and fail, before and after
    for rect in bars:
        assert float(rect.get("width")) == pytest.approx(int(rect.get("data-count")) * scale, abs=0.01)
        if rect.get("data-scan") == "before":
            assert int(rect.get("data-count")) == expected[rect.get("data-category")][rect.get("data-result")]
    assert "px per rule" not in text
    assert {"checklists/rhel9-a.ckl", "checklists/rhel9-a.cklb"} <= set(page.xpath("//a/@href"))


def test_html_summary_reconciles_a_full_run(tmp_path):
    report = report_samples.debian_full_run()
    text, page = _page(tmp_path, {"lab7": report})
    outcomes, buckets, card = _summary_counts(page, "lab7")
    assert outcomes == report["outcomes"]
    assert outcomes["remediated/verified"] == 112 and outcomes["escalated/environment:kernel_config"] == 47
    # every rule failing at the end in exactly one bucket, and the buckets add up
    assert buckets == {"human": 46, "environment": 47, "access_impacting": 6, "waived": 2, "no_outcome": 1}
    assert sum(buckets.values()) == report["after"]["fail"] == 102
    assert HS.glance(report)["left_for_human"] == 47
    assert card.xpath(".//*[@data-fact='regressions']")[0].text_content() == "none"
    assert card.xpath(".//*[@data-fact='picked_up']/@data-count") == ["1"]
    assert "yes: 1 earlier start" in card.xpath(".//*[@data-fact='resumed']")[0].text_content()
    assert "no tailoring file" in card.text_content() and "OpenSCAP 1.3.7" in card.text_content()
    # Debian's content: no DISA ids, so no CAT words and no identifiers column
    assert "CAT I" not in text and not page.xpath("//table[@class='rules']//th[.='identifiers']")
    collapsed = page.xpath("//tr[@class='collapsed']")
    assert [(c.get("data-reason"), c.get("data-count")) for c in collapsed] == [("environment:kernel_config", "47")]
    assert len(collapsed[0].xpath(".//span[@data-rule]")) == 47
    assert len(page.xpath("//table[contains(@class, 'ledger')]//tr[@data-rule]")) == 112
    became = sum(int(m) for m in re.findall(r"\((\d+) became applicable\)", text))
    assert became == len(HS.became_applicable(report)) == 3
    sections = [s.get("id") for s in page.xpath("//body/section")]
    assert sections == ["summary", "warnings", "changes", "ledger", "categories", "rules", "outputs"]


def test_html_says_memory_degraded_or_off_with_the_reason(tmp_path):
    """Issue 19 item 6: the host report's memory state and reason reach report.html."""
    reason = ("lessons.json is corrupt (invalid JSON: Unterminated string); moved to "
              "/m/lessons.json.corrupt-20261201T000000.000000Z; a fresh table was started")
    degraded = dict(report_samples.debian_full_run(), memory={"shown": 1, "created": 2, "reinforced": 0, "retired": 0,
                                                              "state": "degraded", "reason": reason})
    off = dict(report_samples.debian_full_run(), host="lab8",
               memory={"shown": 0, "created": 0, "reinforced": 0, "retired": 0, "state": "off",
                       "reason": "decide: memory table 'meta' is corrupt", "error": "decide: memory table 'meta' is corrupt"})
    _text, page = _page(tmp_path, {"lab7": degraded, "lab8": off})
    facts = {h: page.xpath("//section[@id='summary']/div[@data-host='%s']//*[@data-fact='memory']" % h)[0]
             for h in ("lab7", "lab8")}
    assert facts["lab7"].get("data-state") == "degraded"
    assert facts["lab7"].text_content() == ("1 lessons shown, 2 created, 0 reinforced, 0 retired (memory degraded: %s)"
                                            % reason)
    assert (facts["lab8"].get("data-state"), facts["lab8"].text_content()) == (
        "off", "memory off: decide: memory table 'meta' is corrupt")
    warnings = page.xpath("//section[@id='warnings']//li/text()")
    assert ": Memory degraded: %s" % reason in warnings  # after the host's name
    assert ": Memory off, the lesson store failed: decide: memory table 'meta' is corrupt" in warnings


def test_html_check_mode_shows_the_plan_and_the_tailoring(tmp_path):
    report = report_samples.debian_full_run()
    plan = "vendor fix would run 2 tasks: Set x; Restart y"
    rules = {s: dict(r, outcome="skipped", reason="check_mode", detail=plan, attempts=0, attempt_log=[])
             for s, r in report["rules"].items()}
    report = dict(report, check_mode=True, after=None, rules=rules,
                  outcomes={"skipped/check_mode": len(rules)}, resumed=None,
                  scan_results={s: dict(r, after=None) for s, r in report["scan_results"].items()},
                  tailoring={"file": "site-tailoring.xml", "sha256": "ab" * 32,
                             "profile": "xccdf_site_profile_web", "scan_profile": "xccdf_site_profile_web"})
    text, page = _page(tmp_path, {"lab7": report})
    assert {b.get("data-scan") for b in page.xpath("//svg//rect")} == {"before"}  # no empty after bars
    assert len(page.xpath("//tr[@data-plan]")) == len(rules)
    assert plan in page.xpath("//tr[@data-plan]/td/text()")
    card = page.xpath("//section[@id='summary']/div")[0].text_content()
    assert "site-tailoring.xml" in card and "check mode" in card


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


def test_oscal_assessment_results_load_back_with_trestle(tmp_path):
    from trestle.oscal.assessment_results import AssessmentResults

    report = report_samples.debian_full_run()
    path = report_oscal.write(str(tmp_path), {"lab7": report, "lab8": {"host": "lab8", "error": {"reason": "x", "msg": "y"}}},
                              report["run_id"], "2026-12-01T12:30:00+00:00")
    assert path == str(tmp_path / "oscal" / "assessment-results.json")
    loaded = AssessmentResults.oscal_read(Path(path))  # trestle's models validate every field
    assert [r.title for r in loaded.results] == ["lab7: anssi_bp28_high"]  # a host that never ran has no result
    result = loaded.results[0]
    assert len(result.observations) == len(report["scan_results"])
    props = {o.title: {p.name: p.value for p in o.props} for o in result.observations}
    assert props["accounts_password_pam_dcredit"]["result"] == "pass"
    assert props["accounts_password_pam_dcredit"]["outcome"] == "remediated"
    failing = HS.final_fail(report)
    assert sorted(f.target.target_id for f in result.findings) == failing and len(failing) == 102
    assert {getattr(f.target.status.state, "value", f.target.status.state) for f in result.findings} == {"not-satisfied"}
    by_uuid = {o.uuid: o for o in result.observations}
    assert all(by_uuid[f.related_observations[0].observation_uuid].title == f.target.target_id for f in result.findings)
    tasks = {t.uuid: t for t in result.local_definitions.tasks}
    assert len(tasks) == 112  # the change ledger
    fixed = next(o for o in result.observations if o.title == "accounts_password_pam_dcredit")
    related = fixed.origins[0].related_tasks
    assert len(related) == 1 and "accounts_password_pam_dcredit" in tasks[related[0].task_uuid].title
    assert "+x=1" in tasks[related[0].task_uuid].remarks
    assert {e.href for e in fixed.relevant_evidence} == {"arf/lab7-before.xml", "arf/lab7-after.xml"}


def _reconciled_report(with_key: bool = True) -> HR.HostReport:
    """A host where every failing rule passes at the end (one by another rule's fix) and one
    rule is notchecked: nothing fails, yet a rule is left to check by hand."""
    ids = {k: [] for k in HR.ID_KINDS}
    row = {"severity": "medium", "identifiers": ids, "category": "auth"}
    report = {
        "host": "lab6", "run_id": "r1", "profile": "p", "before": {"fail": 2, "notchecked": 1},
        "after": {"pass": 2, "notchecked": 1}, "check_mode": False,
        "outcomes": {"remediated/passes_after_other_fixes": 1, "remediated/verified": 1},
        "rules": {"accounts_password_pam_retry": dict(row, rule="accounts_password_pam_retry", title="retry",
                                                      outcome="remediated", reason="passes_after_other_fixes",
                                                      attempts=0, detail="passes in the final scan after other rules' "
                                                      "fixes; it was escalated/llm_unavailable"),
                  "package_pam_pwquality_installed": dict(row, rule="package_pam_pwquality_installed", title="pwq",
                                                          outcome="remediated", reason="verified", attempts=1)},
        "scan_results": {"accounts_password_pam_retry": dict(row, title="retry", before="fail", after="pass"),
                         "package_pam_pwquality_installed": dict(row, title="pwq", before="fail", after="pass"),
                         "security_patches_up_to_date": dict(row, title="Ensure Software Patches Installed",
                                                             before="notchecked", after="notchecked")},
    }
    if with_key:
        report["not_judged"] = {"security_patches_up_to_date": {
            "before": "notchecked", "result": "notchecked", "message": "None of the check-content-ref elements was resolvable.",
            "why": "OpenSCAP did not check it (notchecked): the content has no automated check OpenSCAP can run for this "
                   "rule; check it by hand; OpenSCAP says: None of the check-content-ref elements was resolvable."}}
    return t.cast(HR.HostReport, report)


def test_html_never_says_nothing_is_left_when_a_rule_is_notchecked(tmp_path):
    """Issue 17 item 5: notchecked rules are named on the first screen with why, and the
    heading counts them; a rule that passes by another rule's fix is not left for a human."""
    report = _reconciled_report()
    text, page = _page(tmp_path, {"lab6": report})
    _outcomes, buckets, card = _summary_counts(page, "lab6")
    assert buckets == {} and HS.glance(report)["left_for_human"] == 0
    heading = card.xpath(".//h3[@data-left-for-human]")[0]
    assert (heading.get("data-left-for-human"), heading.get("data-to-check-by-hand")) == ("0", "1")
    assert heading.text_content() == "Left for a human: 0 failing, and 1 to check by hand"
    item = card.xpath(".//details[@class='not-judged']//li")
    assert [(li.get("data-rule"), li.get("data-result"), li.get("data-before")) for li in item] == [
        ("security_patches_up_to_date", "notchecked", "notchecked")]
    assert item[0].text_content() == (
        "security_patches_up_to_date (notchecked, Ensure Software Patches Installed): "
        + report["not_judged"]["security_patches_up_to_date"]["why"])
    warned = page.xpath("//section[@id='warnings']//li")
    assert [w.text_content() for w in warned] == [
        "lab6: 1 rule(s) OpenSCAP did not judge pass or fail at the end, to check by hand: "
        "security_patches_up_to_date (notchecked)"]
    row = page.xpath("//tr[@data-rule='accounts_password_pam_retry']")[0]
    assert (row.get("data-outcome"), row.get("data-reason")) == ("remediated", "passes_after_other_fixes")
    assert HS.console_lines("lab6", report)[2] == (
        "lab6:   left for a human: 0 of the 0 rules failing at the end; 1 not judged by OpenSCAP, to check by hand: "
        "security_patches_up_to_date")


def test_an_older_report_without_not_judged_still_names_the_notchecked_rule():
    rows = HS.not_judged(_reconciled_report(with_key=False))
    assert rows == [{"rule": "security_patches_up_to_date", "title": "Ensure Software Patches Installed",
                     "before": "notchecked", "result": "notchecked", "message": None,
                     "why": report_html.HS.decisions.NOT_JUDGED_WHY["notchecked"]}]
    assert HS.not_judged({"host": "x", "error": {"reason": "content", "msg": "m"}}) == []
