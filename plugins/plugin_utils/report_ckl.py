"""STIG checklists that DISA STIG Viewer opens: ``checklists/<host>.ckl`` (STIG Viewer 2.x's
XML) and ``checklists/<host>.cklb`` (STIG Viewer 3's JSON), issue 10 item 3 and issue 20 item 3.

One VULN per V- id of the profile (:mod:`stig_groups`: the rules mapped to one V- id merge
into one status; a rule with two SV- ids counts in both), never one per rule: STIG Viewer
keeps one status per V- id, and a failing and a passing rule of one group written as two
VULNs read NotAFinding. FINDING_DETAILS lists each mapped rule and its result (and what the
run did about it); a rule waived by ``scapforge_waivers`` keeps its group Open (it still
fails; DISA records accepted risk on an open finding) with the justification and expiry in
COMMENTS. STIG_INFO names the content (SSG version, the datastream's file and sha256), the
profile and the scanner (OpenSCAP version).

A checklist is an answer for the whole profile: one with no result for any of its rules, or
with fewer VULNs than the profile's selected rules have V- ids, raises
:class:`ChecklistError` and no file is written.

CKL layout (no published XSD; what STIG Viewer 2.17 writes and reads): ``CHECKLIST/ASSET``,
``STIGS/iSTIG/STIG_INFO`` (``SI_DATA`` pairs) and the VULNs: ``STIG_DATA`` pairs
(``VULN_ATTRIBUTE``/``ATTRIBUTE_DATA``) then STATUS, FINDING_DETAILS, COMMENTS,
SEVERITY_OVERRIDE, SEVERITY_JUSTIFICATION. CKLB: ``{title, id, stigs: [{..., rules: [...]}],
active, mode, has_path, target_data, cklb_version: "1.0"}`` with STIG Viewer 3's keys and
lower-case statuses (``not_a_finding``...).
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing as t
import uuid

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils import stig_groups as SG
from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError

try:
    from lxml import etree
except ImportError:
    deps.missing("lxml")

FOLDER = "checklists"
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
#: uuid5 namespace of the checklists' ids (the same content, profile and host give the same ids).
NAMESPACE = uuid.UUID("6f1b2d3e-5c1a-4f7e-9a57-2d9e0c4b8a11")


class ChecklistError(ScapforgeError):
    """The checklist would be empty or incomplete; the message says which and why."""

    kind = "checklist"


@dataclasses.dataclass
class Vuln:
    """One VULN: its group, status, FINDING_DETAILS and COMMENTS."""

    group: SG.StigGroup
    status: str
    details: str
    comments: str


@dataclasses.dataclass
class Checklist:
    """A host's checklist: ``vulns`` in V- order, ``info`` the STIG_INFO values, ``host``,
    ``comment`` (TARGET_COMMENT), ``stig_uuid``."""

    host: str
    vulns: list[Vuln]
    info: dict[str, str]
    comment: str
    stig_uuid: str

    def counts(self) -> dict[str, int]:
        """{status: number of VULNs}."""
        out: dict[str, int] = {}
        for vuln in self.vulns:
            out[vuln.status] = out.get(vuln.status, 0) + 1
        return out


def short_id(rule_id: str) -> str:
    """A rule's short id from a full or short one."""
    return rule_id.split("_rule_", 1)[1] if rule_id.startswith("xccdf_") and "_rule_" in rule_id else rule_id


