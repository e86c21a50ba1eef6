"""The setup step of a host's run: from the user's options and the host session to one
``RunContext`` and a fresh ``RunState``. Nothing here changes the host; every refusal is a
``LoopError`` with its reason code, raised before the first change."""

from __future__ import annotations

import dataclasses
import os
import re
import time
import typing as t

from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import health, safety, task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils import waivers as W
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.context import RunContext
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.state import RunState, Sinks
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.verifier import Verifier
from ansible_collections.scapforge.remediation.plugins.plugin_utils.attempt_runner import AttemptRunner
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import DEFAULT_ROOT, CheckpointError, make_provider
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import PackageFactsCache
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import (
    LoopError,
    load_catalog,
    load_tailoring,
    refuse_controller,
    resolve_profile,
    with_host_facts,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.session import MemorySession
from ansible_collections.scapforge.remediation.plugins.plugin_utils.scanner import Scanner
from ansible_collections.scapforge.remediation.plugins.plugin_utils.skills import SkillError, load_skill
from ansible_collections.scapforge.remediation.plugins.plugin_utils.tailoring import build_tailoring


class _Timer:
    """Seconds per setup step, for run_start's ``timing``."""

    def __init__(self) -> None:
        self.timing: dict[str, float] = {}
        self._clock = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.timing[name] = round(now - self._clock, 2)
        self._clock = now


def build(session, opts, events, console, progress, parent, started: float,
          lock=None) -> tuple[RunContext, RunState]:
    """Set the run up for the host behind ``session``; raises LoopError. ``lock`` (the host's
    run lock) is acquired once the host is known not to be the controller, before anything
    that could change the host (LoopError ``host_busy``)."""
    check_mode = session.check_mode
    try:
        skill = load_skill(opts.skill)
    except SkillError as exc:
        raise LoopError("skill", str(exc)) from None
    remote_user = session.remote_user()
    gate_policy = task_gate.GatePolicy(remote_user=remote_user, module_allowlist_extra=frozenset(skill.modules))
    timer = _Timer()
    catalog, trusted, source = load_catalog(session, session.task_vars, opts.datastream, opts.datastream_src,
                                            opts.trusted_sha256)
    if opts.tailoring_src:  # a view: the cached catalog is shared by every host
        catalog = load_tailoring(catalog, opts.tailoring_src)
    timer.lap("catalog_s")
    session.task_vars = with_host_facts(session, session.task_vars)
    timer.lap("facts_s")
    if not opts.allow_controller:
        refuse_controller(session, session.task_vars.get("ansible_facts", {}))
    profile = resolve_profile(catalog, opts.profile)
    scope, skipped, allowed = _resolve_rules(catalog, opts)
    active, expired = _waivers(catalog, opts.waivers, events)
    agents, token_ledger = _agents(session, opts, skill, remote_user, check_mode, events)
    memory = _memory(session, opts, catalog, events)
    health_commands = tuple(opts.health_commands) + tuple(skill.health_checks)
    if lock is not None:  # the options are sound; the health baseline and every change come after
        lock.acquire()
        timer.lap("lock_s")
    baseline = None if check_mode else _health_baseline(session, opts, health_commands, remote_user, events)
    timer.lap("health_baseline_s")
    frozen = () if check_mode else tuple(_frozen_until_reboot(session, skill, events))
    selected = set(profile.selected_rules)
    scan_rules = tuple(catalog.expand_requires(list(scope))) if scope else ()
    outside = tuple(r for r in scan_rules if r not in selected)
    tailoring_xml, scan_profile = _scan_tailoring(catalog, profile, list(outside))
    scanner = Scanner(session, session.task_vars, opts.datastream, scan_profile, tailoring_xml)
    verifier = Verifier(scanner, catalog, events, opts.scan_timeout)
    state = RunState(Sinks(events, console, None if check_mode else progress, None if check_mode else memory),
                     lambda rule_id: skill.category_of(catalog.rule(rule_id)), opts.time_budget, started)
    resume = progress.load()
    package_facts = PackageFactsCache()
    runner = AttemptRunner(session, session.task_vars, catalog, verifier, _checkpoints(session, opts), events,
                           gate_policy, opts.health_check, state.stop, want_evidence=agents is not None or memory is not None,
                           progress=progress, start=resume.starts + 1, parent=parent, baseline=baseline,
                           health_commands=health_commands, deadman_seconds=opts.deadman_seconds,
                           home=gate_policy.home(), classify=_classifier(skill, events), facts_cache=package_facts,
                           run_id=opts.run_id)
    ctx = RunContext(
        opts=opts, session=session, task_vars=session.task_vars, skill=skill, catalog=catalog, trusted=trusted,
        content_source=source, profile=profile, scope=tuple(scope), scan_rules=scan_rules, scan_profile=scan_profile,
        tailoring_xml=tailoring_xml, outside=outside, waivers=active, expired_waivers=tuple(expired),
        skipped=frozenset(skipped), allowed=frozenset(allowed), allow_all="all" in opts.allow_access_impacting,
        remote_user=remote_user, gate_policy=gate_policy, health_commands=health_commands, health_baseline=baseline,
        frozen=frozen, events=events, console=console, progress=progress, parent=parent, memory=memory,
        package_facts=package_facts, verifier=verifier, runner=runner, agents=agents, token_ledger=token_ledger,
        resume=resume, timing=timer.timing)
    return ctx, state


def _resolve_rules(catalog, opts) -> tuple[list[str], set[str], set[str]]:
    """(scope, skipped, allowed) as full rule ids: a typo in a waiver must not let the rule
    run, nor an opt-in silently do nothing."""
    try:
        return ([catalog.rule(r).id for r in opts.rules], {catalog.rule(r).id for r in opts.skip_rules},
                {catalog.rule(r).id for r in opts.allow_access_impacting if r != "all"})
    except CatalogError as exc:
        raise LoopError("rule", str(exc)) from None


def _waivers(catalog, entries, events) -> tuple[dict, list[dict]]:
    """({full rule id: active Waiver}, expired entries with short ids; event
    ``waiver_expired`` each). LoopError(``waiver``) names a malformed entry or unknown rule."""
    try:
        parsed = W.parse(entries)
    except W.WaiverError as exc:
        raise LoopError("waiver", str(exc)) from None
    today = W.today_utc()
    active: dict = {}
    expired: list[dict] = []
    for index, waiver in enumerate(parsed):
        try:
            rule_id = catalog.rule(waiver.rule).id
        except CatalogError as exc:
            raise LoopError("waiver", "scapforge_waivers[%d] (rule %s): %s" % (index, waiver.rule, exc)) from None
        if waiver.active(today):
            active[rule_id] = waiver
            continue
        entry = dict(waiver.to_dict(), rule=safety.short_rule_id(rule_id))
        expired.append(entry)
        events.emit("waiver_expired", rule=entry["rule"], expires=entry["expires"], reason=waiver.reason)
    return active, expired


def _agents(session, opts, skill, remote_user, check_mode, events) -> tuple[t.Any, t.Any]:
    """(Agents, TokenLedger) when an endpoint is configured (a remote one only with
    ``allow_remote``), else (None, None). Raises LoopError(``llm_remote``, ``prompts``)."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import agents as agents_mod
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import llm as llm_mod
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_environment
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.transcript import Transcript

    config = opts.llm
    if config is None or not config.configured or check_mode:
        return None, None
    try:
        llm_mod.check_endpoint(config.base_url, config.allow_remote)
    except llm_mod.LLMError as exc:
        raise LoopError("llm_remote", str(exc)) from None
    if opts.prompts is None:
        raise LoopError("prompts", "no prompts for the agents (skill %s)" % opts.skill)
    facts = session.task_vars.get("ansible_facts", {})
    base = {
        "skill": {"name": skill.name, "description": opts.skill_description or skill.description},
        "host": {"os": "%s %s" % (facts.get("distribution", "?"), facts.get("distribution_version", "")),
                 "virtualization": "%s %s" % (facts.get("virtualization_role", ""),
                                              facts.get("virtualization_type", "")),
                 "user": remote_user or "?", "become": session.become_method or "none",
                 "environment": host_environment.describe(host_environment.read(session))},
    }
    ledger = agents_mod.TokenLedger(opts.run_dir, opts.run_tokens)
    return agents_mod.Agents(llm_mod.LLMClient(config), opts.prompts, events, ledger, base,
                             max_tokens=opts.max_answer_tokens,
                             transcript=Transcript(opts.run_dir, session.host)), ledger


def _memory(session, opts, catalog, events):
    try:
        return MemorySession.open(os.path.expanduser(opts.memory_path), opts.memory_mode, opts.memory_retry,
                                  session.task_vars.get("ansible_facts", {}), catalog.benchmark_version, opts.skill,
                                  opts.run_id, session.host, events)
    except ValueError as exc:
        raise LoopError("memory", str(exc)) from None


def _health_baseline(session, opts, commands, remote_user, events):
    """The health baseline before any change (None when health checks are off): a fresh
    login with become must work first, or no check could protect this host."""
    if not opts.health_check:
        return None
    status = health.check_host(session)
    if not status.healthy:
        raise LoopError("unhealthy_before", "a fresh login with become fails before any change, so the health "
                                            "check cannot protect this host: %s" % status.detail)
    try:
        baseline = health.take_baseline(session, list(commands), user=remote_user)
    except health.HealthError as exc:
        raise LoopError("unhealthy_before", "the health baseline cannot be taken: %s" % exc) from None
    events.emit("health_baseline", failing=baseline.failing)
    return baseline


def _frozen_until_reboot(session, skill, events) -> list[dict]:
    """The skill's ``frozen_until_reboot`` probes that hold on this host now (one command
    each, with become): a rule they name that passes waits for a reboot. A probe that fails
    to run holds nothing (a container may not read the kernel's audit status)."""
    held = []
    for probe in skill.frozen_probes:
        try:
            res = session.run_command(probe["command"], sudoable=True)
        except AnsibleError as exc:
            res = {"rc": None, "stdout": "", "stderr": str(exc)}
        said = (res.get("stdout") or "").replace("\r\n", "\n")  # a become through a pty says \r\n
        holds = res.get("rc") == 0 and re.search(probe["pattern"], said, re.M) is not None
        events.emit("frozen_probe", command=probe["command"], rc=res.get("rc"), holds=holds,
                    said=((res.get("stdout") or "") + (res.get("stderr") or "")).strip()[-300:])
        if holds:
            held.append(probe)
    return held


def _scan_tailoring(catalog, profile, outside: list[str]) -> tuple[str | None, str]:
    """(tailoring XML or None, profile id) for every scan: the user's tailoring file and
    profile when given; with rules outside the profile (full ids), a generated tailoring
    that selects them (decision 5), carrying the user's profile's changes when it is a
    tailored one (oscap takes one tailoring file per scan)."""
    if outside:
        xml_bytes, profile_id = build_tailoring(catalog, profile.id, select=outside)
        return xml_bytes.decode("utf-8"), profile_id
    tailoring = catalog.tailoring
    return (tailoring.xml if tailoring is not None else None), profile.id


def _checkpoints(session, opts):
    options = dict(opts.checkpoint_options)
    if opts.checkpoint_provider == "files":
        options.setdefault("root", DEFAULT_ROOT)  # one directory per run below it
        options["root"] = "%s/%s" % (options["root"].rstrip("/"), opts.run_id or "adhoc")
    try:
        return make_provider(opts.checkpoint_provider, session, session.task_vars, options)
    except CheckpointError as exc:
        raise LoopError("checkpoint", str(exc)) from None


def _classifier(skill, events) -> t.Callable[[str, str], str | None]:
    """The skill's ``classify_failure`` hook: an environment kind for a failed fix, or None."""
    def classify(rule_id: str, message: str) -> str | None:
        return skill.call_hook("classify_failure", rule_id, message, log=lambda **kw: events.emit(
            "hook_failed", rule=safety.short_rule_id(rule_id), **kw))
    return classify


def tailoring_record(catalog, profile, scan_profile: str) -> dict | None:
    """The user's tailoring file for the report and run_start: {file (base name), sha256,
    profile (its profile the run uses), scan_profile (the profile oscap is given: a generated
    one when rules outside it were added)}; None without one."""
    tailoring = catalog.tailoring
    if tailoring is None:
        return None
    return {"file": tailoring.name, "sha256": tailoring.sha256, "profile": profile.id, "scan_profile": scan_profile}


def run_start_fields(ctx: RunContext, seconds: float) -> dict:
    """The ``run_start`` event's fields."""
    opts = ctx.opts
    return dict(
        run_id=opts.run_id, profile=ctx.profile.id, datastream=opts.datastream, content_source=ctx.content_source,
        content_sha256=ctx.catalog.sha256, trusted=ctx.trusted, scope=[safety.short_rule_id(r) for r in ctx.scan_rules],
        waived=sorted(safety.short_rule_id(r) for r in ctx.skipped),
        waivers=[dict(w.to_dict(), rule=safety.short_rule_id(r)) for r, w in sorted(ctx.waivers.items())],
        expired_waivers=list(ctx.expired_waivers),
        allowed_access_impacting="all" if ctx.allow_all else sorted(safety.short_rule_id(r) for r in ctx.allowed),
        tailored=[safety.short_rule_id(r) for r in ctx.outside],
        tailoring=tailoring_record(ctx.catalog, ctx.profile, ctx.scan_profile), check_mode=ctx.check_mode,
        connection=ctx.session.connection_name,  # mitogen_ssh when accelerated
        llm={"endpoint": opts.llm.base_url, "model": opts.llm.model} if ctx.agents is not None else None,
        budget=dataclasses.asdict(opts.budget), catalog_from_disk=ctx.catalog.loaded_from_disk,
        seconds=round(seconds, 2), timing=dict(ctx.timing))
