# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""OVAL evidence of failing XCCDF rules, read from oscap's ``--oval-results`` files.

Why: the Worker must see the scanner's contract - what the check looked for and what it
found on the host - instead of guessing it from the rule's title (seed 004, ADR-0020:
"the Worker is guessing the OpenSCAP scanner's contract"; DESIGN.md: "OVAL evidence in
the context").

Runs on targets: Python 3.9 syntax, standard library only. Nothing here runs a process or
touches a file: the module reads the files and passes their bytes.

Facts these helpers are built on (OpenSCAP 1.3.7, SSG 0.1.76, ssg-debian12-ds.xml, seen
on the lab 2026-11-30):

* ``oscap xccdf eval --oval-results`` writes one ``<component>.result.xml`` per OVAL
  component into its working directory (not next to ``--results``):
  ``ssg-debian12-oval.xml.result.xml`` (3.1 MB for 5 rules, 3.3 MB for the whole
  anssi_bp28_high profile: every definition of the component is in it) and
  ``ssg-debian12-cpe-oval.xml.result.xml`` (the CPE platform checks, never read here).
* A rule-result names its check as ``<check-content-ref name="oval:ssg-X:def:1"
  href="ssg-debian12-oval.xml"/>``; the href plus ``.result.xml`` is the file name.
* The results file holds the OVAL definitions (definitions, tests, objects, states,
  variables), then ``results/system`` with the definition and test results, and the
  system characteristics (collected objects with their ``flag``, and items).
* Criteria, criterion and extend_definition nodes of a definition result carry their
  result after their own ``negate`` (checked on the whole profile: a negated criterion
  over a ``false`` test reads ``true``). oscap short-circuits: nodes it skipped read
  ``not evaluated``.
* Some rules test a variable computed from a file, not the file itself:
  accounts_umask_etc_login_defs is a ``variable_test`` on a ``variable_object`` whose
  ``local_variable`` is built from a ``textfilecontent54_object`` on /etc/login.defs.
  The evidence follows such variables back to the objects they are computed from.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import json
import xml.etree.ElementTree as ET

#: Check system of OVAL checks in XCCDF.
OVAL_SYSTEM = "http://oval.mitre.org/XMLSchema/oval-definitions-5"
_XSI_NIL = "{http://www.w3.org/2001/XMLSchema-instance}nil"

#: Default caps (see ``build_evidence``).
MAX_RULES = 50
MAX_TESTS = 8
MAX_ITEMS = 5
MAX_VALUE_CHARS = 300
MAX_BYTES = 100000
#: Values kept per variable.
MAX_VALUES = 5
#: Values kept per repeated entity or item field (a partition item lists each mount option).
MAX_REPEATED = 16
#: Objects shown for one local variable (the objects it is computed from).
MAX_SOURCES = 2
#: Objects shown for an object defined as a set of objects.
MAX_SET_OBJECTS = 3
#: Fields kept per item (a file_item has about 25).
MAX_ITEM_FIELDS = 30
#: Nodes kept of one definition's criteria tree, and how deep extended definitions are opened.
MAX_NODES = 40
MAX_EXTEND_DEPTH = 3
#: Files the check reads that are described per rule (``attach_files``).
MAX_FILES = 3

#: Node results that made a definition not ``true`` (``not evaluated`` nodes were skipped
#: by oscap's short-circuit and ``not applicable`` ones do not count, so neither is a cause).
_NOT_TRUE = ("false", "error", "unknown")
_FLIP = {"true": "false", "false": "true"}