def _details(group: SG.StigGroup, results: t.Mapping[str, str | None], outcomes: t.Mapping[str, t.Mapping],
             before: t.Mapping[str, str | None], scanner: str) -> tuple[str, str]:
    """(FINDING_DETAILS, COMMENTS) of one VULN: every mapped rule with its result."""
    cat = HR.CAT_BY_SEVERITY.get(group.severity, "no CAT")
    lines = ["%s (severity %s). %s result%s of the %d SCAP rule%s mapped to %s:" % (
        cat, group.severity, scanner or "OpenSCAP", "s" if len(group.rules) > 1 else "", len(group.rules),
        "s" if len(group.rules) > 1 else "", group.vuln)]
    comments = []
    for rule in group.rules:
        result = results.get(rule) or "notselected (no result)"
        line = "- %s: %s" % (rule, result)
        if before.get(rule) and before.get(rule) != results.get(rule):
            line += " (baseline: %s)" % before[rule]
        outcome = outcomes.get(rule)
        if outcome:
            line += "; scapforge %s/%s after %d attempt(s)" % (outcome.get("outcome"), outcome.get("reason"),
                                                               outcome.get("attempts") or 0)
            if outcome.get("detail"):
                line += ": %s" % " ".join(str(outcome["detail"]).split())[:300]
            if outcome.get("changed_tasks"):
                line += "; changed: %s" % "; ".join(outcome["changed_tasks"])
            waiver = outcome.get("waiver")
            if waiver:
                comments.append("%s waived (risk accepted) until %s: %s" % (rule, waiver.get("expires"),
                                                                            waiver.get("reason")))
        lines.append(line)
    return "\n".join(lines), "\n".join(comments)


def build(stig_map: SG.StigMap, results: t.Mapping[str, str | None], *, host: str = "",
          outcomes: t.Mapping[str, t.Mapping] | None = None, before: t.Mapping[str, str | None] | None = None,
          scanner: str = "", run_id: str = "") -> Checklist:
    """The checklist of one host: ``results`` {rule id (short or full): final oscap result},
    ``outcomes`` {short id: the run's RuleReport}, ``before`` {short id: baseline result},
    ``scanner`` ("OpenSCAP 1.3.7"). Raises ChecklistError when the map has no V- id, when no
    rule of the map has a result, or when a V- id of the profile would be missing."""
    results = {short_id(k): v for k, v in results.items()}
    outcomes, before = outcomes or {}, {short_id(k): v for k, v in (before or {}).items()}
    if not stig_map.groups:
        raise ChecklistError("profile %s has no rule with a DISA SV- id: there is no STIG to check against"
                             % (stig_map.profile or "?"))
    bad = sorted({v for v in results.values() if v is not None and v not in SG.RESULTS})
    if bad:
        raise ChecklistError("results must be named as oscap names them (%s), not %s"
                             % (", ".join(SG.RESULTS), ", ".join(map(str, bad))))
    mapped = {r for g in stig_map.groups.values() for r in g.rules}
    evaluated = [r for r in mapped if results.get(r) not in (None, "notselected")]
    if not evaluated:
        raise ChecklistError("zero results: none of the %d rule(s) with STIG ids of profile %s has a result "
                             "(%d result(s) given); an empty checklist would read as not reviewed, not as a scan"
                             % (len(mapped), stig_map.profile or "?", len(results)))
    vulns = []
    for group in stig_map.groups.values():
        details, comments = _details(group, results, outcomes, before, scanner)
        vulns.append(Vuln(group, SG.group_status(results.get(r) for r in group.rules), details, comments))
    missing = sorted(set(stig_map.expected) - {v.group.vuln for v in vulns})
    if missing:
        raise ChecklistError("incomplete: %d VULN(s) for the %d V- id(s) of the profile's rules; missing %s"
                             % (len(vulns), len(stig_map.expected), ", ".join(missing[:10])))
    unmapped = sorted(r for r in results if r not in mapped and r in stig_map.without_ids)
    name = stig_map.profile.split("_profile_", 1)[-1] if stig_map.profile else "?"
    stig_uuid = str(uuid.uuid5(NAMESPACE, "%s %s" % (stig_map.sha256, stig_map.profile)))
    content = "SCAP Security Guide %s" % (stig_map.benchmark_version or "?")
    info = {"version": stig_map.benchmark_version, "classification": "UNCLASSIFIED", "stigid": name,
            "title": stig_map.profile_title or name,
            "description": "Checklist of profile %s written by scapforge.remediation from the SCAP results" % (
                stig_map.profile or "?"),
            "filename": os.path.basename(stig_map.source.split(":", 1)[-1]) if stig_map.source else "",
            "releaseinfo": "%s; scanner %s" % (content, scanner or "unknown"),
            "uuid": stig_uuid, "source": "%s datastream sha256 %s; scanner %s" % (
                content, stig_map.sha256 or "?", scanner or "unknown")}
    comment = "scapforge%s; %d V- id(s) from %d rule(s) with DISA SV- ids%s" % (
        " run %s" % run_id if run_id else "", len(vulns), len(stig_map.rules_with_ids),
        "; %d evaluated rule(s) without an SV- id are not listed" % len(unmapped) if unmapped else "")
    return Checklist(host=host, vulns=vulns, info=info, comment=comment, stig_uuid=stig_uuid)


