"""``junit.xml``: one JUnit test case per rule per host, for CI dashboards (issue 10 item 3).

Written with junitparser (the JUnit XML format as Jenkins, GitLab and Azure DevOps read it:
https://github.com/testmoapp/junitxml). One ``testsuite`` per host (its name the host), one
``testcase`` per rule the scans evaluated, ``classname`` the host and ``name`` the rule's short
id. A rule's case:

- passes when its outcome is ``remediated`` or, without an outcome, OpenSCAP's final result is
  ``pass``;
- fails (``failure``, message the reason code, text the detail) when its outcome is
  ``escalated`` or ``deferred``, or without an outcome its final result is ``fail``;
- is ``skipped`` when its outcome is ``skipped`` (message ``waived: <justification> (until
  <expires>)`` for a waiver, else the reason code and detail) or its final result is
  notapplicable, notchecked, informational, unknown or error (message the result).

A host whose run could not start gets one ``error`` case named ``run`` with its reason.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR

try:
    from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite
except ImportError:
    deps.missing("junitparser")

FILE_NAME = "junit.xml"


def _skipped_message(rule: dict) -> str:
    waiver = rule.get("waiver")
    if rule.get("reason") == "waived" and waiver:
        return "waived: %s (until %s)" % (waiver.get("reason"), waiver.get("expires"))
    return "%s: %s" % (rule.get("reason"), rule["detail"]) if rule.get("detail") else str(rule.get("reason"))


def case_for(host: str, short: str, row: t.Mapping[str, t.Any] | None, rule: t.Mapping[str, t.Any] | None) -> TestCase:
    """The test case of one rule: ``row`` its ScanResult (may be None), ``rule`` its
    RuleReport when it failed at baseline (None otherwise)."""
    case = TestCase(short, classname=host)
    title = (rule or row or {}).get("title")
    if title:
        case.system_out = str(title)
    if rule:
        outcome = rule.get("outcome")
        if outcome == "remediated":
            return case
        if outcome == "skipped":
            case.result = [Skipped(message=_skipped_message(dict(rule)))]
            return case
        failure = Failure(message=str(rule.get("reason")), type_=str(outcome))
        failure.text = "%s/%s after %d attempt(s): %s" % (outcome, rule.get("reason"), rule.get("attempts") or 0,
                                                          rule.get("detail") or "")
        case.result = [failure]
        return case
    result = HR.final_result(row or {})
    if result == "pass":
        return case
    if result == "fail":
        case.result = [Failure(message="fail", type_="fail")]
    else:
        case.result = [Skipped(message=str(result))]
    return case


def build(hosts: t.Mapping[str, HR.HostReport]) -> JUnitXml:
    """The JUnitXml of a run: {host: HostReport} -> one suite per host, sorted by host."""
    xml = JUnitXml(name="scapforge")
    for host in sorted(hosts):
        report = hosts[host]
        suite = TestSuite(host)
        rows = report.get("scan_results") or {}
        rules = report.get("rules") or {}
        if report.get("error") and not rows:
            case = TestCase("run", classname=host)
            error = report["error"] or {}
            case.result = [Error(message=str(error.get("reason")), type_="run_error")]
            case.result[0].text = str(error.get("msg") or "")
            suite.add_testcase(case)
        for short in sorted(set(rows) | set(rules)):
            suite.add_testcase(case_for(host, short, rows.get(short), rules.get(short)))
        suite.update_statistics()
        xml.add_testsuite(suite)
    xml.update_statistics()
    return xml


def write(run_dir: str, hosts: t.Mapping[str, HR.HostReport]) -> str:
    """Write ``<run_dir>/junit.xml`` (atomically); returns its path. Raises OSError."""
    path = os.path.join(run_dir, FILE_NAME)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    build(hosts).write(tmp, pretty=True)
    os.replace(tmp, path)
    return path
