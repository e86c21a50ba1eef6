"""bench/scenarios.py's pure logic: index reading, sampling, families, package names, variables and
tailoring, rule results, manifest diffs, the summary and the compare differences."""

import importlib.util
import json
import os
from pathlib import Path

import pytest
from lxml import etree

ROOT = Path(__file__).resolve().parents[2]
VALUE = "xccdf_org.ssgproject.content_value_"
X = "{http://checklists.nist.gov/xccdf/1.2}"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_scenarios", ROOT / "bench" / "scenarios.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


S = _bench()


def _sc(rule, file, **more):
    header = {"file": file, "kind": file.split(".")[-2], "packages": [], "remediation": ["all"], "variables": [],
              "vm": [], "platform": ["multi_platform_all"]}
    header.update(more)
    return header


INDEX = {"profile": "xccdf_org.ssgproject.content_profile_anssi_bp28_high", "rules": {
    "sysctl_kernel_sysrq": {"path": "linux_os/guide/system/permissions/restrictions/sysctl_kernel_sysrq",
                            "scenarios": [_sc("sysctl_kernel_sysrq", "wrong.fail.sh", vm=["kernel (runtime sysctl)"])]},
    "accounts_tmout": {"path": "linux_os/guide/system/accounts/accounts-session/accounts_tmout", "scenarios": [
        _sc("accounts_tmout", "wrong_value_profile.fail.sh", variables=["var_accounts_tmout=600"]),
        _sc("accounts_tmout", "correct_value_profile.pass.sh", variables=["var_accounts_tmout=600"]),
        _sc("accounts_tmout", "other.notapplicable.sh")]},
    "file_permissions_etc_shadow": {"path": "linux_os/guide/system/permissions/files/file_permissions_etc_shadow",
                                    "scenarios": [_sc("file_permissions_etc_shadow", "lenient.fail.sh")]},
}}


def test_load_index_reads_index_json(tmp_path):
    (tmp_path / "index.json").write_text(json.dumps(INDEX))
    assert S.load_index(str(tmp_path))["rules"]["accounts_tmout"]["path"].endswith("/accounts_tmout")


@pytest.mark.parametrize("rule, path, expected", [
    ("accounts_password_pam_minlen", "linux_os/guide/system/accounts/accounts-pam/x", "pam"),
    ("accounts_tmout", "", "accounts"),
    ("sudoers_no_root_target", "", "accounts"),
    ("grub2_password", "", "other"),
    ("sshd_disable_root_login", "", "sshd"),
    ("file_permissions_sshd_config", "", "permissions"),
    ("file_owner_etc_passwd", "", "permissions"),
    ("accounts_user_dot_group_ownership", "", "permissions"),
    ("audit_rules_login_events_faillock", "", "audit"),
    ("sysctl_net_ipv4_conf_all_accept_redirects", "", "sysctl"),
    ("package_audit_installed", "", "packages"),
    ("service_auditd_enabled", "", "services"),
    ("rsyslog_remote_tls", "", "logging"),
    ("ensure_logrotate_activated", "", "logging"),
    ("kernel_config_kexec", "", "other"),
    ("coredump_disable_storage", "linux_os/guide/system/permissions/restrictions/coredumps/x", "permissions"),
    ("something_else", "linux_os/guide/system/logging/x", "logging"),
    ("something_else", "linux_os/guide/services/x", "other"),
])
def test_family(rule, path, expected):
    assert S.family(rule, path) == expected


def test_select_scenarios_flattens_sorts_and_filters():
    got = S.select_scenarios(INDEX)
    assert [(s["rule"], s["file"], s["family"]) for s in got] == [
        ("accounts_tmout", "correct_value_profile.pass.sh", "accounts"),
        ("accounts_tmout", "other.notapplicable.sh", "accounts"),
        ("accounts_tmout", "wrong_value_profile.fail.sh", "accounts"),
        ("file_permissions_etc_shadow", "lenient.fail.sh", "permissions"),
        ("sysctl_kernel_sysrq", "wrong.fail.sh", "sysctl")]
    assert got[2]["rule_path"] == "linux_os/guide/system/accounts/accounts-session/accounts_tmout"
    only = S.select_scenarios(INDEX, rules=["accounts_tmout"], kinds=("pass",))
    assert [s["file"] for s in only] == ["correct_value_profile.pass.sh", "other.notapplicable.sh"]


