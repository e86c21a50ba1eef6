"""The DISA STIG groups of a profile: which SCAP rules answer for each V- id, and the one
status a group gets from their results (issue 20 item 3).

STIG Viewer keys a finding by its V- id (``Vuln_Num``, CKLB ``group_id``) and keeps one
status per id. SSG maps several rules to one V- id (ssg-rhel9-ds.xml 0.1.76's stig
profile: 490 rules with SV- ids, 448 distinct V- ids, 18 V- ids with several rules) and
some rules to two (ten rules carry two SV- ids): a checklist written one VULN per rule
shows the last rule's status. Here every V- id is one :class:`StigGroup` listing all its
rules (a rule with two SV- ids is in both groups), and :func:`group_status` merges their
results:

- ``Open`` if any mapped rule failed;
- else ``Not_Reviewed`` if any has no verdict (notchecked, notselected or no result at all,
  error, unknown, informational);
- else ``Not_Applicable`` if all are notapplicable;
- else ``NotAFinding``: every mapped rule passed (``fixed`` counts as pass), those that do
  not apply to the host aside.

The V- id is the number of DISA's SV- rule version id (DISA numbers both alike; the content
carries no V- id of its own). A group's STIG ID (``Rule_Ver``) is the one its rules share;
a rule with two SV- ids and two STIG ids pairs them in order (DISA numbers both in the same
order), and what stays ambiguous is listed, space-separated.
"""

from __future__ import annotations

import dataclasses
import typing as t

#: STIG Viewer 2.x's four statuses (CKL STATUS); CKLB spells them in lower snake case.
OPEN, NOT_A_FINDING, NOT_APPLICABLE, NOT_REVIEWED = "Open", "NotAFinding", "Not_Applicable", "Not_Reviewed"
CKLB_STATUS = {OPEN: "open", NOT_A_FINDING: "not_a_finding", NOT_APPLICABLE: "not_applicable",
               NOT_REVIEWED: "not_reviewed"}
#: the XCCDF 1.2 rule results (oscap's names).
RESULTS = ("pass", "fail", "error", "unknown", "notapplicable", "notchecked", "notselected", "informational",
           "fixed")
SEVERITY_ORDER = {"high": 3, "medium": 2, "low": 1}


def vuln_of(sv_id: str) -> str | None:
    """``SV-257777r1044860_rule`` -> ``V-257777``; None for anything else."""
    if not sv_id or not sv_id.startswith("SV-"):
        return None
    number = sv_id[3:].split("r", 1)[0]
    return "V-" + number if number.isdigit() else None


@dataclasses.dataclass(frozen=True)
class StigGroup:
    """One V- id: ``rule_id`` its SV- id, ``stig_id`` its STIG ID (``RHEL-09-211010``, "" when
    the content names none), ``severity`` the highest of its rules', ``title`` and
    ``discussion`` of its first rule, ``group_title`` the SRG id (DISA's group title),
    ``ccis``, and ``rules``: the short ids of the rules mapped to it, in the profile's order."""

    vuln: str
    rule_id: str
    stig_id: str
    severity: str
    title: str
    discussion: str
    group_title: str
    ccis: tuple[str, ...]
    rules: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class StigMap:
    """The V- groups of one profile over one datastream: ``groups`` {V- id: StigGroup} in V-
    order; ``rules_with_ids`` the profile's selected rules that carry an SV- id; ``without_ids``
    the selected rules that carry none (not in any checklist); ``expected`` every V- id the
    rules' SV- ids name (a checklist with fewer is incomplete); ``profile`` (full id),
    ``profile_title``, ``benchmark_version``, ``sha256`` and ``source`` (the datastream's
    file) name the content."""

    groups: dict[str, StigGroup]
    rules_with_ids: tuple[str, ...]
    without_ids: tuple[str, ...]
    profile: str
    profile_title: str
    benchmark_version: str
    sha256: str
    source: str
    expected: frozenset = frozenset()

    def vulns_of(self, short_id: str) -> list[str]:
        """The V- ids a rule (short id) answers for."""
        return [v for v, g in self.groups.items() if short_id in g.rules]


class _RuleLike(t.Protocol):
    short_id: str
    title: str
    description: str
    severity: str
    identifiers: t.Mapping[str, t.Sequence[str]]


