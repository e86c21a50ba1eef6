# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module names resolved as Ansible resolves them (controller only).

One job: ``sysctl`` -> ``ansible.posix.sysctl``, redirects and ``ansible.legacy`` through
Ansible's own plugin routing.  The gate (:mod:`..task_gate`) and the untrusted-task policy
(:mod:`..untrusted_policy`) both read module names through it, so neither imports the other
for it.
"""
from __future__ import annotations

import dataclasses
import functools

from ansible.errors import AnsibleError
from ansible.plugins.loader import module_loader

__all__ = ['ModuleRef', 'ensure_plugin_loader', 'resolve_module']


@dataclasses.dataclass(frozen=True)
class ModuleRef:
    """A module name resolved through Ansible's plugin routing.

    name: the name as written; fqcn: the canonical FQCN after routing (e.g. ``ansible.posix.sysctl``
    for ``sysctl``); path: the module file on the controller; collection: its collection.
    """

    name: str
    fqcn: str
    path: str | None
    collection: str | None


def ensure_plugin_loader() -> None:
    """Install Ansible's collection loader when nothing did (outside an ansible-playbook run,
    e.g. unit tests), so collection modules such as ansible.posix.sysctl resolve."""
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:
        from ansible.plugins.loader import init_plugin_loader
        init_plugin_loader()


@functools.lru_cache(maxsize=512)
def resolve_module(name: str) -> ModuleRef | None:
    """Resolve a module/action name as Ansible does (routing, redirects, ansible.legacy).

    Returns a ModuleRef, or None when no such module exists.  Uses the global module loader
    (the same object as an action's ``_shared_loader_obj.module_loader``).
    """
    if not isinstance(name, str) or not name:
        return None
    ensure_plugin_loader()
    try:
        ctx = module_loader.find_plugin_with_context(name)
    except AnsibleError:
        return None
    if not ctx.resolved:
        return None
    return ModuleRef(name=name, fqcn=ctx.resolved_fqcn, path=ctx.plugin_resolved_path,
                     collection=ctx.plugin_resolved_collection)
