"""Skills as validated plug-ins (issue 8): the loader, the two skills against the real SSG 0.1.76
datastreams the lab keeps (tests/unit/plugins/plugin_utils/test_catalog.py pins their sha256), ordering, and hooks."""

import dataclasses
import shutil

import pytest
import yaml

from ansible_collections.scapforge.remediation.plugins.plugin_utils import skills
from ansible_collections.scapforge.remediation.plugins.plugin_utils.agent_loop import WorkerPhase
from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import read_events

from test_catalog import DEBIAN12_SHA256, RHEL9_SHA256, lab_datastream
from test_worker_phase import GOOD, FakeAgents, FakeLoop, vendor_failed

R = "xccdf_org.ssgproject.content_rule_"


@pytest.fixture(scope="module")
def rhel9():
    return Catalog.from_path(lab_datastream("ssg-rhel9-ds.xml"))


@pytest.fixture(scope="module")
def debian12():
    return Catalog.from_path(lab_datastream("ssg-debian12-ds.xml"))


def copy_skill(tmp_path, name="anssi-debian12"):
    """A copy of a shipped skill under tmp_path/skills/<name> (the loader's ``root``)."""
    root = tmp_path / "skills"
    shutil.copytree(skills.SKILLS_ROOT + "/" + name, root / name)
    return root, root / name


def edit(path, change):
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


# ------------------------------------------------------------------ the loader
def test_the_shipped_skills_load_by_name_from_the_collection():
    assert skills.skill_names() == ["anssi-debian12", "stig-rhel9"]
    stig = skills.load_skill("stig-rhel9")
    assert stig is skills.load_skill("stig-rhel9")  # cached
    assert stig.profile == "xccdf_org.ssgproject.content_profile_stig"
    assert stig.datastream_path == "/usr/share/xml/scap/ssg/content/ssg-rhel9-ds.xml"
    assert stig.packages("content", "RedHat") == ["scap-security-guide"]
    assert stig.packages("content", "Debian") == []
    assert stig.packages("scanner", "RedHat") == ["openscap-scanner"]
    assert stig.trusted_sha256 == [RHEL9_SHA256]
    assert skills.load_skill("anssi-debian12").trusted_sha256 == [DEBIAN12_SHA256]
    assert stig.prompts_dir.endswith("skills/stig-rhel9/prompts")


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(profile=5), "skill.yml: profile: 5 is not of type 'string'"),
    (lambda d: d["categories"]["groups"].update(ssh=["x"]), "skill.yml: categories.groups.ssh: ['x'] is not of type 'string'"),
    (lambda d: d.pop("datastream"), "skill.yml: (top level): 'datastream' is a required property"),
    (lambda d: d.update(colour="red"), "Additional properties are not allowed ('colour' was unexpected)"),
    (lambda d: d["datastream"].update(path="relative/ds.xml"), "skill.yml: datastream.path: 'relative/ds.xml' does not match"),
    (lambda d: d.update(name="other"), "skill.yml: name: 'other' does not match its directory 'anssi-debian12'"),
    (lambda d: d.update(unfixable_on_running_host={"^kernel_(": "k"}), "unfixable_on_running_host.^kernel_(: not a regular expression"),
    (lambda d: d.update(fixes={"audit_rules_immutable": "fixes/missing.yml"}), "fixes.audit_rules_immutable: fixes/missing.yml cannot be read"),
    (lambda d: d.update(fixes={"audit_rules_immutable": "../../etc.yml"}), "fixes.audit_rules_immutable: ../../etc.yml is outside"),
])
def test_a_malformed_skill_is_refused_naming_the_file_and_the_key(tmp_path, change, message):
    root, directory = copy_skill(tmp_path)
    edit(directory / "skill.yml", change)
    with pytest.raises(skills.SkillError) as err:
        skills.load_skill("anssi-debian12", root=str(root))
    assert str(directory / "skill.yml") in str(err.value)
    assert message in str(err.value)


def test_unreadable_yaml_a_missing_prompts_dir_and_a_bad_hooks_file(tmp_path):
    root, directory = copy_skill(tmp_path)
    (directory / "skill.yml").write_text("name: [unclosed\n")
    with pytest.raises(skills.SkillError, match="skill.yml: not valid YAML"):
        skills.load_skill("anssi-debian12", root=str(root))
    root, directory = copy_skill(tmp_path / "b")
    shutil.rmtree(directory / "prompts")
    with pytest.raises(skills.SkillError, match="the skill has no prompts directory"):
        skills.load_skill("anssi-debian12", root=str(root))
    root, directory = copy_skill(tmp_path / "c")
    (directory / "hooks.py").write_text("import no_such_module\n")
    with pytest.raises(skills.SkillError, match=r"hooks.py: cannot be imported: ModuleNotFoundError"):
        skills.load_skill("anssi-debian12", root=str(root))
    root, directory = copy_skill(tmp_path / "d")
    (directory / "fixes" / "audit_rules_immutable.yml").write_text("just: a mapping\n")
    with pytest.raises(skills.SkillError, match="must be a non-empty list of tasks"):
        skills.load_skill("anssi-debian12", root=str(root))
    with pytest.raises(skills.SkillError, match="is not a skill name"):
        skills.load_skill("../etc")