def _local(tag):
    """Element tag without its namespace: ``{ns}rule-result`` -> ``rule-result``."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _children(elem, name):
    return [c for c in elem if _local(c.tag) == name] if elem is not None else []


def _child(elem, name):
    found = _children(elem, name)
    return found[0] if found else None


# --------------------------------------------------------------------------- XCCDF side


def failing_checks(xccdf_bytes, rules=None):
    """The OVAL check of every rule whose XCCDF result is ``fail``.

    xccdf_bytes: an XCCDF results document as ``oscap --results`` writes it (bytes or str).
    rules: full rule ids to keep (the requested rules), or None for every failing rule.

    Returns ``{full_rule_id: {"system": str or None, "name": str or None,
    "href": str or None, "exports": {oval variable id: XCCDF Value id}}}`` in document
    order: the first ``check`` of the rule's first ``fail`` rule-result (name: the OVAL
    definition id; href: the OVAL component, e.g. ``"ssg-debian12-oval.xml"``; exports:
    its ``check-export`` elements, the XCCDF Values passed to OVAL external variables).
    The last TestResult wins when there are several.

    Raises ValueError when the document is not XML or holds no TestResult.
    """
    if isinstance(xccdf_bytes, str):
        xccdf_bytes = xccdf_bytes.encode("utf-8")
    wanted = set(rules) if rules else None
    checks = {}
    found_test_result = False
    try:
        for event, elem in ET.iterparse(io.BytesIO(xccdf_bytes), events=("start", "end")):
            name = _local(elem.tag)
            if event == "start":
                if name == "TestResult":
                    found_test_result = True
                    checks = {}
                continue
            if name == "rule-result":
                rule_id = elem.get("idref")
                result = _child(elem, "result")
                if (
                    rule_id
                    and result is not None
                    and (result.text or "").strip() == "fail"
                    and rule_id not in checks
                    and (wanted is None or rule_id in wanted)
                ):
                    check = _child(elem, "check")
                    ref = _child(check, "check-content-ref")
                    checks[rule_id] = {
                        "system": check.get("system") if check is not None else None,
                        "name": ref.get("name") if ref is not None else None,
                        "href": ref.get("href") if ref is not None else None,
                        "exports": dict(
                            (e.get("export-name"), e.get("value-id"))
                            for e in _children(check, "check-export")
                            if e.get("export-name") and e.get("value-id")
                        ),
                    }
                elem.clear()
            elif name in ("Group", "Rule", "Value", "Profile"):
                elem.clear()
    except ET.ParseError as exc:
        raise ValueError("XCCDF results are not well-formed XML: %s" % exc)
    if not found_test_result:
        raise ValueError("XCCDF results hold no TestResult element")
    return checks


def oval_results_name(href):
    """File name oscap gives the OVAL results of component ``href``:
    ``"ssg-debian12-oval.xml"`` -> ``"ssg-debian12-oval.xml.result.xml"`` (in its cwd)."""
    base = (href or "").lstrip("#").replace("\\", "/").rsplit("/", 1)[-1]
    return base + ".result.xml" if base else ""


def needed_files(checks):
    """The OVAL results file names ``build_evidence`` needs for ``checks``, sorted."""
    return sorted(
        set(oval_results_name(c["href"]) for c in checks.values() if c.get("href") and c.get("system") == OVAL_SYSTEM)
    )


# --------------------------------------------------------------------------- OVAL side


class OvalResults:
    """Index of one OVAL results document (``<component>.result.xml``) by id.

    Built from the whole document (bytes or str). Attributes, each ``{id: Element}``:
    ``definitions``, ``tests``, ``objects``, ``states``, ``variables`` (the OVAL
    definitions part); ``def_results`` (by definition_id), ``test_results`` (by test_id),
    ``collected`` (collected objects, the first per id), ``items`` (system data, by item
    id). ``var_values``: ``{variable id: [value, ...]}`` from every tested_variable and
    variable_value in the document, first seen first.

    Raises ValueError when the document is not XML or is no ``oval_results`` document.
    """

    def __init__(self, xml_bytes):
        if isinstance(xml_bytes, str):
            xml_bytes = xml_bytes.encode("utf-8")
        try:
            root = ET.fromstring(xml_bytes)
        except ET.ParseError as exc:
            raise ValueError("OVAL results are not well-formed XML: %s" % exc)
        if _local(root.tag) != "oval_results":
            raise ValueError("not an OVAL results document (root element %s)" % _local(root.tag))
        self.definitions = {}
        self.tests = {}
        self.objects = {}
        self.states = {}
        self.variables = {}
        self.def_results = {}
        self.test_results = {}
        self.collected = {}
        self.items = {}
        self.var_values = {}
        sections = {
            "definitions": self.definitions,
            "tests": self.tests,
            "objects": self.objects,
            "states": self.states,
            "variables": self.variables,
        }
        definitions_part = _child(root, "oval_definitions")
        for section in list(definitions_part) if definitions_part is not None else []:
            index = sections.get(_local(section.tag))
            if index is None:
                continue
            for elem in section:
                if elem.get("id"):
                    index.setdefault(elem.get("id"), elem)
        for system in _children(_child(root, "results"), "system"):
            for elem in _children(_child(system, "definitions"), "definition"):
                self.def_results.setdefault(elem.get("definition_id"), elem)
            for elem in _children(_child(system, "tests"), "test"):
                self.test_results.setdefault(elem.get("test_id"), elem)
                for var in _children(elem, "tested_variable"):
                    self._add_value(var.get("variable_id"), var.text)
            characteristics = _child(system, "oval_system_characteristics")
            for elem in _children(_child(characteristics, "collected_objects"), "object"):
                self.collected.setdefault(elem.get("id"), elem)
                for var in _children(elem, "variable_value"):
                    self._add_value(var.get("variable_id"), var.text)
            system_data = _child(characteristics, "system_data")
            for elem in list(system_data) if system_data is not None else []:
                if elem.get("id"):
                    self.items.setdefault(elem.get("id"), elem)

    def _add_value(self, var_id, text):
        values = self.var_values.setdefault(var_id, [])
        text = text or ""
        if text not in values:
            values.append(text)


class _Ctx:
    """Caps of one rule's evidence, and whether any of them cut something."""

    def __init__(self, doc, max_tests, max_items, max_value_chars, exports=None):
        self.doc = doc
        self.exports = exports or {}
        self.max_tests = max_tests
        self.max_items = max_items
        self.max_value_chars = max_value_chars
        self.truncated = False

    def cut(self, text, strip=False):
        """text cut to max_value_chars characters, "..." marking the cut (None stays None).
        strip: drop surrounding whitespace first (comments, titles); values are kept as
        they are (leading blanks of a matched line can matter)."""
        if text is None:
            return None
        if strip:
            text = text.strip()
        if len(text) > self.max_value_chars:
            self.truncated = True
            return text[: max(self.max_value_chars - 3, 0)] + "..."
        return text

    def capped(self, values, limit):
        if len(values) > limit:
            self.truncated = True
        return values[:limit]