def test_skip_reasons_and_no_fix():
    by_file = {s["file"]: s for s in S.select_scenarios(INDEX)}
    assert S.skip_reason(by_file["wrong.fail.sh"]) == "needs a VM: kernel (runtime sysctl)"
    assert S.skip_reason(by_file["other.notapplicable.sh"]) == "notapplicable scenario (not asked for with --kind)"
    assert S.skip_reason(by_file["lenient.fail.sh"]) is None
    assert S.expects_no_fix({"remediation": ["none"]}) is True
    assert S.expects_no_fix(by_file["lenient.fail.sh"]) is False
    assert S.scenario_kind("a.b.pass.sh") == "pass"
    assert S.scenario_kind("helper.sh") is None


def test_sample_is_seeded_spread_over_families_and_sorted():
    items = [{"rule": "%s_%02d" % (fam, i), "file": "x.fail.sh", "family": fam}
             for fam in ("accounts", "audit", "permissions") for i in range(10)] + \
        [{"rule": "sshd_only", "file": "x.fail.sh", "family": "sshd"}]
    got = S.sample(items, 7, seed=1)
    assert got == S.sample(items, 7, seed=1)
    assert got != S.sample(items, 7, seed=2)
    fams = [s["family"] for s in got]
    # families in turn: accounts, sshd, audit, permissions, then accounts, audit, permissions
    assert sorted(fams) == ["accounts", "accounts", "audit", "audit", "permissions", "permissions", "sshd"]
    assert got == sorted(got, key=lambda s: (s["rule"], s["file"]))
    assert S.sample(items, None, 1) == items
    assert len(S.sample(items, 100, 1)) == 31


def test_debian_packages_maps_and_dedups():
    assert S.debian_packages(["audit", "crontabs", "cronie", "grub2-tools", "nfs-utils", "aide", "auditd"]) == [
        "auditd", "cron", "grub2-common", "nfs-common", "aide"]
    assert not S.debian_packages([])


def test_parse_variables_strips_spaces_around_equals():
    assert S.parse_variables(["var_accounts_user_umask = 027", "var_accounts_tmout=600", "x=a=b"]) == {
        "var_accounts_user_umask": "027", "var_accounts_tmout": "600", "x": "a=b"}
    assert not S.parse_variables([])
    with pytest.raises(ValueError):
        S.parse_variables(["no_equals_sign"])


def _lab_datastream():
    home = Path(os.environ.get("SCAPFORGE_LAB_HOME", "/var/lib/scapforge-lab"))
    for path in (os.environ.get("SCAPFORGE_DATASTREAM"), home / "content" / "ssg-debian12-ds.xml"):
        if path and Path(path).is_file():
            return Path(path)
    pytest.fail("ssg-debian12-ds.xml not found (set SCAPFORGE_DATASTREAM or run `make lab`)")
    return None


def test_tailoring_sets_the_scenario_values_on_the_profile():
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog
    catalog = Catalog.from_path(_lab_datastream())
    xml, profile_id = S.tailoring(catalog, INDEX["profile"], ["var_accounts_tmout=600",
                                                              "var_accounts_user_umask = 027"])
    assert profile_id == INDEX["profile"] + "_scapforge"
    prof = etree.fromstring(xml).find(X + "Profile")
    assert prof.get("id") == profile_id and prof.get("extends") == INDEX["profile"]
    values = {e.get("idref"): (e.tag[len(X):], e.get("selector") or e.text) for e in prof
              if e.tag in (X + "set-value", X + "refine-value")}
    # 027 is one of var_accounts_user_umask's selectors: refine-value; 600 is none of tmout's: a literal
    assert values == {VALUE + "var_accounts_tmout": ("set-value", "600"),
                      VALUE + "var_accounts_user_umask": ("refine-value", "027")}
    assert not prof.findall(X + "select")


ARF = b"""<?xml version="1.0"?>
<arf:asset-report-collection xmlns:arf="http://scap.nist.gov/schema/asset-reporting-format/1.1"
  xmlns:x="http://checklists.nist.gov/xccdf/1.2"><arf:reports><arf:report id="r1"><arf:content>
<x:TestResult id="xccdf_org.open-scap_testresult_P_scapforge">
  <x:rule-result idref="xccdf_org.ssgproject.content_rule_accounts_tmout"><x:result>fail</x:result></x:rule-result>
  <x:rule-result idref="xccdf_org.ssgproject.content_rule_other"><x:result>pass</x:result></x:rule-result>
</x:TestResult></arf:content></arf:report></arf:reports></arf:asset-report-collection>"""


