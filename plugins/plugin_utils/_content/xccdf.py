"""XCCDF 1.2 and SCAP source datastream names, the parser for untrusted content, and the
plain text of an XCCDF text element (XHTML markup stripped)."""

from __future__ import annotations

import re
from typing import Callable, List, Optional

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.errors import CatalogError

try:
    from lxml import etree
except ImportError:
    deps.missing("lxml")

XCCDF12_NS = "http://checklists.nist.gov/xccdf/1.2"
XCCDF11_NS = "http://checklists.nist.gov/xccdf/1.1"
DS_NS = "http://scap.nist.gov/schema/scap/source/1.2"
XHTML_NS = "http://www.w3.org/1999/xhtml"
ANSIBLE_FIX_SYSTEM = "urn:xccdf:fix:script:ansible"

X = "{%s}" % XCCDF12_NS
T_BENCHMARK = X + "Benchmark"
T_GROUP = X + "Group"
T_RULE = X + "Rule"
T_VALUE = X + "Value"
T_PROFILE = X + "Profile"
T_TAILORING = X + "Tailoring"
T_SUB = X + "sub"

_BLOCK_TAGS = {"p", "pre", "br", "li", "ul", "ol", "div", "table", "tr", "h1", "h2", "h3",
               "h4", "blockquote", "dl", "dt", "dd"}
_XHTML = "{%s}" % XHTML_NS
_WS_RE = re.compile(r"[ \t\r\f\v\n]+")


def local(tag) -> str:
    """An element's tag without its namespace ("" for comments and the like)."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def no_sub(idref: str) -> str:
    """The text of an ``<xccdf:sub>`` where subs are dropped (titles of profiles and Values)."""
    return ""


def plain_text(elem, sub_text: Callable[[str], str]) -> str:
    """Plain text of an XCCDF text element with XHTML markup (see ``Rule.description``);
    an ``<xccdf:sub idref>`` becomes ``sub_text(idref)``. "" for None."""
    if elem is None:
        return ""
    out: List[str] = []

    def emit(text: Optional[str], pre: bool) -> None:
        if not text:
            return
        out.append(text if pre else _WS_RE.sub(" ", text))

    def walk(node, pre: bool) -> None:
        emit(node.text, pre)
        for child in node:
            tag = local(child.tag)
            if child.tag == T_SUB:
                out.append(sub_text(child.get("idref", "")))
            elif tag in _BLOCK_TAGS and child.tag.startswith(_XHTML):
                out.append("\n")
                walk(child, pre or tag == "pre")
                out.append("\n")
            else:
                walk(child, pre)
            emit(child.tail, pre)

    walk(elem, False)
    lines = [line.strip() for line in "".join(out).split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def xccdf_bool(value: Optional[str], default: bool) -> bool:
    """An XCCDF boolean attribute ("true"/"1", anything else false; ``default`` when absent)."""
    if value is None:
        return default
    return value.strip().lower() in ("true", "1")


def _xml_parser():
    """A parser that never fetches, expands entities or loads a DTD (content is untrusted)."""
    return etree.XMLParser(
        resolve_entities=False, no_network=True, huge_tree=True,
        remove_comments=True, remove_pis=True, load_dtd=False,
    )


def xml_root(data: bytes, what: str, source: str):
    """The root element of ``data`` (a ``what`` read from ``source``); CatalogError when it is
    not well-formed XML or empty."""
    try:
        root = etree.fromstring(data, _xml_parser())
    except etree.XMLSyntaxError as exc:
        raise CatalogError("%s %s is not well-formed XML: %s" % (what, source, exc)) from None
    except (ValueError, TypeError) as exc:  # e.g. empty input
        raise CatalogError("%s %s could not be parsed: %s" % (what, source, exc)) from None
    if root is None:
        raise CatalogError("%s %s is empty" % (what, source))
    return root
