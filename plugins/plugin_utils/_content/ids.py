"""Full and short XCCDF ids: ``xccdf_org.ssgproject.content_rule_sshd_disable_root_login``
<-> ``sshd_disable_root_login`` for the benchmark's id namespace
(``xccdf_org.ssgproject.content_``) and a kind (rule, group, profile, value)."""

from __future__ import annotations

import re


def full_id(namespace: str, ident: str, kind: str) -> str:
    """``ident`` as a full id: kept when it already is one (starts with ``xccdf_``)."""
    if ident.startswith("xccdf_"):
        return ident
    return "%s%s_%s" % (namespace, kind, ident)


def short_id(namespace: str, ident: str, kind: str) -> str:
    """``ident`` without its ``xccdf_<ns>_<kind>_`` prefix (any namespace); kept when it has none."""
    prefix = "%s%s_" % (namespace, kind)
    if namespace and ident.startswith(prefix):
        return ident[len(prefix):]
    match = re.match(r"^xccdf_.+?_%s_(.+)$" % kind, ident)
    return match.group(1) if match else ident


def sub_placeholder(plain: dict, namespace: str, idref: str) -> str:
    """The text of an ``<xccdf:sub idref>`` in a rule's or profile's text: the benchmark's
    ``<plain-text>`` of that id, else ``[short value id]`` (``Catalog.describe`` fills it)."""
    if idref in plain:
        return plain[idref]
    return "[%s]" % short_id(namespace, idref, "value")
