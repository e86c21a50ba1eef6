"""A SCAP source datastream's first XCCDF 1.2 Benchmark, read into the catalog's tables:
Values, plain-texts, rules and groups (with their selection data and clusters), Rules."""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Dict, List, Tuple

from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.errors import CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.ids import short_id, sub_placeholder
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.model import FixSnippet, Item, Rule, Value
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.xccdf import (
    ANSIBLE_FIX_SYSTEM,
    DS_NS,
    T_BENCHMARK,
    T_GROUP,
    T_RULE,
    T_SUB,
    T_TAILORING,
    T_VALUE,
    X,
    XCCDF11_NS,
    local,
    no_sub,
    plain_text,
    xccdf_bool,
    xml_root,
)

# CCE identifiers: <ident system="https://nvd.nist.gov/cce/index.cfm">CCE-90839-2</ident>.
_CCE_SYSTEM_RE = re.compile(r"cce", re.IGNORECASE)
_CCE_RE = re.compile(r"^CCE-\d+-\d$")
# DISA STIG IDs (RHEL-08-010020, OL08-00-010020, SLES-15-010000, UBTU-22-...): SSG puts them in
# <reference href="https://public.cyber.mil/stigs/downloads/?_dl_facet_stigs=operating-systems%2Cunix-linux">,
# newer releases may carry them as <ident>. Recognised by their shape, wherever they are.
_STIG_ID_RE = re.compile(r"^[A-Z][A-Z0-9]*-\d{2}-\d{6}$")
# SRG ids ride on the general-purpose-os STIG href: SRG-OS-000480-GPOS-00227.
_SRG_RE = re.compile(r"^SRG-[A-Z]+-\d+(-[A-Z]+-\d+)?$")
_CCI_RE = re.compile(r"^CCI-\d+$")
# DISA's rule version id (SV-258134r1045265_rule), on the srg-stig-tools href; its number is
# the vulnerability id (V-258134) STIG Viewer shows as Vuln_Num.
_SV_RE = re.compile(r"^SV-\d+r\d+_rule$")


#: what a file with another root than a datastream's most likely is, and what to do with it.
_WRONG_ROOT_HINT = {
    T_TAILORING: ": it is an XCCDF tailoring file; give it as scapforge_tailoring_src (tailoring_src), "
                 "with the datastream it tailors as scapforge_datastream_src",
    T_BENCHMARK: ": it is a bare XCCDF 1.2 Benchmark; give the SCAP source datastream (ssg-*-ds.xml) that holds it",
}


def benchmark_of(data: bytes, source: str):
    """The first XCCDF 1.2 Benchmark element of a datastream's bytes; CatalogError when
    they are no SCAP source datastream, hold none (or only XCCDF 1.1), or it has no id."""
    root = xml_root(data, "datastream", source)
    if root.tag != "{%s}data-stream-collection" % DS_NS:
        raise CatalogError(
            "%s is not a SCAP source datastream: root element is <%s>, expected "
            "<ds:data-stream-collection> (%s)%s" % (source, local(root.tag), DS_NS, _WRONG_ROOT_HINT.get(root.tag, ""))
        )
    benchmark = next(root.iter(T_BENCHMARK), None)
    if benchmark is None:
        if next(root.iter("{%s}Benchmark" % XCCDF11_NS), None) is not None:
            raise CatalogError("datastream %s holds an XCCDF 1.1 Benchmark; only XCCDF 1.2 is supported" % source)
        raise CatalogError("datastream %s holds no XCCDF 1.2 Benchmark" % source)
    if not benchmark.get("id"):
        raise CatalogError("datastream %s: the Benchmark has no id" % source)
    return benchmark


def rule_identifiers(elem) -> Dict[str, Tuple[str, ...]]:
    """``Rule.identifiers`` of a Rule element: CCE, STIG ids, DISA rule versions, SRG and
    CCI ids from its ``<ident>`` and ``<reference>`` children, by their shape."""
    ids: Dict[str, List[str]] = {"cce": [], "stig_id": [], "stig_rule": [], "srg": [], "cci": []}

    def add(key, text):
        if text not in ids[key]:
            ids[key].append(text)

    for ident in elem.findall(X + "ident"):
        text = (ident.text or "").strip()
        if _CCE_RE.match(text) or (_CCE_SYSTEM_RE.search(ident.get("system", "")) and text):
            add("cce", text)
        elif _STIG_ID_RE.match(text):
            add("stig_id", text)
        elif _CCI_RE.match(text):
            add("cci", text)
    for ref in elem.findall(X + "reference"):
        text = (ref.text or "").strip()
        if _STIG_ID_RE.match(text) and "cyber.mil" in ref.get("href", ""):
            add("stig_id", text)
        elif _SV_RE.match(text):
            add("stig_rule", text)
        elif _SRG_RE.match(text):
            add("srg", text)
        elif _CCI_RE.match(text):
            add("cci", text)
    return {k: tuple(v) for k, v in ids.items()}


