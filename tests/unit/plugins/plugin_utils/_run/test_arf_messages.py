"""The scanner's own words for a rule it did not judge (``_run.arf.rule_messages``), read
from an ARF shaped as oscap 1.3.7 writes it on the lab host (issue 17 item 5)."""

from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.arf import rule_messages

P = "xccdf_org.ssgproject.content_rule_"
ARF = """<?xml version="1.0" encoding="UTF-8"?>
<arf:asset-report-collection xmlns:arf="http://scap.nist.gov/schema/asset-reporting-format/1.1">
 <arf:reports><arf:report id="xccdf1"><arf:content>
  <TestResult xmlns="http://checklists.nist.gov/xccdf/1.2" id="xccdf_org.open-scap_testresult_p">
   <rule-result idref="%(p)ssecurity_patches_up_to_date" role="full" time="t" severity="high" weight="1.0">
    <result>notchecked</result>
    <message severity="info">None of the check-content-ref elements
      was resolvable.</message>
   </rule-result>
   <rule-result idref="%(p)saccounts_password_pam_retry"><result>pass</result>
    <message severity="info">not asked for</message></rule-result>
   <rule-result idref="%(p)sgone"><result>notapplicable</result></rule-result>
  </TestResult>
 </arf:content></arf:report></arf:reports>
</arf:asset-report-collection>
""" % {"p": P}


def test_messages_of_the_rules_asked_for(tmp_path):
    path = tmp_path / "lab6-after.xml"
    path.write_text(ARF)
    assert rule_messages(str(path), [P + "security_patches_up_to_date", P + "gone"]) == {
        P + "security_patches_up_to_date": "None of the check-content-ref elements was resolvable."}


def test_no_file_or_a_broken_one_gives_no_messages(tmp_path):
    assert rule_messages(None, [P + "x"]) == {}
    assert rule_messages(str(tmp_path / "missing.xml"), [P + "x"]) == {}
    broken = tmp_path / "broken.xml"
    broken.write_text(ARF[:400])
    assert rule_messages(str(broken), [P + "security_patches_up_to_date"]) == {}
    assert rule_messages(str(broken), []) == {}