def _culprit_tests(doc, def_result):
    """``[(test_id, negate)]`` of the tests that made the definition result what it is.

    Walks the result's criteria tree depth first, into extended definitions, and enters
    only nodes of the failing polarity: with a definition ``false`` (or error/unknown),
    nodes that read false/error/unknown; with a definition ``true`` (a vulnerability or
    patch definition, which XCCDF maps to fail), nodes that read true. A negated node
    flips the polarity its children are read with. Without such a test (a definition
    with nothing evaluated, for example), the first tests of the tree.
    """
    out = []
    root = _child(def_result, "criteria")
    if root is None:
        return out

    def walk(nodes, bad_is_true, every, seen_defs):
        for node in nodes:
            name = _local(node.tag)
            result = node.get("result")
            if not every:
                bad = result == "true" if bad_is_true else result in _NOT_TRUE
                if not bad:
                    continue
            negate = node.get("negate") == "true"
            raw = _FLIP.get(result, result) if negate else result
            if name == "criterion":
                if node.get("test_ref"):
                    out.append((node.get("test_ref"), negate))
            elif name == "criteria":
                walk(list(node), raw == "true", every, seen_defs)
            elif name == "extend_definition":
                ref = node.get("definition_ref")
                if ref in seen_defs:
                    continue
                extended = _child(doc.def_results.get(ref), "criteria")
                if extended is not None:
                    walk([extended], raw == "true", every, seen_defs | {ref})

    start = {def_result.get("definition_id")}
    walk([root], def_result.get("result") == "true", False, start)
    if not out:
        walk([root], False, True, start)
    seen = set()
    unique = []
    for test_id, negate in out:
        if test_id not in seen:
            seen.add(test_id)
            unique.append((test_id, negate))
    return unique


