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
