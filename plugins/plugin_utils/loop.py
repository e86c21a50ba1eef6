"""The per-host remediation loop: vendor fixes first, then the agents, every attempt undone
when it fails.

Runs inside the ``scapforge.remediation.ralph`` action plugin on the controller:

1. baseline scan with ``oscap_eval`` (the profile, or the requested rules and the rules
   they require, DESIGN decision 6);
2. every rule that fails is a work item (``attempts.WorkItem``); ``error``/``unknown``/
   ``notchecked`` are reported, never worked on (decision 3);
3. the vendor phase: per work item, waiver and access checks, then attempt 1, the vendor fix
   from the datastream rendered with the profile's XCCDF Values, run on the action's own
   connection (decision 1) under a checkpoint of the files it touches, a fresh-connection
   health check, and re-evaluation with oscap in batches (decision 15); a fix that does not
   pass is rolled back and the restore verified;
4. a rescan picks up rules that became applicable (a package got installed) and works them;
5. the Worker phase (``agent_loop.WorkerPhase``): what the vendor fixes left failing, and
   the rules without one, go to the Architect, Worker and Reflector, attempt after attempt;
   without an LLM endpoint they end with the vendor attempt's reason or ``llm_unavailable``;
6. deferred fixes (reboot-marked, ran cleanly, still failing: decision 4): with
   ``allow_reboot`` the host reboots once and those rules are verified again;
7. the final scan gives the ``after`` counts and the regressions (pass before, not after).

Everything a human needs later goes to the run's ``events.jsonl`` and the host's JSON file.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
import typing as t

import yaml
from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import health, outcomes, safety, task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils import waivers as W
from ansible_collections.scapforge.remediation.plugins.plugin_utils.agent_loop import WorkerPhase
from ansible_collections.scapforge.remediation.plugins.plugin_utils.attempt_runner import AttemptRunner
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import CheckpointError, make_provider
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import PackageFactsCache, TaskListExecutor
from ansible_collections.scapforge.remediation.plugins.plugin_utils.console import ConsoleProgress
from ansible_collections.scapforge.remediation.plugins.plugin_utils.progress import Progress
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.lessons import tasks_sha
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.session import MemorySession
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import (
    LoopError,
    ParentWatch,
    load_catalog,
    load_tailoring,
    refuse_controller,
    resolve_profile,
    with_host_facts,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.scanner import CRASH_KINDS, Scanner, counts_of
from ansible_collections.scapforge.remediation.plugins.plugin_utils.skills import SkillError, load_skill
from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import write_host_report
from ansible_collections.scapforge.remediation.plugins.plugin_utils.tailoring import build_tailoring

#: results that are reported but never become work items (DESIGN decision 3).
NOT_WORK = ("error", "unknown", "notchecked")
#: where checkpoints live on the target, one directory per run.
CHECKPOINT_ROOT = "/var/lib/scapforge/checkpoints"
#: the action that reboots a host for its deferred fixes, and the seconds it may take to come
#: back (ansible.builtin.reboot's reboot_timeout; its own default is 600 too).
REBOOT_ACTION = "ansible.builtin.reboot"
REBOOT_TIMEOUT = 600
#: where the baseline and final scans keep their ARF results on the target (one directory per
#: run, gzip-compressed: a whole profile's ARF is about 14 MB of XML, 1 MB compressed), and the
#: action that brings them to the controller (``<run dir>/arf/<host>-before.xml``/``-after.xml``).
ARF_ROOT = "/var/lib/scapforge/arf"
FETCH_ACTION = "ansible.builtin.fetch"


@dataclasses.dataclass
class LoopOptions:
    """What the user asked for; field meanings are documented in plugins/modules/ralph.py.

    llm: an ``llm.LLMConfig`` (None or not ``configured``: no Worker phase); prompts: the
    agents' PromptSet; budget: the per-rule ``attempts.Budget``; run_tokens: the run's
    token budget over all hosts (0: none); max_answer_tokens: the most tokens one answer may take;
    memory_path/memory_mode/memory_retry: the lesson store (``memory.session``).
    """

    datastream: str
    profile: str
    datastream_src: str | None = None
    tailoring_src: str | None = None
    trusted_sha256: list[str] = dataclasses.field(default_factory=list)
    rules: list[str] = dataclasses.field(default_factory=list)
    skip_rules: list[str] = dataclasses.field(default_factory=list)
    waivers: list[dict] = dataclasses.field(default_factory=list)  # scapforge_waivers (waivers.parse)
    allow_access_impacting: list[str] = dataclasses.field(default_factory=list)
    health_check: bool = True
    rescan: bool = True
    run_dir: str = "."
    run_id: str = ""
    time_budget: float = 0.0  # seconds, 0 = no limit
    verify_batch: int = 8  # applied rules re-evaluated per oscap call
    skill: str = "anssi-debian12"
    skill_description: str = ""
    llm: t.Any = None
    prompts: t.Any = None
    budget: A.Budget = dataclasses.field(default_factory=A.Budget)
    run_tokens: int = 0
    max_answer_tokens: int = 2000
    memory_path: str = "~/.scapforge/memory"
    memory_mode: str = "inject"
    memory_retry: bool = False
    allow_controller: bool = False
    health_commands: list[str] = dataclasses.field(default_factory=list)
    deadman_seconds: int = 600
    allow_reboot: bool = False
    checkpoint_provider: str = "files"
    checkpoint_options: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Applied:
    """A vendor fix that ran and waits for verification: its work item and attempt, and
    whether the fix's metadata says reboot (DESIGN decision 4)."""

    item: A.WorkItem
    attempt: A.Attempt
    reboot: bool
    trusted: bool = False  # how its tasks ran, to apply them again alone (``_check_batch_health``)
    variables: dict | None = None


def task_names(tasks: list) -> list[str]:
    """Names of the tasks of a fix, blocks flattened (unnamed tasks are shown by their keys)."""
    names: list[str] = []
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        if isinstance(task.get("block"), list):
            names.extend(task_names(task["block"]))
        else:
            names.append(str(task.get("name") or ", ".join(k for k in task if k not in ("when", "tags"))))
    return names


def _covered(attempt: A.Attempt) -> set:
    """The files the attempt's tasks ran to change (``changing``); its checkpoint may hold more,
    saved ahead for tasks that then did not run. An attempt recorded without it: its saved files."""
    checkpoint = attempt.checkpoint or {}
    return set(checkpoint.get("changing", checkpoint.get("covered")) or [])


