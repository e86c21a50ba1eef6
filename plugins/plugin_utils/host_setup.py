"""What the loop needs from the host before it starts: trusted content and the host's facts.

Raises ``LoopError`` (a reason code and a message for the user) when the run cannot start.
"""

from __future__ import annotations

import base64
import hashlib
import os
import typing as t

from ansible import constants as C
from ansible.utils.vars import combine_vars
from ansible.vars.clean import clean_facts, namespace_facts

from ansible_collections.scapforge.remediation.plugins.plugin_utils import health, package_checks
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog, CatalogError, Profile
from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError


class ControllerGone(ScapforgeError):
    """ansible-playbook, the process that started this worker, is gone (killed): the loop
    stops at once, writes nothing more, and leaves its open attempt to a resumed run.

    Ansible's worker processes detach into their own session, so a SIGKILL to the playbook
    (or its process group) does not reach them: without this check a killed run would go on
    changing the host in the background (seen in tests/faults/test_resume.py).
    """

    kind = "controller_gone"


class ParentWatch:
    """Tells whether the process that was our parent when created is still our parent."""

    def __init__(self) -> None:
        self.parent = os.getppid()

    def gone(self) -> bool:
        return os.getppid() != self.parent

    def check(self) -> None:
        """Raise ControllerGone when the parent process has died."""
        if self.gone():
            raise ControllerGone("ansible-playbook (pid %d) is gone: stopping this host's loop" % self.parent)


