"""Checks that prove nothing on this host (issue 17 item 7): ``check_unreliable``.

A "package removed" check (SSG's ``package_<name>_removed``: an OVAL ``dpkginfo_test`` with
``check_existence="none_exist"`` on a package name) passes whenever no package of that name
is installed. When the distribution has no package of that name at all (apt knows no
candidate: ``net-snmp`` where Debian ships ``snmpd``), the pass says nothing about the
software the rule means to forbid. Three pure steps, pinned by tests/unit/plugins/plugin_utils/test_package_checks.py:

- :func:`removed_packages`: {full rule id: package names} of the rules whose OVAL check is
  only such tests, from the datastream's bytes (lxml);
- :func:`candidates_command` / :func:`parse_candidates`: one read-only ``apt-cache policy``
  on the host and its answer, {name: candidate version or None};
- :func:`unreliable`: the passing rules whose package names have no candidate, judged only
  when apt's lists exist (``dpkg``, always installed, has a candidate).
"""

from __future__ import annotations

import re
import shlex
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps

try:
    from lxml import etree
except ImportError:
    deps.missing("lxml")

XCCDF = "{http://checklists.nist.gov/xccdf/1.2}"
OVAL = "{http://oval.mitre.org/XMLSchema/oval-definitions-5}"
LINUX = "{http://oval.mitre.org/XMLSchema/oval-definitions-5#linux}"
OVAL_SYSTEM = "http://oval.mitre.org/XMLSchema/oval-definitions-5"
#: a package every Debian host has installed: without a candidate for it, apt's lists are missing.
WITNESS = "dpkg"
REASON = "check_unreliable"


def _definition_packages(definition, definitions: dict, tests: dict, seen: frozenset) -> list | None:
    """The package names of a definition whose criteria are only none_exist dpkginfo tests
    (through extend_definition), else None."""
    names: list = []
    criteria = definition.find(OVAL + "criteria")
    if criteria is None:
        return None
    for node in criteria.iter(OVAL + "criterion", OVAL + "extend_definition"):
        if node.tag == OVAL + "criterion":
            test = tests.get(node.get("test_ref"))
            if test is None or node.get("negate") == "true":
                return None
            names.append(test)
            continue
        ref = node.get("definition_ref")
        if ref in seen or ref not in definitions:
            return None
        inner = _definition_packages(definitions[ref], definitions, tests, seen | {ref})
        if inner is None:
            return None
        names.extend(inner)
    return list(dict.fromkeys(names)) or None


def removed_packages(data: bytes) -> dict[str, tuple[str, ...]]:
    """{full XCCDF rule id: package names} of the rules whose OVAL check passes only when no
    package of those names is installed (see the module docstring). Never raises: content
    it cannot read gives {}."""
    if "lxml" in deps.MISSING:
        return {}
    try:
        root = etree.fromstring(data, parser=etree.XMLParser(huge_tree=True, resolve_entities=False, no_network=True))
    except (etree.XMLSyntaxError, ValueError):
        return {}
    objects = {o.get("id"): (o.findtext(LINUX + "name") or "").strip() for o in root.iter(LINUX + "dpkginfo_object")}
    tests = {}
    for test in root.iter(LINUX + "dpkginfo_test"):
        ref = test.find(LINUX + "object")
        name = objects.get(ref.get("object_ref")) if ref is not None else None
        if test.get("check_existence") == "none_exist" and test.find(LINUX + "state") is None and name:
            tests[test.get("id")] = name
    definitions = {d.get("id"): d for d in root.iter(OVAL + "definition")}
    out: dict[str, tuple[str, ...]] = {}
    for rule in root.iter(XCCDF + "Rule"):
        for check in rule.findall(XCCDF + "check"):
            ref = check.find(XCCDF + "check-content-ref")
            if check.get("system") != OVAL_SYSTEM or ref is None or ref.get("name") not in definitions:
                continue
            names = _definition_packages(definitions[ref.get("name")], definitions, tests, frozenset())
            if names:
                out[rule.get("id")] = tuple(names)
    return out


def candidates_command(names: t.Iterable[str]) -> str:
    """One read-only command: ``apt-cache policy`` of :data:`WITNESS` and ``names``."""
    return "LC_ALL=C apt-cache policy %s 2>/dev/null; true" % " ".join(
        shlex.quote(n) for n in [WITNESS] + sorted(set(names) - {WITNESS}))


def parse_candidates(stdout: str) -> dict[str, str | None]:
    """{package name: candidate version, or None for ``(none)``} from ``apt-cache policy``;
    a name apt does not know at all is absent."""
    out: dict[str, str | None] = {}
    current = None
    for line in (stdout or "").splitlines():
        head = re.match(r"^(\S+):$", line)
        if head:
            current = head.group(1)
            continue
        found = re.match(r"^\s+Candidate:\s*(\S+)", line)
        if found and current is not None:
            out[current] = None if found.group(1) == "(none)" else found.group(1)
    return out


def unreliable(passing: t.Iterable[str], checks: t.Mapping[str, t.Sequence[str]],
               candidates: t.Mapping[str, str | None]) -> dict[str, list[str]]:
    """{rule: its package names without a candidate} of the ``passing`` rules whose check is
    a package-removed check (``checks``: :func:`removed_packages`) on a name apt has no
    candidate for. {} when :data:`WITNESS` has no candidate (apt's lists missing: no judgement)."""
    if not candidates.get(WITNESS):
        return {}
    out = {}
    for rule in passing:
        missing = [n for n in checks.get(rule) or () if not candidates.get(n)]
        if missing:
            out[rule] = missing
    return out


def detail(names: t.Sequence[str], known: t.Mapping[str, str] | None = None) -> str:
    """The outcome's detail of a ``check_unreliable`` rule; ``known``: the skill's
    ``known_content_defects`` entry of the rule (its evidence is added)."""
    text = ("passes only because no package named %s is installed, and this host's package sources have no package "
            "of that name: the check cannot see the software it means to forbid (it may run under another package "
            "name); a person checks by hand" % " or ".join(names))
    if known:
        text += "; a known content defect: %s (evidence: %s)" % (known.get("defect"), known.get("evidence"))
    return text[:800]
