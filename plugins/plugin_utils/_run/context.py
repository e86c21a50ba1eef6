"""What one host's run was given and set up: built once by ``setup.build``, then read only."""

from __future__ import annotations

import dataclasses
import typing as t


@dataclasses.dataclass(frozen=True)
class RunContext:
    """The run's inputs and services for one host.

    opts: the ``LoopOptions``; session: the ``HostSession``; task_vars: the host's variables
    with its facts; skill, catalog (a tailoring view when the user gave one), trusted (vendor
    fixes may render as templates), content_source; profile: the resolved XCCDF profile;
    scope: the requested rules (full ids, empty: the profile); scan_rules: what every scan
    evaluates (scope and what it requires); scan_profile/tailoring_xml: what oscap is given;
    outside: scope rules outside the profile (added by a generated tailoring); waivers
    {rule: active Waiver}, expired_waivers, skipped (scapforge_skip_rules), allowed
    (access-impacting opt-ins), allow_all; remote_user, gate_policy, health_commands,
    health_baseline (None: fresh login only); frozen: the skill's frozen_until_reboot probes
    that hold; events, console, progress, parent (ParentWatch), memory (MemorySession or
    None), package_facts (PackageFactsCache); verifier; runner (AttemptRunner); agents
    (None without an endpoint) and token_ledger; resume: what an interrupted start left
    (``progress.Resume``); timing: setup's seconds by step.
    """

    opts: t.Any
    session: t.Any
    task_vars: dict
    skill: t.Any
    catalog: t.Any
    trusted: bool
    content_source: str
    profile: t.Any
    scope: tuple
    scan_rules: tuple
    scan_profile: str
    tailoring_xml: str | None
    outside: tuple
    waivers: t.Mapping
    expired_waivers: tuple
    skipped: frozenset
    allowed: frozenset
    allow_all: bool
    remote_user: str | None
    gate_policy: t.Any
    health_commands: tuple
    health_baseline: t.Any
    frozen: tuple
    events: t.Any
    console: t.Any
    progress: t.Any
    parent: t.Any
    memory: t.Any
    package_facts: t.Any
    verifier: t.Any
    runner: t.Any
    agents: t.Any
    token_ledger: t.Any
    resume: t.Any
    timing: t.Mapping

    @property
    def check_mode(self) -> bool:
        return bool(self.session.check_mode)

    @property
    def host(self) -> str:
        return self.session.host

    def rule(self, rule_id: str) -> t.Any:
        """The catalog's rule."""
        return self.catalog.rule(rule_id)

    def category_of(self, rule_id: str) -> str:
        return self.skill.category_of(self.catalog.rule(rule_id))

    def access_impact(self, rule_id: str) -> str | None:
        """Why the rule's fix can cut the controller off, None when it cannot."""
        return self.skill.access_impact(rule_id, self.remote_user)

    def emit(self, event: str, **fields: t.Any) -> None:
        self.events.emit(event, **fields)