class RemediationLoop:
    """One host's run. ``run()`` returns the host report written to ``hosts/<host>.json``:
    host, run_id, profile, tailoring (see ``_tailoring_record``, null without one), content
    {sha256, benchmark_version, oscap_version}, check_mode,
    llm {endpoint, model, tokens} (null without one), before/after counts by result (after
    null when the host stopped or in check mode), outcomes {"outcome/reason": n},
    regressions, picked_up_by_rescan, not_work_items, still_failing, reboot_required (short
    ids still deferred for a reboot, [] when none), rebooted (the reboot of deferred fixes:
    {rules, seconds, ok, detail}, null when none), stopped, seconds (wall time),
    rules {short id: RuleOutcome dict, with attempt_log}."""

    def __init__(self, action, task_vars: dict, opts: LoopOptions, check_mode: bool) -> None:
        self.action = action
        self.task_vars = task_vars
        self.opts = opts
        self.check_mode = check_mode
        self.host = task_vars.get("inventory_hostname", "localhost")
        self.console = ConsoleProgress(self.host)
        self.events = EventLog(os.path.join(opts.run_dir, "events.jsonl"), self.host, listener=self.console.event)
        self.outcomes: dict[str, outcomes.RuleOutcome] = {}
        self.items: dict[str, A.WorkItem] = {}
        self.queue: list[str] = []  # rules waiting for the Worker phase, in order
        self.stopped: str | None = None  # detail of the failed health check, once stopped
        self.started = time.monotonic()
        self.remote_user = self._remote_user()
        self.gate_policy = task_gate.GatePolicy(remote_user=self.remote_user)
        self.worker: WorkerPhase | None = None
        self.runner: AttemptRunner | None = None
        self.memory: MemorySession | None = None
        self.parent = ParentWatch()
        self.progress = Progress(opts.run_dir, self.host)
        self.resume = self.progress.load()
        self.interrupted: list[dict] = []
        self.rebooted: dict | None = None  # the reboot of deferred fixes: rules, seconds, ok, detail
        self.waivers: dict[str, W.Waiver] = {}  # full rule id -> its active waiver
        self.expired_waivers: list[dict] = []
        self.arf_dir: str | None = None  # the run's ARF directory on the target, once made
        self.arf: dict = {}  # before/after: path relative to the run dir, or an "error"

    @property
    def changed(self) -> bool:
        """True once an attempt changed the host."""
        return bool(self.runner and self.runner.changed)

    # -- setup -----------------------------------------------------------------------------
    def _remote_user(self) -> str | None:
        try:
            user = self.action._connection.get_option("remote_user")
        except Exception:
            user = None
        return user or self.task_vars.get("ansible_user") or self.action._play_context.remote_user

    def _prepare(self) -> None:
        try:
            self.skill = load_skill(self.opts.skill)
        except SkillError as exc:
            raise LoopError("skill", str(exc)) from None
        self.gate_policy = task_gate.GatePolicy(remote_user=self.remote_user, module_allowlist_extra=self.skill.modules)
        self.health_commands = list(self.opts.health_commands) + self.skill.health_checks
        clock = time.monotonic()
        self.catalog, self.trusted, source = load_catalog(
            self.action, self.task_vars, self.opts.datastream, self.opts.datastream_src, self.opts.trusted_sha256
        )
        if self.opts.tailoring_src:  # a view: the cached catalog is shared by every host
            self.catalog = load_tailoring(self.catalog, self.opts.tailoring_src)
        timing = {"catalog_s": round(time.monotonic() - clock, 2)}
        clock = time.monotonic()
        self.task_vars = with_host_facts(self.action, self.task_vars)
        timing["facts_s"] = round(time.monotonic() - clock, 2)
        if not self.opts.allow_controller:
            refuse_controller(self.action, self.task_vars.get("ansible_facts", {}))
        self.profile = resolve_profile(self.catalog, self.opts.profile)
        try:  # a typo in a waiver must not let the rule run (or an opt-in silently do nothing)
            self.scope = [self.catalog.rule(r).id for r in self.opts.rules]
            self.waived = {self.catalog.rule(r).id for r in self.opts.skip_rules}
            self.allowed = {self.catalog.rule(r).id for r in self.opts.allow_access_impacting if r != "all"}
        except CatalogError as exc:
            raise LoopError("rule", str(exc)) from None
        self._load_waivers()
        self.allow_all = "all" in self.opts.allow_access_impacting
        self.worker = self._worker_phase()
        try:
            self.memory = MemorySession.open(
                os.path.expanduser(self.opts.memory_path), self.opts.memory_mode, self.opts.memory_retry,
                self.task_vars.get("ansible_facts", {}), self.catalog.benchmark_version, self.opts.skill,
                self.opts.run_id, self.host, self.events)
        except ValueError as exc:
            raise LoopError("memory", str(exc)) from None
        self.baseline = None
        clock = time.monotonic()
        if self.opts.health_check and not self.check_mode:
            status = health.check_host(self.action)
            if not status.healthy:
                raise LoopError(
                    "unhealthy_before",
                    "a fresh login with become fails before any change, so the health check cannot "
                    "protect this host: %s" % status.detail,
                )
            try:
                self.baseline = health.take_baseline(self.action, self.health_commands, user=self.remote_user)
            except health.HealthError as exc:
                raise LoopError("unhealthy_before", "the health baseline cannot be taken: %s" % exc) from None
            self.events.emit("health_baseline", failing=self.baseline.failing)
        timing["health_baseline_s"] = round(time.monotonic() - clock, 2)
        self.frozen = [] if self.check_mode else self._frozen_until_reboot()
        self.package_facts = PackageFactsCache()
        selected = set(self.profile.selected_rules)
        scope = self.catalog.expand_requires(self.scope) if self.scope else []
        outside = [r for r in scope if r not in selected]
        tailoring_xml, profile_id = self._scan_tailoring(outside)
        self.scan_rules, self.scan_profile = scope, profile_id
        self.scanner = Scanner(self.action, self.task_vars, self.opts.datastream, profile_id, tailoring_xml)
        options = dict(self.opts.checkpoint_options)
        if self.opts.checkpoint_provider == "files":
            options.setdefault("root", CHECKPOINT_ROOT)
            options["root"] = "%s/%s" % (options["root"].rstrip("/"), self.opts.run_id or "adhoc")
        try:
            checkpoints = make_provider(self.opts.checkpoint_provider, self.action, self.task_vars, options)
        except CheckpointError as exc:
            raise LoopError("checkpoint", str(exc)) from None
        self.runner = AttemptRunner(self.action, self.task_vars, self.catalog, self.scanner, checkpoints, self.events,
                                    self.gate_policy, self.opts.health_check, self._stop,
                                    want_evidence=self.worker.agents is not None, progress=self.progress,
                                    start=self.resume.starts + 1, parent=self.parent, baseline=self.baseline,
                                    health_commands=self.health_commands,
                                    deadman_seconds=self.opts.deadman_seconds, home=self.gate_policy.home(),
                                    classify=self._classify_failure, facts_cache=self.package_facts)
        llm = self.opts.llm
        self.events.emit(
            "run_start",
            run_id=self.opts.run_id,
            profile=self.profile.id,
            datastream=self.opts.datastream,
            content_source=source,
            content_sha256=self.catalog.sha256,
            trusted=self.trusted,
            scope=[safety.short_rule_id(r) for r in scope],
            waived=sorted(safety.short_rule_id(r) for r in self.waived),
            waivers=[dict(w.to_dict(), rule=safety.short_rule_id(r)) for r, w in sorted(self.waivers.items())],
            expired_waivers=self.expired_waivers,
            allowed_access_impacting="all" if self.allow_all else sorted(safety.short_rule_id(r) for r in self.allowed),
            tailored=[safety.short_rule_id(r) for r in outside],
            tailoring=self._tailoring_record(profile_id),
            check_mode=self.check_mode,
            connection=getattr(self.action._connection, "_load_name", None),  # mitogen_ssh when accelerated
            llm={"endpoint": llm.base_url, "model": llm.model} if self.worker.agents is not None else None,
            budget=dataclasses.asdict(self.opts.budget),
            catalog_from_disk=self.catalog.loaded_from_disk,
            seconds=round(time.monotonic() - self.started, 2),  # since the loop started: setup
            timing=timing,
        )

    def _load_waivers(self) -> None:
        """Validate ``waivers`` (``waivers.parse``) and resolve their rules in the catalog:
        active ones go to ``self.waivers``, expired ones to ``self.expired_waivers`` (short
        ids; event ``waiver_expired``) and their rules are worked as usual. Raises
        LoopError(``waiver``) naming the entry for a malformed one or an unknown rule."""
        try:
            parsed = W.parse(self.opts.waivers)
        except W.WaiverError as exc:
            raise LoopError("waiver", str(exc)) from None
        today = W.today_utc()
        for index, waiver in enumerate(parsed):
            try:
                rule_id = self.catalog.rule(waiver.rule).id
            except CatalogError as exc:
                raise LoopError("waiver", "scapforge_waivers[%d] (rule %s): %s" % (index, waiver.rule, exc)) from None
            entry = dict(waiver.to_dict(), rule=safety.short_rule_id(rule_id))
            if waiver.active(today):
                self.waivers[rule_id] = waiver
            else:
                self.expired_waivers.append(entry)
                self.events.emit("waiver_expired", rule=entry["rule"], expires=entry["expires"], reason=waiver.reason)

    def _frozen_until_reboot(self) -> list[dict]:
        """The skill's ``frozen_until_reboot`` probes that hold on this host now (one command
        each, with become): a rule they name that passes waits for a reboot. A probe that fails
        to run holds nothing (a container may not read the kernel's audit status)."""
        held = []
        for probe in self.skill.frozen_probes:
            try:
                res = self.action._low_level_execute_command(probe["command"], sudoable=True)
            except AnsibleError as exc:
                res = {"rc": None, "stdout": "", "stderr": str(exc)}
            said = (res.get("stdout") or "").replace("\r\n", "\n")  # a become through a pty says \r\n
            holds = res.get("rc") == 0 and re.search(probe["pattern"], said, re.M) is not None
            self.events.emit("frozen_probe", command=probe["command"], rc=res.get("rc"), holds=holds,
                             said=((res.get("stdout") or "") + (res.get("stderr") or "")).strip()[-300:])
            if holds:
                held.append(probe)
        return held

    def _frozen(self, rule_id: str) -> dict | None:
        short = safety.short_rule_id(rule_id)
        return next((p for p in self.frozen if re.search(p["rules"], short)), None)

    def _classify_failure(self, rule_id: str, message: str) -> str | None:
        """The skill's ``classify_failure`` hook: an environment kind for a failed fix, or None."""
        return self.skill.call_hook("classify_failure", rule_id, message, log=lambda **kw: self.events.emit(
            "hook_failed", rule=safety.short_rule_id(rule_id), **kw))

    def _scan_tailoring(self, outside: list[str]) -> tuple[str | None, str]:
        """(tailoring XML or None, profile id) for every scan: the user's tailoring file and
        profile when given; with rules outside the profile (full ids), a generated tailoring
        that selects them (decision 5), carrying the user's profile's changes when it is a
        tailored one (oscap takes one tailoring file per scan)."""
        if outside:
            xml_bytes, profile_id = build_tailoring(self.catalog, self.profile.id, select=outside)
            return xml_bytes.decode("utf-8"), profile_id
        tailoring = self.catalog.tailoring
        return (tailoring.xml if tailoring is not None else None), self.profile.id

    def _tailoring_record(self, scan_profile: str) -> dict | None:
        """The user's tailoring file for the report and run_start: {file (base name),
        sha256, profile (its profile the run uses), scan_profile (the profile oscap is
        given: a generated one when rules outside it were added)}; None without one."""
        tailoring = self.catalog.tailoring
        if tailoring is None:
            return None
        return {"file": tailoring.name, "sha256": tailoring.sha256, "profile": self.profile.id,
                "scan_profile": scan_profile}

    def _worker_phase(self) -> WorkerPhase:
        """The Worker phase, with agents when an endpoint is configured (a remote one only
        with ``allow_remote``). Raises LoopError(``llm_remote``, ``prompts``)."""
        from ansible_collections.scapforge.remediation.plugins.plugin_utils import agents as agents_mod
        from ansible_collections.scapforge.remediation.plugins.plugin_utils import llm as llm_mod

        config = self.opts.llm
        if config is None or not config.configured or self.check_mode:
            return WorkerPhase(self, None, self.opts.budget)
        try:
            llm_mod.check_endpoint(config.base_url, config.allow_remote)
        except llm_mod.LLMError as exc:
            raise LoopError("llm_remote", str(exc)) from None
        if self.opts.prompts is None:
            raise LoopError("prompts", "no prompts for the agents (skill %s)" % self.opts.skill)
        facts = self.task_vars.get("ansible_facts", {})
        base = {
            "skill": {"name": self.skill.name, "description": self.opts.skill_description or self.skill.description},
            "host": {"os": "%s %s" % (facts.get("distribution", "?"), facts.get("distribution_version", "")),
                     "virtualization": "%s %s" % (facts.get("virtualization_role", ""),
                                                  facts.get("virtualization_type", "")),
                     "user": self.remote_user or "?", "become": self.action._play_context.become_method or "none"},
        }
        ledger = agents_mod.TokenLedger(self.opts.run_dir, self.opts.run_tokens)
        agents = agents_mod.Agents(llm_mod.LLMClient(config), self.opts.prompts, self.events, ledger, base,
                                   max_tokens=self.opts.max_answer_tokens)
        return WorkerPhase(self, agents, self.opts.budget, ledger)

    def _arf_path(self, label: str) -> str | None:
        """Where a scan keeps its ARF on the target: the baseline's as ``before.xml.gz``, the
        rescan's and final's as ``after.xml.gz`` (the last one wins); None for other scans
        and in check mode. The run's directory is made (0700) on first use; a failure to make
        it is recorded in ``self.arf`` and the scans go on without ARF."""
        name = {"baseline": "before", "rescan": "after", "final": "after"}.get(label)
        if name is None or self.check_mode or self.arf.get("error"):
            return None
        if self.arf_dir is None:
            folder = "%s/%s" % (ARF_ROOT, self.opts.run_id or "adhoc")
            try:
                made = self.action._execute_module(module_name="ansible.builtin.file", task_vars=self.task_vars,
                                                   module_args={"path": folder, "state": "directory", "mode": "0700"})
            except AnsibleError as exc:
                made = {"failed": True, "msg": str(exc)}
            if made.get("failed"):
                self.arf["error"] = "cannot make %s on the host: %s" % (folder, str(made.get("msg"))[-300:])
                return None
            self.arf_dir = folder
        return "%s/%s.xml.gz" % (self.arf_dir, name)

    def _fetch_arf(self) -> None:
        """Bring the kept ARF files to ``<run dir>/arf/<host>-before.xml`` and ``-after.xml``
        (fetched compressed with ``ansible.builtin.fetch`` on the action's connection and
        become, unpacked on the controller), then remove the run's ARF directory from the
        host. ``self.arf`` gets {before, after}: the paths relative to the run dir, and
        ``error`` when one could not be fetched (never fatal: the outcomes stand)."""
        if self.arf_dir is None:
            return
        executor = TaskListExecutor(self.action, self.task_vars, trusted=False)
        folder = os.path.join(self.opts.run_dir, "arf")
        errors = []
        for name in ("before", "after"):
            gz = os.path.join(folder, "%s-%s.xml.gz" % (self.host, name))
            try:
                got = executor.run_loop_action(FETCH_ACTION, {"src": "%s/%s.xml.gz" % (self.arf_dir, name), "dest": gz,
                                                              "flat": True, "fail_on_missing": True},
                                               task_name="Fetch the %s scan's ARF" % name)
            except AnsibleError as exc:
                got = {"failed": True, "msg": str(exc)}
            if got.get("failed"):
                errors.append("%s: %s" % (name, str(got.get("msg"))[-300:]))
                continue
            try:
                HR.gunzip(gz, gz[:-3])
            except OSError as exc:
                errors.append("%s: %s" % (name, exc))
                continue
            self.arf[name] = os.path.relpath(gz[:-3], self.opts.run_dir)
        if errors:
            self.arf["error"] = "; ".join(errors)
        self.events.emit("arf_fetched", **self.arf)
        try:
            self.action._execute_module(module_name="ansible.builtin.file", task_vars=self.task_vars,
                                        module_args={"path": self.arf_dir, "state": "absent"})
        except AnsibleError:
            pass  # left on the host: a later run of the same id overwrites it

    def _scan(self, label: str) -> dict:
        started = time.monotonic()
        result = self.scanner.scan(self.scan_rules, arf_path=self._arf_path(label))
        if result.get("failed"):
            kind = result.get("error_kind", "oscap_error")
            self.events.emit("scan_failed", label=label, error_kind=kind, msg=result.get("msg"))
            said = " | ".join((result.get("stderr_tail") or "").splitlines())[-600:]
            env = safety.environment_kind("%s\n%s" % (result.get("msg"), said))  # a full /tmp: environment:disk_full
            code = "scanner_crash" if kind in CRASH_KINDS else outcomes.environment_reason(env) if env else "scan_failed"
            raise LoopError(code, "%s scan failed (%s): %s%s" % (label, kind, result.get("msg"),
                                                                 " oscap said: %s" % said if env else ""))
        results = result.get("rules", {})
        result["label"] = label
        self.events.emit(
            "scan",
            label=label,
            counts=counts_of(results),
            seconds=round(time.monotonic() - started, 2),
            oscap_version=result.get("oscap_version"),
            content_version=result.get("content_version"),
            missing=result.get("missing", []),
        )
        return result

    # -- outcomes --------------------------------------------------------------------------
    def _finish(self, rule_id: str, reason: str, **kwargs: t.Any) -> outcomes.RuleOutcome:
        rule = self.catalog.rule(rule_id)
        outcome = outcomes.RuleOutcome.of(rule_id, reason, category=self.skill.category_of(rule), **kwargs)
        self.outcomes[rule_id] = outcome
        data = outcome.to_dict()
        del data["rule"], data["attempts"], data["attempt_log"]
        self.events.emit("rule_complete", rule=safety.short_rule_id(rule_id), attempt=outcome.attempts or None, **data)
        self.console.rule_done(safety.short_rule_id(rule_id), outcome.to_dict())
        if not self.check_mode:
            self.progress.append("outcome", rule=rule_id, outcome=outcome.to_dict())
        if self.memory is not None and not self.check_mode:
            entry = dict(outcome.to_dict(), rule=rule.short_id)
            item = self.items.get(rule_id)
            records = [dataclasses.asdict(a) for a in item.attempts] if item else []
            self.memory.learn(entry, records, from_memory=outcome.from_memory is not None)
        return outcome

    def finish_item(self, item: A.WorkItem, reason: str, detail: str = "") -> outcomes.RuleOutcome:
        """The rule's outcome from its work item: every attempt in ``attempt_log``, the
        modules of all of them, the changed tasks of the last one that ran."""
        ran = [a for a in item.attempts if a.report]
        modules: list[str] = []
        for a in ran:
            modules.extend(m for m in a.modules if m not in modules)
        last = ran[-1] if ran else None
        changed = ["%s (%s)" % (r.get("name"), r.get("module")) for r in (last.report.get("task_results") or [])
                   if r.get("changed") and not r.get("check_mode")] if last else []
        kept = last.side_effects if last is not None and last.verdict == A.PASSED else []
        return self._finish(item.rule, reason, attempts=len(item.attempts), modules=modules, changed_tasks=changed,
                            detail=detail[:800], attempt_log=[a.log_entry() for a in item.attempts],
                            lessons_shown=list(item.lessons_shown), side_effects=list(kept))

    def out_of_budget(self) -> bool:
        """True once the run's time budget (``time_budget`` seconds) is spent."""
        return bool(self.opts.time_budget) and time.monotonic() - self.started > self.opts.time_budget

    # -- the vendor phase ------------------------------------------------------------------
    def _item(self, rule_id: str) -> A.WorkItem:
        if rule_id not in self.items:
            self.items[rule_id] = A.WorkItem(rule_id, category=self.skill.category_of(self.catalog.rule(rule_id)))
        return self.items[rule_id]

    def _not_attempted(self, rule_id: str) -> tuple[str, str] | None:
        """(reason, detail) when the rule is not attempted at all: host stopped, time budget,
        waiver, access impact without opt-in, or a rule no running host can pass."""
        if self.stopped:
            return "host_stopped", self.stopped
        if self.out_of_budget():
            return "budget", ""
        if rule_id in self.waivers:
            return "waived", W.detail(self.waivers[rule_id])
        if rule_id in self.waived:
            return "waived", ""
        impact = self.skill.access_impact(rule_id, self.remote_user)
        if impact and rule_id not in self.allowed and not self.allow_all:
            return "access_impacting", impact
        unfixable = self.skill.unfixable_kind(rule_id)
        if unfixable:
            return outcomes.environment_reason(unfixable), "no fix on a running host can pass this rule"
        return None

    def apply(self, rule_id: str, defer_health: bool = False) -> Applied | None:
        """Decide and, where allowed, apply one rule's vendor fix; never raises for a
        host-side failure. Returns the Applied fix waiting for verification, or None when the
        rule got its outcome or went to the Worker queue. ``defer_health``: its health check
        waits for its batch (``AttemptRunner.run``)."""
        self.parent.check()
        rule = self.catalog.rule(rule_id)
        self.events.emit("rule_start", rule=rule.short_id, title=rule.title, category=self.skill.category_of(rule))
        skip = self._not_attempted(rule_id)
        if skip is not None:
            waiver = self.waivers.get(rule_id) if skip[0] == "waived" else None
            self._finish(rule_id, skip[0], detail=skip[1],
                         waiver=dict(waiver.to_dict(), rule=rule.short_id) if waiver else None)
            return None
        item = self._item(rule_id)
        fix = rule.ansible_fix
        tasks, unrenderable = self.skill.fix_tasks(rule_id), None
        own = tasks is not None  # the skill's fix replaces the content's (shipped with the collection: trusted)
        if fix is not None and not own:
            try:
                tasks = yaml.safe_load(self.catalog.render_fix(rule_id, self.profile.id)) or []
            except (CatalogError, yaml.YAMLError) as exc:  # content fault: this rule, not the run
                unrenderable = "the content's fix cannot be rendered: %s" % exc
        acted, applied = self._from_memory(item, tasks, defer_health)
        if acted:
            return applied
        if tasks is None and not unrenderable:
            if self.check_mode:
                self._finish(rule_id, "check_mode" if self.worker.agents else "llm_unavailable",
                             detail="the content has no Ansible fix for this rule")
            else:
                self.queue.append(rule_id)
            return None
        if unrenderable:
            attempt = item.new_attempt(A.VENDOR)
            attempt.gate = attempt.detail = unrenderable
            attempt.verdict, attempt.reason = A.REFUSED, "fix_refused"
            self.queue.append(rule_id)
            return None
        if self.check_mode:
            executor = TaskListExecutor(self.action, self.task_vars, trusted=self.trusted or own)
            problems = executor.validate(tasks)
            if problems:
                self._finish(rule_id, "fix_refused", detail="; ".join(problems)[:500])
            else:
                plan = task_names(tasks)
                self._finish(rule_id, "check_mode",
                             detail=("vendor fix would run %d tasks: %s" % (len(plan), "; ".join(plan)))[:800])
            return None
        attempt = item.new_attempt(A.VENDOR)
        # a skill's fix templates with the rule's XCCDF Values, as the content's fixes get
        # them from their set_fact of each Value
        variables = self.catalog.rule_values(rule_id, self.profile.id) if own else None
        started = time.monotonic()
        self.runner.run(item, attempt, tasks, trusted=self.trusted or own, variables=variables,
                        defer_health=defer_health)
        attempt.seconds = time.monotonic() - started
        if attempt.verdict:  # refused or unhealthy: decided without verification
            self._after_vendor(item)
            return None
        return Applied(item, attempt, bool(fix is not None and fix.reboot) or self.skill.needs_reboot(rule_id),
                       trusted=self.trusted or own, variables=variables)

    def _from_memory(self, item: A.WorkItem, vendor_tasks: list | None,
                     defer_health: bool = False) -> tuple[bool, Applied | None]:
        """Act on what memory knows before the vendor fix (issue 6 item 5): classify the rule
        with zero attempts (a caution, or a vendor failure with no model to try anything
        else), skip the vendor fix for the Worker, or first try tasks that verified on a host
        like this one. Returns (acted, the Applied attempt to verify or None)."""
        if self.memory is None:
            return False, None
        decision = self.memory.decide(item.rule, item.category, llm=self.worker.agents is not None,
                                      tasks_sha=tasks_sha(vendor_tasks) if vendor_tasks else None)
        if decision is None or (decision.action == "try_first" and decision.source == "vendor"):
            return False, None  # proven vendor tasks are the content's fix: it runs as usual
        item.lessons_shown.append(decision.lesson)
        if self.check_mode:
            self._finish(item.rule, "check_mode", detail="memory would act: %s" % decision.detail,
                         lessons_shown=[decision.lesson])
            return True, None
        if decision.action == "classify":
            self._finish(item.rule, decision.reason, detail=decision.detail, from_memory=decision.lesson,
                         lessons_shown=[decision.lesson])
            return True, None
        if decision.action == "skip_vendor":
            self.queue.append(item.rule)
            return True, None
        attempt = item.new_attempt(A.WORKER)  # try_first: tasks a Worker wrote that verified before
        attempt.origin = attempt.detail = decision.detail
        started = time.monotonic()
        self.runner.run(item, attempt, decision.tasks, trusted=False, defer_health=defer_health)
        attempt.seconds = time.monotonic() - started
        if attempt.verdict:
            self._after_vendor(item)
            return True, None
        return True, Applied(item, attempt, False)

    def verify(self, applied: list[Applied]) -> None:
        """Re-evaluate applied vendor fixes in ONE oscap call (with the rules they require),
        judge each by its own rule-result (a missing result is never a pass), then roll back
        those that did not pass, newest first."""
        self.parent.check()
        batch = self.catalog.expand_requires([a.item.rule for a in applied])
        result = self.scanner.scan(batch, evidence=self.runner.want_evidence)
        shorts = [safety.short_rule_id(r) for r in batch]
        if result.get("failed"):
            kind = result.get("error_kind", "oscap_error")
            self.events.emit("verify", failed=True, error_kind=kind, msg=result.get("msg"), batch=shorts)
            value = "scanner_crash" if kind in CRASH_KINDS else "scan_failed"
            for entry in applied:
                self.runner.judge(entry.item, entry.attempt, value, None, entry.reboot)
                entry.attempt.say("verification failed: %s" % str(result.get("msg"))[:500])
        else:
            evidence = result.get("evidence") or {}
            for entry in applied:
                value = result.get("rules", {}).get(entry.item.rule, "missing")
                self.events.emit("verify", rule=entry.item.short_id, attempt=entry.attempt.number, result=value,
                                 batch=shorts)
                self.runner.judge(entry.item, entry.attempt, value, evidence.get(entry.item.rule), entry.reboot)
                frozen = self._frozen(entry.item.rule) if entry.attempt.verdict == A.PASSED else None
                if frozen:  # case audit-immutable-last: on disk, not loaded until a reboot
                    entry.attempt.verdict, entry.attempt.reason = A.INEFFECTIVE, "reboot_required"
                    entry.attempt.say("its lines are on disk; %s" % frozen.get("why", "loaded only after a reboot"))
        self._roll_back_batch(applied)
        for entry in applied:
            self.runner.close(entry.item, entry.attempt)
            self._after_vendor(entry.item)

    def _roll_back_batch(self, applied: list[Applied]) -> None:
        """Roll back the batch's attempts that did not pass, newest first. An attempt whose
        files a later fix of the batch also changed, and that later fix stands, is not
        restored (its checkpoint would undo the later fix too): it is kept and says so."""
        for index in range(len(applied) - 1, -1, -1):
            entry = applied[index]
            if not A.needs_rollback(entry.attempt) or self.stopped:
                continue
            blockers = [later.item.short_id for later in applied[index + 1:]
                        if later.attempt.rolled_back is not True and _covered(later.attempt) & _covered(entry.attempt)]
            if blockers:
                entry.attempt.rolled_back = False
                entry.attempt.add_note("not rolled back: shares files with %s, applied after it in the same batch"
                                       % ", ".join(blockers))
                continue
            self.runner.roll_back(entry.item, entry.attempt)

    def _after_vendor(self, item: A.WorkItem) -> None:
        """A vendor attempt is judged: finish the rule when nothing more can be done, else
        queue it for the Worker phase."""
        step = A.next_step(item, self.opts.budget, llm=True, now=time.monotonic())
        if step.kind == "finish":
            self.finish_item(item, step.reason, step.detail)
        else:
            self.queue.append(item.rule)

    # -- the run ---------------------------------------------------------------------------
    def _access_last(self, rule_ids: t.Sequence[str]) -> list[str]:
        """The rules in their order, with the access-impacting ones the user opted in to moved
        to the end (issue 7 item 4): a lock-out they cause can then cost no other rule."""
        risky = [r for r in rule_ids if self.skill.access_impact(r, self.remote_user)]
        return [r for r in rule_ids if r not in risky] + risky

    def _work(self, rule_ids: t.Sequence[str]) -> None:
        """Apply and verify the vendor fixes of the rules.

        Rules tied by <requires> (even in a cycle, as sshd_set_idle_timeout and
        sshd_set_keepalive are) are applied together, since neither passes before the other
        is fixed. Verification is batched: up to ``verify_batch`` applied rules are
        re-evaluated in one oscap call (bench/verify_batch.py: 7.35x faster for 8 rules), each
        judged by its own rule-result after the whole batch ran, so within a batch a later fix
        that undoes an earlier one shows as fix_ineffective on the earlier rule; across batches
        the final scan marks it regressed.
        """
        todo = list(rule_ids)
        done: set[str] = set()
        pending: list[Applied] = []
        batch_size = max(1, self.opts.verify_batch)
        for rule_id in todo:
            if rule_id in done:
                continue
            group = [r for r in self.catalog.expand_requires([rule_id]) if r in todo and r not in done]
            done.update(group)
            try:
                pending.extend(a for a in (self.apply(r, defer_health=batch_size > 1) for r in group)
                               if a is not None)
                if len(pending) >= batch_size or self.stopped:
                    pending, batch = [], pending
                    self._verify_or_stop(batch)
            except AnsibleError as exc:  # an Ansible error outside the executor (connection, become): stop
                self._stop("stopped during %s: %s" % (safety.short_rule_id(rule_id), str(exc)[-300:]), group)
        self._verify_or_stop(pending)

    def _verify_or_stop(self, applied: list[Applied]) -> None:
        """The batch's health check (for the attempts that deferred it), then its verification."""
        try:
            applied = self._check_batch_health(applied)
            if applied:
                self.verify(applied)
        except AnsibleError as exc:
            self._stop("verification failed: %s" % str(exc)[-300:], [a.item.rule for a in applied], "verify_error")

    def _check_batch_health(self, applied: list[Applied]) -> list[Applied]:
        """One health check for the batch's attempts that deferred theirs (issue 9: vendor fixes
        applied in one pass, with per-rule bisection only for what breaks health). Healthy: each
        attempt gets the batch's health and the batch goes on to verification. Unhealthy: the
        deferred attempts are rolled back, newest first, and applied again one at a time, each
        with its own health check, which finds the attempt at fault and rolls back only that one
        (``AttemptRunner.run``). A batch that is still unhealthy once rolled back stops the host.
        Returns the attempts to verify."""
        deferred = [a for a in applied if (a.attempt.health or {}).get("deferred")]
        if not deferred or self.stopped:
            return applied
        self.parent.check()
        shorts = [a.item.short_id for a in deferred]
        status = self.runner.batch_health([(a.item, a.attempt) for a in deferred])
        self.events.emit("health", batch=shorts, **status.to_dict())
        if status.healthy:
            for entry in deferred:
                entry.attempt.health = dict(status.to_dict(), batch=shorts)
            return applied
        restored = [self.runner.roll_back(a.item, a.attempt) for a in reversed(deferred)]
        after = self.runner.batch_health([])
        self.events.emit("health", batch=shorts, after_restore=True, by="restore", **after.to_dict())
        if not all(restored) or not after.healthy:
            for entry in deferred:
                entry.attempt.verdict, entry.attempt.reason = A.UNHEALTHY, "unhealthy"
                entry.attempt.health = status.to_dict()
            self._stop("the batch %s left the host unhealthy (%s)%s" % (
                ", ".join(shorts), status.detail[:300], "" if after.healthy else "; the rollback did not heal it"),
                [a.item.rule for a in applied])
            return []
        kept = [a for a in applied if a not in deferred]
        for entry in deferred:
            self.runner.close(entry.item, entry.attempt)
            entry.item.attempts.remove(entry.attempt)
            attempt = entry.item.new_attempt(entry.attempt.source)
            alone = "applied alone: its batch (%s) failed the health check: %s" % (", ".join(shorts),
                                                                                   status.detail[:200])
            attempt.origin = "%s; %s" % (entry.attempt.origin, alone) if entry.attempt.origin else alone
            attempt.detail = attempt.origin
            started = time.monotonic()
            self.runner.run(entry.item, attempt, entry.attempt.tasks, trusted=entry.trusted,
                            variables=entry.variables)
            attempt.seconds = time.monotonic() - started
            if self.stopped:
                break
            if attempt.verdict:
                self._after_vendor(entry.item)
            else:
                kept.append(dataclasses.replace(entry, attempt=attempt))
        return kept

    def _work_queue(self) -> None:
        """The Worker phase over the queued rules, in the order they were queued."""
        queue, self.queue = self.skill.order(self.queue), []
        for rule_id in queue:
            if rule_id in self.outcomes:
                continue
            item = self._item(rule_id)
            try:
                self.worker.run(item)
            except AnsibleError as exc:
                self._stop("stopped during %s: %s" % (item.short_id, str(exc)[-300:]), [rule_id])

    def _stop(self, detail: str, rules: t.Iterable[str] = (), reason: str = "unhealthy") -> None:
        """Stop working this host; give ``rules`` still without an outcome ``reason``. Later
        rules get ``host_stopped``."""
        self.stopped = self.stopped or detail
        self.events.emit("host_stopped", detail=detail)
        for rule in rules:
            if rule not in self.outcomes:
                item = self.items.get(rule)
                if item is not None and item.attempts:
                    self.finish_item(item, reason, detail)
                else:
                    self._finish(rule, reason, detail=detail)

    def run(self) -> dict:
        """Run the loop for this host and return its report (also written to hosts/<host>.json).

        Raises LoopError when the run cannot start (content, profile, LLM endpoint, baseline scan).
        """
        self._prepare()
        if not self.check_mode:
            self.progress.append("start", run_id=self.opts.run_id)
        baseline = self._resume() if self.resume.baseline is not None and not self.check_mode else None
        if baseline is None:
            baseline = self._scan("baseline")
            if not self.check_mode:
                self.progress.append("baseline", scan={k: baseline.get(k) for k in (
                    "rules", "oscap_version", "content_version", "label")})
        before = baseline.get("rules", {})
        in_scope = set(self.scan_rules) if self.scope else None
        work = [r for r, v in before.items()
                if v == "fail" and (in_scope is None or r in in_scope) and r not in self.outcomes]
        ordered = self.skill.order(work)
        self.console.planned(len(ordered), self.profile.id, len(self.outcomes), self.check_mode)
        held = [r for r in ordered if self.skill.runs_last(r)] if self.opts.rescan else []
        self._work(self._access_last([r for r in ordered if r not in held]))

        picked_up: list[str] = []
        final = None if self.check_mode else self._scan_after("rescan" if self.opts.rescan else "final")
        if final is not None and self.opts.rescan:
            picked_up = [
                r for r, v in final.get("rules", {}).items()
                if v == "fail" and r not in self.outcomes and r not in self.items and r not in self.queue
                and before.get(r) not in ("fail", "pass") and (in_scope is None or r in in_scope)
            ]
            if picked_up:
                self.events.emit("rescan_picked_up", rules=[safety.short_rule_id(r) for r in picked_up])
                self.console.added(len(picked_up), "the rescan found")
        if held or picked_up:  # the skill's last rules after every other fix, the rescan's included
            self._work(self._access_last(self.skill.order(picked_up + held)))
        worked_by_agents = bool(self.queue) and self.worker.agents is not None
        self._work_queue()
        self._settle_deferred()
        if final is not None and (picked_up or held or worked_by_agents or self.rebooted):
            final = self._scan_after("final") or final  # a stopped host keeps the rescan's counts
        if final is not None:
            self._mark_regressed(final.get("rules", {}))
        self._close_checkpoints()
        if not self.stopped:
            self._fetch_arf()
        memory = self.memory.close() if self.memory is not None else None
        return self._report(baseline, final, picked_up, memory)

    # -- deferred fixes (DESIGN decision 4) ------------------------------------------------
    def _settle_deferred(self) -> None:
        """Give the rules deferred for a reboot their final outcome, when the user allows a
        reboot (``allow_reboot``), not in check mode and on a host not stopped: reboot the
        host once (:meth:`_reboot`), then verify exactly those rules again in one oscap call
        (:meth:`_verify_after_reboot`). Without the permission they stay ``deferred`` and the
        report's ``reboot_required`` lists them. A host that does not come back is stopped and
        its rules stay deferred. Then the skill's ``resolve_deferred`` hook may settle the
        rules still deferred (:meth:`_resolve_deferred_by_skill`)."""
        rules = outcomes.deferred_for_reboot(self.outcomes)
        if not rules:
            return
        if self.opts.allow_reboot and not self.check_mode and not self.stopped:
            self.parent.check()
            problem = self._reboot(rules)
            if problem:
                self._stop("the reboot for the deferred fixes (%s) failed: %s"
                           % (", ".join(safety.short_rule_id(r) for r in rules), problem))
            else:
                self._verify_after_reboot(rules)
        self._resolve_deferred_by_skill()

    def _resolve_deferred_by_skill(self) -> None:
        """Ask the skill's ``resolve_deferred(rule_ids, results)`` hook (short ids; {short id:
        last OpenSCAP result}) about the rules still deferred; each {short id: reason code}
        it returns for one of them replaces the outcome (attempts kept). An unknown rule or
        reason code, a non-dict answer or a raising hook changes nothing (event
        ``hook_failed`` for the last two)."""
        rules = outcomes.deferred_for_reboot(self.outcomes)
        if not rules or self.skill.hook("resolve_deferred") is None:
            return

        def log(**kw):
            return self.events.emit("hook_failed", **kw)

        shorts = {safety.short_rule_id(r): r for r in rules}
        results = {short: (self.items[rule].attempts[-1].result if rule in self.items and self.items[rule].attempts
                           else None) for short, rule in shorts.items()}
        said = self.skill.call_hook("resolve_deferred", list(shorts), results, log=log)
        if said is None:
            return
        if not isinstance(said, dict):
            log(name="resolve_deferred", error="returned %s, not a dict" % type(said).__name__)
            return
        for short, reason in said.items():
            try:
                valid = short in shorts and outcomes.outcome_for(str(reason)) is not None
            except ValueError:
                valid = False
            if not valid:
                log(name="resolve_deferred", error="ignored %r: %r" % (short, reason))
                continue
            old = self.outcomes[shorts[short]]
            self._finish(shorts[short], str(reason), attempts=old.attempts, modules=old.modules,
                         changed_tasks=old.changed_tasks, attempt_log=old.attempt_log, lessons_shown=old.lessons_shown,
                         side_effects=old.side_effects, detail="settled by the skill's resolve_deferred hook")

    def _reboot(self, rules: list[str]) -> str | None:
        """Reboot the host with ``ansible.builtin.reboot`` on the action's own connection (the
        executor's handler, as a fix's task runs), wait up to REBOOT_TIMEOUT s for it to answer
        again; emit ``reboot`` (rules, seconds, ok, detail) and keep it in ``self.rebooted``.
        Returns None once the host is back, else why it is not (str)."""
        started = time.monotonic()
        executor = TaskListExecutor(self.action, self.task_vars, trusted=False)
        try:
            result = executor.run_loop_action(
                REBOOT_ACTION, {"reboot_timeout": REBOOT_TIMEOUT,
                                "msg": "scapforge: reboot for deferred fixes (run %s)" % (self.opts.run_id or "adhoc")},
                task_name="Reboot for the deferred fixes")
        except AnsibleError as exc:
            result = {"failed": True, "msg": str(exc)}
        ok = not result.get("failed") and not result.get("unreachable") and bool(result.get("rebooted"))
        detail = "" if ok else str(result.get("msg") or "the reboot action did not report a reboot")[-500:]
        self.rebooted = {"rules": [safety.short_rule_id(r) for r in rules],
                         "seconds": round(time.monotonic() - started, 1), "ok": ok, "detail": detail}
        self.events.emit("reboot", **self.rebooted)
        return None if ok else detail

    def _verify_after_reboot(self, rules: list[str]) -> None:
        """Evaluate ``rules`` (with the rules they require, decision 6) in ONE oscap call and
        give each its final outcome from its own result (``attempts.after_reboot_reason``). A
        verification that cannot reach the host stops it (the rules get verify_error)."""
        batch = self.catalog.expand_requires(rules)
        shorts = [safety.short_rule_id(r) for r in batch]
        try:
            result = self.scanner.scan(batch)
        except AnsibleError as exc:
            result = {"failed": True, "error_kind": "connection", "msg": str(exc)[-300:]}
        if result.get("failed"):
            kind = result.get("error_kind", "oscap_error")
            self.events.emit("verify", label="after_reboot", failed=True, error_kind=kind, msg=result.get("msg"),
                             batch=shorts)
            values = dict.fromkeys(rules, "scanner_crash" if kind in CRASH_KINDS else "scan_failed")
        else:
            values = {r: result.get("rules", {}).get(r, "missing") for r in rules}
        for rule in rules:
            if not result.get("failed"):
                self.events.emit("verify", rule=safety.short_rule_id(rule), label="after_reboot", result=values[rule],
                                 batch=shorts)
            self._finish_after_reboot(rule, values[rule])
        if result.get("error_kind") == "connection":
            self._stop("verification after the reboot failed: %s" % result.get("msg"))

    def _finish_after_reboot(self, rule_id: str, value: str) -> None:
        """Replace a deferred outcome by its final one; the attempts and their log stay."""
        old = self.outcomes[rule_id]
        reason = A.after_reboot_reason(value)
        detail = "the fix's metadata says reboot; after the reboot (%s s) OpenSCAP reports %s" % (
            self.rebooted["seconds"], value)
        self._finish(rule_id, reason, attempts=old.attempts, modules=old.modules, changed_tasks=old.changed_tasks,
                     attempt_log=old.attempt_log, lessons_shown=old.lessons_shown, side_effects=old.side_effects,
                     detail=detail)

    def _resume(self) -> dict:
        """Continue an interrupted run of this run id (issue 7, "Resume"): keep the outcomes
        of the rules it finished and its baseline, and first settle the attempts it left open,
        newest first: restored from their checkpoint and verified, unless the dead-man switch
        already did it or the checkpoint is gone. Returns the baseline scan."""
        for rule, data in self.resume.outcomes.items():
            self.outcomes[rule] = outcomes.RuleOutcome(**data)
        for entry in reversed(self.resume.open):
            self.interrupted.append(self._settle(entry))
        self.events.emit("resume", start=self.resume.starts + 1, finished=len(self.outcomes),
                         interrupted=self.interrupted, damaged=self.resume.damaged)
        return dict(self.resume.baseline, label="baseline")

    def _settle(self, entry: dict) -> dict:
        """Roll back one attempt a crash left open; returns what was found and done."""
        found = dict(rule=safety.short_rule_id(entry["rule"]), attempt=entry["attempt"], checkpoint=entry["checkpoint"])
        try:
            checkpoint = self.runner.checkpoints.attach(entry["checkpoint"])
            state = checkpoint.deadman_status() if getattr(checkpoint, "supports_deadman", False) else None
            if state is not None and state.fired:  # the switch restored it while the controller was away
                verified = bool(state.result and state.result.verified)
                found.update(rolled_back=verified, by="dead-man switch", detail=state.detail)
            else:
                result = checkpoint.restore()
                nothing = result.missing
                found.update(rolled_back=None if nothing else bool(result.verified), by=None if nothing else "resume",
                             detail=result.detail)
        except (CheckpointError, AnsibleError) as exc:
            found.update(rolled_back=False, by=None, detail="could not restore: %s" % str(exc)[:300])
        if found["rolled_back"] is not False:
            self.progress.append("close", rule=entry["rule"], attempt=entry["attempt"])
        return found

    def _close_checkpoints(self) -> None:
        """Remove this run's checkpoints from the host: every attempt is judged by now and
        every one due was restored (a failure here is logged, never fatal)."""
        root = getattr(self.runner.checkpoints, "root", None)
        if self.check_mode or self.stopped or root is None:
            return  # a stopped host keeps its checkpoints for a human (or a resumed run)
        try:
            result = self.action._execute_module(
                module_name="ansible.builtin.file", module_args={"path": root, "state": "absent"},
                task_vars=self.task_vars)
            if result.get("failed"):
                self.events.emit("checkpoints_left", path=root, msg=result.get("msg"))
        except AnsibleError as exc:
            self.events.emit("checkpoints_left", path=root, msg=str(exc)[-300:])

    def _scan_after(self, label: str) -> dict | None:
        """A scan after changes were made: on failure the host stops and the report is still
        written (``after`` null), since what was applied must not be lost."""
        if self.stopped:
            return None  # the controller cannot scan a host it can no longer manage
        try:
            return self._scan(label)
        except (LoopError, AnsibleError) as exc:
            self._stop("%s scan failed: %s" % (label, exc), ())
            return None

    def _mark_regressed(self, after: dict) -> None:
        for rule_id, outcome in list(self.outcomes.items()):
            if outcome.outcome == outcomes.REMEDIATED and after.get(rule_id) not in (None, "pass"):
                self._finish(rule_id, "regressed", attempts=outcome.attempts, modules=outcome.modules,
                             changed_tasks=outcome.changed_tasks, attempt_log=outcome.attempt_log,
                             detail="passed after its fix, %s in the final scan" % after.get(rule_id))

    def _llm_summary(self) -> dict | None:
        """The endpoint, model and tokens this host spent (null without an endpoint)."""
        if self.worker is None or self.worker.agents is None:
            return None
        return {"endpoint": self.opts.llm.base_url, "model": self.opts.llm.model,
                "tokens": sum(item.tokens for item in self.items.values()), "down": self.worker.llm_down}

    def _report(self, baseline: dict, final: dict | None, picked_up: list[str], memory: dict | None = None) -> dict:
        """The host report; ``after`` is None when the host was stopped before a final scan."""
        before, after = baseline.get("rules", {}), (final or {}).get("rules", {})
        regressions = sorted(
            safety.short_rule_id(r) for r, v in before.items() if v == "pass" and after.get(r) not in (None, "pass")
        )
        by_reason: dict[str, int] = {}
        for outcome in self.outcomes.values():
            key = "%s/%s" % (outcome.outcome, outcome.reason)
            by_reason[key] = by_reason.get(key, 0) + 1
        last = after if final is not None else before
        not_work = {
            value: sorted(safety.short_rule_id(r) for r, v in last.items() if v == value) for value in NOT_WORK
        }
        report = {
            "host": self.host,
            "run_id": self.opts.run_id,
            "profile": self.profile.id,
            "tailoring": self._tailoring_record(self.scan_profile),
            "content": {
                "sha256": self.catalog.sha256,
                "benchmark_version": self.catalog.benchmark_version,
                "oscap_version": baseline.get("oscap_version"),
            },
            "check_mode": self.check_mode,
            "llm": self._llm_summary(),
            "memory": memory,
            "resumed": {"count": self.resume.starts, "interrupted": self.interrupted} if self.resume.starts else None,
            "health_baseline": {"failing": self.baseline.failing} if self.baseline is not None else None,
            "before": counts_of(before),
            "after": counts_of(after) if final is not None else None,
            "after_scan": final.get("label") if final is not None else None,
            "outcomes": dict(sorted(by_reason.items())),
            "regressions": regressions,
            "picked_up_by_rescan": sorted(safety.short_rule_id(r) for r in picked_up),
            "not_work_items": {k: v for k, v in not_work.items() if v},
            "still_failing": sorted(safety.short_rule_id(r) for r, v in after.items() if v == "fail"),
            "reboot_required": sorted(safety.short_rule_id(r) for r in outcomes.deferred_for_reboot(self.outcomes)),
            "rebooted": self.rebooted,
            "stopped": self.stopped,
            "seconds": round(time.monotonic() - self.started, 1),
            "package_facts": {"gathered": self.package_facts.gathered, "served": self.package_facts.served},
            "rules": {safety.short_rule_id(r): o.to_dict() for r, o in sorted(self.outcomes.items())},
            "scan_results": HR.scan_results(self.catalog, self.skill, before, after if final is not None else None,
                                            self.profile),
            "waivers": [dict(w.to_dict(), rule=safety.short_rule_id(r)) for r, w in sorted(self.waivers.items())],
            "expired_waivers": self.expired_waivers,
            "arf": dict(self.arf) or None,
        }
        for rule_id, outcome in zip(sorted(self.outcomes), report["rules"].values()):
            outcome["rule"] = safety.short_rule_id(outcome["rule"])
            outcome.update(HR.rule_meta(self.catalog.rule(rule_id), self.profile))
        write_host_report(self.opts.run_dir, self.host, report)
        self.events.emit("run_end", before=report["before"], after=report["after"], outcomes=report["outcomes"],
                         regressions=regressions, seconds=report["seconds"], package_facts=report["package_facts"])
        self.console.finished(report["outcomes"], self.stopped)
        return report