def test_rule_result_reads_the_rule_and_the_test_result_id():
    assert S.rule_result(ARF, "accounts_tmout") == ("fail", "xccdf_org.open-scap_testresult_P_scapforge")
    assert S.rule_result(ARF, "xccdf_org.ssgproject.content_rule_other")[0] == "pass"
    assert S.rule_result(ARF, "missing") == (None, "xccdf_org.open-scap_testresult_P_scapforge")


def test_dpkg_list_and_manifest_diff():
    pkgs = S.dpkg_list("bash\t5.2.15-2+b7\nauditd\t1:3.0.9-1\n\n")
    assert pkgs == {"bash": "5.2.15-2+b7", "auditd": "1:3.0.9-1"}
    before = {"etc": {"/etc/shadow": ["0o640", 0, 42, "aa"], "/etc/profile": ["0o644", 0, 0, "bb"],
                      "/etc/gone": ["0o644", 0, 0, "cc"], "/etc/passwd-": ["0o644", 0, 0, "dd"]},
              "packages": pkgs}
    after = {"etc": {"/etc/shadow": ["0o600", 0, 42, "aa"], "/etc/profile": ["0o644", 0, 0, "bb"],
                     "/etc/new": ["0o644", 0, 0, "ee"], "/etc/passwd-": ["0o644", 0, 0, "ff"]},
             "packages": {"bash": "5.2.15-2+b7", "auditd": "1:3.0.9-2", "aide": "0.18"}}
    diffs = S.manifest_diff(before, after)
    assert diffs == ["-/etc/gone", "+/etc/new", "~/etc/passwd-", "~/etc/shadow", "+pkg:aide", "~pkg:auditd"]
    assert S.beyond_backups(diffs) == ["-/etc/gone", "+/etc/new", "~/etc/shadow", "+pkg:aide", "~pkg:auditd"]
    assert S.beyond_backups(["~/etc/passwd-", "~/etc/subuid-", "-/etc/shadow-"]) == ["-/etc/shadow-"]
    assert not S.manifest_diff(before, before)


def test_product_code_from_the_host_report():
    report = {"rules": {"a": {"outcome": "remediated", "reason": "verified"},
                        "b": {"outcome": "escalated", "reason": "side_effect_rolled_back"},
                        "c": {"outcome": "escalated", "reason": ""}},
              "scan_results": {"d": {"before": "pass", "after": "pass"}}}
    assert [S.product_code(report, r) for r in "abcde"] == [
        "remediated", "side_effect_rolled_back", "escalated", "not_worked:pass", "not_in_report"]


def _rec(rule, scenario, kind, remediator, final, initial_ok=True, **more):
    rec = {"rule": rule, "scenario": scenario, "kind": kind, "family": S.family(rule), "remediator": remediator,
           "initial": kind if initial_ok else "notapplicable", "initial_ok": initial_ok, "final": final,
           "outcome": more.pop("outcome", "x"), "host_unchanged": None}
    rec.update(more)
    return rec


RECORDS = [
    _rec("accounts_tmout", "w.fail.sh", "fail", "product", "fail", outcome="side_effect_rolled_back"),
    _rec("accounts_tmout", "w.fail.sh", "fail", "ssg", "pass", outcome=0),
    _rec("accounts_tmout", "c.pass.sh", "pass", "product", "pass", host_unchanged=False,
         host_unchanged_but_backups=True),
    _rec("accounts_tmout", "c.pass.sh", "pass", "ssg", "pass", host_unchanged=False,
         host_unchanged_but_backups=False),
    _rec("file_owner_etc_passwd", "o.fail.sh", "fail", "product", "pass", outcome="remediated"),
    _rec("file_owner_etc_passwd", "o.fail.sh", "fail", "ssg", "pass"),
    _rec("file_owner_etc_passwd", "m.fail.sh", "fail", "product", None, initial_ok=False),
    _rec("file_owner_etc_passwd", "m.fail.sh", "fail", "ssg", "pass"),
    _rec("file_owner_etc_passwd", "n.fail.sh", "fail", "product", "fail", expects_no_fix=True),
    _rec("file_owner_etc_passwd", "n.fail.sh", "fail", "ssg", "fail", expects_no_fix=True),
    _rec("sshd_disable_root_login", "e.fail.sh", "fail", "ssg", None, initial_ok=None, error="LabError: x"),
    {"rule": "sysctl_kernel_sysrq", "scenario": "v.fail.sh", "kind": "fail", "family": "sysctl",
     "remediator": None, "skipped": True, "why": "needs a VM"},
]


