"""scope.py (issue 17 item 7): endpoints a fix added where the host had its own, a main file
written while a drop-in configures the same service."""

from ansible_collections.scapforge.remediation.plugins.plugin_utils import scope

CHRONY_DIFF = (
    "--- before: /etc/chrony/chrony.conf (content)\n+++ after: /etc/chrony/chrony.conf (content)\n@@ -1,3 +1,4 @@\n"
    " # Welcome to the chrony configuration file.\n sourcedir /etc/chrony/sources.d\n"
    "+server 0.debian.pool.ntp.org\n+# a comment the fix wrote\n"
)
CHANGES = [{"kind": "file", "target": "/etc/chrony/chrony.conf", "change": "changed", "diff": CHRONY_DIFF},
           {"kind": "package", "target": "chrony", "change": "installed"}]


def test_written_keeps_the_added_setting_lines_of_service_files_only():
    assert scope.written(CHANGES + [{"kind": "file", "target": "/etc/issue", "change": "changed"}]) == {
        "/etc/chrony/chrony.conf": {"added": ["server 0.debian.pool.ntp.org"], "removed": []}}


def test_endpoints_found_per_kind():
    by_name = {s.name: s for s in scope.SERVICES}
    assert by_name["chrony"].find("  pool 2.debian.pool.org iburst") == ["2.debian.pool.org"]
    assert by_name["systemd-timesyncd"].find("NTP=a.example b.example") == ["a.example", "b.example"]
    assert by_name["rsyslog"].find("*.* @@(o)logs.example:514") == ["logs.example"]
    assert by_name["rsyslog"].find('*.* action(type="omfwd" target="10.0.0.9" port="514")') == ["10.0.0.9"]
    assert by_name["rsyslog"].find("# *.* @@remote-host:514") == []
    assert by_name["apt"].find("deb [signed-by=/k.gpg] http://deb.debian.org/debian bookworm main") == [
        "http://deb.debian.org/debian"]
    assert by_name["apt"].find("URIs: http://a.example/debian http://b.example/debian") == [
        "http://a.example/debian", "http://b.example/debian"]
    assert by_name["resolver"].find("nameserver 10.0.0.53") == ["10.0.0.53"]
    assert by_name["systemd-resolved"].find("DNS=1.1.1.1") == ["1.1.1.1"]


def test_service_of_counts_a_dropin_only_with_its_suffix():
    chrony = scope.SERVICES[0]
    assert scope.service_of("/etc/chrony/sources.d/local.sources") == (chrony, True)
    assert scope.service_of("/etc/chrony/sources.d/README") == (None, False)
    assert scope.service_of("/etc/chrony/chrony.conf") == (chrony, False)


def test_read_command_reads_the_written_services_files_and_dirs():
    assert scope.read_command(["/etc/issue"]) is None
    cmd = scope.read_command(["/etc/chrony/chrony.conf"])
    assert cmd.startswith("grep -RHsE ") and cmd.endswith("; true")
    for path in ("/etc/chrony/chrony.conf", "/etc/chrony/sources.d", "/etc/chrony/conf.d"):
        assert " %s" % path in cmd
    assert "rsyslog" not in cmd


def test_added_time_server_where_the_host_has_its_own_in_a_dropin():
    host = scope.parse_read("/etc/chrony/chrony.conf:sourcedir /etc/chrony/sources.d\n"
                            "/etc/chrony/chrony.conf:server 0.debian.pool.ntp.org\n"
                            "/etc/chrony/sources.d/local.sources:server 10.87.3.1 iburst\n")
    assert scope.warnings_for(scope.written(CHANGES), host) == [
        "the fix added time servers 0.debian.pool.ntp.org to /etc/chrony/chrony.conf, but the host already names "
        "its own time servers in /etc/chrony/sources.d/local.sources (10.87.3.1): check which the host should use"]


def test_the_lines_a_fix_removed_were_the_hosts_own():
    wrote = {"/etc/chrony/chrony.conf": {"added": ["server ntp.example"], "removed": ["pool 2.debian.pool.org iburst"]}}
    host = {"/etc/chrony/chrony.conf": ["server ntp.example"]}
    assert scope.warnings_for(wrote, host) == [
        "the fix added time servers ntp.example to /etc/chrony/chrony.conf, but the host already names its own "
        "time servers in /etc/chrony/chrony.conf (2.debian.pool.org): check which the host should use"]


def test_no_warning_without_own_endpoints_or_when_the_added_one_is_the_hosts():
    wrote = scope.written(CHANGES)
    assert scope.warnings_for(wrote, {"/etc/chrony/chrony.conf": ["server 0.debian.pool.ntp.org"]}) == []
    host = {"/etc/chrony/chrony.conf": ["server 0.debian.pool.ntp.org"],
            "/etc/chrony/sources.d/a.sources": ["server 0.debian.pool.ntp.org"]}
    assert scope.warnings_for(wrote, host) == [
        "the fix wrote /etc/chrony/chrony.conf, but the host configures chrony in /etc/chrony/sources.d/a.sources "
        "as well: a setting there may add to or override the fix's"]


