"""The datastream catalog, on the real SSG 0.1.76 Debian 12 and RHEL 9 datastreams the lab
keeps in its content directory (`make lab-build` fetches and verifies both), plus a small
hand-written datastream for the XCCDF selection rules the real content does not exercise."""

import os
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.scapforge.remediation.plugins.plugin_utils import task_gate
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import (
    Catalog,
    CatalogError,
    FixSnippet,
    Rule,
)

DEBIAN12_SHA256 = "ed594d33cfd38c6bbb91f2283fee7fe436641d1176861b67a474e11bf445062c"
# SSG 0.1.76 from Debian trixie's ssg-nondebian (lab/scapforge_lab.py pins the same digest)
RHEL9_SHA256 = "94c2e4baf044ffa3b4b7068b138325f704020b3e9af1a9750bbd3806f78a134e"
RULE = "xccdf_org.ssgproject.content_rule_"
VALUE = "xccdf_org.ssgproject.content_value_"
HIGH = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
STIG = "xccdf_org.ssgproject.content_profile_stig"


def lab_content():
    """The lab's content directory: ``$SCAPFORGE_LAB_HOME/content`` (default
    /var/lib/scapforge-lab/content), where ``lab/lab.py build`` writes the datastreams."""
    return Path(os.environ.get("SCAPFORGE_LAB_HOME", "/var/lib/scapforge-lab")) / "content"


def lab_datastream(name):
    """Path of the datastream ``name`` in the lab's content directory. Fails (not skips)
    when it is missing: `make test` and `make unit` run lab-build first."""
    path = lab_content() / name
    if not path.is_file():
        pytest.fail("%s not found in %s: run `make lab-build`" % (name, lab_content()))
    return path


def debian12_datastream():
    """Path of ssg-debian12-ds.xml: $SCAPFORGE_DATASTREAM, else the lab's content copy."""
    path = os.environ.get("SCAPFORGE_DATASTREAM")
    return Path(path) if path else lab_datastream("ssg-debian12-ds.xml")


@pytest.fixture(scope="module")
def cat():
    return Catalog.from_path(debian12_datastream())


def test_parse_once_and_timing():
    path = debian12_datastream()
    Catalog.clear_cache()
    started = time.perf_counter()
    first = Catalog.from_path(path)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    again = Catalog.from_bytes(path.read_bytes())
    warm = time.perf_counter() - started
    print("\ncatalog: parse+index %.3f s (from_path %.3f s), cached lookup %.3f s, %d rules"
          % (first.parse_seconds, cold, warm, len(first.rules)))
    assert again is first
    assert first.sha256 == DEBIAN12_SHA256


def test_benchmark_and_profiles(cat):
    assert cat.benchmark_id == "xccdf_org.ssgproject.content_benchmark_DEBIAN-12"
    assert cat.benchmark_version == "0.1.76"
    assert len(cat.rules) == 591
    assert len(cat.profiles) == 9
    assert cat.profiles[HIGH] == "ANSSI-BP-028 (high)"
    assert cat.profile("anssi_bp28_high") is cat.profile(HIGH)


def test_anssi_high_selection(cat):
    prof = cat.profile("anssi_bp28_high")
    # 391 <select selected="true"> rules, none under the 37 groups it deselects; oscap
    # reports 390 of them as pass/fail/notapplicable and security_patches_up_to_date as
    # notchecked (its OVAL is the remote Debian feed).
    assert len(prof.selected_rules) == 391
    assert len(set(prof.selected_rules)) == 391
    assert RULE + "sshd_disable_root_login" in prof.selected_rules
    assert RULE + "accounts_umask_etc_login_defs" in prof.selected_rules
    assert RULE + "sshd_set_idle_timeout" not in prof.selected_rules
    assert RULE + "sudo_remove_nopasswd" not in prof.selected_rules
    # document order (oscap's evaluation order)
    order = list(cat.rules)
    positions = [order.index(r) for r in prof.selected_rules]
    assert positions == sorted(positions)
    assert len(prof.refine_values) == 40
    assert prof.refine_values[VALUE + "var_accounts_user_umask"] == "077"
    minimal = cat.profile("anssi_bp28_minimal")
    assert len(minimal.selected_rules) == 35


