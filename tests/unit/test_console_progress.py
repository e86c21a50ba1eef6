"""Progress lines of a host's loop (plugin_utils/console.py): one line per rule at default
verbosity, per-attempt detail at -v, through Ansible's Display."""

from ansible.utils.display import Display

from ansible_collections.scapforge.remediation.plugins.plugin_utils.console import ConsoleProgress
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog

PROFILE = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"


class Screen:
    """Records what ConsoleProgress writes, with Display's verbosity rule (``verbose`` shows
    when verbosity > caplevel)."""

    def __init__(self, verbosity=0):
        self.verbosity = verbosity
        self.lines = []

    def display(self, msg):
        self.lines.append(msg)

    def verbose(self, msg, caplevel=2):
        if self.verbosity > caplevel:
            self.lines.append(msg)


def outcome(outcome, reason, attempts=0, log=(), **kw):
    return dict(rule="x", outcome=outcome, reason=reason, attempts=attempts, attempt_log=list(log), **kw)


def test_one_line_per_rule_with_index_total_attempt_and_seconds():
    screen = Screen()
    console = ConsoleProgress("lab1", screen)
    console.planned(3, PROFILE)
    console.rule_done("sysctl_kernel_kptr_restrict", outcome("remediated", "verified", 1, [
        {"source": "vendor", "seconds": 2.14}]))
    console.rule_done("package_telnet_removed", outcome("skipped", "waived"))
    console.rule_done("accounts_tmout", outcome("escalated", "fix_ineffective", 2, [
        {"source": "vendor", "seconds": 1.0}, {"source": "worker", "seconds": 3.5}], detail="still fails"))
    assert screen.lines == [
        "lab1: 3 failing rules to work, profile anssi_bp28_high",
        "lab1: rule 1/3 sysctl_kernel_kptr_restrict attempt 1 (vendor): remediated [verified] 2.1 s",
        "lab1: rule 2/3 package_telnet_removed: skipped [waived]",
        "lab1: rule 3/3 accounts_tmout attempt 2 (worker): escalated [fix_ineffective] 4.5 s",
    ]


def test_rescan_grows_the_total_and_a_later_outcome_is_marked_now():
    screen = Screen()
    console = ConsoleProgress("lab2", screen)
    console.planned(1, PROFILE, finished_before=4)
    console.rule_done("a", outcome("remediated", "verified", 1, [{"source": "vendor", "seconds": 1}]))
    console.added(2, "the rescan found")
    console.rule_done("b", outcome("escalated", "llm_unavailable", from_memory="L0123456789ab"))
    console.rule_done("a", outcome("escalated", "regressed", 1, [{"source": "vendor", "seconds": 1}]))
    console.finished({"remediated/verified": 1, "escalated/regressed": 1, "escalated/llm_unavailable": 1}, None)
    assert screen.lines[0] == "lab2: 1 failing rule to work, profile anssi_bp28_high, 4 finished by an earlier start of this run"
    assert screen.lines[2] == "lab2: the rescan found: 2 more rules, 3 in all"
    assert screen.lines[3] == "lab2: rule 2/3 b from memory L0123456789ab: escalated [llm_unavailable]"
    assert screen.lines[4] == "lab2: rule a attempt 1 (vendor): now escalated [regressed] 1.0 s"
    assert screen.lines[5].startswith("lab2: done in ") and screen.lines[5].endswith(": 2 escalated, 1 remediated")


def test_attempt_detail_only_at_verbose(tmp_path):
    events = [("scan", None, None, {"label": "baseline", "counts": {"pass": 105, "fail": 136}, "seconds": 12.34}),
              ("fix_applied", "r", 1, {"source": "vendor", "ok": True, "changed": True, "tasks": [{}, {}]}),
              ("health", "r", 1, {"healthy": True, "seconds": 1.24}),
              ("verify", "r", 1, {"result": "fail"}),
              ("restore", "r", 1, {"verified": True})]
    quiet, loud = Screen(0), Screen(1)
    for screen in (quiet, loud):
        log = EventLog(str(tmp_path / ("%d.jsonl" % screen.verbosity)), "lab1",
                       listener=ConsoleProgress("lab1", screen).event)
        for kind, rule, attempt, data in events:
            log.emit(kind, rule=rule, attempt=attempt, **data)
    assert quiet.lines == []
    assert loud.lines == [
        "lab1: baseline scan: 136 fail, 105 pass in 12.3 s",
        "lab1:   r attempt 1 (vendor): 2 task(s), changed True",
        "lab1:   r attempt 1: health ok (1.2 s)",
        "lab1:   r attempt 1: OpenSCAP fail",
        "lab1:   r attempt 1: rolled back, verified",
    ]