def _criteria(doc, def_result, ctx):
    """The definition result's criteria tree, compact: ``{"operator", "result", "negate"?,
    "nodes": [...], "more"?}`` for a criteria node, ``{"test", "result", "negate"?}`` for a
    criterion, ``{"definition", "title", "result", "negate"?, "criteria"?}`` for an
    extend_definition. Each ``result`` is the node's, after its own negate, as oscap wrote it
    (``not evaluated``: skipped by its short-circuit). An extended definition is opened only
    when it did not read ``true`` before its negate (a ``true`` one is not why the rule fails)
    and at most MAX_EXTEND_DEPTH deep; at most MAX_NODES nodes in all, ``more`` counting the
    children left out. None when the result has no criteria."""
    left = [MAX_NODES]

    def node(elem, depth, seen):
        if left[0] <= 0:
            ctx.truncated = True
            return None
        left[0] -= 1
        name = _local(elem.tag)
        out = {"result": elem.get("result")}
        negate = elem.get("negate") == "true"
        if negate:
            out["negate"] = True
        if name == "criterion":
            out = dict({"test": elem.get("test_ref")}, **out)
        elif name == "extend_definition":
            ref = elem.get("definition_ref")
            title = _child(_child(doc.definitions.get(ref), "metadata"), "title")
            out = dict({"definition": ref, "title": ctx.cut(title.text if title is not None else None, strip=True)}, **out)
            raw = _FLIP.get(out["result"], out["result"]) if negate else out["result"]
            extended = _child(doc.def_results.get(ref), "criteria")
            if raw != "true" and extended is not None and ref not in seen and depth < MAX_EXTEND_DEPTH:
                out["criteria"] = node(extended, depth + 1, seen | {ref})
        else:
            out = dict({"operator": elem.get("operator", "AND")}, **out)
            children = [c for c in elem if _local(c.tag) in ("criteria", "criterion", "extend_definition")]
            kept = [n for n in (node(c, depth, seen) for c in children) if n is not None]
            out["nodes"] = kept
            if len(kept) < len(children):
                out["more"] = len(children) - len(kept)
        return out

    root = _child(def_result, "criteria")
    return node(root, 0, {def_result.get("definition_id")}) if root is not None else None


def _set_text(elem):
    """An object ``<set>`` as one line: ``UNION of oval:a:obj:1, oval:b:obj:1; filter exclude oval:s:ste:1``."""
    refs = [(r.text or "").strip() for r in _children(elem, "object_reference")]
    parts = ["%s of %s" % (elem.get("set_operator", "UNION"), ", ".join(refs))]
    for f in _children(elem, "filter"):
        parts.append("filter %s %s" % (f.get("action", "exclude"), (f.text or "").strip()))
    for sub in _children(elem, "set"):
        parts.append("(%s)" % _set_text(sub))
    return "; ".join(parts)


def _add_field(fields, name, value, ctx):
    if name not in fields:
        fields[name] = value
        return
    if not isinstance(fields[name], list):
        fields[name] = [fields[name]]
    if len(fields[name]) < MAX_REPEATED:
        fields[name].append(value)
    else:
        ctx.truncated = True


def _entities(elem, tested_vars, ctx, depth):
    """``(fields, operations)`` of an OVAL object or state element.

    fields: ``{entity name: str}``; a repeated entity gives a list; ``xsi:nil`` gives None;
    an entity bound to a variable (``var_ref``) gives ``_variable(...)``'s dict.
    operations: ``{entity name: operation}`` for operations other than ``equals``.
    """
    fields = {}
    operations = {}
    for child in elem:
        name = _local(child.tag)
        if name in ("notes", "signature", ""):
            continue
        if name == "behaviors":
            value = " ".join("%s=%s" % kv for kv in sorted(child.attrib.items()))
        elif name == "filter":
            value = "%s %s" % (child.get("action", "exclude"), ctx.cut((child.text or "").strip()))
        elif name == "set":
            value = ctx.cut(_set_text(child))
        elif child.get("var_ref"):
            value = _variable(child.get("var_ref"), tested_vars, ctx, depth)
        elif name == "var_ref" and (child.text or "").strip():  # variable_object
            value = _variable(child.text.strip(), tested_vars, ctx, depth)
        elif child.get(_XSI_NIL) == "true":
            value = None
        elif len(child):  # a record entity
            value = ctx.cut("; ".join("%s=%s" % (f.get("name") or _local(f.tag), (f.text or "").strip()) for f in child))
        else:
            value = ctx.cut(child.text or "")
        _add_field(fields, name, value, ctx)
        operation = child.get("operation")
        if operation and operation != "equals":
            operations[name] = operation
    return fields, operations


def _set_leaves(doc, object_id, limit_depth=6):
    """The objects (not themselves sets) an object is made of, in document order:
    ``[object_id]`` for an object that is no set."""
    out = []

    def walk(oid, depth, seen):
        elem = doc.objects.get(oid)
        sets = [c for c in elem if _local(c.tag) == "set"] if elem is not None else []
        if not sets or depth > limit_depth:
            if oid not in out:
                out.append(oid)
            return
        for node in sets:
            for sub in node.iter():
                if _local(sub.tag) == "object_reference":
                    ref = (sub.text or "").strip()
                    if ref and ref not in seen:
                        walk(ref, depth + 1, seen | {ref})

    walk(object_id, 0, {object_id})
    return out


