# -*- coding: utf-8 -*-
# Copyright: scapforge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Generate XCCDF 1.2 tailoring files for a datastream's profile (decision 5).

A tailoring file adds one profile that extends a profile of the datastream and selects or
unselects rules and sets Values; oscap runs it with::

    oscap xccdf eval --tailoring-file tailoring.xml --profile TAILORED_ID ds.xml

oscap takes one tailoring file per scan, and resolves a tailored profile's ``extends`` only
in the benchmark and in the same tailoring file (oscap 1.3.7 on the lab). To add rules to a
profile of the user's own tailoring file (a catalog view from ``Catalog.with_tailoring``),
the generated document, which replaces the user's for the scan, therefore extends that
profile's benchmark ancestor and repeats what the user's profile changes (selections,
Values, refine-rules) before its own selects.

Controller only (lxml).
"""

from __future__ import annotations

import datetime
import re
from typing import Dict, Iterable, Mapping, Optional, Tuple

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import (
    XCCDF12_NS,
    Catalog,
    CatalogError,
    Profile,
)

try:
    from lxml import etree
except ImportError:
    deps.missing("lxml")

__all__ = ["build_tailoring", "TAILORING_SUFFIX"]

#: appended to the base profile id to form the tailored profile's id
TAILORING_SUFFIX = "_scapforge"

_X = "{%s}" % XCCDF12_NS
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


def build_tailoring(
    catalog: Catalog,
    base_profile_id: str,
    select: Iterable[str] = (),
    unselect: Iterable[str] = (),
    values: Optional[Mapping[str, str]] = None,
    *,
    include_requires: bool = True,
    profile_id: Optional[str] = None,
    title: Optional[str] = None,
) -> Tuple[bytes, str]:
    """An XCCDF 1.2 Tailoring document whose one profile extends ``base_profile_id`` (for a
    profile of the user's tailoring: its benchmark ancestor, with its changes repeated).

    Args:
        catalog: the datastream's Catalog, or a view of it with the user's tailoring.
        base_profile_id: full or short id of a profile of the datastream, or of the view's
            tailoring (see the module's docstring: the document then extends the benchmark
            profile that one extends and carries its changes; without one, it extends none).
        select: rule ids (full or short) to select. With ``include_requires`` the rules they
            ``<requires>`` are selected too (oscap leaves a rule out when what it requires is
            not selected). Groups above a selected rule that the base profile deselects are
            selected as well, and every other rule that this would bring in is unselected
            explicitly, so the selection changes by exactly the rules asked for.
        unselect: rule ids (full or short) to unselect; applied after ``select``.
        values: {value id (full or short): value}. A value that is one of the Value's
            selectors is written as ``<refine-value selector=...>``; any other string as
            ``<set-value>`` (a literal).
        include_requires: see ``select``.
        profile_id: id of the tailored profile; default ``<base full id>_scapforge``.
        title: title of the tailored profile; default "<base title> (scapforge tailoring)".

    Returns:
        (xml_bytes, tailored_profile_id): the UTF-8 document with XML declaration, and the
        full id to give ``oscap --profile``.

    Raises:
        CatalogError: unknown profile, rule or Value; a rule both selected and unselected;
        a profile id that is not an XCCDF 1.2 profile id.
    """
    base = catalog.profile(base_profile_id)
    ancestor = catalog.datastream_ancestor(base.id)
    inherited_selections, inherited_values, refine_rules = _changes_beyond(base, ancestor)
    wanted = [catalog.rule(r).id for r in select]
    if include_requires:
        wanted = catalog.expand_requires(wanted)
    dropped = [catalog.rule(r).id for r in unselect]
    clash = sorted(set(wanted) & set(dropped))
    if clash:
        raise CatalogError("rules both selected and unselected: %s" % ", ".join(clash))

    tailored_id = profile_id or base.id + TAILORING_SUFFIX
    if not re.match(r"^xccdf_[^_]+_profile_.+$", tailored_id):
        raise CatalogError("tailored profile id %r is not of the form xccdf_<ns>_profile_<name>" % tailored_id)

    changes = _selection_changes(catalog, base, inherited_selections, wanted, dropped)
    value_elems = _value_elements(catalog, inherited_values, values or {})
    root = _tailoring_root(catalog, base, ancestor, tailored_id, title)
    _append_profile_changes(root.find(_X + "Profile"), changes, value_elems, refine_rules)
    data = etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True)
    return data, tailored_id


def _selection_changes(catalog: Catalog, base: Profile, inherited: Mapping[str, bool],
                       wanted: Iterable[str], dropped: Iterable[str]) -> Dict[str, bool]:
    """The ``<select>`` entries {item id: bool} (in the order to write them) that turn
    ``base``'s selection into exactly ``base`` + ``wanted`` - ``dropped``: the ``inherited``
    ones first, each wanted rule and every group above it that the base deselects, the
    dropped rules, then an unselect for every other rule re-selecting a group brought in."""
    wanted, dropped = list(wanted), list(dropped)
    selections = dict(base.selections)
    changes = dict(inherited)  # item id -> bool, in insertion order
    for rid in wanted:
        changes[rid] = True
        for group in catalog.group_ancestors(rid):
            if not selections.get(group, catalog.default_selected(group)) and group not in changes:
                changes[group] = True
    for rid in dropped:
        changes[rid] = False
    after = dict(selections)
    after.update(changes)
    expected = (set(base.selected_rules) | set(wanted)) - set(dropped)
    # Rules that re-selecting a group would bring in without being asked for.
    for rid in catalog.effective_selection(after):
        if rid not in expected:
            changes[rid] = False
    after.update(changes)
    result = set(catalog.effective_selection(after))
    if result != expected:  # pragma: no cover - a bug in the logic above, not an input error
        raise CatalogError("tailoring selection mismatch: %d unexpected, %d missing" % (
            len(result - expected), len(expected - result)))
    return changes


def _value_elements(catalog: Catalog, inherited: Mapping[str, Tuple[str, str]],
                    values: Mapping[str, str]) -> Dict[str, Tuple[str, str]]:
    """{full value id: ("refine-value", selector) | ("set-value", literal)}: the
    ``inherited`` entries, then ``values`` (a value that is one of the Value's selectors is
    a refine-value, any other string a set-value). CatalogError for an unknown Value."""
    value_elems = dict(inherited)
    for vid, val in values.items():
        if not catalog.has_value(vid):
            raise CatalogError("XCCDF Value %r is not in %s" % (vid, catalog.benchmark_id))
        full_vid = vid if vid.startswith("xccdf_") else "%svalue_%s" % (catalog.id_namespace, vid)
        val = str(val)
        if val in catalog.value_selectors(full_vid):
            value_elems[full_vid] = ("refine-value", val)
        else:
            value_elems[full_vid] = ("set-value", val)
    return value_elems


def _tailoring_root(catalog: Catalog, base: Profile, ancestor: Optional[Profile], tailored_id: str,
                    title: Optional[str]):
    """The ``<xccdf:Tailoring>`` element with its status, version and one Profile (id,
    extends, title, description), the Profile's changes not yet added."""
    root = etree.Element(_X + "Tailoring", nsmap={"xccdf": XCCDF12_NS})
    root.set("id", "xccdf_scapforge_tailoring_" + re.sub(r"[^A-Za-z0-9_.-]", "_", base.short_id))
    status = etree.SubElement(root, _X + "status")
    status.text = "incomplete"
    version = etree.SubElement(root, _X + "version")
    version.set("time", datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat())
    version.text = "1"
    prof = etree.SubElement(root, _X + "Profile")
    prof.set("id", tailored_id)
    if ancestor is not None:
        prof.set("extends", ancestor.id)
    ptitle = etree.SubElement(prof, _X + "title")
    ptitle.set(_XML_LANG, "en-US")
    ptitle.set("override", "true")
    ptitle.text = title or "%s (scapforge tailoring)" % (base.title or base.short_id)
    pdesc = etree.SubElement(prof, _X + "description")
    pdesc.set(_XML_LANG, "en-US")
    pdesc.set("override", "true")
    user_file = catalog.tailoring  # set whenever base is a tailored profile (ancestor is not base)
    pdesc.text = "Generated by scapforge.remediation from %s (%s %s, sha256 %s)%s." % (
        base.id, catalog.benchmark_id, catalog.benchmark_version, catalog.sha256,
        "" if user_file is None or (ancestor is not None and ancestor.id == base.id)
        else " of tailoring file %s (sha256 %s)" % (user_file.name, user_file.sha256))
    return root


def _append_profile_changes(prof, changes: Mapping[str, bool], value_elems: Mapping[str, Tuple[str, str]],
                            refine_rules: Mapping[str, Mapping[str, str]]) -> None:
    """Append to Profile element ``prof`` its selects, then refine-values and set-values,
    then refine-rules (attributes sorted), in XCCDF's element order."""
    for item_id, flag in changes.items():
        sel = etree.SubElement(prof, _X + "select")
        sel.set("idref", item_id)
        sel.set("selected", "true" if flag else "false")
    for vid, (tag, val) in value_elems.items():
        elem = etree.SubElement(prof, _X + tag)
        elem.set("idref", vid)
        if tag == "refine-value":
            elem.set("selector", val)
        else:
            elem.text = val
    for item_id, attrs in refine_rules.items():
        elem = etree.SubElement(prof, _X + "refine-rule")
        elem.set("idref", item_id)
        for name, value in sorted(attrs.items()):
            elem.set(name, value)


def _changes_beyond(base: Profile, ancestor: Optional[Profile]) -> Tuple[dict, dict, dict]:
    """What profile ``base`` sets that its benchmark ancestor (None: the benchmark's
    defaults) does not, so that a profile extending the ancestor can repeat it.

    Returns (selections {item id: bool}, values {full value id: ("refine-value" |
    "set-value", selector | literal)}, refine_rules {item id: {attribute: value}}), each in
    ``base``'s order and only where it differs; all empty when ``base`` is the ancestor.
    """
    if ancestor is not None and ancestor.id == base.id:
        return {}, {}, {}
    old_sel = ancestor.selections if ancestor else {}
    old_ref = ancestor.refine_values if ancestor else {}
    old_set = ancestor.set_values if ancestor else {}
    old_rules = ancestor.refine_rules if ancestor else {}
    selections = {k: v for k, v in base.selections.items() if old_sel.get(k) != v}
    values = {k: ("refine-value", v) for k, v in base.refine_values.items() if old_ref.get(k) != v}
    values.update({k: ("set-value", v) for k, v in base.set_values.items() if old_set.get(k) != v})
    refine_rules = {}
    for item_id, attrs in base.refine_rules.items():
        diff = {k: v for k, v in attrs.items() if old_rules.get(item_id, {}).get(k) != v}
        if diff:
            refine_rules[item_id] = diff
    return selections, values, refine_rules