def test_umask_value_and_rendered_fix(cat):
    assert cat.value("var_accounts_user_umask", "anssi_bp28_high") == "077"
    assert cat.value("var_accounts_user_umask") == "027"  # the Value's default
    assert cat.value(VALUE + "var_accounts_user_umask", "standard") == "027"
    text = cat.render_fix("accounts_umask_etc_login_defs", "anssi_bp28_high")
    assert "<xccdf" not in text
    tasks = yaml.safe_load(text)
    assert isinstance(tasks, list) and all(isinstance(t, dict) for t in tasks)
    set_fact = [t for t in tasks if "set_fact" in t]
    assert set_fact[0]["set_fact"] == {"var_accounts_user_umask": "077"}
    assert isinstance(set_fact[0]["set_fact"]["var_accounts_user_umask"], str)
    lines = [t for t in tasks if "ansible.builtin.lineinfile" in t]
    assert lines[-1]["ansible.builtin.lineinfile"]["line"] == "UMASK {{ var_accounts_user_umask }}"


def test_every_fix_renders_to_a_task_list(cat):
    count = 0
    for pid in cat.profiles:
        for rid in cat.profile(pid).selected_rules:
            if cat.rules[rid].ansible_fix is not None:
                tasks = yaml.safe_load(cat.render_fix(rid, pid))
                assert isinstance(tasks, list) and all(isinstance(t, dict) for t in tasks), rid
                count += 1
    assert count == 926
    with_fix = [r for r in cat.profile("anssi_bp28_high").selected_rules if cat.rules[r].ansible_fix]
    assert len(with_fix) == 270  # DESIGN decision 1 counts keywords over these 270 fixes


def test_sshd_disable_root_login(cat):
    rule = cat.rule("sshd_disable_root_login")
    assert isinstance(rule, Rule)
    assert rule.id == RULE + "sshd_disable_root_login"
    assert rule.short_id == "sshd_disable_root_login"
    assert rule.title == "Disable SSH Root Login"
    assert rule.severity == "medium"
    assert rule.group_path == ("services", "ssh", "ssh_server")
    assert rule.description.endswith("/etc/ssh/sshd_config:\nPermitRootLogin no")
    assert "  " not in rule.description and "<" not in rule.description
    assert rule.rationale.startswith("Even though the communications channel may be encrypted")
    assert rule.identifiers["cce"] == () and rule.identifiers["stig_id"] == ()
    assert "SRG-OS-000109-GPOS-00056" in rule.identifiers["srg"]
    assert rule.identifiers["cci"] == ("CCI-000366", "CCI-004045")
    fix = rule.ansible_fix
    assert isinstance(fix, FixSnippet)
    assert (fix.reboot, fix.complexity, fix.disruption, fix.strategy) == (False, "low", "low", "restrict")
    assert fix.value_ids == ()
    assert "PermitRootLogin" in fix.text


def test_fix_metadata_with_values_and_reboot(cat):
    fix = cat.rule("accounts_umask_etc_login_defs").ansible_fix
    assert fix.value_ids == (VALUE + "var_accounts_user_umask",)
    assert '!!str <xccdf:sub idref="%svar_accounts_user_umask" use="legacy"/>' % VALUE in fix.text
    reboots = [r for r in cat.profile("anssi_bp28_high").selected_rules
               if cat.rules[r].ansible_fix and cat.rules[r].ansible_fix.reboot]
    assert len(reboots) == 99  # DESIGN decision 4: 99 of 270 fixes, every sysctl one
    assert cat.rule("sysctl_kernel_kptr_restrict").ansible_fix.reboot is True


def test_description_with_values(cat):
    rule = cat.rule("accounts_umask_etc_login_defs")
    assert rule.description.endswith("to read as follows:\nUMASK [var_accounts_user_umask]")
    assert cat.describe(rule.id, "anssi_bp28_high").endswith("\nUMASK 077")
    assert rule.platforms == ("#package_shadow-utils",)
    assert cat.rule("sshd_disable_root_login").platforms == ("#system_with_kernel",)  # its group's


def test_requires_and_conflicts(cat):
    with_requires = sorted(r.short_id for r in cat.rules.values() if r.requires)
    assert with_requires == ["service_auditd_enabled", "sshd_set_idle_timeout",
                             "sshd_set_keepalive", "sshd_set_keepalive_0"]
    assert cat.rule("sshd_set_idle_timeout").requires == (RULE + "sshd_set_keepalive",)
    assert cat.expand_requires(["service_auditd_enabled"]) == [
        RULE + "service_auditd_enabled", RULE + "package_audit_installed"]
    assert cat.expand_requires(["sshd_set_keepalive_0", RULE + "sshd_set_idle_timeout"]) == [
        RULE + "sshd_set_keepalive_0", RULE + "sshd_set_idle_timeout", RULE + "sshd_set_keepalive"]
    assert cat.expand_requires(["sshd_disable_root_login"]) == [RULE + "sshd_disable_root_login"]
    assert cat.rule("sshd_enable_warning_banner").conflicts == (RULE + "sshd_enable_warning_banner_net",)


