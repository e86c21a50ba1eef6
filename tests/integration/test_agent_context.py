"""What the Worker is told, and what it may not do, on a real lab host with the scripted
server (issue 18 items 2, 5 and 8).

set_password_hashing_algorithm_logindefs (no content fix): attempt 1 probes login.defs, then
writes a hashing method the profile does not accept (ineffective, rolled back); the second
Worker call must read the first probe's result and the first attempt's rationale and task
results in its history, and the host's environment (the lab host is a systemd-nspawn
container). service_chronyd_or_ntpd_enabled: the Worker masks chrony; the review refuses it
before the host sees it, the next call reads why, and the rule is not reported remediated.
accounts_password_set_max_life_root: the Worker starts a unit that fails (set up by the test);
the Reflector reads the unit's journal, not only systemd's "see journalctl" (item 4).
aide_periodic_cron_checking: the content's fix installs aide and writes root's crontab, and is
ineffective (rolled back); the Architect's plan call reads what that fix changed and that it
was undone (item 4), and answers cannot_fix.
"""

from __future__ import annotations

import shlex

import pytest
from llm_server import ScriptedLLM
from test_agents import PLAN_MARK, agent, events_of, own_oscap, run_job, verdicts

HASHING, CHRONY = "set_password_hashing_algorithm_logindefs", "service_chronyd_or_ntpd_enabled"
MAX_LIFE = "accounts_password_set_max_life_root"
AIDE = "aide_periodic_cron_checking"
UNIT = "scapforge-fails.service"
MARKER = "scapforge-journal-marker: the daemon cannot start here"
FAILING_UNIT = "[Unit]\nDescription=fails on start\n[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo %s; exit 3'\n" % MARKER
RATIONALE_1 = "the probe shows the current ENCRYPT_METHOD; MD5 is a start"
MASK = {"tasks": [{"name": "Quiet chrony", "ansible.builtin.systemd": {"name": "chrony.service", "masked": True}}],
        "rationale": "a masked unit cannot fail the check"}
DECLINE = {"cannot_fix": {"reason": "environment",
                          "evidence": "chronyd needs CAP_SYS_TIME, which this container lacks"}}


@pytest.fixture(scope="module")
def context_run(lab, lab_host, lab_inventory, tmp_path_factory, remediate):
    host = lab.reset([lab_host.name])[0]
    host.ssh("sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends cron "
             ">/tmp/apt.log 2>&1 || (tail -20 /tmp/apt.log; false)", timeout=600)  # as test_ledger: the fix needs crontab(1)
    host.ssh("printf %s | sudo tee /etc/systemd/system/%s >/dev/null && sudo systemctl daemon-reload"
             % (shlex.quote(FAILING_UNIT), UNIT))
    with ScriptedLLM() as llm:
        llm.script(agent("Architect", HASHING, PLAN_MARK), {"verdict": "PLAN", "plan": "Set ENCRYPT_METHOD in login.defs."})
        llm.script(agent("Architect", CHRONY, PLAN_MARK), {"verdict": "PLAN", "plan": "Enable chronyd."})
        llm.script(agent("Reflector", HASHING), {"diagnosis": "MD5 is not the profile's method", "lesson": None})
        llm.script(agent("Reflector", CHRONY), {"diagnosis": "masking was refused", "lesson": None})
        llm.script(agent("Worker", HASHING), {"probes": [{"command": ["grep", "-n", "ENCRYPT_METHOD", "/etc/login.defs"]}],
                                              "rationale": "see the current ENCRYPT_METHOD"})
        llm.script(agent("Worker", HASHING), {"tasks": [{"name": "Hash with MD5", "ansible.builtin.lineinfile": {
            "path": "/etc/login.defs", "regexp": "^\\s*ENCRYPT_METHOD\\s", "line": "ENCRYPT_METHOD MD5"}}],
            "rationale": RATIONALE_1})
        llm.script(agent("Worker", HASHING), {"tasks": [{"name": "Hash with yescrypt", "ansible.builtin.lineinfile": {
            "path": "/etc/login.defs", "regexp": "^\\s*ENCRYPT_METHOD\\s", "line": "ENCRYPT_METHOD YESCRYPT"}}],
            "rationale": "the profile wants YESCRYPT"})
        llm.script(agent("Architect", MAX_LIFE, PLAN_MARK), {"verdict": "PLAN", "plan": "p"})
        llm.script(agent("Worker", MAX_LIFE), {"tasks": [{"name": "Start the helper", "ansible.builtin.systemd": {
            "name": UNIT, "state": "started"}}], "rationale": "r"})
        llm.script(agent("Reflector", MAX_LIFE), {"diagnosis": "the unit fails", "lesson": None})
        llm.script(agent("Worker", MAX_LIFE), {"cannot_fix": {"reason": "needs_human", "evidence": "e"}})
        llm.script(agent("Worker", CHRONY), MASK)
        llm.script(agent("Worker", CHRONY), DECLINE)
        llm.script(agent("Architect", AIDE, PLAN_MARK), {"cannot_fix": {"reason": "needs_human", "evidence": "e"}})
        runs = tmp_path_factory.mktemp("runs")
        report = run_job(remediate, lab_inventory, host, runs, llm, [HASHING, CHRONY, MAX_LIFE, AIDE],
                         scapforge_llm_max_attempts=2)
        workers = {rule: [b["messages"][1]["content"] for b in llm.requests if agent("Worker", rule)(b)]
                   for rule in (HASHING, CHRONY)}
        reflector = [b["messages"][1]["content"] for b in llm.requests if agent("Reflector", MAX_LIFE)(b)]
        aide_plan = [b["messages"][1]["content"] for b in llm.requests if agent("Architect", AIDE)(b)]
        unused = llm.unused_scripts
    masked = host.ssh("systemctl is-enabled chrony.service 2>&1; true").stdout.strip()
    return {"host": host, "report": report, "runs": runs, "workers": workers, "unused": unused, "masked": masked,
            "reflector": reflector, "aide_plan": aide_plan,
            "after": own_oscap(host, [HASHING])}