def test_main_file_written_while_a_dropin_configures_the_service():
    wrote = {"/etc/systemd/timesyncd.conf": {"added": ["RootDistanceMaxSec=1"], "removed": []}}
    host = {"/etc/systemd/timesyncd.conf": ["[Time]", "RootDistanceMaxSec=1"],
            "/etc/systemd/timesyncd.conf.d/site.conf": ["[Time]", "RootDistanceMaxSec=5"]}
    assert scope.warnings_for(wrote, host) == [
        "the fix wrote /etc/systemd/timesyncd.conf, but the host configures systemd-timesyncd in "
        "/etc/systemd/timesyncd.conf.d/site.conf as well: a setting there may add to or override the fix's"]
    assert scope.warnings_for(wrote, {"/etc/systemd/timesyncd.conf": ["[Time]"]}) == []


class _Session:
    """A host whose configuration answers the one read; records the commands."""

    def __init__(self, stdout):
        self.stdout, self.commands = stdout, []

    def run_command(self, command, sudoable=True, in_data=None):
        self.commands.append(command)
        return {"rc": 0, "stdout": self.stdout, "stderr": ""}


class _Events:
    def __init__(self):
        self.emitted = []

    def emit(self, event, rule=None, attempt=None, **data):
        self.emitted.append((event, rule, attempt, data))


def _runner(session, events):
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.attempt_runner import AttemptRunner
    return AttemptRunner(session, {}, None, None, None, events, None, health_check=False, stop_host=lambda d: None)


def test_the_runner_reads_the_host_once_and_warns_through_the_passed_attempt():
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
    item = A.WorkItem("xccdf_org.ssgproject.content_rule_chronyd_specify_remote_server")
    attempt = item.new_attempt(A.VENDOR)
    attempt.report = {"ok": True, "changed": True, "changes": CHANGES}
    session, events = _Session("/etc/chrony/chrony.conf:server 0.debian.pool.ntp.org\n"
                               "/etc/chrony/sources.d/local.sources:server 10.87.3.1 iburst\n"), _Events()
    runner = _runner(session, events)
    runner.judge(item, attempt, "pass", None, reboot=False)
    assert attempt.verdict == A.PASSED and len(session.commands) == 1
    assert session.commands[0] == scope.read_command(["/etc/chrony/chrony.conf"])
    assert attempt.warnings == [
        "the fix added time servers 0.debian.pool.ntp.org to /etc/chrony/chrony.conf, but the host already names "
        "its own time servers in /etc/chrony/sources.d/local.sources (10.87.3.1): check which the host should use"]
    assert events.emitted == [("scope_warning", "chronyd_specify_remote_server", 1, {"warnings": attempt.warnings})]
    failing = item.new_attempt(A.VENDOR)
    failing.report = {"ok": True, "changed": True, "changes": CHANGES}
    runner.judge(item, failing, "fail", None, reboot=False)
    assert failing.warnings == [] and len(session.commands) == 1  # a failed fix is not read for
    other = item.new_attempt(A.VENDOR)
    other.report = {"ok": True, "changed": True, "changes": [{"kind": "file", "target": "/etc/issue", "change": "c"}]}
    runner.judge(item, other, "pass", None, reboot=False)
    assert other.warnings == [] and len(session.commands) == 1  # no service file written: no read


def test_report_html_lists_every_rule_warning_in_the_warnings_block_before_the_rule_tables():
    import sys
    from pathlib import Path

    import lxml.html

    from ansible_collections.scapforge.remediation.plugins.plugin_utils import report_html

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/unit: report_samples
    import report_samples  # pylint: disable=import-outside-toplevel

    report = report_samples.debian_full_run()
    rule = next(r for r, row in sorted(report["rules"].items()) if row["outcome"] == "remediated")
    report["rules"][rule]["warnings"] = ["the fix added time servers a.example to /etc/chrony/chrony.conf"]
    html = report_html.render({"lab1": report}, "run1", "2026-12-02T06:00:00Z")
    page = lxml.html.fromstring(html)
    items = page.xpath("//section[@id='warnings']//li[@data-rule]")
    assert [(li.get("data-host"), li.get("data-rule")) for li in items] == [("lab1", rule)]
    assert items[0].text_content() == "%s (remediated/%s): the fix added time servers a.example to /etc/chrony/chrony.conf" % (
        rule, report["rules"][rule]["reason"])
    assert page.xpath("//section[@id='warnings']//p[@data-rule-warnings]")[0].get("data-rule-warnings") == "1"
    assert html.index('id="warnings"') < html.index('id="ledger"')
    assert "None." not in page.xpath("//section[@id='warnings']")[0].text_content()
    assert report_html.rule_warnings({"rules": {"a": {"outcome": "remediated", "reason": "verified"}}}) == []