class LoopError(ScapforgeError):
    """The run cannot start or go on for this host (bad content, unknown profile, scan failure).

    ``reason`` is a short code for the task result and the host's error report: ``content``,
    ``content_mismatch``, ``untrusted_content``, ``tailoring``, ``profile``, ``rule``, ``facts``,
    ``unhealthy_before``, ``scan_failed``, ``scanner_crash``, ``llm_remote``, ``prompts``,
    ``memory``, ``controller``, ``checkpoint``, ``waiver``, ``skill``, ``run_id`` (a --check
    start over a run's report), ``host_busy`` (another run holds the host's run lock);
    ``kind`` (ScapforgeError's) is the same code. The message says what to do.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message, kind=reason)
        self.reason = reason


def load_catalog(session, task_vars: dict, datastream: str, datastream_src: str | None,
                 trusted_sha256: t.Iterable[str]) -> tuple[Catalog, bool, str]:
    """Parse the datastream once on the controller; return (catalog, trusted, where from).

    Content read from ``datastream_src`` on the controller is trusted; content fetched from
    the target is trusted only if its sha256 is in ``trusted_sha256`` (DESIGN decision 2).
    With ``datastream_src`` the host's file must have the same sha256, or the fixes would
    come from other content than the scans. Raises LoopError (``content``,
    ``content_mismatch``, ``untrusted_content``) with a message naming the files.
    """
    if datastream_src:
        try:
            with open(datastream_src, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise LoopError("content", "cannot read datastream_src %s: %s" % (datastream_src, exc)) from None
        source, trusted = "controller:" + datastream_src, True
        host_digest = _host_sha256(session, task_vars, datastream)
        digest = hashlib.sha256(data).hexdigest()
        if host_digest != digest:
            raise LoopError(
                "content_mismatch",
                "datastream_src %s (sha256 %s) is not the host's %s (sha256 %s): the fixes would come from "
                "other content than the scans; the role copies datastream_src to a path of its own on the host "
                "(/var/lib/scapforge/content/<sha256>.xml) and scans that, except in --check"
                % (datastream_src, digest, datastream, host_digest),
            )
    else:
        slurped = session.execute_module(
            name="ansible.builtin.slurp", args={"src": datastream}, task_vars=task_vars
        )
        if slurped.get("failed"):
            raise LoopError("content", "cannot read datastream %s on the host: %s" % (datastream, slurped.get("msg")))
        data = base64.b64decode(slurped["content"])
        digest = hashlib.sha256(data).hexdigest()
        trusted = digest in {d.lower() for d in trusted_sha256}
        source = "target:" + datastream
        if not trusted:
            raise LoopError(
                "untrusted_content",
                "datastream %s on the host has sha256 %s, which the controller does not know; pass "
                "datastream_src (a controller copy) or add the digest to trusted_sha256" % (datastream, digest),
            )
    try:
        catalog = Catalog.from_bytes(data, source=source)
    except CatalogError as exc:
        raise LoopError("content", "datastream from %s: %s" % (source, exc)) from None
    if catalog.removed_packages is None:  # the in-memory catalog is shared: parsed once per content
        catalog.removed_packages = package_checks.removed_packages(data)
    return catalog, trusted, source


def read_tailoring(tailoring_src: str) -> bytes:
    """The bytes of the user's tailoring file; LoopError(``tailoring``) naming it when unreadable."""
    try:
        with open(tailoring_src, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise LoopError("tailoring", "cannot read tailoring_src %s: %s" % (tailoring_src, exc.strerror or exc)) from None


def load_tailoring(catalog: Catalog, tailoring_src: str) -> Catalog:
    """The catalog view with the user's XCCDF 1.2 tailoring file, read on the controller.

    Raises LoopError(``tailoring``) naming the file (and the id at fault) when it cannot be
    read or is not a tailoring of this catalog's benchmark (see ``Catalog.with_tailoring``).
    """
    data = read_tailoring(tailoring_src)
    try:
        return catalog.with_tailoring(data, source=tailoring_src)
    except CatalogError as exc:
        raise LoopError("tailoring", str(exc)) from None


def resolve_profile(catalog: Catalog, profile_id: str) -> Profile:
    """The run's profile (full or short id): with a tailoring file, one of its own profiles
    (a benchmark profile is refused too: the user meant the tailoring); else the benchmark's.
    Raises LoopError(``profile``) whose message lists the ids there are."""
    try:
        if catalog.tailoring is not None:
            return catalog.tailoring_profile(profile_id)
        return catalog.profile(profile_id)
    except CatalogError as exc:
        raise LoopError("profile", str(exc)) from None


def _host_sha256(session, task_vars: dict, path: str) -> str | None:
    """sha256 of ``path`` on the host (None if missing); raises LoopError if stat fails."""
    result = session.execute_module(
        name="ansible.builtin.stat",
        args={"path": path, "checksum_algorithm": "sha256", "get_mime": False},
        task_vars=task_vars,
    )
    if result.get("failed"):
        raise LoopError("content", "cannot stat the datastream %s on the host: %s" % (path, result.get("msg")))
    stat = result.get("stat", {})
    return stat.get("checksum") if stat.get("exists") else None


#: where a machine's id is kept (the order Ansible's platform facts read them).
MACHINE_ID_FILES = ("/var/lib/dbus/machine-id", "/etc/machine-id")


def controller_machine_id() -> str | None:
    """This controller's machine id (systemd's machine-id(5)), or None when it has none."""
    for path in MACHINE_ID_FILES:
        try:
            with open(path, encoding="ascii", errors="replace") as handle:
                value = handle.read().strip()
        except OSError:
            continue
        if value:
            return value
    return None


def refuse_controller(session, facts: dict) -> None:
    """Refuse to work on the controller itself: a ``local`` connection (or Mitogen's stand-in
    for it), or a target whose
    machine id (fact ``machine_id``) is the controller's. A sysctl fix run in a chroot once
    changed this machine's kernel (shared/DESIGN.md, SAFETY). Raises LoopError(``controller``);
    ``allow_controller: true`` is the caller's way around it."""
    name = health.plain_connection_name(session.parts().connection)
    if name in ("local", "ansible.builtin.local", "ansible.legacy.local"):
        raise LoopError("controller", "the connection is %s: the loop would change the controller itself; "
                        "use scapforge_allow_controller: true if that is really meant" % name)
    target, mine = facts.get("machine_id"), controller_machine_id()
    if target and mine and target == mine:
        raise LoopError("controller", "the host's machine id %s is the controller's: the loop would change the "
                        "controller itself; use scapforge_allow_controller: true if that is really meant" % target)


def with_host_facts(session, task_vars: dict) -> dict:
    """Return task_vars with the host's facts, gathered once with ``setup`` if the play did not.

    The SSG fixes read facts such as ``ansible_os_family`` and ``ansible_virtualization_type``
    (the SSG playbooks run with gather_facts). Facts are merged as Ansible's VariableManager
    does: under ``ansible_facts`` without the prefix, and as ``ansible_*`` variables when
    INJECT_FACTS_AS_VARS is on. Raises LoopError(``facts``) if setup fails.
    """
    if task_vars.get("ansible_facts", {}).get("os_family"):
        return task_vars
    result = session.execute_module(
        name="ansible.builtin.setup", args={}, task_vars=task_vars
    )
    if result.get("failed"):
        raise LoopError("facts", "gathering facts failed: %s" % result.get("msg"))
    facts = result.get("ansible_facts", {})
    merged = dict(task_vars)
    merged["ansible_facts"] = combine_vars(task_vars.get("ansible_facts", {}), namespace_facts(facts)["ansible_facts"])
    if C.INJECT_FACTS_AS_VARS:
        merged.update(clean_facts(facts))
    return merged
