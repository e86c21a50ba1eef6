"""The run's inputs, checked on the controller before anything reaches the host (issue 17 item 3).

The role's first task (action ``scapforge.remediation.check_inputs``) calls :func:`check_inputs`
before preflight: a controller datastream that is not well-formed XML, not a SCAP source
datastream or holds no XCCDF 1.2 Benchmark, a tailoring file that is not an XCCDF Tailoring
of that benchmark, an unknown profile or rule, a malformed waiver: each stops the host with a
``LoopError`` naming the file and the problem, and nothing has been copied, installed or
created on the host. A datastream that passed is copied to a path of our own,
:func:`host_content_path` (``/var/lib/scapforge/content/<sha256>.xml``), never over the
distribution package's file (``/usr/share/xml/scap/...``), and the scans use that copy.
"""

from __future__ import annotations

import dataclasses
import posixpath
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import llm
from ansible_collections.scapforge.remediation.plugins.plugin_utils import waivers as W
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.tailoring_file import tailoring_root
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog, CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import (
    LoopError,
    load_tailoring,
    read_tailoring,
    resolve_profile,
)

#: where the role keeps the controller's datastream on the host, one file per sha256.
HOST_CONTENT_DIR = "/var/lib/scapforge/content"

#: trees a distribution's packages own: a copy of ours never goes there (a package's file
#: replaced by ours is what a later run refused as untrusted, and what an upgrade overwrites).
PACKAGE_TREES = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot")


@dataclasses.dataclass(frozen=True)
class CheckedInputs:
    """What passed: the controller datastream's ``sha256`` and the ``host_path`` it is copied
    to (both None without one), its ``benchmark`` id and version, the ``profile`` (full id) and
    the ``tailoring`` file's sha256 when they could be checked on the controller."""

    sha256: t.Optional[str] = None
    host_path: t.Optional[str] = None
    benchmark: t.Optional[str] = None
    profile: t.Optional[str] = None
    tailoring: t.Optional[str] = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def host_content_path(content_dir: str, sha256: str) -> str:
    """``<content_dir>/<sha256>.xml``: the host path of the controller's datastream. Raises
    LoopError(``content``) when ``content_dir`` is relative or lies in a tree packages own."""
    folder = posixpath.normpath(content_dir or "")
    if not folder.startswith("/"):
        raise LoopError("content", "the host's content directory %r is not an absolute path" % content_dir)
    for tree in PACKAGE_TREES:
        if folder == tree or folder.startswith(tree + "/"):
            raise LoopError("content", "the host's content directory %s is under %s, which the distribution's "
                            "packages own: the controller's datastream is never copied there" % (folder, tree))
    return "%s/%s.xml" % (folder, sha256)


def check_datastream(path: str) -> Catalog:
    """The catalog of the controller datastream at ``path``; LoopError(``content``) naming the
    file when it cannot be read, is empty, is not well-formed XML (a truncated file), is not a
    SCAP source datastream (a tailoring file, a bare Benchmark) or holds no XCCDF 1.2 Benchmark."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise LoopError("content", "cannot read datastream_src %s: %s" % (path, exc.strerror or exc)) from None
    if not data.strip():
        raise LoopError("content", "datastream_src %s is empty (%d bytes)" % (path, len(data)))
    try:
        return Catalog.from_bytes(data, source=path)
    except CatalogError as exc:
        raise LoopError("content", "datastream_src %s refused, nothing was copied to the host: %s" % (path, exc)) from None


def check_waivers(entries: t.Sequence[dict], catalog: t.Optional[Catalog]) -> None:
    """LoopError(``waiver``) for a malformed entry, or (with a catalog) one naming no rule."""
    try:
        parsed = W.parse(entries)
    except W.WaiverError as exc:
        raise LoopError("waiver", str(exc)) from None
    if catalog is None:
        return
    for index, waiver in enumerate(parsed):
        try:
            catalog.rule(waiver.rule)
        except CatalogError as exc:
            raise LoopError("waiver", "scapforge_waivers[%d] (rule %s): %s" % (index, waiver.rule, exc)) from None


def check_rules(catalog: Catalog, named: t.Mapping[str, t.Sequence[str]]) -> None:
    """LoopError(``rule``) for a rule id (short or full) the catalog lacks; ``named`` maps an
    option (``rules``, ``skip_rules``, ``allow_access_impacting``) to its ids (``all`` allowed)."""
    for option, ids in named.items():
        for rule_id in ids:
            if option == "allow_access_impacting" and rule_id == "all":
                continue
            try:
                catalog.rule(rule_id)
            except CatalogError as exc:
                raise LoopError("rule", "%s: %s" % (option, exc)) from None


def check_tailoring_file(path: str) -> None:
    """Without a controller datastream the benchmark is only known on the host: the tailoring
    file is checked for what it must be whatever it tailors (readable, well-formed, an XCCDF
    1.2 Tailoring); LoopError(``tailoring``)."""
    data = read_tailoring(path)
    try:
        tailoring_root(data, path)
    except CatalogError as exc:
        raise LoopError("tailoring", str(exc)) from None


def check_endpoint(base_url: t.Optional[str], model: t.Optional[str], allow_remote: bool) -> None:
    """The agents' endpoint, when one is configured (a URL and a model), must be on this
    machine's networks unless ``allow_remote``: LoopError(``llm_remote``), the check the loop
    makes too, made here before preflight (it resolves names, never connects)."""
    if not (base_url and model):
        return
    try:
        llm.check_endpoint(base_url, allow_remote)
    except llm.LLMError as exc:
        raise LoopError("llm_remote", str(exc)) from None


def check_inputs(datastream_src: t.Optional[str], tailoring_src: t.Optional[str], profile: str,
                 named_rules: t.Mapping[str, t.Sequence[str]], waivers: t.Sequence[dict],
                 content_dir: str = HOST_CONTENT_DIR) -> CheckedInputs:
    """Check every input the controller can check; raise LoopError (``content``, ``tailoring``,
    ``profile``, ``rule``, ``waiver``) at the first bad one. With ``datastream_src`` the
    datastream, the tailoring against its benchmark, the profile, the rule names and the
    waivers' rules; without, the shapes only (the host's content is checked by the loop,
    read-only, before its first change)."""
    if not datastream_src:
        if tailoring_src:
            check_tailoring_file(tailoring_src)
        check_waivers(waivers, None)
        return CheckedInputs()
    catalog = check_datastream(datastream_src)
    host_path = host_content_path(content_dir, catalog.sha256)
    tailoring = None
    if tailoring_src:
        catalog = load_tailoring(catalog, tailoring_src)
        tailoring = catalog.tailoring.sha256 if catalog.tailoring is not None else None
    chosen = resolve_profile(catalog, profile).id if profile else None
    check_rules(catalog, named_rules)
    check_waivers(waivers, catalog)
    return CheckedInputs(sha256=catalog.sha256, host_path=host_path,
                         benchmark="%s %s" % (catalog.benchmark_id, catalog.benchmark_version),
                         profile=chosen, tailoring=tailoring)