def _text(parent: t.Any, tag: str, text: t.Any = "") -> t.Any:
    node = etree.SubElement(parent, tag)
    node.text = "" if text is None else str(text)
    return node


def to_ckl(checklist: Checklist) -> bytes:
    """The CKL document (UTF-8 bytes, with STIG Viewer's header comment)."""
    root = etree.Element("CHECKLIST")
    asset = etree.SubElement(root, "ASSET")
    values = {"ROLE": "None", "ASSET_TYPE": "Computing", "MARKING": "CUI", "HOST_NAME": checklist.host,
              "WEB_OR_DATABASE": "false", "TARGET_COMMENT": checklist.comment}
    for key in ASSET_KEYS:
        _text(asset, key, values.get(key, ""))
    istig = etree.SubElement(etree.SubElement(root, "STIGS"), "iSTIG")
    info = etree.SubElement(istig, "STIG_INFO")
    for key in SI_KEYS:
        pair = etree.SubElement(info, "SI_DATA")
        _text(pair, "SID_NAME", key)
        if checklist.info.get(key):
            _text(pair, "SID_DATA", checklist.info[key])
    for vuln in checklist.vulns:
        group = vuln.group
        data = {"Vuln_Num": group.vuln, "Severity": group.severity, "Group_Title": group.group_title,
                "Rule_ID": group.rule_id, "Rule_Ver": group.stig_id, "Rule_Title": group.title,
                "Vuln_Discuss": group.discussion, "Weight": "10.0", "Class": "Unclass",
                "STIGRef": checklist.info.get("title", ""), "Documentable": "false", "Check_Content_Ref": "M",
                "STIG_UUID": checklist.stig_uuid}
        element = etree.SubElement(istig, "VULN")
        for key in VULN_KEYS:
            pair = etree.SubElement(element, "STIG_DATA")
            _text(pair, "VULN_ATTRIBUTE", key)
            _text(pair, "ATTRIBUTE_DATA", data.get(key, ""))
        for cci in group.ccis:
            pair = etree.SubElement(element, "STIG_DATA")
            _text(pair, "VULN_ATTRIBUTE", "CCI_REF")
            _text(pair, "ATTRIBUTE_DATA", cci)
        for key, text in zip(VULN_TAIL, (vuln.status, vuln.details, vuln.comments, "", "")):
            _text(element, key, text)
    return (b'<?xml version="1.0" encoding="UTF-8"?>\n<!--DISA STIG Viewer :: 2.17-->\n'
            + etree.tostring(root, pretty_print=True, encoding="UTF-8"))


def to_cklb(checklist: Checklist) -> dict:
    """The CKLB document (STIG Viewer 3's JSON checklist) as a dict."""
    info, rules = checklist.info, []
    for vuln in checklist.vulns:
        group = vuln.group
        rules.append({
            "group_id_src": group.vuln, "group_tree": [{"id": group.vuln, "title": group.group_title,
                                                        "description": "<GroupDescription></GroupDescription>"}],
            "group_id": group.vuln, "severity": group.severity, "group_title": group.group_title,
            "rule_id_src": group.rule_id, "rule_id": group.rule_id.removesuffix("_rule"),
            "rule_version": group.stig_id, "rule_title": group.title, "fix_text": "", "weight": "10.0",
            "check_content": "", "check_content_ref": {"href": info.get("filename") or "scap", "name": "M"},
            "classification": "Unclassified", "discussion": group.discussion, "false_positives": "",
            "false_negatives": "", "documentable": "false", "security_override_guidance": "",
            "potential_impacts": "", "third_party_tools": "", "ia_controls": "", "responsibility": "",
            "mitigations": "", "mitigation_control": "", "legacy_ids": [], "ccis": list(group.ccis),
            "reference_identifier": "", "uuid": str(uuid.uuid5(NAMESPACE, "%s %s %s" % (
                checklist.stig_uuid, checklist.host, group.vuln))),
            "stig_uuid": checklist.stig_uuid, "status": SG.CKLB_STATUS[vuln.status], "overrides": {},
            "comments": vuln.comments, "finding_details": vuln.details,
        })
    return {
        "title": "%s %s" % (checklist.host or "host", info.get("stigid", "")),
        "id": str(uuid.uuid5(NAMESPACE, "%s %s" % (checklist.stig_uuid, checklist.host))),
        "stigs": [{"stig_name": info.get("title", ""), "display_name": info.get("title", ""),
                   "stig_id": info.get("stigid", ""), "release_info": info.get("releaseinfo", ""),
                   "version": info.get("version", ""), "uuid": checklist.stig_uuid, "reference_identifier": "",
                   "size": len(rules), "rules": rules}],
        "active": False, "mode": 1, "has_path": True,
        "target_data": {"target_type": "Computing", "host_name": checklist.host, "ip_address": "",
                        "mac_address": "", "fqdn": "", "comments": checklist.comment, "role": "None",
                        "is_web_database": False, "technology_area": "", "web_db_site": "", "web_db_instance": "",
                        "classification": None},
        "cklb_version": "1.0",
    }


