"""Exact values of the run's pure decisions (plugins/plugin_utils/_run/decisions.py) that
``make mutation`` showed no other test pinned: boundaries, default arguments, missing keys and
the exact words of the messages a user reads (a lock's holder, an unjudged rule's why)."""

from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import decisions as D

HOLDER = {"run_id": "r1", "controller": "ctl-a", "pid": 4242, "started": "2026-12-01T10:00:00Z", "age": 60}


# -- scan_timeout ---------------------------------------------------------------------------
def test_scan_timeout_default_override_is_none():
    """Without the override argument the baseline decides: unknown -> 900, short -> floor."""
    assert D.scan_timeout(None) == 900
    assert D.scan_timeout(5.0) == 120
    assert D.scan_timeout(30.0) == 300


def test_scan_timeout_override_of_one_second_is_taken():
    assert D.scan_timeout(None, 1) == 1
    assert D.scan_timeout(30.0, 1) == 1
    assert D.scan_timeout(30.0, 0) == 300
    assert D.scan_timeout(30.0, -1) == 300


# -- lock_verdict ---------------------------------------------------------------------------
def test_lock_max_age_is_one_day():
    assert D.LOCK_MAX_AGE_S == 86400


def test_lock_from_another_controller_at_exactly_the_default_limit_is_refused():
    at_limit = dict(HOLDER, age=86400)
    assert D.lock_verdict(at_limit, {}, None) == (
        "refuse", "run r1 holds it (controller ctl-a, process 4242, since 2026-12-01T10:00:00Z)")


def test_lock_from_another_controller_one_second_past_the_default_limit_is_taken_over():
    past = dict(HOLDER, age=86401)
    assert D.lock_verdict(past, {}, None) == ("take_over", "it was taken 86401 s ago, more than 86400 s")


def test_lock_age_boundary_with_explicit_limit():
    assert D.lock_verdict(dict(HOLDER, age=100), {}, None, max_age_s=100)[0] == "refuse"
    assert D.lock_verdict(dict(HOLDER, age=101), {}, None, max_age_s=100) == (
        "take_over", "it was taken 101 s ago, more than 100 s")


def test_lock_of_a_young_holder_on_another_controller_is_refused():
    assert D.lock_verdict(HOLDER, {}, None) == (
        "refuse", "run r1 holds it (controller ctl-a, process 4242, since 2026-12-01T10:00:00Z)")


def test_lock_of_a_live_holder_is_refused_however_old():
    old = dict(HOLDER, age=10 ** 9)
    assert D.lock_verdict(old, {}, True) == (
        "refuse", "run r1 holds it (controller ctl-a, process 4242, since 2026-12-01T10:00:00Z)")


def test_lock_of_a_dead_process_is_taken_over_with_its_pid_and_controller():
    assert D.lock_verdict(HOLDER, {}, False) == ("take_over", "its process 4242 on ctl-a is gone")


def test_lock_with_an_unreadable_file_is_refused_with_its_error_and_age():
    holder = {"unreadable": "bad json", "age": 12}
    assert D.lock_verdict(holder, {}, True) == ("refuse", "its file cannot be read (bad json), 12 s old")
    assert D.lock_verdict(holder, {}, None) == ("refuse", "its file cannot be read (bad json), 12 s old")


def test_lock_holder_with_no_fields_says_question_marks():
    assert D.lock_verdict({}, {}, True) == ("refuse", "run ? holds it (controller ?, process ?, since ?)")
    assert D.lock_verdict({}, {}, None) == ("refuse", "run ? holds it (controller ?, process ?, since ?)")


# -- keep_old_report ------------------------------------------------------------------------
def test_keep_old_report_none_is_replaced():
    assert D.keep_old_report(None, False) is False
    assert D.keep_old_report(None, True) is False


def test_keep_old_report_with_rules_only():
    assert D.keep_old_report({"rules": {"a": 1}}, False) is True
    assert D.keep_old_report({"rules": {"a": 1}}, True) is False


def test_keep_old_report_with_counts_only():
    assert D.keep_old_report({"before": {}}, False) is True
    assert D.keep_old_report({"before": {}}, True) is False


def test_keep_old_report_error_only_is_replaced():
    assert D.keep_old_report({"error": "boom"}, False) is False
    assert D.keep_old_report({"error": "boom", "rules": {}, "before": None}, False) is False


# -- not_judged_why -------------------------------------------------------------------------
def test_not_judged_why_words_per_result():
    assert D.not_judged_why(None, "error", None) == (
        "OpenSCAP's check of it ended in an error; check it by hand (the ARF results hold the check's messages)")
    assert D.not_judged_why(None, "unknown", None) == "OpenSCAP could not tell pass from fail (unknown); check it by hand"
    assert D.not_judged_why("pass", "notapplicable", None) == (
        "not applicable in the final scan although OpenSCAP judged it at baseline: a change of the run "
        "made its platform (a package, a file) absent, so nothing checks it any more")
    assert D.not_judged_why(None, "weird", None) == "OpenSCAP's result is weird; check it by hand"


def test_not_judged_why_says_fail_at_baseline():
    assert D.not_judged_why("fail", "unknown", None) == (
        "OpenSCAP could not tell pass from fail (unknown); check it by hand (it was fail at baseline)")
    assert D.not_judged_why("pass", "unknown", None).endswith(" (it was pass at baseline)")


def test_not_judged_why_message_is_cut_at_300_characters():
    why = D.not_judged_why(None, "unknown", "m" * 400)
    assert why == "OpenSCAP could not tell pass from fail (unknown); check it by hand; OpenSCAP says: " + "m" * 300
