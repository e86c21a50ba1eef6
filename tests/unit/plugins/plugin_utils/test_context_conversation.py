"""Issue 18 item 2: the per-rule conversation carries forward. A later Worker call sees the
earlier attempts' probes with what they showed, each attempt's tasks, rationale, what each task
did and the diagnosis; the Reflector sees the Worker's rationale and probe results; the
attempt in progress is not listed as an empty attempt (item 9)."""

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import context

PROFILE = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
RULE = "xccdf_org.ssgproject.content_rule_audit_rules_immutable"
NETLINK = "probe command auditctl -s:\nrc 1\nstderr: Cannot open netlink audit socket"


def _failed_first_attempt(item):
    first = item.new_attempt(A.WORKER)
    first.probes = ["command auditctl -s"]
    first.probe_results = [NETLINK]
    first.rationale = "make the audit rules immutable with -e 2 in a rules.d file"
    copy = {"dest": "/etc/audit/rules.d/99-finalize.rules", "content": "-e 2\n"}
    first.tasks = [{"name": "Immutable", "ansible.builtin.copy": copy}]
    first.report = {"task_results": [{"name": "Immutable", "module": "ansible.builtin.copy", "changed": True}]}
    first.verdict, first.reason, first.detail = A.INEFFECTIVE, "fix_ineffective", "oscap result after the fix: fail"
    first.reflection = {"diagnosis": "augenrules never ran: no audit netlink in this container", "lesson": None}
    return first


def test_the_second_workers_call_sees_the_first_probes_result_and_not_an_empty_attempt(catalog):
    item = A.WorkItem(RULE)
    _failed_first_attempt(item)
    second = item.new_attempt(A.WORKER)  # in progress: no verdict yet
    sections, skipped = context.worker_sections(catalog, RULE, PROFILE, item, None, [])
    assert skipped == []
    history = next(s.text for s in sections if s.name == "history")
    assert "Cannot open netlink audit socket" in history
    assert "The Worker's rationale: make the audit rules immutable" in history
    assert "- Immutable (ansible.builtin.copy) changed" in history
    assert "Reflection: augenrules never ran" in history
    assert "Attempt %d" % second.number not in history  # not listed as an empty attempt
    assert history.count("Attempt ") == 1


def test_the_reflector_sees_the_workers_rationale_and_probe_results(catalog):
    item = A.WorkItem(RULE)
    first = _failed_first_attempt(item)
    first.reflection = None
    sections, _skipped = context.reflector_sections(catalog, RULE, PROFILE, item, first)
    reasoning = next(s.text for s in sections if s.name == "reasoning")
    assert reasoning.startswith('<data source="target" name="worker_reasoning">')
    assert "Rationale: make the audit rules immutable with -e 2" in reasoning
    assert "Cannot open netlink audit socket" in reasoning
    first.rationale, first.probe_results = "", []
    sections, _skipped = context.reflector_sections(catalog, RULE, PROFILE, item, first)
    assert "reasoning" not in [s.name for s in sections]


def test_the_newest_probe_is_kept_whole_and_older_ones_give_way():
    """The trial's case: a 3.7 KB file read first cut a later ``find`` to about 120 characters."""
    big = "probe file /etc/login.defs:\n" + "x" * 3700
    find = "probe find /etc/audit -name '*.rules':\n" + "\n".join("/etc/audit/rules.d/%02d.rules" % n for n in range(30))
    text = context.probes_text([big, find], 4000)
    assert find in text  # whole
    assert text.startswith("probe file /etc/login.defs:") and "characters cut]" in text
    assert len(text) <= 4000 + 2
    many = ["probe %d:\n%s" % (n, "y" * 1400) for n in range(6)]
    text = context.probes_text(many, 4000, 1500)
    assert many[5] in text and many[4] in text and "probe 0:" not in text
    assert many[3] not in text and "probe 3:" in text  # cut to the room left
    assert text.startswith("[3 earlier probe(s) not shown]")
    assert context.probes_text([find], 4000) == find


def test_a_failed_service_tasks_journal_reaches_the_reflector(catalog):
    """Issue 18 item 4: systemd's own message says only "see journalctl"; the unit's journal
    tail the executor read for the failed task is in what the Reflector reads, and in the history."""
    item = A.WorkItem(RULE)
    first = item.new_attempt(A.WORKER)
    first.tasks = [{"name": "Start auditd", "ansible.builtin.systemd": {"name": "auditd", "state": "started"}}]
    first.report = {"ok": False, "failed_task": "Start auditd",
                    "error": "Unable to start service auditd: Job for auditd.service failed. See journalctl -xeu",
                    "task_results": [{"name": "Start auditd", "module": "ansible.builtin.systemd", "failed": True,
                                      "msg": "Unable to start service auditd",
                                      "journal": "auditd[81]: Error - audit support not in kernel"}]}
    first.verdict, first.reason = A.FAILED, "fix_failed"
    sections, _skipped = context.reflector_sections(catalog, RULE, PROFILE, item, first)
    result = next(s.text for s in sections if s.name == "result")
    assert "- Start auditd (ansible.builtin.systemd) failed: Unable to start service auditd" in result
    assert "the unit's journal, last lines:\nauditd[81]: Error - audit support not in kernel" in result
    item.new_attempt(A.WORKER)
    history = context.history_text(item)
    assert "audit support not in kernel" in history
