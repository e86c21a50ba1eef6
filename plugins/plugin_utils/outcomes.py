"""The closed list of per-rule outcomes and reason codes (DESIGN decision 3).

Every rule that failed at baseline ends a run with exactly one ``Outcome`` carrying one
reason code from ``REASONS``. Reports, events and the memory store use these strings;
adding a reason means adding it here, with its meaning, and to README.md's table.
"""

from __future__ import annotations

import dataclasses
import typing as t

REMEDIATED = "remediated"
ESCALATED = "escalated"
SKIPPED = "skipped"
DEFERRED = "deferred"

OUTCOMES = (REMEDIATED, ESCALATED, SKIPPED, DEFERRED)

#: reason code -> (outcome it belongs to, what it means). ``environment:<kind>`` codes are
#: open-ended in their kind and belong to ``escalated`` (see ``environment_reason``).
#: README.md's table shows the same list (tests/unit/plugins/plugin_utils/test_outcomes_safety.py compares them).
REASONS: dict[str, tuple[str, str]] = {
    "verified": (REMEDIATED, "the fix ran and OpenSCAP now reports pass for the rule"),
    "verified_after_reboot": (REMEDIATED, "the fix's metadata says reboot; after the host rebooted "
                                          "(allow_reboot) OpenSCAP reports pass"),
    "passes_without_fix": (REMEDIATED, "a task of the rule's own fix failed, yet OpenSCAP reports pass: the pass is not "
                                       "the fix's doing (another rule's fix, or the tasks that ran before the failure, "
                                       "which stay applied, satisfy the check); the fix is not counted as done"),
    "passes_after_other_fixes": (REMEDIATED, "the rule was escalated or skipped (no fix of its own passed), and OpenSCAP "
                                             "reports pass in the final scan (or when the Worker was about to start): "
                                             "other rules' fixes made it pass; the detail names its earlier outcome "
                                             "and whether a fix of its own stayed applied"),
    "llm_unavailable": (ESCALATED, "the content has no Ansible fix for the rule and no LLM endpoint is configured "
                                   "for a Worker to write one"),
    "llm_error": (ESCALATED, "the LLM endpoint failed (connection, timeout, HTTP error) after its retries, "
                             "answered 3 times in a row with a body that is not a chat completion, or a prompt "
                             "template failed to render; the endpoint is marked down for the rest of the host's run "
                             "and memory learns nothing from it"),
    "fix_refused": (ESCALATED, "the gate refused the last fix before anything ran (unsupported keyword or module, "
                               "banned pattern, unusable model answer)"),
    "fix_failed": (ESCALATED, "a task of the last fix failed on the host (the change ledger says "
                              "what of it was undone and what is left)"),
    "fix_ineffective": (ESCALATED, "the last fix changed the host but OpenSCAP still reports fail (the "
                                   "change ledger says what of it was undone and what is left)"),
    "fix_ineffective_after_reboot": (ESCALATED, "the fix's metadata says reboot; the host rebooted (allow_reboot) "
                                                "and OpenSCAP still reports fail (the fix stays applied)"),
    "no_effect": (ESCALATED, "the last fix changed nothing and OpenSCAP still reports fail"),
    "verify_error": (ESCALATED, "after the fix OpenSCAP gives the rule no pass or fail (error, unknown, "
                                "notapplicable, no result), or the verification scan itself failed"),
    "scanner_crash": (ESCALATED, "oscap crashed or was killed (or hung past the scan timeout) while verifying the "
                                 "rule, and again when run once more; or a rescan failed that way before the rule "
                                 "was worked"),
    "unhealthy": (ESCALATED, "after the fix a fresh login with privilege escalation failed (or the connection "
                             "was lost during it) and the fix could not be rolled back; the host was stopped"),
    "unhealthy_rolled_back": (ESCALATED, "after the fix a fresh login with privilege escalation failed; the fix was "
                                         "rolled back, the restore verified and the host is healthy again"),
    "side_effect_rolled_back": (ESCALATED, "the fix changed something beyond its rule (a login shell that now "
                                           "errs, a sensitive file's owner or mode, a file the umask made "
                                           "unreadable, an sshd Match block) and was rolled back"),
    "regressed": (ESCALATED, "the rule passed after its fix but fails in the final scan (another fix undid it)"),
    "architect_escalate": (ESCALATED, "the Architect escalated the rule to a human: before any Worker attempt, or "
                                      "after reviewing the failed attempts"),
    "needs_human": (ESCALATED, "the Worker or the Architect answered cannot_fix: a person must decide (reason "
                               "needs_human), or the SCAP content's check or fix does not fit this host (reason "
                               "content); the detail carries the agent's evidence; memory does not learn it as a "
                               "failure of the rule's fix"),
    "meta_plateau": (ESCALATED, "a second Architect review repeated a plan already tried (seed 001)"),
    "attempt_budget": (ESCALATED, "the rule's Worker attempts (scapforge_llm_max_attempts) were spent"),
    "probe_budget": (ESCALATED, "the Worker kept asking for probes past the rule's probe budget "
                                "(scapforge_llm_max_probes)"),
    "rule_time_budget": (ESCALATED, "the rule's time budget (scapforge_llm_rule_seconds) was spent"),
    "rule_token_budget": (ESCALATED, "the rule's token budget (scapforge_llm_rule_tokens) was spent"),
    "run_token_budget": (ESCALATED, "the run's token budget (scapforge_llm_run_tokens, all hosts) was spent"),
    "check_unreliable": (ESCALATED, "the rule passes only because no package of the name its check looks up is "
                                    "installed, and the host's package sources have no package of that name (apt has "
                                    "no candidate): the check cannot see the software it means to forbid; a person "
                                    "checks by hand"),
    "access_impacting": (SKIPPED, "the fix can cut the controller off (sudo, sshd access, root login); opt in to run it"),
    "waived": (SKIPPED, "the user listed the rule in scapforge_skip_rules, or an unexpired scapforge_waivers entry "
                        "waives it (its justification and expiry are in the outcome's waiver)"),
    "host_stopped": (SKIPPED, "not attempted: the host was stopped earlier in the run (the report's stopped says why)"),
    "check_mode": (SKIPPED, "check mode: the fix was planned, not applied"),
    "budget": (SKIPPED, "not attempted: the run's time budget was spent"),
    "reboot_required": (DEFERRED, "the fix is applied and its metadata says reboot; the rule still fails until a reboot "
                                  "(allow_reboot reboots the host once and verifies it again)"),
}

