"""Issue 18 item 8: the review refuses model-written tasks that make a check pass by making
what the rule protects inert, and lets the honest fix of the same rule through."""

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import task_review as R

DROPIN = "/etc/systemd/system/auditd.service.d/99-scapforge.conf"


#: the OVAL pattern of a careless check: it matches "-e 2" anywhere on a line, comments too
LOOSE = ["-e\\s+2"]


def codes(rule, tasks):
    return [f.code for f in R.review(rule, tasks, LOOSE)]


@pytest.mark.parametrize("rule, task, want", [
    # a drop-in that makes the unit do nothing, against one that configures it
    ("service_auditd_enabled", {"ansible.builtin.copy": {"dest": DROPIN, "content": "[Service]\nExecStart=\nExecStart=/bin/true\n"}},
     [R.INERT_UNIT]),
    ("service_auditd_enabled", {"ansible.builtin.copy": {"dest": DROPIN, "content": "[Service]\nExecStart=\n"}}, [R.INERT_UNIT]),
    ("service_auditd_enabled", {"ansible.builtin.copy": {"dest": DROPIN, "content": "[Service]\nExecCondition=/bin/false\n"}},
     [R.INERT_UNIT]),
    ("service_auditd_enabled", {"ansible.builtin.copy": {"dest": DROPIN, "content": "[Service]\nExecCondition=/bin/true\n"}},
     []),  # a condition that always passes changes nothing
    ("service_auditd_enabled", {"community.general.ini_file": {"path": DROPIN, "section": "Service",
                                                               "option": "ExecCondition", "value": "/bin/false"}},
     [R.INERT_UNIT]),
    ("service_auditd_enabled", {"ansible.builtin.copy": {"dest": DROPIN,
                                                         "content": "[Service]\nExecStart=\nExecStart=/sbin/auditd -n\n"}}, []),
    ("service_auditd_enabled", {"ansible.builtin.copy": {"dest": DROPIN, "content": "[Service]\nRestart=always\n"}}, []),
    ("service_auditd_enabled", {"community.general.ini_file": {"path": DROPIN, "section": "Service", "option": "ExecStart",
                                                               "value": "/usr/bin/sleep infinity"}}, [R.INERT_UNIT]),
    # masking: a trick for a rule that wants the service, the fix for one that wants it gone
    ("service_auditd_enabled", {"ansible.builtin.systemd": {"name": "auditd", "masked": True}}, [R.MASKS]),
    ("service_autofs_disabled", {"ansible.builtin.systemd": {"name": "autofs", "masked": True}}, []),
    ("service_auditd_enabled", {"ansible.builtin.command": "systemctl mask auditd.service"}, [R.MASKS]),
    ("service_autofs_disabled", {"ansible.builtin.command": "systemctl mask --now autofs.service"}, []),
    ("service_auditd_enabled", {"ansible.builtin.file": {"src": "/dev/null", "dest": "/etc/systemd/system/auditd.service",
                                                         "state": "link"}}, [R.MASKS]),
    # emptying what the check parses
    ("accounts_password_pam_minlen", {"ansible.builtin.copy": {"dest": "/etc/security/pwquality.conf", "content": ""}},
     [R.EMPTIES]),
    ("accounts_password_pam_minlen", {"ansible.builtin.copy": {"dest": "/etc/security/pwquality.conf",
                                                               "content": "minlen = 14\n"}}, []),
    ("banner_etc_issue", {"ansible.builtin.shell": "truncate -s 0 /etc/issue"}, [R.EMPTIES]),
    ("banner_etc_issue", {"ansible.builtin.shell": ": > /etc/issue"}, [R.EMPTIES]),
    # a comment line the check's pattern matches
    ("audit_rules_immutable", {"ansible.builtin.lineinfile": {"path": "/etc/audit/rules.d/99.rules", "line": "# -e 2"}},
     [R.COMMENT_ONLY]),
    ("audit_rules_immutable", {"ansible.builtin.lineinfile": {"path": "/etc/audit/rules.d/99.rules", "line": "-e 2"}}, []),
    ("audit_rules_immutable", {"ansible.builtin.lineinfile": {"path": "/etc/audit/rules.d/99.rules",
                                                              "line": "# scapforge attempt 3"}}, []),  # a marker
    ("audit_rules_immutable", {"ansible.builtin.lineinfile": {"path": "/etc/audit/rules.d/99.rules", "line": "# -e 2",
                                                              "state": "absent"}}, []),
    ("audit_rules_immutable", {"ansible.builtin.blockinfile": {"path": "/etc/audit/rules.d/99.rules", "block": "# a\n# -e 2"}},
     [R.COMMENT_ONLY]),
    # permissions opened
    ("file_owner_etc_shadow", {"ansible.builtin.file": {"path": "/etc/shadow", "mode": "0666"}}, [R.OPENS_MODE]),
    ("file_owner_etc_shadow", {"ansible.builtin.file": {"path": "/etc/shadow", "mode": "0640", "owner": "root"}}, []),
    ("file_permissions_etc_passwd", {"ansible.builtin.file": {"path": "/etc/passwd", "mode": "u+rw,g+w"}}, [R.OPENS_MODE]),
    ("file_permissions_etc_passwd", {"ansible.builtin.file": {"path": "/etc/passwd", "mode": "u=rw,go=r"}}, []),
    ("file_permissions_etc_passwd", {"ansible.builtin.file": {"path": "/usr/bin/x", "mode": "4755"}}, [R.OPENS_MODE]),
    ("file_permissions_etc_passwd", {"ansible.builtin.shell": "chmod 777 /etc/passwd"}, [R.OPENS_MODE]),
    ("file_permissions_etc_passwd", {"ansible.builtin.shell": "chmod 0644 /etc/passwd"}, []),
    ("file_permissions_etc_passwd", {"ansible.builtin.shell": "chmod o+w /etc/passwd"}, [R.OPENS_MODE]),
    # a package held instead of removed
    ("package_telnetd_removed", {"ansible.builtin.dpkg_selections": {"name": "telnetd", "selection": "hold"}}, [R.HOLDS_PACKAGE]),
    ("package_telnetd_removed", {"ansible.builtin.command": "apt-mark hold telnetd"}, [R.HOLDS_PACKAGE]),
    ("package_telnetd_removed", {"ansible.builtin.apt": {"name": "telnetd", "state": "absent", "purge": True}}, []),
])
def test_a_task_that_games_the_check_is_found_and_the_honest_fix_is_not(rule, task, want):
    assert codes(rule, [dict(task, name="t")]) == want