def _sources(doc, var_id, limit_depth=6):
    """``(object ids, variable ids)`` a local variable is computed from: the objects of its
    ``object_component``s and the external or constant variables of its
    ``variable_component``s, following local variables, in document order, no duplicates."""
    objects = []
    variables = []
    seen = set()

    def walk(vid, depth):
        if vid in seen or depth > limit_depth:
            return
        seen.add(vid)
        var = doc.variables.get(vid)
        if var is None:
            return
        if depth > 0 and _local(var.tag) != "local_variable":
            variables.append(vid)
            return
        for node in var.iter():
            name = _local(node.tag)
            if name == "object_component" and node.get("object_ref") and node.get("object_ref") not in objects:
                objects.append(node.get("object_ref"))
            elif name == "variable_component" and node.get("var_ref"):
                walk(node.get("var_ref"), depth + 1)

    walk(var_id, 0)
    return objects, variables


def _variable(var_id, tested_vars, ctx, depth):
    """``{"var_ref", "type", "comment", "values", "xccdf_value"?, "from"?,
    "from_variables"?}`` for a variable reference.

    values: the test's tested_variable values, else any tested_variable/variable_value in
    the document, else a constant_variable's values (at most MAX_VALUES, each cut).
    xccdf_value: the XCCDF Value the rule's check exports to this (external) variable.
    from (local variables, top level only): the objects the variable is computed from,
    ``[{"object": {...}, "items": [...]}]``, at most MAX_SOURCES; from_variables: the
    external and constant variables it is computed from, at most MAX_SOURCES, each
    ``{"var_ref", "type", "comment", "values", "xccdf_value"?}``.
    """
    doc = ctx.doc
    var = doc.variables.get(var_id)
    values = tested_vars.get(var_id) or doc.var_values.get(var_id)
    if not values and var is not None and _local(var.tag) == "constant_variable":
        values = [v.text or "" for v in _children(var, "value")]
    out = {
        "var_ref": var_id,
        "type": _local(var.tag) if var is not None else None,
        "comment": ctx.cut(var.get("comment"), strip=True) if var is not None else None,
        "values": [ctx.cut(v) for v in ctx.capped(list(values or []), MAX_VALUES)],
    }
    if var_id in ctx.exports:
        out["xccdf_value"] = ctx.exports[var_id]
    if depth == 0 and var is not None and _local(var.tag) == "local_variable":
        objects, variables = _sources(doc, var_id)
        if objects:
            out["from"] = [
                {"object": _object(oid, tested_vars, ctx, depth + 1), "items": _collected_items(oid, ctx)}
                for oid in ctx.capped(objects, MAX_SOURCES)
            ]
        if variables:
            out["from_variables"] = [_variable(vid, tested_vars, ctx, depth + 1) for vid in ctx.capped(variables, MAX_SOURCES)]
    return out


def _object(object_id, tested_vars, ctx, depth=0):
    """``{"id", "type", "comment", "fields", "operations"?, "flag", "set_objects"?, "message"?}``.

    set_objects (an object defined as a ``<set>`` of objects, top level only): the
    objects the set is made of (nested sets flattened), at most MAX_SET_OBJECTS, in the
    same shape.

    flag: the collected object's flag (``complete``, ``does not exist``, ``error``,
    ``incomplete``, ``not collected``, ``not applicable``), None when not collected.
    message: oscap's messages on the collected object, joined.
    """
    doc = ctx.doc
    elem = doc.objects.get(object_id)
    collected = doc.collected.get(object_id)
    out = {
        "id": object_id,
        "type": _local(elem.tag) if elem is not None else None,
        "comment": ctx.cut(elem.get("comment"), strip=True) if elem is not None else None,
        "fields": {},
        "flag": collected.get("flag") if collected is not None else None,
    }
    if elem is not None:
        out["fields"], operations = _entities(elem, tested_vars, ctx, depth)
        if operations:
            out["operations"] = operations
    if depth == 0 and elem is not None:
        leaves = _set_leaves(doc, object_id)
        if leaves != [object_id]:
            out["set_objects"] = [_object(ref, tested_vars, ctx, depth + 1) for ref in ctx.capped(leaves, MAX_SET_OBJECTS)]
    messages = [m.text.strip() for m in _children(collected, "message") if (m.text or "").strip()]
    if messages:
        out["message"] = ctx.cut(" | ".join(messages))
    return out


