"""A user's XCCDF 1.2 tailoring file, checked against the benchmark it tailors before the
catalog resolves its profiles (``Catalog.with_tailoring``)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, List, Mapping

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.errors import CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.model import Item, Value
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.xccdf import (
    T_PROFILE,
    T_TAILORING,
    XCCDF12_NS,
    local,
    xml_root,
)

try:
    from lxml import etree
except ImportError:
    deps.missing("lxml")


def tailoring_root(data: bytes, source: str):
    """The ``<xccdf:Tailoring>`` root element of ``data``; CatalogError otherwise."""
    root = xml_root(data, "tailoring file", source)
    if root.tag != T_TAILORING:
        raise CatalogError(
            "%s is not an XCCDF 1.2 tailoring file: root element is <%s> (%s), expected <xccdf:Tailoring> (%s)"
            % (source, local(root.tag), etree.QName(root).namespace or "no namespace", XCCDF12_NS))
    return root


class TailoringChecker:
    """Checks a tailoring file's profiles against one benchmark: its id and version (for
    messages), profile ids, rules and groups, clusters and Values."""

    def __init__(self, benchmark_id: str, benchmark_version: str, profiles: Mapping[str, str],
                 items: Mapping[str, Item], clusters: Mapping[str, List[str]], values: Mapping[str, Value]) -> None:
        self.benchmark = "%s %s" % (benchmark_id, benchmark_version)
        self.benchmark_id = benchmark_id
        self.profiles = profiles
        self.items = items
        self.clusters = clusters
        self.values = values

    def profile_elems(self, root, source: str) -> "OrderedDict[str, Any]":
        """{profile id: element} of a Tailoring root, each checked against the benchmark."""
        elems: "OrderedDict[str, Any]" = OrderedDict()
        for elem in root.findall(T_PROFILE):
            pid = elem.get("id")
            if not pid:
                raise CatalogError("tailoring file %s: an xccdf:Profile has no id" % source)
            if pid in self.profiles or pid in elems:
                raise CatalogError("tailoring file %s: profile id %s is already used by %s; give the tailored "
                                   "profile an id of its own" % (
                                       source, pid, "the file" if pid in elems else self.benchmark_id))
            elems[pid] = elem
        if not elems:
            raise CatalogError("tailoring file %s holds no xccdf:Profile" % source)
        for pid, elem in elems.items():
            base = elem.get("extends")
            if base and base not in self.profiles and base not in elems:
                raise CatalogError("tailoring file %s: profile %s extends %s, which is neither a profile of %s "
                                   "nor of the file" % (source, pid, base, self.benchmark))
            for child in elem:
                self.check_item(child, pid, source)
        return elems

    def check_item(self, child, pid: str, source: str) -> None:
        """CatalogError when a select/refine-rule/refine-value/set-value names nothing here."""
        tag, idref = local(child.tag), child.get("idref", "")
        where = "tailoring file %s: profile %s: %s" % (source, pid, tag)
        if tag in ("select", "refine-rule") and idref not in self.items and idref not in self.clusters:
            raise CatalogError("%s names %r, which is no rule, group or cluster of %s" % (
                where, idref, self.benchmark))
        if tag in ("refine-value", "set-value"):
            value = self.values.get(idref)
            if value is None:
                raise CatalogError("%s names XCCDF Value %r, which is not in %s" % (where, idref, self.benchmark))
            selector = child.get("selector")
            if tag == "refine-value" and selector is not None and selector not in value.options:
                raise CatalogError("%s gives Value %s the selector %r, which it lacks (has: %s)" % (
                    where, idref, selector, ", ".join(sorted(value.options))))
