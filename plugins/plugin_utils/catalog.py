# -*- coding: utf-8 -*-
# Copyright: scapforge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side catalog of a SCAP source datastream (XCCDF 1.2), parsed once with lxml.

The catalog answers what the loop needs to know about the content, without running oscap:
rules (text, severity, identifiers, category, requires/conflicts, the Ansible fix and the
XCCDF Values it uses), profiles (which rules they select, their refine-values), and the
rendering of a rule's vendor Ansible fix with a profile's values.

Usage::

    cat = Catalog.from_path("/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml")
    prof = cat.profile("anssi_bp28_high")          # short or full profile id
    rule = cat.rule("accounts_umask_etc_login_defs")  # short or full rule id
    tasks_yaml = cat.render_fix(rule.id, prof.id)  # str, a YAML list of task dicts

Parsing happens once per distinct content: catalogs are cached in-process by the sha256 of
the datastream bytes (``from_bytes`` / ``from_path`` return the cached object), and on disk
(a pickle per sha256 under ``~/.cache/scapforge/catalog``, or ``$SCAPFORGE_CATALOG_CACHE``;
an empty value turns it off), so the forks of one ansible-playbook run and later runs load
the parsed catalog instead of parsing the XML again (issue 9: ssg-rhel9-ds.xml, 25.6 MB,
about 0.8 s to parse, 0.05 s to load; see ``_content.disk_cache``). The cache file's name
carries a digest of this module's and ``_content``'s sources, so a changed catalog never
reads an older layout. Everything
the catalog hands out is immutable (frozen dataclasses, tuples, and dicts that callers must
treat as read-only), since one object is shared by every caller in the process.

The catalog's parts live in the private subpackage ``_content`` (reading the datastream,
the records, profiles, tailoring files, values, the disk cache); this module keeps the
``Catalog`` and every name other code imports from it.

