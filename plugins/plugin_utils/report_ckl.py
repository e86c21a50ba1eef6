"""STIG checklists (``checklists/<host>.ckl``) that DISA STIG Viewer opens (issue 10 item 3).

The CKL format is STIG Viewer 2.x's XML checklist (no published XSD; the structure is what
STIG Viewer 2.17 writes and reads): ``CHECKLIST/ASSET`` (the host), ``STIGS/iSTIG/STIG_INFO``
(``SI_DATA`` pairs naming the benchmark) and one ``VULN`` per STIG rule: ``STIG_DATA`` pairs
(``VULN_ATTRIBUTE``/``ATTRIBUTE_DATA``: Vuln_Num, Severity, Group_Title, Rule_ID, Rule_Ver,
Rule_Title, ..., CCI_REF), then STATUS, FINDING_DETAILS, COMMENTS, SEVERITY_OVERRIDE and
SEVERITY_JUSTIFICATION, in that order.

Ids come from the datastream only: Rule_ID is DISA's SV- rule version id, Rule_Ver the STIG
ID (RHEL-09-211010), Vuln_Num the V- id with the SV- id's number (DISA numbers both alike;
the SCAP content carries no V- id of its own). A rule without an SV- id cannot be a VULN
(STIG Viewer keys findings by Vuln_Num): it is left out and counted in the checklist's
``TARGET_COMMENT`` and in :func:`build`'s second return value. Content without any SV- id
(SSG's Debian 12 profiles) gets no checklist.

Status (STIG Viewer's four values) from the rule's last OpenSCAP result: pass ->
NotAFinding, fail -> Open, notapplicable -> Not_Applicable, anything else (error, unknown,
notchecked, no result) -> Not_Reviewed. A rule waived by ``scapforge_waivers`` stays Open
(it still fails; DISA records accepted risk on an open finding) with the justification and
expiry in COMMENTS. CAT I/II/III follow the severity high/medium/low.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR

try:
    from lxml import etree
except ImportError:
    deps.missing("lxml")

STATUS_BY_RESULT = {"pass": "NotAFinding", "fail": "Open", "notapplicable": "Not_Applicable"}
NOT_REVIEWED = "Not_Reviewed"
#: STIG Viewer 2.x's STIG_INFO keys, in its order.
SI_KEYS = ("version", "classification", "customname", "stigid", "description", "filename", "releaseinfo",
           "title", "uuid", "notice", "source")
#: the STIG_DATA attributes of a VULN, in STIG Viewer 2.x's order (CCI_REF repeats, last).
VULN_KEYS = ("Vuln_Num", "Severity", "Group_Title", "Rule_ID", "Rule_Ver", "Rule_Title", "Vuln_Discuss",
             "IA_Controls", "Check_Content", "Fix_Text", "False_Positives", "False_Negatives", "Documentable",
             "Mitigations", "Potential_Impact", "Third_Party_Tools", "Mitigation_Control", "Responsibility",
             "Security_Override_Guidance", "Check_Content_Ref", "Weight", "Class", "STIGRef", "TargetKey",
             "STIG_UUID", "LEGACY_ID")
#: what follows the STIG_DATA of a VULN, in order.
VULN_TAIL = ("STATUS", "FINDING_DETAILS", "COMMENTS", "SEVERITY_OVERRIDE", "SEVERITY_JUSTIFICATION")
ASSET_KEYS = ("ROLE", "ASSET_TYPE", "MARKING", "HOST_NAME", "HOST_IP", "HOST_MAC", "HOST_FQDN", "TARGET_COMMENT",
              "TECH_AREA", "TARGET_KEY", "WEB_OR_DATABASE", "WEB_DB_SITE", "WEB_DB_INSTANCE")


def status_of(result: str | None) -> str:
    """STIG Viewer's status for an OpenSCAP result."""
    return STATUS_BY_RESULT.get(result or "", NOT_REVIEWED)


def has_stig_ids(report: HR.HostReport) -> bool:
    """True when a rule of the host's scans carries a DISA SV- rule id."""
    return any(HR.vuln_id(row.get("identifiers")) for row in (report.get("scan_results") or {}).values())


def _text(parent: etree._Element, tag: str, text: t.Any = "") -> etree._Element:
    node = etree.SubElement(parent, tag)
    node.text = "" if text is None else str(text)
    return node