# ------------------------------------------------------------------ stig-rhel9 against the real content
def test_stig_rhel9_table_from_the_real_datastream(rhel9):
    assert rhel9.sha256 == RHEL9_SHA256
    stig = skills.load_skill("stig-rhel9")
    rows = skills.rule_table(stig, rhel9)
    counts = skills.table_counts(rows)
    assert (counts["rules"], counts["ansible_fix"], counts["reboot"]) == (493, 454, 91)
    assert counts["stig_id"] == 492 and counts["access_impacting"] == 18
    assert sum(1 for r in rows if r["vuln_id"] and r["stig_rule"]) == 490
    allowed = set(stig.data["categories"]["allowed"])
    assert {r["category"] for r in rows} == allowed  # every rule in a category a STIG engineer knows
    assert {k: v["rules"] for k, v in counts["by_cat"].items()} == {"CAT I": 34, "CAT II": 426, "CAT III": 28, "none": 5}
    assert {k: v["rules"] for k, v in counts["by_category"].items()} == {
        "audit": 100, "authentication": 88, "banner": 7, "crypto": 15, "filesystem": 87, "integrity_monitoring": 14,
        "kernel": 59, "logging": 11, "packages": 14, "services": 59, "ssh": 39}
    root = next(r for r in rows if r["rule"] == "sshd_disable_root_login")
    assert root == {"rule": "sshd_disable_root_login", "title": "Disable SSH Root Login", "severity": "medium",
                    "cat": "CAT II", "stig_id": "RHEL-09-255045", "vuln_id": "V-257985",
                    "stig_rule": root["stig_rule"], "cce": "CCE-90800-4", "category": "ssh", "ansible_fix": True,
                    "reboot": False, "access_impacting": None}
    assert root["stig_rule"].startswith("SV-257985r") and root["stig_rule"].endswith("_rule")
    aide = next(r for r in rows if r["rule"] == "package_aide_installed")
    assert (aide["category"], aide["vuln_id"]) == ("integrity_monitoring", "V-258134")
    # a controller logging in as root loses its login to sshd_disable_root_login
    assert stig.access_impact(R + "sshd_disable_root_login", "root")
    assert "FIPS" in stig.access_impact("enable_fips_mode", "scapforge")


def test_anssi_debian12_table_keeps_the_categories_memory_is_scoped_by(debian12):
    skill = skills.load_skill("anssi-debian12")
    counts = skills.table_counts(skills.rule_table(skill, debian12))
    assert (counts["rules"], counts["ansible_fix"], counts["reboot"]) == (391, 270, 99)
    cats = {r.short_id: skill.category_of(r) for r in debian12.rules.values()}
    assert cats["service_auditd_enabled"] == "audit"
    assert cats["sudo_remove_nopasswd"] == "sudo"
    assert cats["sysctl_kernel_kptr_restrict"] == "kernel"
    assert cats["kernel_config_acpi_custom_method"] == "kernel_config"
    assert cats["accounts_passwords_pam_faillock_deny"] == "pam"
    assert cats["file_permissions_etc_shadow"] == "permissions"
    assert cats["rsyslog_files_permissions"] == "logging"
    assert cats["package_telnet_removed"] == "services"
    # no mapping: the deepest group's short id
    assert cats["kernel_disable_entropy_contribution_for_solid_state_drives"] == "entropy"


# ------------------------------------------------------------------ ordering
def test_audit_immutable_runs_after_every_other_audit_rule():
    """Case audit-immutable-last (shared/cases): the ordering comes from the skill."""
    skill = skills.load_skill("stig-rhel9")
    work = [R + "audit_rules_immutable", R + "audit_rules_usergroup_modification_passwd",
            R + "audit_rules_immutable_login_uids", R + "sshd_disable_root_login", R + "audit_rules_sudoers"]
    assert skill.order(work) == [R + "audit_rules_usergroup_modification_passwd", R + "sshd_disable_root_login",
                                 R + "audit_rules_sudoers", R + "audit_rules_immutable_login_uids",
                                 R + "audit_rules_immutable"]
    assert skill.runs_last(R + "audit_rules_immutable") and not skill.runs_last(R + "audit_rules_sudoers")
    tasks = skill.fix_tasks("audit_rules_immutable")
    assert tasks[-1]["ansible.builtin.copy"]["dest"] == "/etc/audit/rules.d/zz-immutable.rules"
    tasks.clear()
    assert skill.fix_tasks("audit_rules_immutable")  # a fresh copy each time


def test_ordering_after_moves_a_rule_behind_the_rules_it_names(tmp_path):
    root, directory = copy_skill(tmp_path)
    edit(directory / "skill.yml", lambda d: d.update(ordering={"after": {"a": ["b", "c"]}, "last": ["z"]}))
    skill = skills.load_skill("anssi-debian12", root=str(root))
    assert skill.order(["z", "a", "b", "x", "c", "y"]) == ["b", "x", "c", "a", "y", "z"]
    assert skill.order(["b", "c", "a"]) == ["b", "c", "a"]  # already after: unchanged