Controller only: this module needs lxml, which targets may not have.
"""

from __future__ import annotations

import copy
import glob
import hashlib
import os
import re
import threading
import time
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content import disk_cache
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.datastream import (
    BenchmarkReader,
    benchmark_of,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.errors import CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.ids import (
    full_id,
    short_id,
    sub_placeholder,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.model import (
    FixSnippet,
    Item,
    Profile,
    Rule,
    Tailoring,
    Value,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.profiles import profile_entries
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.tailoring_file import (
    TailoringChecker,
    tailoring_root,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.values import render_subs, value_under
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.xccdf import (
    ANSIBLE_FIX_SYSTEM,
    DS_NS,
    T_PROFILE,
    X,
    XCCDF11_NS,
    XCCDF12_NS,
    XHTML_NS,
    no_sub,
    plain_text,
)

try:
    from lxml import etree
except ImportError:
    deps.missing("lxml")

__all__ = [
    "Catalog",
    "CatalogError",
    "FixSnippet",
    "Profile",
    "Rule",
    "Tailoring",
    "ANSIBLE_FIX_SYSTEM",
    "XCCDF12_NS",
]

# the names this module has always had (other code imports them from here)
_REEXPORTED = (DS_NS, XCCDF11_NS, XHTML_NS)

_CACHE_SIZE = 4
_cache: "OrderedDict[str, Catalog]" = OrderedDict()
_cache_lock = threading.Lock()
#: the on-disk layout's version: a digest of this module and of _content (a changed Rule,
#: reader or Catalog never loads an older pickle)
_DISK_LAYOUT = disk_cache.layout_version(
    [__file__] + glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_content", "*.py")))


class Catalog:
    """The parsed content of one SCAP source datastream (its first XCCDF 1.2 Benchmark).

    Build with ``Catalog.from_bytes`` or ``Catalog.from_path`` (cached by sha256), not with
    the constructor. Attributes: ``sha256`` (hex digest of the bytes), ``benchmark_id``,
    ``benchmark_version`` (e.g. "0.1.76"), ``id_namespace`` (``xccdf_org.ssgproject.content_``),
    ``rules`` ({full id: Rule}, document order), ``profiles`` ({full id: title}),
    ``parse_seconds`` (time spent parsing and indexing, when it was parsed), ``loaded_from_disk``
    and ``load_seconds`` (True and the seconds when it came from the disk cache), ``tailoring`` (None; a ``Tailoring``
    on the view ``with_tailoring`` returns), ``removed_packages`` (None until
    ``host_setup.load_catalog`` sets it: ``package_checks.removed_packages`` of the content).
    """

    removed_packages: Optional[Dict[str, Tuple[str, ...]]] = None

    tailoring: Optional[Tailoring] = None
    loaded_from_disk = False
    load_seconds = 0.0

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> "Catalog":
        """Catalog of a datastream given as bytes; parsed once per distinct sha256.

        Raises CatalogError when the bytes are not well-formed XML or not a SCAP source
        datastream with an XCCDF 1.2 Benchmark.
        """
        if not isinstance(data, (bytes, bytearray)):
            raise CatalogError("datastream must be bytes, got %s" % type(data).__name__)
        digest = hashlib.sha256(data).hexdigest()
        with _cache_lock:
            hit = _cache.get(digest)
            if hit is not None:
                _cache.move_to_end(digest)
                return hit

        catalog = disk_cache.cached(digest, _DISK_LAYOUT, cls, lambda: cls._parsed(bytes(data), digest, source))
        catalog.source = source
        with _cache_lock:
            _cache[digest] = catalog
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
        return catalog

    @classmethod
    def _parsed(cls, data: bytes, digest: str, source: str) -> "Catalog":
        started = time.perf_counter()
        catalog = cls(data, digest, source)
        catalog.parse_seconds = time.perf_counter() - started
        return catalog

    @classmethod
    def from_path(cls, path) -> "Catalog":
        """Catalog of the datastream file at ``path`` (str or path-like).

        Raises CatalogError when the file cannot be read or is not a usable datastream.
        """
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise CatalogError("cannot read datastream %s: %s" % (path, exc.strerror or exc)) from None
        return cls.from_bytes(data, source=str(path))

    @classmethod
    def cached(cls, sha256: str) -> "Optional[Catalog]":
        """The catalog of the datastream whose sha256 is ``sha256`` when this process or the
        disk cache already holds it, else None; never parses (the reports of a run look up
        the content its hosts used)."""
        with _cache_lock:
            hit = _cache.get(sha256)
        if hit is not None:
            return hit
        directory = disk_cache.cache_dir()
        if not directory or not sha256:
            return None
        found = disk_cache.load(os.path.join(directory, "%s-%s.pickle" % (sha256, _DISK_LAYOUT)), sha256, cls)
        return found if isinstance(found, cls) else None

    @staticmethod
    def clear_cache() -> None:
        """Forget every cached catalog (tests, long-lived processes)."""
        with _cache_lock:
            _cache.clear()

    def __init__(self, data: bytes, sha256: str, source: str = "<bytes>") -> None:
        self.sha256 = sha256
        self.source = source
        self.parse_seconds = 0.0
        benchmark = benchmark_of(data, source)
        self.benchmark_id: str = benchmark.get("id", "")
        self.benchmark_version: str = (benchmark.findtext(X + "version") or "").strip()
        self.title: str = plain_text(benchmark.find(X + "title"), no_sub)
        match = re.match(r"^(xccdf_.+?_)benchmark_", self.benchmark_id)
        self.id_namespace: str = match.group(1) if match else ""
        reader = BenchmarkReader(self.id_namespace).read(benchmark)
        self._values: Dict[str, Value] = reader.values
        self._plain: Dict[str, str] = reader.plain
        self._items: Dict[str, Item] = reader.items
        self._clusters: Dict[str, List[str]] = reader.clusters
        self.rules: Dict[str, Rule] = reader.rules
        self._profile_elems: Dict[str, Any] = OrderedDict(
            (p.get("id"), p) for p in benchmark.iter(T_PROFILE) if p.get("id")
        )
        self.profiles: Dict[str, str] = OrderedDict(
            (pid, plain_text(p.find(X + "title"), no_sub)) for pid, p in self._profile_elems.items()
        )
        self._profile_cache: Dict[str, Profile] = {}
        self._profile_descriptions = {
            pid: plain_text(p.find(X + "description"), self._sub_placeholder)
            for pid, p in self._profile_elems.items()
        }
        # resolve all profiles now, then drop the tree
        for pid in list(self._profile_elems):
            self._resolve_profile(pid, ())
        self._profile_elems = {}

    # ------------------------------------------------------------------ ids
    def _full(self, ident: str, kind: str) -> str:
        return full_id(self.id_namespace, ident, kind)

    def _short(self, ident: str, kind: str) -> str:
        return short_id(self.id_namespace, ident, kind)

    def _sub_placeholder(self, idref: str) -> str:
        return sub_placeholder(self._plain, self.id_namespace, idref)

    # ------------------------------------------------------------------ profiles
    def _resolve_profile(self, pid: str, seen: Tuple[str, ...]) -> Profile:
        if pid in self._profile_cache:
            return self._profile_cache[pid]
        elem = self._profile_elems[pid]
        base = elem.get("extends")
        parent = None
        if base:
            if base in seen or (base not in self._profile_elems and base not in self._profile_cache):
                raise CatalogError("profile %s extends %s, which is %s" % (
                    pid, base, "circular" if base in seen else "not in the benchmark"))
            parent = self._resolve_profile(base, seen + (pid,))
        selections, refine_values, set_values, refine_rules = profile_entries(
            elem, self._items, self._clusters, parent)
        profile = Profile(
            id=pid,
            short_id=self._short(pid, "profile"),
            title=self.profiles.get(pid, ""),
            description=self._profile_descriptions.get(pid, ""),
            selected_rules=self.effective_selection(selections),
            refine_values=refine_values,
            set_values=set_values,
            refine_rules=refine_rules,
            selections=selections,
            extends=base or None,
        )
        self._profile_cache[pid] = profile
        return profile

    def effective_selection(self, selections: Mapping[str, bool]) -> Tuple[str, ...]:
        """Rule ids (document order) selected under ``selections`` ({item id: bool}).

        A rule is selected when its own flag (its ``selected`` attribute unless
        ``selections`` names it) is true and so is the flag of every group above it.
        """
        out = []
        for rid in self.rules:
            item = self._items[rid]
            ok = selections.get(rid, item.selected)
            parent = item.parent
            while ok and parent:
                ok = selections.get(parent, self._items[parent].selected)
                parent = self._items[parent].parent
            if ok:
                out.append(rid)
        return tuple(out)

    def group_ancestors(self, rule_id: str) -> Tuple[str, ...]:
        """Full ids of the groups above a rule, nearest first. Raises CatalogError if unknown."""
        rid = self.rule(rule_id).id
        out = []
        parent = self._items[rid].parent
        while parent:
            out.append(parent)
            parent = self._items[parent].parent
        return tuple(out)

    def rules_under(self, group_id: str) -> Tuple[str, ...]:
        """Full ids of every rule inside a group (any depth), document order."""
        out: List[str] = []
        stack = [group_id]
        while stack:
            item = self._items.get(stack.pop())
            if item is None:
                continue
            for child in item.children:
                if self._items[child].kind == "rule":
                    out.append(child)
                else:
                    stack.append(child)
        order = {rid: n for n, rid in enumerate(self.rules)}
        return tuple(sorted(out, key=order.__getitem__))

    def default_selected(self, item_id: str) -> bool:
        """The benchmark's own ``selected`` flag for a rule or group id (full)."""
        try:
            return self._items[item_id].selected
        except KeyError:
            raise CatalogError("no rule or group %s in %s" % (item_id, self.benchmark_id)) from None

    def profile(self, profile_id: str) -> Profile:
        """The Profile for a full or short id (``anssi_bp28_high``).

        Raises CatalogError naming the profile and listing available ones if unknown.
        """
        full = self._full(profile_id, "profile")
        try:
            return self._profile_cache[full]
        except KeyError:
            shorts = [self._short(p, "profile") for p in self.profiles]
            raise CatalogError(
                "profile %r is not in %s %s; available: %s" % (
                    profile_id, self.benchmark_id, self.benchmark_version,
                    ", ".join(shorts[:12]) + (" ..." if len(shorts) > 12 else ""))
            ) from None

    # ------------------------------------------------------------------ tailoring
    def with_tailoring(self, data: bytes, source: str = "<tailoring>") -> "Catalog":
        """A view of this catalog with the Profiles of an XCCDF 1.2 tailoring file added.

        The view shares rules, groups and Values with this catalog, which stays as it was
        (it is cached and shared by every host): only the profile tables are copied, so a
        view costs one selection pass per tailored profile. On the view, ``profile``,
        ``value(vid, profile_id)``, ``render_fix`` and ``describe`` resolve a tailored profile
        exactly like the benchmark's own (``extends``, select, refine-value, set-value,
        refine-rule); ``tailoring`` says which file it was.

        Args:
            data: the file's bytes.
            source: its path (for messages and ``Tailoring.name``).

        Raises:
            CatalogError naming ``source`` and the id at fault: not well-formed XML; a root
            that is not an XCCDF 1.2 ``<Tailoring>``; no Profile; a Profile without id, with
            an id the benchmark or the file already has; ``extends`` naming no profile of
            either, or circular; a select or refine-rule naming no rule, group or cluster of
            the benchmark; a refine-value or set-value naming no Value; a refine-value
            selector the Value lacks.
        """
        if not isinstance(data, (bytes, bytearray)):
            raise CatalogError("tailoring file %s must be bytes, got %s" % (source, type(data).__name__))
        root = tailoring_root(bytes(data), source)
        elems = TailoringChecker(self.benchmark_id, self.benchmark_version, self.profiles, self._items,
                                 self._clusters, self._values).profile_elems(root, source)
        view = copy.copy(self)
        view.profiles = OrderedDict(self.profiles)
        view._profile_descriptions = dict(self._profile_descriptions)
        view._profile_cache = dict(self._profile_cache)
        for pid, elem in elems.items():
            view.profiles[pid] = plain_text(elem.find(X + "title"), no_sub)
            view._profile_descriptions[pid] = plain_text(elem.find(X + "description"), self._sub_placeholder)
        view._profile_elems = elems
        try:
            for pid in elems:
                view._resolve_profile(pid, ())
        except CatalogError as exc:
            raise CatalogError("tailoring file %s: %s" % (source, exc)) from None
        finally:
            view._profile_elems = {}
        view.tailoring = Tailoring(
            source=source,
            name=os.path.basename(source),
            sha256=hashlib.sha256(data).hexdigest(),
            id=root.get("id", ""),
            profile_ids=tuple(elems),
            xml=etree.tostring(root, xml_declaration=True, encoding="UTF-8").decode("utf-8"),
        )
        return view

    def tailoring_profile(self, profile_id: str) -> Profile:
        """The tailoring's Profile for a full id, or a short one (``anssi_bp28_high_customized``).

        Raises CatalogError when this catalog has no tailoring, or the id is not one of the
        tailoring's profiles (the message lists them; a benchmark profile is refused too).
        """
        if self.tailoring is None:
            raise CatalogError("no tailoring file is applied to %s" % self.benchmark_id)
        ids = self.tailoring.profile_ids
        full = self._full(profile_id, "profile")
        if full not in ids:
            full = next((p for p in ids if self._short(p, "profile") == profile_id), full)
        if full not in ids:
            raise CatalogError("profile %r is not in tailoring file %s; its profiles: %s" % (
                profile_id, self.tailoring.source, ", ".join(ids)))
        return self._profile_cache[full]

    def datastream_ancestor(self, profile_id: str) -> Optional[Profile]:
        """The benchmark's own profile nearest on a profile's ``extends`` chain: the profile
        itself when it is the benchmark's, None for a tailored chain that extends none
        (what a generated tailoring, which replaces the user's file, can extend). Raises
        CatalogError for an unknown profile."""
        prof = self.profile(profile_id)
        tailored = set(self.tailoring.profile_ids) if self.tailoring else set()
        while prof.id in tailored:
            if prof.extends is None:
                return None
            prof = self.profile(prof.extends)
        return prof

    # ------------------------------------------------------------------ rules
    def rule(self, rule_id: str) -> Rule:
        """The Rule for a full or short id. Raises CatalogError if the benchmark has none."""
        full = self._full(rule_id, "rule")
        try:
            return self.rules[full]
        except KeyError:
            short = self._short(full, "rule")
            near = [r.short_id for r in self.rules.values() if short[:6] and r.short_id.startswith(short[:6])]
            raise CatalogError("rule %r is not in %s %s%s" % (
                rule_id, self.benchmark_id, self.benchmark_version,
                ("; similar: " + ", ".join(near[:8])) if near else "")) from None

    def expand_requires(self, rule_ids: Iterable[str]) -> List[str]:
        """The given rules plus, transitively, every rule they ``<requires>`` (decision 6).

        Returns full ids: the given ones first in their order, then the added ones in the
        order found; no duplicates. Required ids that are groups, not rules, are left out.
        Raises CatalogError for an unknown rule id.
        """
        out: List[str] = []
        queue = [self.rule(r).id for r in rule_ids]
        while queue:
            rid = queue.pop(0)
            if rid in out:
                continue
            out.append(rid)
            for req in self.rules[rid].requires:
                if req in self.rules and req not in out:
                    queue.append(req)
        return out

    # ------------------------------------------------------------------ values
    def value(self, value_id: str, profile_id: Optional[str] = None) -> str:
        """The value of an XCCDF Value under a profile (full or short ids).

        Order: the profile's ``<set-value>``; its ``<refine-value selector>``; the Value's
        default (its ``<value>`` without selector, else its first ``<value>``, as oscap
        reads NISTIR-7275r4). With no profile, the default. Raises CatalogError for an
        unknown Value or profile, a refine-value naming a selector the Value lacks (oscap
        fails the check then too), or a Value without any ``<value>``.
        """
        vid = self._full(value_id, "value")
        val = self._values.get(vid)
        if val is None:
            raise CatalogError("XCCDF Value %r is not in %s" % (value_id, self.benchmark_id))
        prof = self.profile(profile_id) if profile_id is not None else None
        return value_under(val, prof, self._short(vid, "value"))

    def rule_values(self, rule_id: str, profile_id: Optional[str] = None) -> Dict[str, str]:
        """{short Value id: its value under the profile} for the XCCDF Values the rule uses
        (``Rule.value_ids`` order). Raises CatalogError for an unknown rule or profile."""
        return {self._short(vid, "value"): self.value(vid, profile_id) for vid in self.rule(rule_id).value_ids}

    def value_selectors(self, value_id: str) -> Dict[str, str]:
        """{selector: value} of a Value (full or short id). Raises CatalogError if unknown."""
        vid = self._full(value_id, "value")
        if vid not in self._values:
            raise CatalogError("XCCDF Value %r is not in %s" % (value_id, self.benchmark_id))
        return dict(self._values[vid].options)

    def has_value(self, value_id: str) -> bool:
        """True when the benchmark defines this Value (full or short id)."""
        return self._full(value_id, "value") in self._values

    # ------------------------------------------------------------------ rendering
    def render_fix(self, rule_id: str, profile_id: Optional[str] = None) -> str:
        """The rule's Ansible fix as YAML text (a task list) with the profile's values.

        Each ``<xccdf:sub>`` becomes ``catalog.value(id, profile_id)`` as a YAML
        double-quoted string (the content writes ``key: !!str <sub/>``; a sub with other
        text around it on its line is inserted unquoted). ``yaml.safe_load`` of the result
        is a list of task dicts. Raises CatalogError for an unknown rule or profile, a rule
        without an Ansible fix, or an unknown Value.
        """
        rule = self.rule(rule_id)
        if rule.ansible_fix is None:
            raise CatalogError("rule %s has no Ansible fix in %s" % (rule.short_id, self.benchmark_id))
        return render_subs(rule.ansible_fix.text, lambda vid: self.value(vid, profile_id))

    def describe(self, rule_id: str, profile_id: Optional[str] = None) -> str:
        """The rule's description with ``[var_x]`` placeholders replaced by the profile's
        values (the defaults without a profile). Raises CatalogError as ``rule``/``value``."""
        rule = self.rule(rule_id)
        text = rule.description
        for vid in rule.value_ids:
            marker = "[%s]" % self._short(vid, "value")
            if marker in text:
                text = text.replace(marker, self.value(vid, profile_id))
        return text

    def __repr__(self) -> str:
        return "<Catalog %s %s: %d rules, %d profiles, sha256 %s>" % (
            self.benchmark_id, self.benchmark_version, len(self.rules), len(self.profiles), self.sha256[:12])