def _atomic(path: str, data: bytes) -> None:
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def write_file(checklist: Checklist, path: str) -> str:
    """Write the checklist to ``path``: CKLB when the name ends in ``.cklb``, else CKL. Raises OSError."""
    if path.endswith(".cklb"):
        data = json.dumps(to_cklb(checklist), indent=1, ensure_ascii=False).encode("utf-8")
    else:
        data = to_ckl(checklist)
    _atomic(path, data)
    return path


def has_stig_ids(report: HR.HostReport) -> bool:
    """True when a rule of the host's scans carries a DISA SV- rule id."""
    return any(HR.vuln_id(row.get("identifiers")) for row in (report.get("scan_results") or {}).values())


def for_host(report: HR.HostReport, catalog: t.Any) -> Checklist | None:
    """The checklist of a host report over its content's catalog (None when the profile has no
    STIG ids: SSG's Debian 12 profiles). Raises ChecklistError (zero results, incomplete, the
    profile not in the datastream)."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import CatalogError
    try:
        stig_map = SG.from_catalog(catalog, report.get("profile"))
    except CatalogError as exc:
        raise ChecklistError("cannot list the profile's STIG ids: %s" % exc) from None
    if not stig_map.groups:
        return None
    rows = report.get("scan_results") or {}
    content = report.get("content") or {}
    scanner = "OpenSCAP %s" % content["oscap_version"] if content.get("oscap_version") else "OpenSCAP"
    return build(stig_map, {s: HR.final_result(r) for s, r in rows.items()}, host=report.get("host") or "",
                 outcomes=report.get("rules") or {}, before={s: r.get("before") for s, r in rows.items()},
                 scanner=scanner, run_id=report.get("run_id") or "")


def write(run_dir: str, hosts: t.Mapping[str, HR.HostReport],
          catalog_of: t.Callable[[str], t.Any]) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Write ``<run_dir>/checklists/<host>.ckl`` and ``.cklb`` for every host whose profile
    carries STIG ids. ``catalog_of(sha256)``: the catalog of a host's content, or None.
    Returns ({host: {"ckl": path, "cklb": path}}, {host: why no checklist was written}) (a host
    whose content has no STIG ids is in neither). Raises OSError."""
    written, refused = {}, {}
    for host, report in sorted(hosts.items()):
        if report.get("error"):
            continue
        sha = (report.get("content") or {}).get("sha256") or ""
        catalog = catalog_of(sha) if sha else None
        if catalog is None:
            if has_stig_ids(report):
                refused[host] = ("the datastream (sha256 %s) is not on the controller to list the profile's STIG "
                                 "ids: run tools/checklist.py with it" % (sha or "?"))
            continue
        try:
            checklist = for_host(report, catalog)
        except ChecklistError as exc:
            refused[host] = str(exc)
            continue
        if checklist is None:
            continue
        folder = os.path.join(run_dir, FOLDER)
        os.makedirs(folder, exist_ok=True)
        written[host] = {kind: write_file(checklist, os.path.join(folder, "%s.%s" % (host, kind)))
                         for kind in ("ckl", "cklb")}
    return written, refused
