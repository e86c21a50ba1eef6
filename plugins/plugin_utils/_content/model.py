"""The records the catalog hands out (frozen: one catalog is shared by every caller in the
process) and the two it keeps for itself (``Value``, ``Item``).

They are pickled in the catalog's disk cache: a change here changes the cache's layout key
(``disk_cache.layout_version`` digests this package).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Mapping, Optional, Tuple


@dataclass(frozen=True)
class FixSnippet:
    """One ``<xccdf:fix>`` of a rule (the catalog keeps the Ansible one).

    Attributes:
        rule_id: full id of the rule it belongs to.
        system: the fix system URI (``urn:xccdf:fix:script:ansible``).
        complexity, disruption, strategy: XCCDF attributes, "unknown" when absent.
        reboot: XCCDF ``reboot`` attribute as bool (False when absent).
        value_ids: full ids of the XCCDF Values referenced by ``<xccdf:sub idref=...>``,
            in order of first appearance, no duplicates.
        text: the snippet text (a YAML task list) with each ``<xccdf:sub>`` left as the
            placeholder ``<xccdf:sub idref="FULL_VALUE_ID" use="legacy"/>``. It is not valid
            YAML to run as is: use ``Catalog.render_fix``.
    """

    rule_id: str
    system: str
    complexity: str
    disruption: str
    reboot: bool
    strategy: str
    value_ids: Tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Rule:
    """One XCCDF Rule, as plain data.

    Attributes:
        id: full id (``xccdf_org.ssgproject.content_rule_sshd_disable_root_login``).
        short_id: the id without its ``xccdf_<ns>_rule_`` prefix (``sshd_disable_root_login``).
        title: plain text.
        description, rationale: plain text. XHTML is stripped, whitespace collapsed inside
            paragraphs; ``pre`` blocks keep their lines and block elements start new lines;
            inline code and paths are kept as text. An ``<xccdf:sub>`` of a Value appears as
            ``[var_name]`` (see ``Catalog.describe`` for the text with a profile's values).
        severity: ``high`` | ``medium`` | ``low`` | ``info`` | ``unknown``.
        identifiers: {"cce": [...], "stig_id": [...], "stig_rule": [...], "srg": [...],
            "cci": [...]} (tuples; the five keys are always present, possibly empty);
            ``stig_rule`` holds DISA's rule version ids (``SV-258134r1045265_rule``).
        group_path: short ids of the groups from the benchmark's top down to the rule's parent
            (a skill maps them to its categories: ``skills.Skill.category_of``).
        requires: full ids named by ``<requires idref=...>`` (a space-separated idref list is
            split; XCCDF reads it as "one of these").
        conflicts: full ids named by ``<conflicts idref=...>``.
        ansible_fix: the Ansible ``FixSnippet`` or None.
        platforms: CPE platform idrefs of the rule and of its groups (``#package_openssh``,
            ``#machine``), the rule's own first; all must apply for the rule to apply.
        value_ids: full ids of the Values the rule's description, fix or check export use.
    """

    id: str
    short_id: str
    title: str
    description: str
    rationale: str
    severity: str
    identifiers: Mapping[str, Tuple[str, ...]]
    group_path: Tuple[str, ...]
    requires: Tuple[str, ...]
    conflicts: Tuple[str, ...]
    ansible_fix: Optional[FixSnippet]
    platforms: Tuple[str, ...]
    value_ids: Tuple[str, ...] = ()

    def __hash__(self) -> int:  # the dict field is not hashable; the id identifies a rule
        return hash(self.id)


@dataclass(frozen=True)
class Profile:
    """One XCCDF Profile of the benchmark, resolved (``extends`` applied).

    Attributes:
        id, short_id, title, description (plain text).
        selected_rules: full ids of the rules the profile selects, in benchmark document order
            (oscap's evaluation order). A rule counts as selected when its own selection (its
            ``selected`` attribute, overridden by the profile's ``<select>``) is true and every
            group above it is selected too.
        refine_values: {full value id: selector} from ``<refine-value>``.
        set_values: {full value id: literal} from ``<set-value>``.
        refine_rules: {full rule id: {attribute: value}} from ``<refine-rule>`` (severity,
            weight, role, selector).
        selections: {full item id: bool}, the profile's own ``<select>`` entries (rules and
            groups) after ``extends``; used to build tailorings.
        extends: full id of the profile it extends, None when it extends none.
    """

    id: str
    short_id: str
    title: str
    description: str
    selected_rules: Tuple[str, ...]
    refine_values: Mapping[str, str]
    set_values: Mapping[str, str]
    refine_rules: Mapping[str, Mapping[str, str]]
    selections: Mapping[str, bool]
    extends: Optional[str] = None

    def __hash__(self) -> int:
        return hash(self.id)


@dataclass(frozen=True)
class Tailoring:
    """A user's XCCDF 1.2 tailoring file applied to a catalog (``Catalog.with_tailoring``).

    Attributes:
        source: where it was read from (a path, for messages and reports).
        name: the file's base name.
        sha256: hex digest of the file's bytes as given.
        id: the Tailoring element's id ("" when it has none).
        profile_ids: full ids of its Profiles, document order.
        xml: the document re-serialized as UTF-8 text with an XML declaration (comments and
            processing instructions dropped), what oscap gets as ``--tailoring-file``.
    """

    source: str
    name: str
    sha256: str
    id: str
    profile_ids: Tuple[str, ...]
    xml: str


@dataclass(frozen=True)
class Value:
    """An XCCDF Value (internal): its default and its {selector: value} options."""

    id: str
    title: str
    type: str
    default: Optional[str]
    options: Mapping[str, str]  # selector -> value


@dataclass
class Item:
    """Selection data for a Rule or Group (internal)."""

    id: str
    kind: str  # "rule" | "group"
    selected: bool
    parent: Optional[str]
    cluster: Optional[str] = None
    children: List[str] = field(default_factory=list)
