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
about 0.8 s to parse, 0.05 s to load). A file lock makes one process parse while the others
wait and then load. Only a cache file owned by this user and writable by no one else is
loaded, and its name carries a digest of this module's source, so a changed catalog.py
never reads an older layout. Everything
the catalog hands out is immutable (frozen dataclasses, tuples, and dicts that callers must
treat as read-only), since one object is shared by every caller in the process.

Controller only: this module needs lxml, which targets may not have.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import pickle
import re
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps

try:
    from filelock import FileLock, Timeout
except ImportError:
    deps.missing("filelock")
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

XCCDF12_NS = "http://checklists.nist.gov/xccdf/1.2"
XCCDF11_NS = "http://checklists.nist.gov/xccdf/1.1"
DS_NS = "http://scap.nist.gov/schema/scap/source/1.2"
XHTML_NS = "http://www.w3.org/1999/xhtml"
ANSIBLE_FIX_SYSTEM = "urn:xccdf:fix:script:ansible"

_X = "{%s}" % XCCDF12_NS
_T_BENCHMARK = _X + "Benchmark"
_T_GROUP = _X + "Group"
_T_RULE = _X + "Rule"
_T_VALUE = _X + "Value"
_T_PROFILE = _X + "Profile"
_T_TAILORING = _X + "Tailoring"
_T_SUB = _X + "sub"

# CCE identifiers: <ident system="https://nvd.nist.gov/cce/index.cfm">CCE-90839-2</ident>.
_CCE_SYSTEM_RE = re.compile(r"cce", re.IGNORECASE)
_CCE_RE = re.compile(r"^CCE-\d+-\d$")
# DISA STIG IDs (RHEL-08-010020, OL08-00-010020, SLES-15-010000, UBTU-22-...): SSG puts them in
# <reference href="https://public.cyber.mil/stigs/downloads/?_dl_facet_stigs=operating-systems%2Cunix-linux">,
# newer releases may carry them as <ident>. Recognised by their shape, wherever they are.
_STIG_ID_RE = re.compile(r"^[A-Z][A-Z0-9]*-\d{2}-\d{6}$")
# SRG ids ride on the general-purpose-os STIG href: SRG-OS-000480-GPOS-00227.
_SRG_RE = re.compile(r"^SRG-[A-Z]+-\d+(-[A-Z]+-\d+)?$")
_CCI_RE = re.compile(r"^CCI-\d+$")
# DISA's rule version id (SV-258134r1045265_rule), on the srg-stig-tools href; its number is
# the vulnerability id (V-258134) STIG Viewer shows as Vuln_Num.
_SV_RE = re.compile(r"^SV-\d+r\d+_rule$")


class CatalogError(Exception):
    """Raised for content the catalog cannot use and for lookups that name nothing in it.

    The message is for humans (it names the file or id and, for unknown ids, a few that
    exist); no lxml traceback is chained to it.
    """


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
class _Value:
    id: str
    title: str
    type: str
    default: Optional[str]
    options: Mapping[str, str]  # selector -> value


@dataclass
class _Item:
    """Selection data for a Rule or Group (internal)."""

    id: str
    kind: str  # "rule" | "group"
    selected: bool
    parent: Optional[str]
    cluster: Optional[str] = None
    children: List[str] = field(default_factory=list)


# --------------------------------------------------------------------------- text helpers

_BLOCK_TAGS = {"p", "pre", "br", "li", "ul", "ol", "div", "table", "tr", "h1", "h2", "h3",
               "h4", "blockquote", "dl", "dt", "dd"}
_WS_RE = re.compile(r"[ \t\r\f\v\n]+")


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _plain_text(elem, sub_text) -> str:
    """Plain text of an XCCDF text element with XHTML markup (see ``Rule.description``)."""
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
            tag = _local(child.tag)
            if child.tag == _T_SUB:
                out.append(sub_text(child.get("idref", "")))
            elif tag in _BLOCK_TAGS and child.tag.startswith("{%s}" % XHTML_NS):
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


def _xccdf_bool(value: Optional[str], default: bool) -> bool:
    if value is None:
        return default
    return value.strip().lower() in ("true", "1")


def _xml_parser():
    """A parser that never fetches, expands entities or loads a DTD (content is untrusted)."""
    return etree.XMLParser(
        resolve_entities=False, no_network=True, huge_tree=True,
        remove_comments=True, remove_pis=True, load_dtd=False,
    )


def _xml_root(data: bytes, what: str, source: str):
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