def _state(state_id, tested_vars, ctx):
    """``{"id", "type", "comment", "fields", "operations"?}`` of an OVAL state."""
    elem = ctx.doc.states.get(state_id)
    out = {
        "id": state_id,
        "type": _local(elem.tag) if elem is not None else None,
        "comment": ctx.cut(elem.get("comment"), strip=True) if elem is not None else None,
        "fields": {},
    }
    if elem is not None:
        out["fields"], operations = _entities(elem, tested_vars, ctx, 0)
        if operations:
            out["operations"] = operations
    return out


def _item(item_id, ctx, result=None):
    """``{"id", "status", "fields", "result"?}`` of a collected item (result: from tested_item)."""
    elem = ctx.doc.items.get(item_id)
    out = {"id": item_id, "status": elem.get("status", "exists") if elem is not None else None, "fields": {}}
    if result is not None:
        out["result"] = result
    if elem is None:
        return out
    fields = {}
    for child in ctx.capped(list(elem), MAX_ITEM_FIELDS):
        name = _local(child.tag)
        if child.get(_XSI_NIL) == "true":
            value = None
        elif len(child):
            value = ctx.cut("; ".join("%s=%s" % (f.get("name") or _local(f.tag), (f.text or "").strip()) for f in child))
        else:
            value = ctx.cut(child.text or "")
        _add_field(fields, name, value, ctx)
    out["fields"] = fields
    return out


def _collected_items(object_id, ctx):
    collected = ctx.doc.collected.get(object_id)
    refs = [r.get("item_ref") for r in _children(collected, "reference") if r.get("item_ref")]
    return [_item(ref, ctx) for ref in ctx.capped(refs, ctx.max_items)]


def _test(test_id, negate, ctx):
    """Evidence of one OVAL test (see ``rule_evidence``)."""
    doc = ctx.doc
    elem = doc.tests.get(test_id)
    res = doc.test_results.get(test_id)
    tested_vars = {}
    for var in _children(res, "tested_variable"):
        tested_vars.setdefault(var.get("variable_id"), []).append(var.text or "")
    source = res if res is not None else elem
    out = {
        "id": test_id,
        "comment": ctx.cut(elem.get("comment"), strip=True) if elem is not None else None,
        "type": _local(elem.tag) if elem is not None else None,
        "result": res.get("result") if res is not None else None,
        "negate": negate,
        "check": source.get("check") if source is not None else None,
        "check_existence": (source.get("check_existence") if source is not None else None) or "at_least_one_exists",
        "object": None,
        "state": None,
        "items": [],
    }
    obj = _child(elem, "object")
    if obj is not None and obj.get("object_ref"):
        out["object"] = _object(obj.get("object_ref"), tested_vars, ctx)
    states = [s.get("state_ref") for s in _children(elem, "state") if s.get("state_ref")]
    if states:
        out["state"] = _state(states[0], tested_vars, ctx)
        if len(states) > 1:
            out["other_states"] = states[1:]
            out["state_operator"] = elem.get("state_operator", "AND")
    tested = [(t.get("item_id"), t.get("result")) for t in _children(res, "tested_item") if t.get("item_id")]
    if tested:
        out["items"] = [_item(item_id, ctx, result) for item_id, result in ctx.capped(tested, ctx.max_items)]
    elif out["object"] is not None:
        out["items"] = _collected_items(out["object"]["id"], ctx)
    return out


