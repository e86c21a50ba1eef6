"""A user's own tailoring file, end to end on a lab host (issue 8 item 5): the main job with
``scapforge_tailoring_src`` and the tailoring's profile remediates a rule only the tailoring
selects, renders a vendor fix with the tailoring's Value (the host file gets it), adds a rule
outside the tailored profile by merging, and refuses a profile id the file does not have
before anything changes. What the product says is checked with an oscap run of the test's
own, with the user's file."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from lxml import etree

DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
RULE = "xccdf_org.ssgproject.content_rule_"
VALUE = "xccdf_org.ssgproject.content_value_"
HIGH = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
CUSTOM = HIGH + "_customized"
X = "{http://checklists.nist.gov/xccdf/1.2}"

#: selects a rule anssi_bp28_high does not (MaxAuthTries), gives login.defs UMASK 027
#: (the profile's is 077) and MaxAuthTries the literal 3
TAILORING = """<?xml version="1.0" encoding="UTF-8"?>
<xccdf:Tailoring xmlns:xccdf="http://checklists.nist.gov/xccdf/1.2" id="xccdf_scapforge-test_tailoring_site">
  <xccdf:version time="2026-11-30T00:00:00">1</xccdf:version>
  <xccdf:Profile id="{custom}" extends="{high}">
    <xccdf:title>ANSSI BP-028 high, site values</xccdf:title>
    <xccdf:select idref="{rule}sshd_set_max_auth_tries" selected="true"/>
    <xccdf:refine-value idref="{value}var_accounts_user_umask" selector="027"/>
    <xccdf:set-value idref="{value}sshd_max_auth_tries_value">3</xccdf:set-value>
  </xccdf:Profile>
</xccdf:Tailoring>
""".format(custom=CUSTOM, high=HIGH, rule=RULE, value=VALUE)

#: in the base profile (Value tailored), only in the tailoring, in neither (merged in)
RULES = ["accounts_umask_etc_login_defs", "sshd_set_max_auth_tries", "sshd_disable_empty_passwords"]


def own_oscap(host, tailoring_path: str) -> dict:
    """{short rule id: result} of RULES by oscap on the host with the user's file."""
    rules = " ".join("--rule %s%s" % (RULE, r) for r in RULES)
    host.ssh("sudo oscap xccdf eval --tailoring-file %s --profile %s %s --results /tmp/own-results.xml %s "
             ">/dev/null 2>&1; test -s /tmp/own-results.xml" % (tailoring_path, CUSTOM, rules, DS), timeout=300)
    root = etree.fromstring(host.ssh("sudo cat /tmp/own-results.xml").stdout.encode(), etree.XMLParser(huge_tree=True))
    results = {rr.get("idref")[len(RULE):]: rr.findtext(X + "result") for rr in root.iter(X + "rule-result")}
    return {rule: results.get(rule) for rule in RULES}


@pytest.fixture(scope="module")
def tailoring_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tailoring") / "site-tailoring.xml"
    path.write_text(TAILORING)
    return path


@pytest.fixture(scope="module")
def run(lab_host, lab_inventory, tailoring_file, tmp_path_factory, remediate):
    host = lab_host
    host.ssh("sudo sed -i 's/^UMASK.*/UMASK\\t\\t022/' /etc/login.defs")
    host.ssh("printf '%%s' %s > /tmp/site-tailoring.xml" % _sh_quote(TAILORING))
    before = own_oscap(host, "/tmp/site-tailoring.xml")
    runs = tmp_path_factory.mktemp("runs")
    proc = remediate(lab_inventory, host.name, runs, {
        "scapforge_rules": RULES, "scapforge_profile": CUSTOM, "scapforge_tailoring_src": str(tailoring_file)})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    summary = json.loads((runs / "latest" / "summary.json").read_text())
    events = [json.loads(line) for line in (runs / "latest" / "events.jsonl").read_text().splitlines()]
    after = own_oscap(host, "/tmp/site-tailoring.xml")
    return {"host": host, "report": summary["hosts"][host.name], "events": events, "before": before, "after": after}


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_the_tailored_rules_are_remediated_and_pass_in_our_own_scan(run):
    assert run["before"] == dict.fromkeys(RULES, "fail")
    rules = run["report"]["rules"]
    for rule in RULES:
        assert (rules[rule]["outcome"], rules[rule]["reason"]) == ("remediated", "verified"), rules[rule]
        assert run["after"][rule] == "pass", rule
    assert run["report"]["regressions"] == []


def test_the_host_files_carry_the_tailorings_values(run):
    host = run["host"]
    assert re.findall(r"(?m)^UMASK\s+(\S+)", host.ssh("cat /etc/login.defs").stdout) == ["027"]
    sshd = host.ssh("sudo cat /etc/ssh/sshd_config").stdout
    assert re.findall(r"(?mi)^\s*MaxAuthTries\s+(\S+)", sshd) == ["3"]
    assert host.ssh("sudo sshd -t", check=False).returncode == 0


def test_report_and_run_start_record_the_tailoring(run, tailoring_file):
    expected = {"file": "site-tailoring.xml", "sha256": hashlib.sha256(tailoring_file.read_bytes()).hexdigest(),
                "profile": CUSTOM, "scan_profile": CUSTOM + "_scapforge"}
    assert run["report"]["profile"] == CUSTOM
    assert run["report"]["tailoring"] == expected
    start = next(e for e in run["events"] if e["event"] == "run_start")
    assert start["data"]["tailoring"] == expected
    assert start["data"]["tailored"] == ["sshd_disable_empty_passwords"]  # merged in: outside the tailored profile


def test_a_profile_the_tailoring_lacks_is_refused_before_any_change(lab_host, lab_inventory, tailoring_file, tmp_path,
                                                                    remediate):
    before = lab_host.ssh("sha256sum /etc/login.defs /etc/ssh/sshd_config").stdout
    proc = remediate(lab_inventory, lab_host.name, tmp_path, {
        "scapforge_rules": RULES, "scapforge_profile": "anssi_bp28_high", "scapforge_tailoring_src": str(tailoring_file)})
    assert proc.returncode != 0
    error = json.loads((tmp_path / "latest" / "summary.json").read_text())["errors"][lab_host.name]
    assert error["reason"] == "profile" and CUSTOM in error["msg"] and "site-tailoring.xml" in error["msg"], error
    assert lab_host.ssh("sha256sum /etc/login.defs /etc/ssh/sshd_config").stdout == before


def test_without_rules_outside_it_the_users_file_is_scanned_as_given(run, lab_host, lab_inventory, tailoring_file,
                                                                     tmp_path, remediate):
    """After the first run: login.defs has UMASK 027, which passes only with the tailoring's
    Value (the base profile's is 077), so a pass here proves oscap got the user's file."""
    proc = remediate(lab_inventory, lab_host.name, tmp_path, {
        "scapforge_rules": RULES[:2], "scapforge_profile": CUSTOM, "scapforge_tailoring_src": str(tailoring_file)})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "latest" / "summary.json").read_text())["hosts"][lab_host.name]
    assert report["tailoring"]["scan_profile"] == CUSTOM
    assert report["before"] == {"pass": 2} and report["rules"] == {}
