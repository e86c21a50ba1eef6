"""Outcomes and reason codes (plugins/plugin_utils/outcomes.py): an outcome's defaults, the
errors a wrong code gets, and which rules wait for a reboot."""

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes as O


def test_an_outcome_from_its_reason_has_empty_defaults():
    assert O.RuleOutcome.of("r1", "verified").to_dict() == {
        "rule": "r1", "outcome": "remediated", "reason": "verified", "attempts": 0, "modules": [], "detail": "",
        "category": "", "changed_tasks": [], "attempt_log": [], "lessons_shown": [], "from_memory": None,
        "side_effects": [], "waiver": None, "warnings": []}


def test_the_errors_name_the_wrong_value():
    with pytest.raises(ValueError) as err:
        O.environment_reason("two words")
    assert str(err.value) == "environment kind must be a non-empty slug, got 'two words'"
    with pytest.raises(ValueError) as err:
        O.outcome_for("fixed")
    assert str(err.value) == "unknown reason code 'fixed' (see outcomes.REASONS)"
    with pytest.raises(ValueError) as err:
        O.RuleOutcome("r1", O.REMEDIATED, "fix_failed")
    assert str(err.value) == "reason 'fix_failed' belongs to outcome 'escalated', not 'remediated'"


def test_deferred_for_reboot_lists_the_rules_waiting_for_one():
    by_rule = {"r3": O.RuleOutcome.of("r3", "reboot_required"), "r1": O.RuleOutcome.of("r1", "verified"),
               "r2": O.RuleOutcome.of("r2", "fix_ineffective_after_reboot"),
               "r0": O.RuleOutcome.of("r0", "reboot_required"), "r4": O.RuleOutcome.of("r4", "verified_after_reboot")}
    assert O.deferred_for_reboot(by_rule) == ["r3", "r0"]
    assert O.deferred_for_reboot({}) == []