def test_unknown_profile_rule_value(cat):
    with pytest.raises(CatalogError) as err:
        cat.profile("stig")
    assert "'stig'" in str(err.value) and "anssi_bp28_high" in str(err.value)
    with pytest.raises(CatalogError, match="sshd_disable_rootlogin"):
        cat.rule("sshd_disable_rootlogin")
    with pytest.raises(CatalogError, match="var_nope"):
        cat.value("var_nope")
    with pytest.raises(CatalogError, match="no Ansible fix"):
        cat.render_fix("security_patches_up_to_date", "anssi_bp28_high")


@pytest.mark.parametrize("data, message", [
    (b"<ds:data-stream-collection xmlns:ds='http://scap.nist.gov/schema/scap/source/1.2'>",
     "not well-formed XML"),
    (b"", "not well-formed XML"),
    (b"<Benchmark xmlns='http://checklists.nist.gov/xccdf/1.2' id='x'/>",
     "not a SCAP source datastream: root element is <Benchmark>"),
    (b"<ds:data-stream-collection xmlns:ds='http://scap.nist.gov/schema/scap/source/1.2'/>",
     "holds no XCCDF 1.2 Benchmark"),
    (b"<!DOCTYPE x [<!ENTITY e SYSTEM 'file:///etc/passwd'>]><x>&e;</x>", "not a SCAP source datastream"),
])
def test_malformed_datastream(data, message):
    with pytest.raises(CatalogError, match=message) as err:
        Catalog.from_bytes(data)
    # no lxml exception chained to it (raise ... from None)
    assert err.value.__cause__ is None
    assert err.value.__context__ is None or err.value.__suppress_context__


def test_truncated_real_datastream():
    data = debian12_datastream().read_bytes()[:200000]
    with pytest.raises(CatalogError, match="not well-formed XML"):
        Catalog.from_bytes(data, source="cut.xml")


def test_missing_file(tmp_path):
    with pytest.raises(CatalogError, match="cannot read datastream"):
        Catalog.from_path(tmp_path / "nope.xml")


# ---------------------------------------------------------------- SSG 0.1.76 RHEL 9 content

@pytest.fixture(scope="module")
def rhel9():
    return Catalog.from_path(lab_datastream("ssg-rhel9-ds.xml"))


def test_rhel9_benchmark_and_stig_profile(rhel9):
    assert rhel9.sha256 == RHEL9_SHA256
    assert rhel9.benchmark_id == "xccdf_org.ssgproject.content_benchmark_RHEL-9"
    assert rhel9.benchmark_version == "0.1.76"
    assert len(rhel9.rules) == 1486
    assert len(rhel9.profiles) == 19
    assert rhel9.profiles[STIG] == "DISA STIG for Red Hat Enterprise Linux 9"
    stig = rhel9.profile("stig")
    assert stig is rhel9.profile(STIG)
    assert "DISA STIG for Red Hat Enterprise Linux 9 V2R3" in stig.description
    assert len(stig.selected_rules) == 493
    assert len(set(stig.selected_rules)) == 493
    assert len(rhel9.profile("stig_gui").selected_rules) == 489
    assert len(stig.refine_values) == 54


def test_rhel9_stig_fixes_and_reboot_metadata(rhel9):
    selected = rhel9.profile("stig").selected_rules
    with_fix = [r for r in selected if rhel9.rules[r].ansible_fix]
    assert len(with_fix) == 454
    assert sum(1 for r in with_fix if rhel9.rules[r].ansible_fix.reboot) == 91
    # among the 39 without one: FIPS mode, partitioning, bootloader passwords
    without = {rhel9.rules[r].short_id for r in selected if not rhel9.rules[r].ansible_fix}
    assert len(without) == 39
    assert {"enable_fips_mode", "partition_for_tmp", "grub2_password"} <= without


