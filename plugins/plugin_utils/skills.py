# -*- coding: utf-8 -*-
# Copyright: scapforge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Skills: what the loop knows about one kind of work, loaded by name from the collection.

A skill is a directory ``<collection>/skills/<name>/`` holding ``skill.yml`` (data, validated
against :data:`SCHEMA` on load), ``prompts/<agent>.j2`` (the agents' templates) and, optionally,
``hooks.py`` (Python, see :class:`SkillHooks`). The data says which content and profile the
skill is for, how rules group into categories, which rules must run last, which can cut the
controller off, which need a reboot, what the gate may allow beyond its defaults and which
health checks to add. Nothing about a product (Debian, RHEL) is hard-coded elsewhere.

Errors: :class:`SkillError`, whose message names the file and the key path
(``skills/x/skill.yml: categories.groups.ssh: 5 is not of type 'string'``); a skill that does
not validate is never half-loaded. A hook that raises is logged by the caller and skipped.

Controller only (PyYAML, jsonschema).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import os
import re
import typing as t

import yaml

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.safety import short_rule_id as _short

try:
    from jsonschema import Draft202012Validator
except ImportError:
    deps.missing("jsonschema")
    Draft202012Validator = None

__all__ = ["Skill", "SkillError", "SkillHooks", "load_skill", "skill_names", "rule_table", "table_counts",
           "SKILLS_ROOT", "CAT_BY_SEVERITY"]

#: ``<collection>/skills`` (plugins/plugin_utils/ -> three levels up).
SKILLS_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "skills")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
#: DISA's category from XCCDF severity (DISA STIG Viewer user guide: CAT I high, II medium, III low).
CAT_BY_SEVERITY = {"high": "CAT I", "medium": "CAT II", "low": "CAT III"}

_STR_LIST = {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True}
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}}
_PACKAGES = {"type": "object", "additionalProperties": _STR_LIST}

#: JSON Schema (2020-12) of skill.yml.
SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "description", "os_families", "datastream", "profile"],
    "properties": {
        "name": {"type": "string", "pattern": NAME_RE.pattern},
        "description": {"type": "string", "minLength": 1},
        "os_families": _STR_LIST | {"minItems": 1},
        "profile": {"type": "string", "minLength": 1},
        "datastream": {
            "type": "object",
            "additionalProperties": False,
            "required": ["path"],
            "properties": {
                "path": {"type": "string", "pattern": "^/"},
                "packages": _PACKAGES,  # OS family -> packages that provide the datastream
                "product": {"type": "string"},
                "ssg_version": {"type": "string"},
                "source": {"type": "string"},
                "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "trusted_sha256": {"type": "array", "items": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
            },
        },
        "scanner_packages": _PACKAGES,  # OS family -> packages that provide oscap
        "categories": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"groups": _STR_MAP, "rules": _STR_MAP, "allowed": _STR_LIST},
        },
        "ordering": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "last": _STR_LIST,
                "after": {"type": "object", "additionalProperties": _STR_LIST},
            },
        },
        "access_impacting": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"rules": _STR_MAP, "prefixes": _STR_MAP, "root_login": _STR_LIST},
        },
        "unfixable_on_running_host": _STR_MAP,  # regex on the short rule id -> environment kind
        "reboot_required": _STR_LIST,
        # while `command` (run once per host, with become) prints a line matching `pattern`, a
        # rule matching `rules` that passes has its lines on disk but not loaded: reboot_required
        "frozen_until_reboot": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["rules", "command", "pattern"],
            "properties": {"rules": {"type": "string"}, "command": {"type": "string", "minLength": 1},
                           "pattern": {"type": "string"}, "why": {"type": "string"}}}},
        # short rule id -> a task file in the skill's directory run instead of the content's fix
        "fixes": {"type": "object", "additionalProperties": {"type": "string", "pattern": "^[^/].*\\.ya?ml$"}},
        "modules": _STR_LIST,
        "health_checks": _STR_LIST,
        # content defects the skill knows, each with its evidence (issue 17 item 7): an outcome
        # of the rule (check_unreliable, a scope warning) names it
        "known_content_defects": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["rule", "defect", "evidence"],
            "properties": {"rule": {"type": "string", "pattern": "^[a-z0-9_.-]+$"},
                           "defect": {"type": "string", "minLength": 1},
                           "evidence": {"type": "string", "minLength": 1}}}},
    },
}
_VALIDATOR = Draft202012Validator(SCHEMA) if Draft202012Validator else None  # None: jsonschema is missing