def test_summarize_counts_each_figure():
    got = S.summarize(RECORDS)
    assert got["skipped"] == {"sysctl": 1, "total": 1}
    assert got["product"]["total"] == {"fail": 2, "fail_to_pass": 1, "pass": 1, "pass_unchanged": 0,
                                       "pass_unchanged_but_backups": 1, "setup_mismatch": 1,
                                       "expects_no_fix": 1, "errors": 0}
    assert got["ssg"]["total"] == {"fail": 3, "fail_to_pass": 3, "pass": 1, "pass_unchanged": 0,
                                   "pass_unchanged_but_backups": 0, "setup_mismatch": 0,
                                   "expects_no_fix": 1, "errors": 1}
    assert got["product"]["accounts"]["fail"] == 1 and got["product"]["permissions"]["fail_to_pass"] == 1
    assert got["ssg"]["sshd"]["errors"] == 1


def test_differences_lists_only_scenarios_counted_on_both_sides():
    assert S.differences(RECORDS) == [{
        "rule": "accounts_tmout", "scenario": "w.fail.sh", "kind": "fail", "passed": "ssg",
        "product": "side_effect_rolled_back", "ssg": 0, "product_final": "fail", "ssg_final": "pass",
        "changed": {"product": [], "ssg": []}}]
    strict = [_rec("r", "c.pass.sh", "pass", "product", "pass", host_unchanged=False, changed=["~/etc/passwd-"]),
              _rec("r", "c.pass.sh", "pass", "ssg", "pass", host_unchanged=True, changed=[])]
    assert [(d["passed"], d["changed"]) for d in S.differences(strict)] == [
        ("ssg", {"product": ["~/etc/passwd-"], "ssg": []})]


def test_table_rows_and_total():
    lines = S.table(S.summarize(RECORDS)).splitlines()
    assert lines[0].startswith("| family | product fail->pass |")
    rows = {line.split(" | ")[0][2:]: line for line in lines[2:]}
    assert list(rows) == ["accounts", "sshd", "sysctl", "permissions", "total"]
    assert rows["total"] == "| total | 1/2 | 0/1 (1) | 1 | 3/3 | 0/1 (0) | 0 | 1 | 1 |"
    assert rows["sysctl"] == "| sysctl | 0/0 | 0/0 (0) | 0 | 0/0 | 0/0 (0) | 0 | 0 | 1 |"


def test_assign_spreads_scenarios_over_hosts_and_pairs():
    scs = [{"rule": "r%d" % i} for i in range(5)]
    plain = S.assign(scs, ["lab5", "lab6"], compare=False)
    assert [(h, [s["rule"] for s, _r in jobs]) for h, jobs in plain] == [
        ("lab5", ["r0", "r2", "r4"]), ("lab6", ["r1", "r3"])]
    paired = S.assign(scs, ["lab5", "lab6", "lab7", "lab8"], compare=True)
    assert [(h, [(s["rule"], r) for s, r in jobs]) for h, jobs in paired] == [
        ("lab5", [("r0", "product"), ("r2", "product"), ("r4", "product")]),
        ("lab6", [("r0", "ssg"), ("r2", "ssg"), ("r4", "ssg")]),
        ("lab7", [("r1", "product"), ("r3", "product")]),
        ("lab8", [("r1", "ssg"), ("r3", "ssg")])]
    with pytest.raises(ValueError):
        S.assign(scs, ["lab5", "lab6", "lab7"], compare=True)


def test_error_text_names_lost_lab_access():
    lost = S.error_text(RuntimeError("lab5: 'sudo oscap ...' exited 255: scapforge@10.87.5.2: Permission denied "
                                     "(publickey,password)."))
    assert lost.startswith("lab_access_lost: RuntimeError: lab5: ")
    assert S.error_text(ValueError("x")) == "ValueError: x"