def test_rhel9_stig_ids_and_cce(rhel9):
    rule = rhel9.rule("sshd_disable_root_login")
    assert rule.identifiers["stig_id"] == ("RHEL-09-255045",)
    assert rule.identifiers["cce"] == ("CCE-90800-4",)
    assert rhel9.rule("accounts_umask_etc_login_defs").identifiers["stig_id"] == ("RHEL-09-412065",)
    selected = rhel9.profile("stig").selected_rules
    with_stig_id = [r for r in selected if rhel9.rules[r].identifiers["stig_id"]]
    assert len(with_stig_id) == 492
    # the one selected rule without a STIG id of its own
    assert sorted(set(selected) - set(with_stig_id)) == [RULE + "enable_authselect"]
    assert all(s.startswith("RHEL-09-") and len(s) == len("RHEL-09-255045")
               for r in with_stig_id for s in rhel9.rules[r].identifiers["stig_id"])
    # only STIG-profile rules carry STIG ids
    assert sum(1 for r in rhel9.rules.values() if r.identifiers["stig_id"]) == 492
    assert sum(1 for r in rhel9.rules.values() if r.identifiers["cce"]) == 1072


def test_rhel9_stig_values(rhel9):
    tasks = yaml.safe_load(rhel9.render_fix("accounts_umask_etc_login_defs", "stig"))
    assert [t["set_fact"] for t in tasks if "set_fact" in t] == [{"var_accounts_user_umask": "077"}]
    # a Value without a selector-less <value>: the first one is the default (NISTIR-7275r4)
    assert rhel9.value("var_removable_partition") == "/dev/cdrom"


def test_rhel9_stig_fixes_pass_the_trusted_gate(rhel9):
    # Every STIG fix, rendered with the profile's Values as the loop renders it, passes the
    # gate as trusted vendor content; as LLM output the ones that template are refused.
    untrusted = {}
    for rid in rhel9.profile("stig").selected_rules:
        if rhel9.rules[rid].ansible_fix is None:
            continue
        text = rhel9.render_fix(rid, "stig")
        tasks = task_gate.parse_task_text(text, trusted=True, source=rid)
        assert task_gate.validate(tasks, trusted=True) == [], rid
        untrusted[rhel9.rules[rid].short_id] = task_gate.validate(yaml.safe_load(text), trusted=False)
    assert len(untrusted) == 454
    assert "Jinja templating is not allowed in untrusted tasks" in untrusted["accounts_umask_etc_login_defs"][0]
    assert sum(bool(p) for p in untrusted.values()) == 291


# ---------------------------------------------------------------- XCCDF selection rules

MINI = b"""<?xml version="1.0"?>
<ds:data-stream-collection xmlns:ds="http://scap.nist.gov/schema/scap/source/1.2"
    xmlns:x="http://checklists.nist.gov/xccdf/1.2" xmlns:h="http://www.w3.org/1999/xhtml" id="c">
 <ds:component id="comp">
  <x:Benchmark id="xccdf_org.example_benchmark_MINI">
   <x:title>Mini</x:title>
   <x:version>9.9</x:version>
   <x:Profile id="xccdf_org.example_profile_base">
    <x:title>Base</x:title>
    <x:select idref="xccdf_org.example_rule_a" selected="true"/>
    <x:select idref="xccdf_org.example_rule_b" selected="true"/>
    <x:select idref="xccdf_org.example_group_off" selected="false"/>
    <x:refine-value idref="xccdf_org.example_value_v" selector="hi"/>
   </x:Profile>
   <x:Profile id="xccdf_org.example_profile_child" extends="xccdf_org.example_profile_base">
    <x:title>Child</x:title>
    <x:select idref="xccdf_org.example_rule_a" selected="false"/>
    <x:select idref="clusterX" selected="true"/>
    <x:set-value idref="xccdf_org.example_value_v">literal</x:set-value>
   </x:Profile>
   <x:Value id="xccdf_org.example_value_v" type="string">
    <x:value selector="lo">1</x:value><x:value selector="hi">9</x:value><x:value>5</x:value>
   </x:Value>
   <x:Group id="xccdf_org.example_group_on">
    <x:Rule id="xccdf_org.example_rule_a" selected="false" severity="high">
     <x:title>A</x:title>
     <x:description>Set   <h:code>/etc/a</h:code>
to <x:sub idref="xccdf_org.example_value_v" use="legacy"/>.<h:pre>line 1
  line 2</h:pre></x:description>
     <x:reference href="https://public.cyber.mil/stigs/downloads/?_dl_facet_stigs=operating-systems%2Cunix-linux">XYZ-01-000001</x:reference>
     <x:ident system="https://nvd.nist.gov/cce/index.cfm">CCE-1234-5</x:ident>
     <x:requires idref="xccdf_org.example_rule_b xccdf_org.example_rule_c"/>
     <x:fix system="urn:xccdf:fix:script:ansible" id="a">- name: v
  set_fact:
    v: !!str <x:sub idref="xccdf_org.example_value_v" use="legacy"/>
</x:fix>
    </x:Rule>
    <x:Rule id="xccdf_org.example_rule_b" selected="false"><x:title>B</x:title></x:Rule>
    <x:Rule id="xccdf_org.example_rule_d" cluster-id="clusterX" selected="false"><x:title>D</x:title></x:Rule>
   </x:Group>
   <x:Group id="xccdf_org.example_group_off">
    <x:Rule id="xccdf_org.example_rule_c" selected="true"><x:title>C</x:title></x:Rule>
   </x:Group>
  </x:Benchmark>
 </ds:component>
</ds:data-stream-collection>
"""