class SkillError(ScapforgeError):
    """A skill is unknown, unreadable or invalid; the message names the file and the key."""

    kind = "skill"


class SkillHooks(t.Protocol):
    """What ``skills/<name>/hooks.py`` may define; every function is optional.

    - ``worker_context(rule: dict, host: dict) -> str | None``: extra text for the Worker's
      prompt about this rule (seed 004, worker_context). ``rule``: {id, short_id, title,
      category, severity, identifiers}; ``host``: {os, os_version, virtualization, user}.
    - ``classify_failure(rule_id: str, message: str) -> str | None``: an environment kind
      (``environment:<kind>``) for a failed fix's message the generic signatures miss.
    - ``resolve_deferred(rule_ids: list[str], results: dict) -> dict``: after the reboot
      step, {rule id: reason} for deferred rules the skill can settle itself (``results``:
      {rule id: oscap result}).

    The caller catches any exception a hook raises, logs it (event ``hook_failed``) and goes
    on as if the hook returned None.
    """

    def worker_context(self, rule: dict, host: dict) -> str | None: ...

    def classify_failure(self, rule_id: str, message: str) -> str | None: ...

    def resolve_deferred(self, rule_ids: list, results: dict) -> dict: ...


def _key_path(error) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


@dataclasses.dataclass(frozen=True)
class Skill:
    """One validated skill. ``data`` is skill.yml as loaded; ``directory`` its folder;
    ``hooks`` the module of hooks.py (None without one). Build it with :func:`load_skill`."""

    name: str
    directory: str
    data: t.Mapping[str, t.Any]
    hooks: t.Any = None
    fixes: t.Mapping[str, list] = dataclasses.field(default_factory=dict)

    # -- plain data -----------------------------------------------------------------------
    @property
    def description(self) -> str:
        return self.data["description"]

    @property
    def profile(self) -> str:
        return self.data["profile"]

    @property
    def datastream_path(self) -> str:
        return self.data["datastream"]["path"]

    @property
    def trusted_sha256(self) -> list[str]:
        return list(self.data["datastream"].get("trusted_sha256") or [])

    @property
    def modules(self) -> list[str]:
        """Modules the gate allows for model-written tasks beyond its defaults."""
        return list(self.data.get("modules") or [])

    @property
    def health_checks(self) -> list[str]:
        """Commands that must exit 0 after every fix, added to the user's."""
        return list(self.data.get("health_checks") or [])

    @property
    def prompts_dir(self) -> str:
        return os.path.join(self.directory, "prompts")

    def packages(self, kind: str, os_family: str) -> list[str]:
        """Packages of ``kind`` (``scanner`` or ``content``) for an OS family (Ansible's
        ``ansible_os_family``: Debian, RedHat...); [] when the skill names none."""
        table = self.data.get("scanner_packages") if kind == "scanner" else self.data["datastream"].get("packages")
        return list((table or {}).get(os_family) or [])

    # -- rules ----------------------------------------------------------------------------
    def category_of(self, rule) -> str:
        """The category of a catalog ``Rule``: the skill's per-rule override, else the value
        for the deepest of its groups (``rule.group_path``) in ``categories.groups``, else the
        deepest group's own id (a new area of the content keeps a stable name)."""
        cats = self.data.get("categories") or {}
        override = (cats.get("rules") or {}).get(rule.short_id)
        if override:
            return override
        groups = cats.get("groups") or {}
        for group in reversed(rule.group_path):
            if group in groups:
                return groups[group]
        return rule.group_path[-1] if rule.group_path else "uncategorized"

    def access_impact(self, rule_id: str, remote_user: str | None) -> str | None:
        """Why applying ``rule_id``'s fix can cut the controller off, or None. A rule of
        ``access_impacting.root_login`` counts only when the controller logs in as root
        (``remote_user`` None is taken as root). Source: shared/cases sudo-nopasswd-lockout,
        sudo-noexec-breaks-become and the SSG rule texts."""
        table = self.data.get("access_impacting") or {}
        short = _short(rule_id)
        reason = (table.get("rules") or {}).get(short)
        if reason:
            return reason
        if short in (table.get("root_login") or ()) and (remote_user or "root") == "root":
            return "the controller logs in as root and the fix disables root login"
        for prefix, why in (table.get("prefixes") or {}).items():
            if short.startswith(prefix):
                return why
        return None

    def unfixable_kind(self, rule_id: str) -> str | None:
        """The environment kind of a rule no fix can pass on a running host (a kernel build
        option, a separate partition), else None."""
        short = _short(rule_id)
        for pattern, kind in (self.data.get("unfixable_on_running_host") or {}).items():
            if re.search(pattern, short):
                return kind
        return None

    def needs_reboot(self, rule_id: str) -> bool:
        """True when the skill knows the rule's fix takes effect only after a reboot (beyond
        the fix's own XCCDF ``reboot`` attribute)."""
        return _short(rule_id) in (self.data.get("reboot_required") or ())

    @property
    def frozen_probes(self) -> list[dict]:
        """``frozen_until_reboot`` entries: {rules (regex on the short id), command, pattern
        (regex, multiline), why}. Source: case audit-immutable-last (`-e 2` loaded: the kernel
        refuses audit rule changes until a reboot)."""
        return [dict(p) for p in self.data.get("frozen_until_reboot") or ()]

    def known_defect(self, rule_id: str) -> dict | None:
        """The skill's ``known_content_defects`` entry of the rule (full or short id) or None."""
        short = safety.short_rule_id(rule_id)
        return next((dict(d) for d in self.data.get("known_content_defects") or () if d.get("rule") == short), None)

    def runs_last(self, rule_id: str) -> bool:
        """True for a rule of ``ordering.last``: applied after every other fix of the run."""
        return _short(rule_id) in ((self.data.get("ordering") or {}).get("last") or ())

    def fix_tasks(self, rule_id: str) -> list | None:
        """The skill's own task list for the rule (a fresh copy), run instead of the content's
        fix; None when the skill has none. Source: ``fixes`` in skill.yml."""
        tasks = self.fixes.get(_short(rule_id))
        return copy.deepcopy(tasks) if tasks is not None else None

    def order(self, rule_ids: t.Sequence[str]) -> list[str]:
        """``rule_ids`` in the order to apply them: ``ordering.after`` moves a rule behind the
        rules it names, ``ordering.last`` puts rules at the very end (in the order listed:
        ``audit_rules_immutable`` freezes the audit rules, so it goes after every other audit
        rule; case audit-immutable-last). Otherwise the given order is kept."""
        ordering = self.data.get("ordering") or {}
        last = list(ordering.get("last") or ())
        after = ordering.get("after") or {}
        out = [r for r in rule_ids if _short(r) not in last]
        for rule in [r for r in out if _short(r) in after]:
            deps = set(after[_short(rule)])
            positions = [i for i, r in enumerate(out) if _short(r) in deps]
            if positions and out.index(rule) < max(positions):
                out.remove(rule)
                out.insert(max(positions), rule)  # the list shrank by one: lands just after the last dependency
        tail = sorted((r for r in rule_ids if _short(r) in last), key=lambda r: last.index(_short(r)))
        return out + tail

    def hook(self, name: str) -> t.Callable | None:
        """The hook function ``name`` of hooks.py, or None."""
        func = getattr(self.hooks, name, None) if self.hooks is not None else None
        return func if callable(func) else None

    def call_hook(self, name: str, *args: t.Any, log: t.Callable[..., None] | None = None) -> t.Any:
        """Call hook ``name`` with ``args``; None when the skill has no such hook or it raised.
        A hook that raises is never fatal: ``log(name=, error=)`` is told (the loop emits a
        ``hook_failed`` event) and the run goes on as if it returned None."""
        func = self.hook(name)
        if func is None:
            return None
        try:
            return func(*args)
        except Exception as exc:  # a skill's bug must not end the run
            if log is not None:
                log(name=name, error="%s: %s" % (type(exc).__name__, str(exc)[:300]))
            return None


