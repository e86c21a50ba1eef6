"""An XCCDF Value under a profile, and a rule's Ansible fix with those values in it."""

from __future__ import annotations

import json
import re
from typing import Callable, Optional

from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.errors import CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.model import Profile, Value

#: the placeholder ``FixSnippet.text`` keeps for each ``<xccdf:sub>``
SUB_RE = re.compile(r'<xccdf:sub idref="([^"]+)" use="legacy"/>')


def value_under(val: Value, prof: Optional[Profile], short_value_id: str) -> str:
    """``val``'s value under ``prof`` (None: no profile): its set-value, its refine-value's
    selector, else the Value's default. CatalogError for a selector the Value lacks or a
    Value without any value (``short_value_id`` names it in the message)."""
    if prof is not None:
        if val.id in prof.set_values:
            return prof.set_values[val.id]
        selector = prof.refine_values.get(val.id)
        if selector:
            if selector not in val.options:
                raise CatalogError("profile %s refines Value %s to selector %r, which it lacks (has: %s)" % (
                    prof.short_id, short_value_id, selector, ", ".join(sorted(val.options))))
            return val.options[selector]
    if val.default is not None:
        return val.default
    raise CatalogError("XCCDF Value %s has no value" % val.id)


def render_subs(text: str, value_of: Callable[[str], str]) -> str:
    """``text`` with each sub placeholder replaced by ``value_of(full value id)``: as a YAML
    double-quoted string where it is a whole scalar (``key: !!str <sub/>``, a list item, a
    line of its own), unquoted where other text surrounds it on its line."""

    def replace(match):
        value = value_of(match.group(1))
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        before = text[start:match.start()]
        after = text[match.end():end if end >= 0 else len(text)]
        whole_scalar = not after.strip() and (
            before.rstrip().endswith((":", "!!str", "-")) or not before.strip())
        if whole_scalar:
            return json.dumps(value, ensure_ascii=False)
        return value

    return SUB_RE.sub(replace, text)
