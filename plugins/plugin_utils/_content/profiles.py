"""What an XCCDF Profile element sets, on top of the profile it extends: selections (a
cluster id selects each of its items), refine-values, set-values and refine-rules."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.model import Item, Profile
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.xccdf import local, xccdf_bool

Entries = Tuple[Dict[str, bool], Dict[str, str], Dict[str, str], Dict[str, Dict[str, str]]]


def profile_entries(elem, items: Mapping[str, Item], clusters: Mapping[str, List[str]],
                    parent: Optional[Profile]) -> Entries:
    """(selections, refine_values, set_values, refine_rules) of Profile element ``elem``:
    ``parent``'s (the profile it extends; None: none), then its own children in document
    order. A later refine-value of a Value drops its set-value, and the other way round."""
    selections: Dict[str, bool] = {}
    refine_values: Dict[str, str] = {}
    set_values: Dict[str, str] = {}
    refine_rules: Dict[str, Dict[str, str]] = {}
    if parent is not None:
        selections.update(parent.selections)
        refine_values.update(parent.refine_values)
        set_values.update(parent.set_values)
        refine_rules.update({k: dict(v) for k, v in parent.refine_rules.items()})
    for child in elem:
        tag = local(child.tag)
        idref = child.get("idref", "")
        if tag == "select":
            flag = xccdf_bool(child.get("selected"), True)
            for item_id in clusters.get(idref, [idref]) if idref not in items else [idref]:
                selections[item_id] = flag
        elif tag == "refine-value":
            if child.get("selector") is not None:
                refine_values[idref] = child.get("selector")
                set_values.pop(idref, None)
        elif tag == "set-value":
            set_values[idref] = child.text or ""
            refine_values.pop(idref, None)
        elif tag == "refine-rule":
            attrs = {k: v for k, v in child.attrib.items() if k != "idref"}
            refine_rules.setdefault(idref, {}).update(attrs)
    return selections, refine_values, set_values, refine_rules