def test_a_malformed_event_never_raises():
    screen = Screen(1)
    ConsoleProgress("lab1", screen).event({"event": "health", "rule": "r", "attempt": 1, "data": {"seconds": "x"}})
    assert screen.lines == []


def test_real_display_prints_default_lines_and_hides_verbose(capsys):
    display = Display()
    saved = display.verbosity
    display.verbosity = 0
    try:
        console = ConsoleProgress("lab9", display)
        console.planned(2, PROFILE)
        console.event({"event": "verify", "rule": "r", "attempt": 1, "data": {"result": "pass"}})
    finally:
        display.verbosity = saved
    out = capsys.readouterr().out
    assert "lab9: 2 failing rules to work, profile anssi_bp28_high" in out
    assert "OpenSCAP pass" not in out


def test_check_mode_prints_the_plan_at_default_verbosity():
    screen = Screen()
    console = ConsoleProgress("lab3", screen)
    console.planned(2, PROFILE, check_mode=True)
    console.rule_done("accounts_umask_etc_login_defs", outcome(
        "skipped", "check_mode", detail="vendor fix would run 2 tasks: Replace user umask in /etc/login.defs; "
                                        "Ensure the umask line"))
    console.rule_done("no_fix_rule", outcome("skipped", "check_mode", detail="the content has no Ansible fix"))
    assert screen.lines[1:] == [
        "lab3: rule 1/2 accounts_umask_etc_login_defs: skipped [check_mode]: vendor fix would run 2 tasks: "
        "Replace user umask in /etc/login.defs; Ensure the umask line",
        "lab3: rule 2/2 no_fix_rule: skipped [check_mode]: the content has no Ansible fix",
    ]


def test_end_of_play_lines_say_where_the_report_is_and_three_lines_per_host():
    import report_samples
    from ansible_collections.scapforge.remediation.plugins.action.run_summary import ActionModule

    report = report_samples.debian_full_run()
    summary = {"run_id": "r9", "hosts": {"lab7": report, "lab8": {"host": "lab8", "error": {
        "reason": "content", "msg": "cannot read datastream"}}}, "without_report": ["lab9"]}
    lines = ActionModule.console_lines(summary, {"html": "/runs/r9/report.html"})
    assert lines == [
        "scapforge run r9: report /runs/r9/report.html",
        "lab7: pass 165 -> 279, fail 213 -> 102, regressions: none",
        "lab7:   112 remediated, 93 escalated, 8 skipped, 0 deferred, 1 picked up by the rescan",
        "lab7:   left for a human: 47 of the 102 rules failing at the end; the others: 47 environment, "
        "6 access impacting, 2 waived",
        "lab8: not run (content): cannot read datastream",
        "lab9: no report (unreachable, or failed before the loop)",
    ]


def test_memory_degraded_and_off_are_said_at_default_verbosity(tmp_path):
    """Issue 19 item 6: memory never changes state in silence."""
    screen = Screen(0)
    log = EventLog(str(tmp_path / "e.jsonl"), "lab1", listener=ConsoleProgress("lab1", screen).event)
    log.emit("memory_degraded", during="decide", table="lessons", moved_to="/m/lessons.json.corrupt-X",
             reason="lessons.json is corrupt (invalid JSON); moved to /m/lessons.json.corrupt-X; a fresh table was started")
    log.emit("memory_error", during="learn", msg="memory table 'meta' is corrupt (no integer \"schema\" >= 0)")
    assert screen.lines == [
        "lab1: memory degraded: lessons.json is corrupt (invalid JSON); moved to /m/lessons.json.corrupt-X; "
        "a fresh table was started",
        "lab1: memory off: memory table 'meta' is corrupt (no integer \"schema\" >= 0)"]