def skill_names(root: str = SKILLS_ROOT) -> list[str]:
    """Names of the skills in ``root`` (directories holding a skill.yml), sorted."""
    try:
        entries = os.listdir(root)
    except OSError:
        return []
    return sorted(e for e in entries if os.path.isfile(os.path.join(root, e, "skill.yml")))


def _read(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise SkillError("%s: cannot be read: %s" % (path, exc.strerror or exc)) from None
    except yaml.YAMLError as exc:
        raise SkillError("%s: not valid YAML: %s" % (path, str(exc).replace("\n", " "))) from None
    if not isinstance(data, dict):
        raise SkillError("%s: (top level): must be a mapping, not %s" % (path, type(data).__name__))
    return data


def _validate(path: str, name: str, data: dict) -> None:
    errors = sorted(_VALIDATOR.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise SkillError("; ".join("%s: %s: %s" % (path, _key_path(e), e.message) for e in errors[:5]))
    if data["name"] != name:
        raise SkillError("%s: name: %r does not match its directory %r" % (path, data["name"], name))
    for pattern in (data.get("unfixable_on_running_host") or {}):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SkillError("%s: unfixable_on_running_host.%s: not a regular expression: %s" % (path, pattern, exc)) from None
    for index, probe in enumerate(data.get("frozen_until_reboot") or ()):
        for key in ("rules", "pattern"):
            try:
                re.compile(probe[key])
            except re.error as exc:
                raise SkillError("%s: frozen_until_reboot.%d.%s: not a regular expression: %s"
                                 % (path, index, key, exc)) from None
    allowed = (data.get("categories") or {}).get("allowed")
    if allowed:
        for key in ("groups", "rules"):
            for item, cat in ((data.get("categories") or {}).get(key) or {}).items():
                if cat not in allowed:
                    raise SkillError("%s: categories.%s.%s: %r is not one of categories.allowed" % (path, key, item, cat))
    prompts = os.path.join(os.path.dirname(path), "prompts")
    if not os.path.isdir(prompts):
        raise SkillError("%s: the skill has no prompts directory (%s)" % (path, prompts))


def _load_hooks(path: str, name: str):
    spec = importlib.util.spec_from_file_location("scapforge_skill_hooks_%s" % name.replace("-", "_"), path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a hook file that does not import is a broken skill, named as such
        raise SkillError("%s: cannot be imported: %s: %s" % (path, type(exc).__name__, exc)) from None
    return module


def _read_fix(directory: str, skill_file: str, rule: str, relative: str) -> list:
    path = os.path.normpath(os.path.join(directory, relative))
    where = "%s: fixes.%s" % (skill_file, rule)
    if not path.startswith(directory + os.sep):
        raise SkillError("%s: %s is outside the skill's directory" % (where, relative))
    try:
        with open(path, "rb") as fh:
            tasks = yaml.safe_load(fh)
    except OSError as exc:
        raise SkillError("%s: %s cannot be read: %s" % (where, relative, exc.strerror or exc)) from None
    except yaml.YAMLError as exc:
        raise SkillError("%s: %s is not valid YAML: %s" % (where, relative, str(exc).replace("\n", " "))) from None
    if not isinstance(tasks, list) or not tasks or not all(isinstance(task, dict) for task in tasks):
        raise SkillError("%s: %s must be a non-empty list of tasks" % (where, relative))
    return tasks


_CACHE: dict[tuple, Skill] = {}


def _stamp(directory: str) -> tuple:
    """(name, mtime in ns) of skill.yml, hooks.py and the files under fixes/: an edited skill
    is loaded again."""
    paths = [os.path.join(directory, "skill.yml"), os.path.join(directory, "hooks.py")]
    fixes = os.path.join(directory, "fixes")
    if os.path.isdir(fixes):
        paths += sorted(os.path.join(fixes, entry) for entry in os.listdir(fixes))
    return tuple((p, os.stat(p).st_mtime_ns) for p in paths if os.path.isfile(p))


def load_skill(name: str, root: str = SKILLS_ROOT) -> Skill:
    """Load and validate the skill ``name`` from ``root`` (default: the installed collection's
    ``skills/``). Cached per (root, name, mtimes of skill.yml, hooks.py and fixes/).

    Raises SkillError: unknown name (the message lists the skills there), unreadable or
    invalid skill.yml (file and key named), no prompts directory, a hooks.py that fails to
    import.
    """
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SkillError("%r is not a skill name (lower case letters, digits, - and _)" % (name,))
    directory = os.path.join(root, name)
    path = os.path.join(directory, "skill.yml")
    if not os.path.isfile(path):
        raise SkillError("no skill named %s: the collection has %s" % (name, ", ".join(skill_names(root)) or "none"))
    hooks_path = os.path.join(directory, "hooks.py")
    key = (root, name, _stamp(directory))
    if key in _CACHE:
        return _CACHE[key]
    data = _read(path)
    _validate(path, name, data)
    hooks = _load_hooks(hooks_path, name) if os.path.isfile(hooks_path) else None
    fixes = {rule: _read_fix(directory, path, rule, rel) for rule, rel in (data.get("fixes") or {}).items()}
    skill = Skill(name=name, directory=directory, data=data, hooks=hooks, fixes=fixes)
    _CACHE[key] = skill
    return skill


def rule_table(skill: Skill, catalog, profile_id: str | None = None, remote_user: str | None = "scapforge") -> list[dict]:
    """One row per rule the profile selects (default: the skill's profile), in document order:
    {rule (short id), title, severity, cat ("CAT I".."CAT III", None for another severity:
    CAT_BY_SEVERITY, the profile's refine-rule severity first), stig_id, vuln_id (``V-<n>``
    from the SV- rule id), stig_rule (``SV-<n>r<m>_rule``), cce, category, ansible_fix,
    reboot (the fix's XCCDF metadata or the skill's list), access_impacting (reason or None,
    for a controller logging in as ``remote_user``)}. Ids are None when the content has none.

    Raises CatalogError for an unknown profile.
    """
    profile = catalog.profile(profile_id or skill.profile)
    rows = []
    for rule_id in profile.selected_rules:
        rule = catalog.rule(rule_id)
        severity = (profile.refine_rules.get(rule_id) or {}).get("severity") or rule.severity
        ids = rule.identifiers
        sv = (ids.get("stig_rule") or (None,))[0]
        fix = rule.ansible_fix
        rows.append({
            "rule": rule.short_id, "title": rule.title, "severity": severity,
            "cat": CAT_BY_SEVERITY.get(severity),
            "stig_id": (ids.get("stig_id") or (None,))[0],
            "vuln_id": "V-" + sv[3:].split("r", 1)[0] if sv else None,
            "stig_rule": sv,
            "cce": (ids.get("cce") or (None,))[0],
            "category": skill.category_of(rule),
            "ansible_fix": fix is not None,
            "reboot": bool(fix is not None and fix.reboot) or skill.needs_reboot(rule_id),
            "access_impacting": skill.access_impact(rule_id, remote_user),
        })
    return rows


def table_counts(rows: t.Sequence[dict]) -> dict:
    """Totals of :func:`rule_table` rows: {rules, ansible_fix, access_impacting, reboot,
    stig_id, by_category: {category: {rules, ansible_fix, access_impacting, reboot}},
    by_cat: {CAT level or "none": same}}."""
    def count(subset):
        return {"rules": len(subset), "ansible_fix": sum(r["ansible_fix"] for r in subset),
                "access_impacting": sum(1 for r in subset if r["access_impacting"]),
                "reboot": sum(1 for r in subset if r["reboot"] and r["ansible_fix"])}

    out = count(rows)
    out["stig_id"] = sum(1 for r in rows if r["stig_id"])
    for key, name in (("category", "by_category"), ("cat", "by_cat")):
        groups: dict = {}
        for row in rows:
            groups.setdefault(row[key] or "none", []).append(row)
        out[name] = {k: count(v) for k, v in sorted(groups.items())}
    return out