# ------------------------------------------------------------------ hooks
HOOKS = '''
def worker_context(rule, host):
    if rule["short_id"] == "boom":
        raise RuntimeError("the hook has a bug")
    return "on %s, %s lives in /etc/aide/aide.conf" % (host["os"], rule["short_id"])


def classify_failure(rule_id, message):
    return "fips_kernel" if "FIPS" in message else None
'''


def test_hooks_give_the_worker_context_and_classify_failures(tmp_path):
    root, directory = copy_skill(tmp_path)
    (directory / "hooks.py").write_text(HOOKS)
    skill = skills.load_skill("anssi-debian12", root=str(root))
    assert skill.call_hook("classify_failure", R + "x", "needs FIPS") == "fips_kernel"
    assert skill.call_hook("resolve_deferred", [], {}) is None  # not defined: None
    seen = []
    assert skill.call_hook("worker_context", {"short_id": "boom"}, {}, log=lambda **kw: seen.append(kw)) is None
    assert seen == [{"name": "worker_context", "error": "RuntimeError: the hook has a bug"}]


def test_a_worker_context_hook_reaches_the_prompt_and_a_raising_one_is_skipped(tmp_path):
    root, directory = copy_skill(tmp_path)
    (directory / "hooks.py").write_text(HOOKS)
    catalog = Catalog.from_path(lab_datastream("ssg-debian12-ds.xml"))
    for rule, expected in (("aide_verify_acls", "on Debian 12, aide_verify_acls lives in /etc/aide/aide.conf"),
                           ("boom", "")):
        run_dir = tmp_path / rule
        run_dir.mkdir()
        loop = FakeLoop(catalog, run_dir, results=("fail", "pass"))
        loop.skill = skills.load_skill("anssi-debian12", root=str(root))
        agents = FakeAgents({"architect_plan": [{"verdict": "PLAN", "plan": "p"}],
                             "worker": [{"tasks": GOOD, "rationale": "r"}]})
        item = vendor_failed()
        if rule == "boom":
            loop.catalog = _Renamed(catalog, "boom")
        loop.agents, loop.token_ledger = agents, None
        WorkerPhase(loop, loop, A.Budget(attempts=2)).run(item)
        assert [v["skill_context"] for v in agents.variables] == [expected, expected]
        failed = [(e["rule"], e["data"]) for e in read_events(str(run_dir / "events.jsonl")) if e["event"] == "hook_failed"]
        assert failed == ([] if expected else [("boom", {"name": "worker_context",
                                                         "error": "RuntimeError: the hook has a bug"})])
        assert item.attempts[-1].verdict == "passed"  # the hook's failure cost the rule nothing


class _Renamed:
    """The catalog with every rule's short id shown as ``name`` (to reach the raising hook)."""

    def __init__(self, catalog, name):
        self._catalog, self._name = catalog, name

    def rule(self, rule_id):
        return dataclasses.replace(self._catalog.rule(rule_id), short_id=self._name)

    def __getattr__(self, attr):
        return getattr(self._catalog, attr)


# ------------------------------------------------------------------ the lookup the role uses
def test_the_skill_lookup_through_ansible():
    from test_memory_tools import ansible

    rc, res, out = ansible("ansible.builtin.debug", "msg={{ lookup('scapforge.remediation.skill', 'stig-rhel9') }}")
    assert rc == 0, out
    data = res["msg"]
    assert (data["profile"], data["datastream"]) == ("xccdf_org.ssgproject.content_profile_stig",
                                                     "/usr/share/xml/scap/ssg/content/ssg-rhel9-ds.xml")
    assert data["content_packages"] == {"RedHat": ["scap-security-guide"]}
    assert data["trusted_sha256"] == [RHEL9_SHA256]
    rc, res, out = ansible("ansible.builtin.debug", "msg={{ lookup('scapforge.remediation.skill', 'nope') }}")
    assert rc != 0 and "no skill named nope: the collection has anssi-debian12, stig-rhel9" in out


def test_a_skills_modules_widen_the_gate_for_model_written_tasks(tmp_path):
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import task_gate

    task = [{"name": "t", "community.general.timezone": {"name": "UTC"}}]
    default = task_gate.GatePolicy(remote_user="scapforge", module_allowlist_extra=skills.load_skill("anssi-debian12").modules)
    assert any("community.general.timezone" in p for p in task_gate.validate(task, trusted=False, policy=default))
    root, directory = copy_skill(tmp_path)
    edit(directory / "skill.yml", lambda d: d.update(modules=["community.general.timezone"], health_checks=["true"]))
    skill = skills.load_skill("anssi-debian12", root=str(root))
    policy = task_gate.GatePolicy(remote_user="scapforge", module_allowlist_extra=skill.modules)
    assert task_gate.validate(task, trusted=False, policy=policy) == []
    assert skill.health_checks == ["true"]
