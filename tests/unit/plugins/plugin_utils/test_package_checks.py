"""package_checks.py (issue 17 item 7): a package-removed check on a name the host's package
sources do not have proves nothing (check_unreliable)."""

from pathlib import Path

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import package_checks as P

from test_catalog import lab_datastream

PREFIX = "xccdf_org.ssgproject.content_rule_"
POLICY = """dpkg:
  Installed: 1.21.23
  Candidate: 1.21.23
  Version table:
 *** 1.21.23 500
telnet-server:
  Installed: (none)
  Candidate: (none)
  Version table:
telnet:
  Installed: (none)
  Candidate: 0.17+2.4-2+deb12u3
  Version table:
"""


@pytest.fixture(scope="module")
def debian12():
    return P.removed_packages(lab_datastream("ssg-debian12-ds.xml").read_bytes())


def test_removed_packages_of_the_debian12_content(debian12):
    assert len(debian12) == 24
    assert debian12[PREFIX + "package_telnet-server_removed"] == ("telnet-server",)
    assert debian12[PREFIX + "package_ypbind_removed"] == ("ypbind-mt",)  # the OVAL name, not the rule id's
    assert PREFIX + "package_chrony_installed" not in debian12  # an installed check is not a removed check
    assert PREFIX + "sshd_disable_root_login" not in debian12


def test_unreadable_content_gives_nothing():
    assert P.removed_packages(b"not xml") == {}


def test_parse_candidates_and_the_command():
    assert P.parse_candidates(POLICY) == {"dpkg": "1.21.23", "telnet-server": None, "telnet": "0.17+2.4-2+deb12u3"}
    assert P.candidates_command(["telnet", "dpkg", "net-snmp"]) == "LC_ALL=C apt-cache policy dpkg net-snmp telnet 2>/dev/null; true"


def test_unreliable_flags_passing_rules_without_a_candidate_only_when_apt_knows_dpkg():
    checks = {"r_telnet_server": ("telnet-server",), "r_telnet": ("telnet",), "r_snmp": ("net-snmp",),
              "r_other": ("telnet-server",)}
    candidates = P.parse_candidates(POLICY)
    assert P.unreliable(["r_telnet_server", "r_telnet", "r_snmp", "r_unknown"], checks, candidates) == {
        "r_telnet_server": ["telnet-server"], "r_snmp": ["net-snmp"]}
    assert P.unreliable(["r_telnet_server"], checks, {"telnet-server": None}) == {}  # no lists: no judgement
    assert P.unreliable(["r_telnet_server"], checks, {"dpkg": None}) == {}


def test_the_reason_is_escalated_and_the_detail_names_the_package():
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes
    assert outcomes.outcome_for(P.REASON) == "escalated"
    assert "no package named telnet-server is installed" in P.detail(["telnet-server"])


def test_report_html_names_check_unreliable_rules_in_the_warnings():
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import report_html
    report = {"rules": {"package_telnet-server_removed": {"outcome": "escalated", "reason": "check_unreliable"}}}
    assert report_html.warnings(report)[-1] == (
        "1 rule(s) pass only because a package name this host's sources do not have is not installed: the check "
        "proves nothing, a person checks by hand (check_unreliable): package_telnet-server_removed")


def test_the_skill_lists_known_content_defects_with_evidence_and_the_detail_names_them():
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import skills
    skill = skills.load_skill("anssi-debian12")
    known = skill.known_defect(PREFIX + "package_telnet-server_removed")
    assert known["rule"] == "package_telnet-server_removed" and "Candidate: (none)" in known["evidence"]
    assert skill.known_defect("package_telnet_removed") is None
    text = P.detail(["telnet-server"], known)
    assert text.startswith(P.detail(["telnet-server"]) + "; a known content defect: its OVAL check looks up a package named "
                           "telnet-server, a virtual name"), text
    assert len(text) <= 800


def test_a_known_defect_without_evidence_is_refused(tmp_path):
    import shutil

    from ansible_collections.scapforge.remediation.plugins.plugin_utils import skills
    src = Path(skills.SKILLS_ROOT) / "anssi-debian12"
    shutil.copytree(src, tmp_path / "anssi-debian12")
    path = tmp_path / "anssi-debian12" / "skill.yml"
    text = path.read_text()
    line = '    evidence: "apt-cache policy dhcp on Debian 12 (bookworm): Candidate: (none)"\n'
    assert line in text
    path.write_text(text.replace(line, ""))
    with pytest.raises(skills.SkillError, match="known_content_defects"):
        skills.load_skill("anssi-debian12", root=str(tmp_path))