def rule_evidence(doc, definition_id, max_tests=MAX_TESTS, max_items=MAX_ITEMS, max_value_chars=MAX_VALUE_CHARS, exports=None):
    """Evidence of one OVAL definition in ``doc`` (an ``OvalResults``).

    Returns::

        {"definition": "oval:ssg-X:def:1", "title": str or None,
         "result": "false",                      # the definition's OVAL result
         "criteria": {...},                      # its criteria tree (``_criteria``)
         "tests": [test, ...],                   # at most max_tests
         "truncated": bool}                      # a cap cut something

    Each test: ``{"id", "comment", "type" ("textfilecontent54_test"), "result" (the
    test's own result, before any negate), "negate" (the criterion negates it), "check",
    "check_existence" (default at_least_one_exists), "object", "state" (None without
    one), "items"}``; ``other_states`` and ``state_operator`` when it has several states.
    Object and state: see ``_object`` / ``_state``; their ``fields`` map entity names to
    str, lists of str (repeated entity), None (``xsi:nil``) or, for an entity bound to a
    variable, ``_variable(...)``'s dict (``{"var_ref", "type", "comment", "values",
    "xccdf_value"?, "from"?, "from_variables"?}``). exports: ``{OVAL variable id: XCCDF
    Value id}`` of the rule's check (``failing_checks``). Items: at most
    max_items (the test's tested items, else the collected object's), each ``{"id",
    "status", "fields", "result"?}``. Every string from the document is cut to
    max_value_chars characters.

    The tests are those that made the definition fail, following extend_definition
    (see ``_culprit_tests``). Returns a dict with an ``error`` (and no tests) when the
    definition has no result in doc.
    """
    ctx = _Ctx(doc, max_tests, max_items, max_value_chars, exports)
    elem = doc.definitions.get(definition_id)
    title_elem = _child(_child(elem, "metadata"), "title")
    title = ctx.cut(title_elem.text or "", strip=True) if title_elem is not None else None
    res = doc.def_results.get(definition_id)
    out = {"definition": definition_id, "title": title, "result": None, "tests": [], "truncated": False}
    if res is None:
        out["error"] = "OVAL definition %s has no result in the OVAL results" % definition_id
        return out
    out["result"] = res.get("result")
    out["criteria"] = _criteria(doc, res, ctx)
    culprits = _culprit_tests(doc, res)
    out["tests"] = [_test(test_id, negate, ctx) for test_id, negate in ctx.capped(culprits, max_tests)]
    out["truncated"] = ctx.truncated
    return out


# --------------------------------------------------------------------------- budget


def _size(value):
    """Characters of value's JSON text (ASCII, so also its bytes)."""
    return len(json.dumps(value, sort_keys=True))


def _shrunk(entry, level):
    """A smaller copy of a rule's evidence; caps drop collected items before tests (issue 18):
    level 1 keeps one item per test (and per variable source) and no file contents, level 2
    keeps every test without items, level 3 keeps 3 tests, level 4 none (and no criteria)."""
    out = dict(entry, truncated=True)
    if out.get("files"):
        out["files"] = dict((path, dict((k, v) for k, v in facts.items() if k != "content"))
                            for path, facts in out["files"].items())
    if level >= 4:
        out["tests"] = []
        out["criteria"] = None
        return out
    tests = []
    for test in entry["tests"][: 3 if level >= 3 else len(entry["tests"])]:
        test = json.loads(json.dumps(test))
        keep = 0 if level >= 2 else 1
        if len(test["items"]) > keep:
            test["items_left_out"] = len(test["items"]) - keep + test.get("items_left_out", 0)
        test["items"] = test["items"][:keep]
        for part in (test.get("object"), test.get("state")):
            for value in (part or {}).get("fields", {}).values():
                if isinstance(value, dict):
                    for source in value.get("from", []):
                        source["items"] = source["items"][:keep]
        tests.append(test)
    if len(tests) < len(entry["tests"]):
        out["tests_left_out"] = len(entry["tests"]) - len(tests)
    out["tests"] = tests
    return out


# --------------------------------------------------------------------------- files the check reads

#: Paths whose content is never read into the evidence (hashes, keys): only their facts are.
_SECRET_PREFIXES = ("/etc/shadow", "/etc/gshadow", "/etc/security/opasswd", "/etc/ssl/private/",
                    "/etc/krb5.keytab", "/root/.ssh/", "/proc/", "/sys/")
_SECRET_SUFFIXES = (".key", ".pem", ".p12", ".pfx", ".keytab", "_key")


def secret_path(path):
    """True for a path whose content must not leave the host in the evidence (password
    hashes, private keys, kernel files whose reads have effects or never end)."""
    path = path or ""
    base = path.rsplit("/", 1)[-1]
    return (path.startswith(_SECRET_PREFIXES) or base.endswith(_SECRET_SUFFIXES)
            or ("/.ssh/id_" in path or base.startswith("ssh_host_")) and not base.endswith(".pub"))


def _object_paths(obj, out):
    """Literal paths an object (evidence dict) reads: ``filepath``, or ``path`` with
    ``filename`` (a nil filename is the directory itself), when compared with ``equals``."""
    if not obj:
        return
    fields = obj.get("fields") or {}
    ops = obj.get("operations") or {}
    path = None
    if isinstance(fields.get("filepath"), str) and "filepath" not in ops:
        path = fields["filepath"]
    elif isinstance(fields.get("path"), str) and "path" not in ops and "filename" not in ops:
        name = fields.get("filename")
        if name is None:
            path = fields["path"]
        elif isinstance(name, str):
            path = fields["path"].rstrip("/") + "/" + name
    if path and path.startswith("/") and path not in out:
        out.append(path)
    for sub in obj.get("set_objects") or []:
        _object_paths(sub, out)
    for value in fields.values():
        if isinstance(value, dict):
            for source in value.get("from") or []:
                _object_paths(source.get("object"), out)