def test_the_second_attempt_reads_the_first_probes_result_and_rationale(context_run):
    outcome = context_run["report"]["rules"][HASHING]
    assert verdicts(outcome) == [("worker", "ineffective"), ("worker", "passed")], outcome
    asked = context_run["workers"][HASHING]
    assert len(asked) == 3  # the probe round, attempt 1's tasks, attempt 2
    history = asked[2][asked[2].index('<data source="target" name="history">'):].split("</data>")[0]
    assert "probe command grep -n ENCRYPT_METHOD /etc/login.defs" in history
    assert "ENCRYPT_METHOD SHA512" in history  # what the probe read on the host: Debian's default
    assert "The Worker's rationale: %s" % RATIONALE_1 in history
    assert "- Hash with MD5 (ansible.builtin.lineinfile) changed" in history
    assert "Reflection: MD5 is not the profile's method" in history
    assert history.count("Attempt ") == 1  # the attempt in progress is not listed
    assert context_run["after"] == {HASHING: "pass"}
    assert context_run["unused"] == []


def test_the_worker_is_told_what_the_container_is_and_cannot_do(context_run):
    first = context_run["workers"][HASHING][0]
    line = next(x for x in first.splitlines() if x.startswith("Environment: "))
    assert line.startswith("Environment: a systemd-nspawn guest; init is systemd; it lacks: ")
    assert "read-only: " in line and "/proc/sys" in line


def test_a_masked_unit_is_refused_by_the_review_and_the_rule_is_not_remediated(context_run):
    outcome = context_run["report"]["rules"][CHRONY]
    assert verdicts(outcome) == [("worker", "refused"), ("worker", "cannot_fix")], outcome
    assert outcome["outcome"] != "remediated" and outcome["reason"].startswith("environment:")
    refused = outcome["attempt_log"][0]
    assert refused["detail"].startswith("refused by the review: these tasks would make the check pass without fixing")
    assert "masks chrony.service" in refused["detail"] and refused["modules"] == []
    second = context_run["workers"][CHRONY][1]
    assert "refused by the review" in second and "masks chrony.service" in second
    reviews = [e["data"] for e in events_of(context_run["runs"]) if e["event"] == "review"]
    assert [[f["code"] for f in r["findings"]] for r in reviews] == [["masks_unit"]]
    assert context_run["masked"] != "masked"  # nothing ran


def test_the_reflector_reads_the_failed_units_journal(context_run):
    outcome = context_run["report"]["rules"][MAX_LIFE]
    assert verdicts(outcome)[0] == ("worker", "failed"), outcome
    assert len(context_run["reflector"]) == 1
    asked = context_run["reflector"][0]
    result = asked[asked.index('<data source="target" name="execution">'):].split("</data>")[0]
    assert "- Start the helper (ansible.builtin.systemd) failed" in result
    assert "the unit's journal, last lines:" in result and MARKER in result


def test_the_architect_reads_what_the_failed_vendor_fix_changed_and_its_undo(context_run):
    outcome = context_run["report"]["rules"][AIDE]
    assert verdicts(outcome) == [("vendor", "ineffective")], outcome
    assert outcome["reason"] == "needs_human"
    [asked] = context_run["aide_plan"]
    vendor = asked[asked.index('<data source="content" name="vendor_fix">'):].split("</data>")[0]
    assert "It ran as attempt 1: ineffective" in vendor
    assert "(ansible.builtin.cron) changed" in vendor  # its task results, not a guess that it was skipped
    assert "- package aide: installed, undone (verified)" in vendor
    assert "- cron root: " in vendor and vendor.count("undone (verified)") >= 2
    assert "Rolled back: yes, restore verified" in vendor


def test_a_large_file_the_check_reads_is_shown_by_its_settings(context_run):
    """login.defs is 12 KB of comments around some 30 settings: too large to show whole, its
    active lines fit (a relay trial could not see which ENCRYPT_METHOD lines were live)."""
    first = context_run["workers"][HASHING][0]
    files = first[first.index('<data source="target" name="check_files">'):].split("</data>")[0]
    assert "/etc/login.defs: file, " in files and "mode 0644, root:root (comment and blank lines left out)\n" in files
    assert "\nENCRYPT_METHOD SHA512\n" in files and "# " not in files.split("\n", 2)[2]