def build(rules: t.Sequence[_RuleLike], severities: t.Mapping[str, str] | None = None, *, profile: str = "",
          profile_title: str = "", benchmark_version: str = "", sha256: str = "", source: str = "") -> StigMap:
    """The STIG map of ``rules`` (catalog ``Rule``s or anything with their attributes, in the
    profile's order); ``severities`` {short id: severity} override the rules' own (the profile's
    refine-rule)."""
    severities = severities or {}
    members: dict[str, list[_RuleLike]] = {}
    sv_of: dict[str, str] = {}
    with_ids, without = [], []
    for rule in rules:
        vulns = [(vuln_of(sv), sv) for sv in rule.identifiers.get("stig_rule") or ()]
        vulns = [(v, sv) for v, sv in vulns if v]
        (with_ids if vulns else without).append(rule.short_id)
        for vuln, sv in vulns:
            members.setdefault(vuln, []).append(rule)
            sv_of.setdefault(vuln, sv)
    stig_ids = _stig_ids(members)
    groups = {}
    for vuln in sorted(members, key=lambda v: int(v[2:])):
        rows = members[vuln]
        first = rows[0]
        severity = max((severities.get(r.short_id) or r.severity or "unknown" for r in rows),
                       key=lambda s: SEVERITY_ORDER.get(s, 0))
        srg = next((s for r in rows for s in r.identifiers.get("srg") or ()), "")
        ccis = tuple(dict.fromkeys(c for r in rows for c in r.identifiers.get("cci") or ()))
        groups[vuln] = StigGroup(vuln=vuln, rule_id=sv_of[vuln], stig_id=stig_ids[vuln], severity=severity,
                                 title=first.title, discussion=getattr(first, "description", "") or "",
                                 group_title=srg or first.title, ccis=ccis,
                                 rules=tuple(dict.fromkeys(r.short_id for r in rows)))
    expected = frozenset(v for r in rules for v in map(vuln_of, r.identifiers.get("stig_rule") or ()) if v)
    return StigMap(groups=groups, rules_with_ids=tuple(with_ids), without_ids=tuple(without), profile=profile,
                   profile_title=profile_title, benchmark_version=benchmark_version, sha256=sha256, source=source,
                   expected=expected)


def _stig_ids(members: t.Mapping[str, t.Sequence[_RuleLike]]) -> dict[str, str]:
    """{V- id: STIG ID}: the id all the group's rules share; else, for a rule with as many STIG
    ids as SV- ids, the one at the same place (both sorted); else those not claimed by
    another group."""
    out: dict[str, str] = {}
    for vuln, rows in members.items():
        shared = set.intersection(*(set(r.identifiers.get("stig_id") or ()) for r in rows))
        if len(shared) == 1:
            out[vuln] = shared.pop()
    for vuln, rows in members.items():
        if vuln in out:
            continue
        rule = rows[0]
        ids = sorted(rule.identifiers.get("stig_id") or ())
        svs = sorted((v for v in (vuln_of(s) for s in rule.identifiers.get("stig_rule") or ()) if v),
                     key=lambda v: int(v[2:]))
        if len(rows) == 1 and len(ids) == len(svs) > 1:
            out[vuln] = ids[svs.index(vuln)]
            continue
        claimed = {out[v] for v in out if v != vuln}
        free = [i for i in ids if i not in claimed]
        out[vuln] = " ".join(free or ids)
    return out


def from_catalog(catalog: t.Any, profile_id: str | None) -> StigMap:
    """The map of a catalog's profile (full or short id; its selected rules); a profile the
    datastream lacks (a tailoring's) raises the catalog's CatalogError."""
    profile = catalog.profile(profile_id)
    rules = [catalog.rule(r) for r in profile.selected_rules]
    severities = {catalog.rule(r).short_id: (profile.refine_rules.get(r) or {}).get("severity")
                  for r in profile.selected_rules if (profile.refine_rules.get(r) or {}).get("severity")}
    return build(rules, severities, profile=profile.id, profile_title=profile.title,
                 benchmark_version=catalog.benchmark_version, sha256=catalog.sha256,
                 source=getattr(catalog, "source", "") or "")


def group_status(results: t.Iterable[str | None]) -> str:
    """The status of one V- id from the results of its rules (None: the rule has no result)."""
    values = [r or "notselected" for r in results]
    if not values:
        return NOT_REVIEWED
    if "fail" in values:
        return OPEN
    if any(v not in ("pass", "fixed", "notapplicable") for v in values):
        return NOT_REVIEWED
    if all(v == "notapplicable" for v in values):
        return NOT_APPLICABLE
    return NOT_A_FINDING
