"""Scope warnings (issue 17 item 7), on a real lab host.

The host runs chrony with its own time server in a drop-in file the content's check does not
read (/etc/chrony/sources.d/local.sources: ``server 10.87.3.1 iburst``, the lab controller's
address; Debian's ``pool`` line removed from chrony.conf). chronyd_specify_remote_server's
OVAL check reads /etc/chrony/chrony.conf and /etc/chrony/chrony.d/*.conf only, so it fails;
the content's fix adds ``server`` lines of var_multiple_time_servers (public pool servers) to
chrony.conf and the rule passes. The rule keeps its result and its outcome carries a warning
naming the servers added and the host's own drop-in; report.html shows it in its Warnings
block, above the per-rule tables.

package_telnet-server_removed's OVAL check looks up a package named ``telnet-server``, which
Debian does not have (a virtual name: apt has no candidate; the server is ``telnetd``), so the
rule passes on every Debian host, telnetd installed or not: it ends escalated/check_unreliable.
package_telnet_removed looks up ``telnet``, which Debian has: its pass stands (no outcome).
"""

from __future__ import annotations

import json
import re

import lxml.html
import pytest

RULE = "chronyd_specify_remote_server"
UNRELIABLE, RELIABLE = "package_telnet-server_removed", "package_telnet_removed"
OWN = "/etc/chrony/sources.d/local.sources"
PREPARE = ("sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chrony >/dev/null"
           " && sudo sed -i '/^[[:space:]]*\\(pool\\|server\\)[[:space:]]/d' /etc/chrony/chrony.conf"
           " && echo 'server 10.87.3.1 iburst' | sudo tee %s >/dev/null" % OWN)


@pytest.fixture(scope="module")
def run(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    host = lab.reset([lab_host.name])[0]
    host.ssh(PREPARE, timeout=300)
    runs = tmp_path_factory.mktemp("runs")
    proc = remediate(lab_inventory, host.name, runs, {"scapforge_rules": [RULE, UNRELIABLE, RELIABLE]})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    report = json.loads((runs / "latest" / "hosts" / ("%s.json" % host.name)).read_text())
    added = re.findall(r"^server (\S+)$", host.ssh("cat /etc/chrony/chrony.conf").stdout, re.M)
    return {"host": host, "report": report, "html": (runs / "latest" / "report.html").read_text(),
            "added": added, "own": host.ssh("cat %s" % OWN).stdout, "proc": proc}


def test_the_fix_keeps_its_result_and_warns_of_the_servers_it_added(run):
    rule = run["report"]["rules"][RULE]
    assert (rule["outcome"], rule["reason"]) == ("remediated", "verified")
    assert run["added"], "the fix added no server line to chrony.conf"
    assert run["own"] == "server 10.87.3.1 iburst\n"  # the host's own drop-in is left as it was
    assert len(rule["warnings"]) == 1, rule["warnings"]
    warning = rule["warnings"][0]
    assert warning.startswith("the fix added time servers %s" % ", ".join(run["added"][:6])), warning
    assert "to /etc/chrony/chrony.conf" in warning
    assert "the host already names its own time servers in %s (10.87.3.1)" % OWN in warning


def test_report_html_shows_the_warning_above_the_rule_tables(run):
    html = run["html"]
    page = lxml.html.fromstring(html)
    items = page.xpath("//section[@id='warnings']//li[@data-rule='%s']" % RULE)
    assert len(items) == 1
    assert run["report"]["rules"][RULE]["warnings"][0] in items[0].text_content()
    assert html.index('id="warnings"') < html.index('data-rule="%s" data-outcome="remediated"' % RULE)
    assert "(1 warning: the fix added time servers" in run["proc"].stdout


def test_a_removed_check_on_a_name_debian_does_not_have_is_check_unreliable(run):
    rules = run["report"]["rules"]
    rule = rules[UNRELIABLE]
    assert (rule["outcome"], rule["reason"], rule["attempts"]) == ("escalated", "check_unreliable", 0)
    assert "no package named telnet-server is installed" in rule["detail"]
    assert "a known content defect: its OVAL check looks up a package named telnet-server" in rule["detail"]  # the skill's
    assert RELIABLE not in rules  # telnet has a candidate: its pass proves what it says
    assert run["report"]["outcomes"] == {"escalated/check_unreliable": 1, "remediated/verified": 1}
    page = lxml.html.fromstring(run["html"])
    said = [li.text_content() for li in page.xpath("//section[@id='warnings']//li[@data-host]")]
    assert any("(check_unreliable): %s" % UNRELIABLE in w for w in said), said
    assert page.xpath("//tr[@data-rule='%s'][@data-reason='check_unreliable']" % UNRELIABLE)