def test_a_finding_names_its_task_inside_a_block_and_says_why():
    tasks = [{"name": "Harden", "block": [
        {"name": "Keep it", "ansible.builtin.systemd": {"name": "auditd", "enabled": True}},
        {"name": "Quiet", "ansible.builtin.systemd": {"name": "auditd", "masked": True}}]}]
    found = R.review("service_auditd_enabled", tasks)
    assert [(f.code, f.task) for f in found] == [(R.MASKS, "task 1 'Harden' block 2 'Quiet'")]
    assert found[0].message.startswith("task 1 'Harden' block 2 'Quiet': masks auditd: the rule does not ask")
    assert R.review("service_auditd_enabled", "not a list") == []


def test_the_patterns_come_from_the_rules_oval_objects_and_a_strict_one_lets_a_comment_be():
    evidence = {"tests": [{"object": {"fields": {"filepath": "/etc/audit/audit.rules", "pattern": "^\\s*-e\\s+2\\s*$"}}},
                          {"object": {"fields": {"path": "/etc"}}}, "junk",
                          {"object": {"fields": {"pattern": "^\\s*-e\\s+2\\s*$"}}}]}
    assert R.check_patterns(evidence) == ["^\\s*-e\\s+2\\s*$"]
    assert R.check_patterns(None) == [] and R.check_patterns({"error": "x"}) == []
    comment = [{"ansible.builtin.lineinfile": {"path": "/etc/audit/rules.d/99.rules", "line": "# -e 2"}}]
    assert R.review("audit_rules_immutable", comment, R.check_patterns(evidence)) == []
    assert R.review("audit_rules_immutable", comment, ["(unbalanced"]) == []