# --------------------------------------------------------------------------- the catalog

_CACHE_SIZE = 4
_cache: "OrderedDict[str, Catalog]" = OrderedDict()
_cache_lock = threading.Lock()
with open(__file__, "rb") as _own_source:
    #: the on-disk layout's version: a digest of this module (a changed Rule or Catalog never
    #: loads an older pickle)
    _DISK_LAYOUT = hashlib.sha256(_own_source.read()).hexdigest()[:12]


def _disk_cache_dir() -> Optional[str]:
    """``$SCAPFORGE_CATALOG_CACHE`` (empty: no disk cache) or ``~/.cache/scapforge/catalog``."""
    value = os.environ.get("SCAPFORGE_CATALOG_CACHE")
    if value is not None:
        return value or None
    return os.path.join(os.path.expanduser("~"), ".cache", "scapforge", "catalog")


def _disk_load(path: str, digest: str) -> "Optional[Catalog]":
    """The catalog pickled at ``path``, or None: missing, not ours, writable by others,
    unreadable, or not the catalog of ``digest``."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    try:
        with open(path, "rb") as handle:
            catalog = pickle.load(handle)
    except Exception:  # a truncated or foreign file: parse again
        return None
    return catalog if isinstance(catalog, Catalog) and catalog.sha256 == digest else None


def _disk_store(directory: str, path: str, catalog: "Catalog") -> None:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".catalog-")
    try:
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(catalog, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _disk_cached(digest: str, parse) -> "Catalog":
    """The catalog of ``digest`` from the disk cache, else ``parse()`` stored there. One process
    parses while the others wait on the lock (forks of one run). A cache that cannot be used
    (no home, read-only, lock timeout) is skipped: the catalog is parsed as without one."""
    directory = _disk_cache_dir()
    if not directory:
        return parse()
    path = os.path.join(directory, "%s-%s.pickle" % (digest, _DISK_LAYOUT))
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        lock = FileLock(path + ".lock", timeout=120)
        lock.acquire()
    except (OSError, Timeout):
        return parse()
    try:
        started = time.perf_counter()
        catalog = _disk_load(path, digest)
        if catalog is not None:
            catalog.loaded_from_disk = True
            catalog.load_seconds = time.perf_counter() - started
            return catalog
        catalog = parse()
        with contextlib.suppress(OSError, pickle.PicklingError):
            _disk_store(directory, path, catalog)
        return catalog
    finally:
        lock.release()


class Catalog:
    """The parsed content of one SCAP source datastream (its first XCCDF 1.2 Benchmark).

    Build with ``Catalog.from_bytes`` or ``Catalog.from_path`` (cached by sha256), not with
    the constructor. Attributes: ``sha256`` (hex digest of the bytes), ``benchmark_id``,
    ``benchmark_version`` (e.g. "0.1.76"), ``id_namespace`` (``xccdf_org.ssgproject.content_``),
    ``rules`` ({full id: Rule}, document order), ``profiles`` ({full id: title}),
    ``parse_seconds`` (time spent parsing and indexing, when it was parsed), ``loaded_from_disk``
    and ``load_seconds`` (True and the seconds when it came from the disk cache), ``tailoring`` (None; a ``Tailoring``
    on the view ``with_tailoring`` returns).
    """

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

        catalog = _disk_cached(digest, lambda: cls._parsed(bytes(data), digest, source))
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
        directory = _disk_cache_dir()
        if not directory or not sha256:
            return None
        return _disk_load(os.path.join(directory, "%s-%s.pickle" % (sha256, _DISK_LAYOUT)), sha256)

    @staticmethod
    def clear_cache() -> None:
        """Forget every cached catalog (tests, long-lived processes)."""
        with _cache_lock:
            _cache.clear()

    def __init__(self, data: bytes, sha256: str, source: str = "<bytes>") -> None:
        self.sha256 = sha256
        self.source = source
        self.parse_seconds = 0.0
        benchmark = self._parse(data, source)
        self.benchmark_id: str = benchmark.get("id", "")
        self.benchmark_version: str = (benchmark.findtext(_X + "version") or "").strip()
        self.title: str = _plain_text(benchmark.find(_X + "title"), lambda i: "")
        match = re.match(r"^(xccdf_.+?_)benchmark_", self.benchmark_id)
        self.id_namespace: str = match.group(1) if match else ""
        self._values: Dict[str, _Value] = {}
        self._plain: Dict[str, str] = {}
        self._items: Dict[str, _Item] = {}
        self._clusters: Dict[str, List[str]] = {}
        self.rules: Dict[str, Rule] = OrderedDict()
        self._index(benchmark)
        self._profile_elems = OrderedDict(
            (p.get("id"), p) for p in benchmark.iter(_T_PROFILE) if p.get("id")
        )
        self.profiles: Dict[str, str] = OrderedDict(
            (pid, _plain_text(p.find(_X + "title"), lambda i: "")) for pid, p in self._profile_elems.items()
        )
        self._profile_cache: Dict[str, Profile] = {}
        self._profile_descriptions = {
            pid: _plain_text(p.find(_X + "description"), self._sub_placeholder)
            for pid, p in self._profile_elems.items()
        }
        # resolve all profiles now, then drop the tree
        for pid in list(self._profile_elems):
            self._resolve_profile(pid, ())
        self._profile_elems = {}

    @staticmethod
    def _parse(data: bytes, source: str):
        root = _xml_root(data, "datastream", source)
        if root.tag != "{%s}data-stream-collection" % DS_NS:
            raise CatalogError(
                "%s is not a SCAP source datastream: root element is <%s>, expected "
                "<ds:data-stream-collection> (%s)" % (source, _local(root.tag), DS_NS)
            )
        benchmark = next(root.iter(_T_BENCHMARK), None)
        if benchmark is None:
            if next(root.iter("{%s}Benchmark" % XCCDF11_NS), None) is not None:
                raise CatalogError("datastream %s holds an XCCDF 1.1 Benchmark; only XCCDF 1.2 is supported" % source)
            raise CatalogError("datastream %s holds no XCCDF 1.2 Benchmark" % source)
        if not benchmark.get("id"):
            raise CatalogError("datastream %s: the Benchmark has no id" % source)
        return benchmark

    # ------------------------------------------------------------------ ids
    def _full(self, ident: str, kind: str) -> str:
        if ident.startswith("xccdf_"):
            return ident
        return "%s%s_%s" % (self.id_namespace, kind, ident)

    def _short(self, ident: str, kind: str) -> str:
        prefix = "%s%s_" % (self.id_namespace, kind)
        if self.id_namespace and ident.startswith(prefix):
            return ident[len(prefix):]
        match = re.match(r"^xccdf_.+?_%s_(.+)$" % kind, ident)
        return match.group(1) if match else ident

    def _sub_placeholder(self, idref: str) -> str:
        if idref in self._plain:
            return self._plain[idref]
        return "[%s]" % self._short(idref, "value")

    # ------------------------------------------------------------------ indexing
    def _index(self, benchmark) -> None:
        for plain in benchmark.findall(_X + "plain-text"):
            self._plain[plain.get("id", "")] = (plain.text or "").strip()
        for elem in benchmark.iter(_T_VALUE):
            self._add_value(elem)
        self._walk(benchmark, None, (), ())

    def _add_value(self, elem) -> None:
        # NISTIR-7275r4: the <value> with empty or absent selector is the default; when there
        # is none, the first <value> in document order is (oscap does the same).
        default = None
        first = None
        options: Dict[str, str] = {}
        for val in elem.findall(_X + "value"):
            text = val.text or ""
            selector = val.get("selector") or ""
            if first is None:
                first = text
            if not selector:
                if default is None:
                    default = text
            else:
                options.setdefault(selector, text)
        if default is None:
            default = first
        vid = elem.get("id", "")
        self._values[vid] = _Value(
            id=vid,
            title=_plain_text(elem.find(_X + "title"), lambda i: ""),
            type=elem.get("type", "string"),
            default=default,
            options=options,
        )

    def _walk(self, node, parent_id, path, platforms) -> None:
        for child in node:
            if child.tag == _T_GROUP:
                gid = child.get("id", "")
                self._items[gid] = _Item(gid, "group", _xccdf_bool(child.get("selected"), True),
                                         parent_id, child.get("cluster-id"))
                if parent_id:
                    self._items[parent_id].children.append(gid)
                self._cluster(child, gid)
                own = tuple(p.get("idref", "") for p in child.findall(_X + "platform"))
                self._walk(child, gid, path + (self._short(gid, "group"),), platforms + own)
            elif child.tag == _T_RULE:
                rule = self._make_rule(child, path, platforms)
                self.rules[rule.id] = rule
                self._items[rule.id] = _Item(rule.id, "rule", _xccdf_bool(child.get("selected"), True),
                                             parent_id, child.get("cluster-id"))
                if parent_id:
                    self._items[parent_id].children.append(rule.id)
                self._cluster(child, rule.id)

    def _cluster(self, elem, item_id) -> None:
        cluster = elem.get("cluster-id")
        if cluster:
            self._clusters.setdefault(cluster, []).append(item_id)

    def _make_rule(self, elem, path, group_platforms) -> Rule:
        rid = elem.get("id", "")
        ids: Dict[str, List[str]] = {"cce": [], "stig_id": [], "stig_rule": [], "srg": [], "cci": []}

        def add(key, text):
            if text not in ids[key]:
                ids[key].append(text)

        for ident in elem.findall(_X + "ident"):
            text = (ident.text or "").strip()
            if _CCE_RE.match(text) or (_CCE_SYSTEM_RE.search(ident.get("system", "")) and text):
                add("cce", text)
            elif _STIG_ID_RE.match(text):
                add("stig_id", text)
            elif _CCI_RE.match(text):
                add("cci", text)
        for ref in elem.findall(_X + "reference"):
            text = (ref.text or "").strip()
            if _STIG_ID_RE.match(text) and "cyber.mil" in ref.get("href", ""):
                add("stig_id", text)
            elif _SV_RE.match(text):
                add("stig_rule", text)
            elif _SRG_RE.match(text):
                add("srg", text)
            elif _CCI_RE.match(text):
                add("cci", text)

        value_ids: List[str] = []
        fix = None
        for fix_elem in elem.findall(_X + "fix"):
            if fix_elem.get("system") == ANSIBLE_FIX_SYSTEM:
                fix = self._make_fix(rid, fix_elem)
                break
        for sub in elem.iter(_T_SUB):
            idref = sub.get("idref", "")
            if idref in self._values and idref not in value_ids:
                value_ids.append(idref)
        for export in elem.iter(_X + "check-export"):
            idref = export.get("value-id", "")
            if idref and idref not in value_ids:
                value_ids.append(idref)

        own_platforms = tuple(p.get("idref", "") for p in elem.findall(_X + "platform"))
        platforms = tuple(OrderedDict.fromkeys(own_platforms + tuple(group_platforms)))

        def idrefs(tag):
            out: List[str] = []
            for item in elem.findall(_X + tag):
                for idref in (item.get("idref") or "").split():
                    if idref not in out:
                        out.append(idref)
            return tuple(out)

        return Rule(
            id=rid,
            short_id=self._short(rid, "rule"),
            title=_plain_text(elem.find(_X + "title"), self._sub_placeholder),
            description=_plain_text(elem.find(_X + "description"), self._sub_placeholder),
            rationale=_plain_text(elem.find(_X + "rationale"), self._sub_placeholder),
            severity=elem.get("severity", "unknown"),
            identifiers={k: tuple(v) for k, v in ids.items()},
            group_path=tuple(path),
            requires=idrefs("requires"),
            conflicts=idrefs("conflicts"),
            ansible_fix=fix,
            platforms=platforms,
            value_ids=tuple(value_ids),
        )

    def _make_fix(self, rule_id, elem) -> FixSnippet:
        parts = [elem.text or ""]
        value_ids: List[str] = []
        for child in elem:
            if child.tag == _T_SUB:
                idref = child.get("idref", "")
                if idref in self._plain:
                    parts.append(self._plain[idref])
                else:
                    parts.append('<xccdf:sub idref="%s" use="legacy"/>' % idref)
                    if idref not in value_ids:
                        value_ids.append(idref)
            else:  # unexpected markup: keep its text
                parts.append("".join(child.itertext()))
            parts.append(child.tail or "")
        return FixSnippet(
            rule_id=rule_id,
            system=elem.get("system", ""),
            complexity=elem.get("complexity", "unknown"),
            disruption=elem.get("disruption", "unknown"),
            reboot=_xccdf_bool(elem.get("reboot"), False),
            strategy=elem.get("strategy", "unknown"),
            value_ids=tuple(value_ids),
            text="".join(parts),
        )

    # ------------------------------------------------------------------ profiles
    def _resolve_profile(self, pid: str, seen: Tuple[str, ...]) -> Profile:
        if pid in self._profile_cache:
            return self._profile_cache[pid]
        elem = self._profile_elems[pid]
        selections: Dict[str, bool] = {}
        refine_values: Dict[str, str] = {}
        set_values: Dict[str, str] = {}
        refine_rules: Dict[str, Dict[str, str]] = {}
        base = elem.get("extends")
        if base:
            if base in seen or (base not in self._profile_elems and base not in self._profile_cache):
                raise CatalogError("profile %s extends %s, which is %s" % (
                    pid, base, "circular" if base in seen else "not in the benchmark"))
            parent = self._resolve_profile(base, seen + (pid,))
            selections.update(parent.selections)
            refine_values.update(parent.refine_values)
            set_values.update(parent.set_values)
            refine_rules.update({k: dict(v) for k, v in parent.refine_rules.items()})
        for child in elem:
            tag = _local(child.tag)
            idref = child.get("idref", "")
            if tag == "select":
                flag = _xccdf_bool(child.get("selected"), True)
                for item_id in self._clusters.get(idref, [idref]) if idref not in self._items else [idref]:
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
        root = self._parse_tailoring(bytes(data), source)
        elems = self._tailored_profile_elems(root, source)
        view = copy.copy(self)
        view.profiles = OrderedDict(self.profiles)
        view._profile_descriptions = dict(self._profile_descriptions)
        view._profile_cache = dict(self._profile_cache)
        for pid, elem in elems.items():
            view.profiles[pid] = _plain_text(elem.find(_X + "title"), lambda i: "")
            view._profile_descriptions[pid] = _plain_text(elem.find(_X + "description"), self._sub_placeholder)
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

    @staticmethod
    def _parse_tailoring(data: bytes, source: str):
        """The ``<xccdf:Tailoring>`` root element of ``data``; CatalogError otherwise."""
        root = _xml_root(data, "tailoring file", source)
        if root.tag != _T_TAILORING:
            raise CatalogError(
                "%s is not an XCCDF 1.2 tailoring file: root element is <%s> (%s), expected <xccdf:Tailoring> (%s)"
                % (source, _local(root.tag), etree.QName(root).namespace or "no namespace", XCCDF12_NS))
        return root

    def _tailored_profile_elems(self, root, source: str) -> "OrderedDict[str, object]":
        """{profile id: element} of a Tailoring root, each checked against the benchmark."""
        elems: "OrderedDict[str, object]" = OrderedDict()
        for elem in root.findall(_T_PROFILE):
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
                raise CatalogError("tailoring file %s: profile %s extends %s, which is neither a profile of %s %s "
                                   "nor of the file" % (source, pid, base, self.benchmark_id, self.benchmark_version))
            for child in elem:
                self._check_tailoring_item(child, pid, source)
        return elems

    def _check_tailoring_item(self, child, pid: str, source: str) -> None:
        """CatalogError when a select/refine-rule/refine-value/set-value names nothing here."""
        tag, idref = _local(child.tag), child.get("idref", "")
        where = "tailoring file %s: profile %s: %s" % (source, pid, tag)
        if tag in ("select", "refine-rule") and idref not in self._items and idref not in self._clusters:
            raise CatalogError("%s names %r, which is no rule, group or cluster of %s %s" % (
                where, idref, self.benchmark_id, self.benchmark_version))
        if tag in ("refine-value", "set-value"):
            value = self._values.get(idref)
            if value is None:
                raise CatalogError("%s names XCCDF Value %r, which is not in %s %s" % (
                    where, idref, self.benchmark_id, self.benchmark_version))
            selector = child.get("selector")
            if tag == "refine-value" and selector is not None and selector not in value.options:
                raise CatalogError("%s gives Value %s the selector %r, which it lacks (has: %s)" % (
                    where, idref, selector, ", ".join(sorted(value.options))))

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
        if profile_id is not None:
            prof = self.profile(profile_id)
            if vid in prof.set_values:
                return prof.set_values[vid]
            selector = prof.refine_values.get(vid)
            if selector:
                if selector not in val.options:
                    raise CatalogError("profile %s refines Value %s to selector %r, which it lacks (has: %s)" % (
                        prof.short_id, self._short(vid, "value"), selector, ", ".join(sorted(val.options))))
                return val.options[selector]
        if val.default is not None:
            return val.default
        raise CatalogError("XCCDF Value %s has no value" % vid)

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
    _SUB_RE = re.compile(r'<xccdf:sub idref="([^"]+)" use="legacy"/>')

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
        text = rule.ansible_fix.text

        def replace(match):
            value = self.value(match.group(1), profile_id)
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            before = text[start:match.start()]
            after = text[match.end():end if end >= 0 else len(text)]
            whole_scalar = not after.strip() and (
                before.rstrip().endswith((":", "!!str", "-")) or not before.strip())
            if whole_scalar:
                return json.dumps(value, ensure_ascii=False)
            return value

        return self._SUB_RE.sub(replace, text)

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
