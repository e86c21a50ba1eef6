import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes, safety, skills


def test_every_reason_maps_to_a_known_outcome():
    assert {o for o, _meaning in outcomes.REASONS.values()} <= set(outcomes.OUTCOMES)
    assert outcomes.outcome_for("verified") == "remediated"
    assert outcomes.outcome_for("access_impacting") == "skipped"
    assert outcomes.outcome_for("reboot_required") == "deferred"
    assert outcomes.outcome_for("environment:read_only_proc_sys") == "escalated"


@pytest.mark.parametrize("reason", ["", "environment:", "fixed", "pass"])
def test_unknown_reason_is_refused(reason):
    with pytest.raises(ValueError):
        outcomes.outcome_for(reason)


def test_rule_outcome_refuses_a_reason_of_another_outcome():
    with pytest.raises(ValueError, match="belongs to outcome 'skipped'"):
        outcomes.RuleOutcome(rule="r", outcome="remediated", reason="waived")
    made = outcomes.RuleOutcome.of("r", "fix_failed", attempts=1)
    assert (made.outcome, made.reason, made.attempts) == ("escalated", "fix_failed", 1)


def test_environment_reason_needs_a_slug():
    assert outcomes.environment_reason("kernel_config") == "environment:kernel_config"
    with pytest.raises(ValueError):
        outcomes.environment_reason("two words")


@pytest.mark.parametrize(
    "rule, user, impacting",
    [
        ("xccdf_org.ssgproject.content_rule_sudo_remove_nopasswd", "scapforge", True),
        ("sudo_add_noexec", "scapforge", True),
        ("sudo_add_requiretty", "scapforge", True),
        ("sshd_limit_user_access", "scapforge", True),
        ("sshd_disable_root_login", "root", True),
        ("sshd_disable_root_login", None, True),  # unknown user: assume root, stay safe
        ("sshd_disable_root_login", "scapforge", False),
        ("sshd_set_idle_timeout", "root", False),
        ("accounts_umask_etc_login_defs", "root", False),
    ],
)
def test_access_impact(rule, user, impacting):
    assert (skills.load_skill("anssi-debian12").access_impact(rule, user) is not None) is impacting


def test_unfixable_and_environment_kinds():
    skill = skills.load_skill("anssi-debian12")
    assert skill.unfixable_kind("xccdf_org.ssgproject.content_rule_kernel_config_x86_vsyscall_none") == "kernel_config"
    assert skill.unfixable_kind("partition_for_var_log_audit") == "partitioning"
    assert skill.unfixable_kind("sysctl_kernel_dmesg_restrict") is None
    msg = "Missing privilege separation directory: /run/sshd"
    assert safety.environment_kind(msg) == "sshd_privsep_dir_missing"
    assert safety.environment_kind("sysctl: setting key \"kernel.x\": Read-only file system") == "read_only_filesystem"
    assert safety.environment_kind("Illegal option -o pipefail") is None


def test_readme_table_lists_exactly_the_reason_codes():
    import os
    import re

    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "README.md"), encoding="utf-8").read()
    rows = re.findall(r"^\| (remediated|escalated|skipped|deferred) \| ([a-z_:&;<>]+) \|", readme, re.M)
    table = {reason: outcome for outcome, reason in rows if not reason.startswith("environment:")}
    assert table == {reason: outcome for reason, (outcome, _meaning) in outcomes.REASONS.items()}
    assert any(reason.startswith("environment:") for _outcome, reason in rows)


@pytest.mark.parametrize("message, kind", [
    # apt-get under the apt module (DPkg::Lock::Timeout=60) while another process held the lock (lab, 2026-11-30)
    ("'/usr/bin/apt-get -y -o \"Dpkg::Options::=--force-confdef\" -o DPkg::Lock::Timeout=60 install "
     "'auditd=1:3.0.9-1'' failed: E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), "
     "is another process using it?", "package_manager_locked"),
    ("E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 59 (python3)", "package_manager_locked"),
    ("E: Unable to lock the administration directory (/var/lib/dpkg/), is another process using it?",
     "package_manager_locked"),
    ("dpkg: error: dpkg frontend lock was locked by another process with pid 4242", "package_manager_locked"),
    ("E: Could not get lock /var/lib/apt/lists/lock. It is held by process 77 (apt-get)", "package_manager_locked"),
    ("Failed to lock apt for exclusive operation: Failed to lock directory /var/lib/apt/lists/",
     "package_manager_locked"),
    ("error: can't create transaction lock on /var/lib/rpm/.rpm.lock (Resource temporarily unavailable)",
     "package_manager_locked"),
    # oscap 1.3.7 with a full /tmp (lab: a 1 MiB tmpfs over /tmp, filled)
    ("I/O error : No space left on device\nI/O error : write error\nCould not save file: "
     "/tmp/oscap.rukbSi/ssg-debian12-cpe-oval.xml.result.xml", "disk_full"),
    ("[Errno 28] No space left on device: '/etc/.ansible_tmp1234login.defs'", "disk_full"),
])
def test_environment_kinds_of_issue_7_item_7(message, kind):
    assert safety.environment_kind(message) == kind
    assert outcomes.outcome_for(outcomes.environment_reason(kind)) == "escalated"


@pytest.mark.parametrize("message", [
    "E: Package 'auditd' has no installation candidate",          # the rule's package, not the host
    "Unable to lock the file /etc/passwd",                         # not a package manager lock
    "write error: Broken pipe",
])
def test_rule_made_failures_are_not_environment(message):
    assert safety.environment_kind(message) is None