def value_of(elem) -> Value:
    """A Value element as a ``Value``."""
    # NISTIR-7275r4: the <value> with empty or absent selector is the default; when there
    # is none, the first <value> in document order is (oscap does the same).
    default = None
    first = None
    options: Dict[str, str] = {}
    for val in elem.findall(X + "value"):
        text = val.text or ""
        selector = val.get("selector") or ""
        if first is None:
            first = text
        if not selector:
            if default is None:
                default = text
        else:
            options.setdefault(selector, text)
    if default is None:
        default = first
    return Value(
        id=elem.get("id", ""),
        title=plain_text(elem.find(X + "title"), no_sub),
        type=elem.get("type", "string"),
        default=default,
        options=options,
    )


def _idrefs(elem, tag: str) -> Tuple[str, ...]:
    """The ids named by ``<tag idref=...>`` children (a space-separated list is split), once each."""
    out: List[str] = []
    for item in elem.findall(X + tag):
        for idref in (item.get("idref") or "").split():
            if idref not in out:
                out.append(idref)
    return tuple(out)


class BenchmarkReader:
    """Reads a Benchmark element into ``values``, ``plain``, ``items``, ``clusters`` and
    ``rules`` (document order), the tables the catalog keeps; ids are shortened with the
    benchmark's id ``namespace``."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.values: Dict[str, Value] = {}
        self.plain: Dict[str, str] = {}
        self.items: Dict[str, Item] = {}
        self.clusters: Dict[str, List[str]] = {}
        self.rules: Dict[str, Rule] = OrderedDict()

    def read(self, benchmark) -> "BenchmarkReader":
        for plain in benchmark.findall(X + "plain-text"):
            self.plain[plain.get("id", "")] = (plain.text or "").strip()
        for elem in benchmark.iter(T_VALUE):
            value = value_of(elem)
            self.values[value.id] = value
        self._walk(benchmark, None, (), ())
        return self

    def sub_placeholder(self, idref: str) -> str:
        return sub_placeholder(self.plain, self.namespace, idref)

    def _walk(self, node, parent_id, path, platforms) -> None:
        for child in node:
            if child.tag == T_GROUP:
                gid = child.get("id", "")
                self._add_item(child, gid, "group", parent_id)
                own = tuple(p.get("idref", "") for p in child.findall(X + "platform"))
                self._walk(child, gid, path + (short_id(self.namespace, gid, "group"),), platforms + own)
            elif child.tag == T_RULE:
                rule = self._make_rule(child, path, platforms)
                self.rules[rule.id] = rule
                self._add_item(child, rule.id, "rule", parent_id)

    def _add_item(self, elem, item_id: str, kind: str, parent_id) -> None:
        cluster = elem.get("cluster-id")
        self.items[item_id] = Item(item_id, kind, xccdf_bool(elem.get("selected"), True), parent_id, cluster)
        if parent_id:
            self.items[parent_id].children.append(item_id)
        if cluster:
            self.clusters.setdefault(cluster, []).append(item_id)

    def _make_rule(self, elem, path, group_platforms) -> Rule:
        rid = elem.get("id", "")
        fix = None
        for fix_elem in elem.findall(X + "fix"):
            if fix_elem.get("system") == ANSIBLE_FIX_SYSTEM:
                fix = self._make_fix(rid, fix_elem)
                break
        own_platforms = tuple(p.get("idref", "") for p in elem.findall(X + "platform"))
        text = self.sub_placeholder
        return Rule(
            id=rid,
            short_id=short_id(self.namespace, rid, "rule"),
            title=plain_text(elem.find(X + "title"), text),
            description=plain_text(elem.find(X + "description"), text),
            rationale=plain_text(elem.find(X + "rationale"), text),
            severity=elem.get("severity", "unknown"),
            identifiers=rule_identifiers(elem),
            group_path=tuple(path),
            requires=_idrefs(elem, "requires"),
            conflicts=_idrefs(elem, "conflicts"),
            ansible_fix=fix,
            platforms=tuple(OrderedDict.fromkeys(own_platforms + tuple(group_platforms))),
            value_ids=self._rule_value_ids(elem),
        )

    def _rule_value_ids(self, elem) -> Tuple[str, ...]:
        """``Rule.value_ids``: the Values its subs name, then those its check exports."""
        value_ids: List[str] = []
        for sub in elem.iter(T_SUB):
            idref = sub.get("idref", "")
            if idref in self.values and idref not in value_ids:
                value_ids.append(idref)
        for export in elem.iter(X + "check-export"):
            idref = export.get("value-id", "")
            if idref and idref not in value_ids:
                value_ids.append(idref)
        return tuple(value_ids)

    def _make_fix(self, rule_id, elem) -> FixSnippet:
        parts = [elem.text or ""]
        value_ids: List[str] = []
        for child in elem:
            if child.tag == T_SUB:
                idref = child.get("idref", "")
                if idref in self.plain:
                    parts.append(self.plain[idref])
                else:
                    parts.append('<xccdf:sub idref="%s" use="legacy"/>' % idref)
                    if idref not in value_ids:
                        value_ids.append(idref)
            else:  # unexpected markup: keep its text
                parts.append("".join(child.itertext()))
            parts.append(child.tail or "")
        return FixSnippet(
            rule_id=rule_id,
            system=elem.get("system", ""),
            complexity=elem.get("complexity", "unknown"),
            disruption=elem.get("disruption", "unknown"),
            reboot=xccdf_bool(elem.get("reboot"), False),
            strategy=elem.get("strategy", "unknown"),
            value_ids=tuple(value_ids),
            text="".join(parts),
        )