def _finding(short: str, row: t.Mapping[str, t.Any], rule: t.Mapping[str, t.Any] | None) -> tuple[str, str]:
    """(FINDING_DETAILS, COMMENTS) of one rule."""
    result = HR.final_result(row)
    cat = HR.CAT_BY_SEVERITY.get(row.get("severity") or "", "no CAT")
    details = ["%s (severity %s). OpenSCAP result: %s (baseline: %s) for XCCDF rule %s."
               % (cat, row.get("severity"), result, row.get("before"), short)]
    comments = []
    if rule:
        details.append("scapforge outcome: %s/%s after %d attempt(s)." % (rule.get("outcome"), rule.get("reason"),
                                                                          rule.get("attempts") or 0))
        if rule.get("detail"):
            details.append(str(rule["detail"]))
        if rule.get("changed_tasks"):
            details.append("Changed: %s." % "; ".join(rule["changed_tasks"]))
        waiver = rule.get("waiver")
        if waiver:
            comments.append("Waived (risk accepted) until %s: %s" % (waiver.get("expires"), waiver.get("reason")))
    return "\n".join(details), "\n".join(comments)


def build(report: HR.HostReport, stig: t.Mapping[str, str] | None = None) -> tuple[etree._ElementTree, list[str]]:
    """The checklist of one host and the short ids of the rules left out (no SV- id).

    ``stig``: STIG_INFO values (title, version, releaseinfo, stigid...), defaults from the
    report's profile and content version.
    """
    root = etree.Element("CHECKLIST")
    asset = etree.SubElement(root, "ASSET")
    rows = report.get("scan_results") or {}
    rules = report.get("rules") or {}
    left_out = sorted(s for s, row in rows.items() if not HR.vuln_id(row.get("identifiers")))
    host = report.get("host") or ""
    values = {"ROLE": "None", "ASSET_TYPE": "Computing", "MARKING": "CUI", "HOST_NAME": host,
              "WEB_OR_DATABASE": "false",
              "TARGET_COMMENT": ("scapforge run %s; %d evaluated rule(s) without a DISA SV- id are not listed"
                                 % (report.get("run_id"), len(left_out)))}
    for key in ASSET_KEYS:
        _text(asset, key, values.get(key, ""))
    istig = etree.SubElement(etree.SubElement(root, "STIGS"), "iSTIG")
    info = etree.SubElement(istig, "STIG_INFO")
    content = report.get("content") or {}
    given = {"title": report.get("profile") or "", "version": content.get("benchmark_version") or "",
             "stigid": report.get("profile") or "", "classification": "UNCLASSIFIED",
             "source": "scapforge.remediation from the SCAP datastream (sha256 %s)" % content.get("sha256", "?"),
             "releaseinfo": "benchmark %s" % content.get("benchmark_version", "?")}
    given.update(stig or {})
    for key in SI_KEYS:
        pair = etree.SubElement(info, "SI_DATA")
        _text(pair, "SID_NAME", key)
        if given.get(key):
            _text(pair, "SID_DATA", given[key])
    for short in sorted(rows, key=lambda s: (HR.vuln_id(rows[s].get("identifiers")) or "", s)):
        row = rows[short]
        ids = row.get("identifiers") or {}
        vuln = HR.vuln_id(ids)
        if not vuln:
            continue
        data = {"Vuln_Num": vuln, "Severity": row.get("severity", "unknown"), "Group_Title": short,
                "Rule_ID": HR.first(ids, "stig_rule"), "Rule_Ver": HR.first(ids, "stig_id") or "",
                "Rule_Title": row.get("title", ""), "Weight": "10.0", "Class": "Unclass",
                "STIGRef": given["title"], "LEGACY_ID": "", "Documentable": "false",
                "Check_Content_Ref": "M", "IA_Controls": ""}
        element = etree.SubElement(istig, "VULN")
        for key in VULN_KEYS:
            pair = etree.SubElement(element, "STIG_DATA")
            _text(pair, "VULN_ATTRIBUTE", key)
            _text(pair, "ATTRIBUTE_DATA", data.get(key, ""))
        for cci in ids.get("cci") or ():
            pair = etree.SubElement(element, "STIG_DATA")
            _text(pair, "VULN_ATTRIBUTE", "CCI_REF")
            _text(pair, "ATTRIBUTE_DATA", cci)
        details, comments = _finding(short, row, rules.get(short))
        for key, text in zip(VULN_TAIL, (status_of(HR.final_result(row)), details, comments, "", "")):
            _text(element, key, text)
    return etree.ElementTree(root), left_out


def write(run_dir: str, hosts: t.Mapping[str, HR.HostReport]) -> dict[str, str]:
    """Write ``<run_dir>/checklists/<host>.ckl`` for every host whose scans carry STIG ids;
    returns {host: path}. Raises OSError."""
    written = {}
    for host, report in sorted(hosts.items()):
        if not has_stig_ids(report):
            continue
        tree, _left_out = build(report)
        folder = os.path.join(run_dir, "checklists")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "%s.ckl" % host)
        tmp = "%s.tmp.%d" % (path, os.getpid())
        with open(tmp, "wb") as handle:
            handle.write(b'<?xml version="1.0" encoding="UTF-8"?>\n<!--DISA STIG Viewer :: 2.17-->\n')
            handle.write(etree.tostring(tree.getroot(), pretty_print=True, encoding="UTF-8"))
        os.replace(tmp, path)
        written[host] = path
    return written