ENVIRONMENT_PREFIX = "environment:"


def environment_reason(kind: str) -> str:
    """Return the reason code ``environment:<kind>`` (outcome ``escalated``).

    ``kind`` is a short slug naming what in the host's environment, not the rule, stops the
    fix (for example ``read_only_proc_sys`` in a container, ``kernel_config`` on a running
    kernel, ``partitioning``). Raises ValueError for an empty or spaced kind.
    """
    if not kind or any(ch.isspace() for ch in kind):
        raise ValueError("environment kind must be a non-empty slug, got %r" % (kind,))
    return ENVIRONMENT_PREFIX + kind


def outcome_for(reason: str) -> str:
    """Return the outcome a reason code belongs to; raise ValueError for an unknown code."""
    if reason.startswith(ENVIRONMENT_PREFIX) and len(reason) > len(ENVIRONMENT_PREFIX):
        return ESCALATED
    try:
        return REASONS[reason][0]
    except KeyError:
        raise ValueError("unknown reason code %r (see outcomes.REASONS)" % (reason,)) from None


@dataclasses.dataclass
class RuleOutcome:
    """What a run did about one rule that failed at baseline.

    ``rule`` is the full XCCDF rule id; ``attempts`` counts attempts, vendor and Worker,
    refused ones included (0 when none was made); ``modules`` the canonical FQCNs executed;
    ``changed_tasks`` "task name (module)" of the tasks that changed the host; ``detail`` a
    one-line human explanation (an error message, the override that was found), at most a few
    hundred characters; ``attempt_log`` one dict per attempt (see
    :meth:`attempts.Attempt.log_entry`: source, verdict, reason, tokens, rolled_back...);
    ``lessons_shown`` the ids of the memory lessons its attempts were shown or decided by;
    ``from_memory`` the lesson id when memory decided the rule without an attempt (then
    ``attempts`` is 0); ``side_effects`` what the fix that stays on the host changed beyond
    its rule (findings of ``health.check_after``: a new file whose mode the umask decided...);
    ``waiver`` the active ``scapforge_waivers`` entry that skipped the rule ({rule, reason,
    expires: YYYY-MM-DD}; None otherwise, and for ``scapforge_skip_rules``); ``warnings``
    plain-language scope warnings about the fix that stays (``scope.warnings_for``: endpoints
    it added where the host had its own, a file the host configures elsewhere too).
    """

    rule: str
    outcome: str
    reason: str
    attempts: int = 0
    modules: list[str] = dataclasses.field(default_factory=list)
    detail: str = ""
    category: str = ""
    changed_tasks: list[str] = dataclasses.field(default_factory=list)
    attempt_log: list[dict] = dataclasses.field(default_factory=list)
    lessons_shown: list[str] = dataclasses.field(default_factory=list)
    from_memory: str | None = None
    side_effects: list[dict] = dataclasses.field(default_factory=list)
    waiver: dict | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        expected = outcome_for(self.reason)
        if self.outcome != expected:
            raise ValueError("reason %r belongs to outcome %r, not %r" % (self.reason, expected, self.outcome))

    @classmethod
    def of(cls, rule: str, reason: str, **kwargs: t.Any) -> "RuleOutcome":
        """Build an outcome from its reason code (the outcome follows from the reason)."""
        return cls(rule=rule, outcome=outcome_for(reason), reason=reason, **kwargs)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def deferred_for_reboot(by_rule: t.Mapping[str, RuleOutcome]) -> list[str]:
    """The rule ids (keys of ``by_rule``, in its order) whose outcome is ``deferred`` with
    reason ``reboot_required``: applied, waiting for a reboot (DESIGN decision 4)."""
    return [rule for rule, o in by_rule.items() if o.outcome == DEFERRED and o.reason == "reboot_required"]