def check_paths(entry):
    """The literal file paths the tests of a rule's evidence read, in order, no duplicates."""
    out = []
    for test in entry.get("tests") or []:
        _object_paths(test.get("object"), out)
        state = test.get("state") or {}
        for value in (state.get("fields") or {}).values():
            if isinstance(value, dict):
                for source in value.get("from") or []:
                    _object_paths(source.get("object"), out)
    return out


def build_evidence(
    checks,
    oval_files,
    max_rules=MAX_RULES,
    max_tests=MAX_TESTS,
    max_items=MAX_ITEMS,
    max_value_chars=MAX_VALUE_CHARS,
    max_bytes=MAX_BYTES,
    inspect=None,
):
    """Evidence of the failing rules in ``checks`` from the OVAL results files.

    checks: ``failing_checks(...)``'s dict. oval_files: ``{file name: bytes}`` of the
    files named by ``needed_files(checks)`` that could be read (a missing name is a file
    oscap did not write). inspect: ``path -> dict`` of what a file the check reads is on the
    host now (the module's ``describe_file``); with it each rule's evidence gets ``files``,
    ``{path: facts}`` for the first MAX_FILES of ``check_paths`` (so "the object does not
    exist" can be told apart: the file is missing, or no line of it matched).

    Returns ``{"evidence": {full_rule_id: rule evidence}, "truncated": bool,
    "omitted": [full_rule_id, ...]}``. Rule evidence: see ``rule_evidence``; a rule whose
    OVAL result cannot be read (no file, malformed file, a check that is not OVAL,
    definition absent) gets the same keys with no tests and an ``error`` string. Caps:
    the first max_rules rules (document order); the JSON text of ``evidence`` stays
    within about max_bytes characters (a rule that does not fit is shrunk: one item per
    test, then every test without items, then 3 tests, then no tests; a rule that does not fit even so is
    left out; file contents go at the first shrink). Rules left out are listed in ``omitted``; ``truncated`` is True when any cap
    cut anything. Never raises for bad OVAL files.
    """
    docs = {}
    errors = {}
    evidence = {}
    omitted = []
    truncated = False
    used = 2  # "{}"
    for n, (rule_id, check) in enumerate(checks.items()):
        if n >= max_rules:
            omitted.append(rule_id)
            truncated = True
            continue
        definition_id = check.get("name")
        entry = {"definition": definition_id, "title": None, "result": None, "tests": [], "truncated": False}
        if check.get("system") != OVAL_SYSTEM:
            entry["error"] = "the rule's check system is %s, not OVAL" % check.get("system")
        elif not definition_id or not check.get("href"):
            entry["error"] = "the rule-result names no OVAL definition (check-content-ref without name or href)"
        else:
            name = oval_results_name(check["href"])
            if name not in docs and name not in errors:
                data = oval_files.get(name)
                if data is None:
                    errors[name] = "oscap wrote no OVAL results file %s" % name
                else:
                    try:
                        docs[name] = OvalResults(data)
                    except ValueError as exc:
                        errors[name] = "OVAL results file %s cannot be read: %s" % (name, exc)
            if name in errors:
                entry["error"] = errors[name]
            else:
                entry = rule_evidence(docs[name], definition_id, max_tests, max_items, max_value_chars, check.get("exports"))
                if inspect is not None:
                    paths = check_paths(entry)[:MAX_FILES]
                    if paths:
                        entry["files"] = dict((path, inspect(path)) for path in paths)
        room = max_bytes - used - len(json.dumps(rule_id)) - 4  # ": " and ", "
        level = 0
        candidate = entry
        while _size(candidate) > room and level < 4:
            level += 1
            candidate = _shrunk(entry, level)
        if _size(candidate) > room:
            omitted.append(rule_id)
            truncated = True
            continue
        evidence[rule_id] = candidate
        used += _size(candidate) + len(json.dumps(rule_id)) + 4
        truncated = truncated or candidate["truncated"]
    return {"evidence": evidence, "truncated": truncated, "omitted": omitted}
