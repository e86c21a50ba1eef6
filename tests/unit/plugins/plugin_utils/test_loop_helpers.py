from ansible_collections.scapforge.remediation.plugins.plugin_utils._host.session import ActionSession
from ansible_collections.scapforge.remediation.plugins.plugin_utils.loop import task_names
from ansible_collections.scapforge.remediation.plugins.plugin_utils.scanner import counts_of


def test_task_names_flatten_blocks_and_name_unnamed_tasks():
    tasks = [
        {"name": "Gather the package facts", "package_facts": {"manager": "auto"}},
        {"name": "Disable SSH Root Login", "block": [
            {"name": "Check for duplicate values", "lineinfile": {}},
            {"lineinfile": {"path": "/x"}, "when": "a", "tags": ["t"]},
        ], "when": "b"},
        "junk",
    ]
    assert task_names(tasks) == ["Gather the package facts", "Check for duplicate values", "lineinfile"]
    assert task_names(None) == []


def test_counts_leave_out_notselected():
    results = {"r1": "pass", "r2": "fail", "r3": "pass", "r4": "notselected", "r5": "error"}
    assert counts_of(results) == {"error": 1, "fail": 1, "pass": 2}


def test_the_scanner_validates_the_content_once_then_skips_validation():
    """Issue 9: the first successful oscap call validates the datastream; later ones skip it."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.scanner import Scanner

    calls, answers = [], [{"failed": True, "msg": "oscap died"}, {"rules": {}}, {"rules": {}}]

    class Action:
        def _execute_module(self, module_name, module_args, task_vars, wrap_async):
            calls.append(dict(module_args))
            return answers.pop(0)

    scanner = Scanner(ActionSession(Action(), {}), {}, "/ds.xml", "p", None)
    scanner.scan()
    scanner.scan(["r1"])
    scanner.scan(["r2"], evidence=True)
    assert [c.get("skip_validation", False) for c in calls] == [False, False, True]
    assert calls[2] == {"datastream": "/ds.xml", "profile": "p", "rules": ["r2"], "evidence": True,
                        "skip_validation": True}


def test_later_rechecks_read_progress_lines_unless_they_want_evidence_or_an_arf():
    """Issue 9: a re-check after the validating scan reads oscap's --progress lines; the
    validating scan, a whole-profile scan, evidence and an ARF keep the results document."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.scanner import Scanner

    calls = []

    class Action:
        def _execute_module(self, module_name, module_args, task_vars, wrap_async):
            calls.append(dict(module_args))
            return {"rules": {}}

    scanner = Scanner(ActionSession(Action(), {}), {}, "/ds.xml", "p", None)
    scanner.scan(["r0"])                          # validates: the document
    scanner.scan(["r1", "r2"])                    # re-check: progress
    scanner.scan(["r3"], evidence=True)           # evidence needs the document
    scanner.scan(["r4"], arf_path="/tmp/a.xml")   # so does an ARF
    scanner.scan()                                # whole profile: the document
    assert [c.get("results_source") for c in calls] == [None, "progress", None, None, None]


def test_a_batch_judges_shared_files_by_what_the_tasks_ran_to_change_not_by_what_was_saved_ahead():
    """A file saved ahead for a task that then did not run is no reason to keep a failed fix
    instead of rolling it back; an attempt recorded before ``changing`` existed keeps ``covered``."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
    from ansible_collections.scapforge.remediation.plugins.plugin_utils._run.decisions import covered

    attempt = A.Attempt(number=1, source="vendor")
    attempt.checkpoint = {"covered": ["/etc/sysctl.conf", "/etc/yum.conf"], "changing": ["/etc/sysctl.conf"]}
    assert covered(attempt.checkpoint) == {"/etc/sysctl.conf"}
    attempt.checkpoint = {"covered": ["/etc/login.defs"]}
    assert covered(attempt.checkpoint) == {"/etc/login.defs"}
    attempt.checkpoint = None
    assert covered(attempt.checkpoint) == set()