def test_selection_rules_on_small_datastream():
    cat = Catalog.from_bytes(MINI)
    ns = "xccdf_org.example_"
    assert cat.benchmark_version == "9.9" and cat.id_namespace == ns
    base, child = cat.profile("base"), cat.profile("child")
    # c is selected by default but its group is deselected by the profile
    assert base.selected_rules == (ns + "rule_a", ns + "rule_b")
    # child: extends base, unselects a, selects d through its cluster-id
    assert child.selected_rules == (ns + "rule_b", ns + "rule_d")
    assert cat.value("v") == "5" and cat.value("v", "base") == "9" and cat.value("v", "child") == "literal"
    rule = cat.rule("a")
    assert rule.identifiers["stig_id"] == ("XYZ-01-000001",) and rule.identifiers["cce"] == ("CCE-1234-5",)
    assert rule.description == "Set /etc/a to [v].\nline 1\nline 2"
    assert rule.requires == (ns + "rule_b", ns + "rule_c")
    assert rule.severity == "high" and rule.group_path[-1] == "on"
    assert rule.ansible_fix.complexity == "unknown" and rule.ansible_fix.reboot is False
    assert yaml.safe_load(cat.render_fix("a", "base")) == [{"name": "v", "set_fact": {"v": "9"}}]
    assert cat.expand_requires(["a"]) == [ns + "rule_a", ns + "rule_b", ns + "rule_c"]


def test_the_disk_cache_is_loaded_instead_of_parsing_again(tmp_path, monkeypatch):
    """Issue 9: forks of one run (and later runs) load the parsed catalog by sha256."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import catalog as catalog_mod

    monkeypatch.setenv("SCAPFORGE_CATALOG_CACHE", str(tmp_path / "cache"))
    Catalog.clear_cache()
    first = Catalog.from_path(lab_datastream("ssg-debian12-ds.xml"))
    assert not first.loaded_from_disk and first.parse_seconds > 0
    [pickled] = [p for p in (tmp_path / "cache").iterdir() if p.suffix == ".pickle"]
    assert pickled.name == "%s-%s.pickle" % (DEBIAN12_SHA256, catalog_mod._DISK_LAYOUT)
    Catalog.clear_cache()
    second = Catalog.from_path(lab_datastream("ssg-debian12-ds.xml"))
    assert second is not first and second.loaded_from_disk and second.load_seconds < 1.0
    assert list(second.rules) == list(first.rules)
    assert second.render_fix("accounts_umask_etc_login_defs", "anssi_bp28_high") == \
        first.render_fix("accounts_umask_etc_login_defs", "anssi_bp28_high")
    # a file others may write is never loaded; a damaged one is parsed again and replaced
    Catalog.clear_cache()
    pickled.chmod(0o666)
    assert not Catalog.from_path(lab_datastream("ssg-debian12-ds.xml")).loaded_from_disk
    Catalog.clear_cache()
    pickled.write_bytes(b"not a pickle")
    pickled.chmod(0o600)
    third = Catalog.from_path(lab_datastream("ssg-debian12-ds.xml"))
    assert not third.loaded_from_disk and len(third.rules) == len(first.rules)
    Catalog.clear_cache()
    assert Catalog.from_path(lab_datastream("ssg-debian12-ds.xml")).loaded_from_disk  # stored again
    monkeypatch.setenv("SCAPFORGE_CATALOG_CACHE", "")  # off
    Catalog.clear_cache()
    assert not Catalog.from_path(lab_datastream("ssg-debian12-ds.xml")).loaded_from_disk
    Catalog.clear_cache()


def test_rule_values_are_the_profiles_values_by_short_id(cat):
    assert cat.rule_values("accounts_umask_etc_login_defs", "anssi_bp28_high") == {"var_accounts_user_umask": "077"}
    assert cat.rule_values("accounts_tmout", "anssi_bp28_high") == {"var_accounts_tmout": "600"}
    assert cat.rule_values("sshd_disable_root_login", "anssi_bp28_high") == {"sshd_required": "0"}  # its check-export
