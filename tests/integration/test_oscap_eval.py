"""scapforge.remediation.oscap_eval for real: run by Ansible over SSH against a lab host
(Debian 12, oscap 1.3.7, SSG 0.1.76), plus one case in a plain chroot of the lab root.

Covers the `evaluation` cases of cases.yml: rule-with-requires, service-rules-in-chroot,
results-dir-missing, scanner-crash; and unknown profile / rule, missing or invalid
datastream, timeout, tailoring_content, check mode, kept results/ARF files.
Timings of a whole-profile scan and of a 3-rule batch are printed (run with -s to see).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from lxml import etree

from ansible_collections.scapforge.remediation.plugins.module_utils.oscap_results import result_class

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
PROFILE = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
R = "xccdf_org.ssgproject.content_rule_"
XCCDF = "http://checklists.nist.gov/xccdf/1.2"
#: Rules in ssg-debian12-ds.xml of SSG 0.1.76 (every one gets a rule-result).
RULES_IN_BENCHMARK = 591


def ansible_module(host, inventory, args, check=False, connection=None, timeout=600):
    """Run oscap_eval with the `ansible` CLI and return the host's result dict (json callback)."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        PATH="%s:%s" % (BIN, os.environ.get("PATH", "")),
    )
    argv = [str(BIN / "ansible"), host, "-i", str(inventory), "-m", "scapforge.remediation.oscap_eval",
            "-a", json.dumps(args)]
    if connection:
        argv += ["-c", connection]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, cwd=str(REPO_ROOT), env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        pytest.fail("ansible printed no JSON (exit %d): %s %s" % (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:]))
    hosts = data["plays"][0]["tasks"][0]["hosts"]
    assert len(hosts) == 1, hosts.keys()
    return list(hosts.values())[0]


@pytest.fixture(scope="module")
def run(lab_host, lab_inventory):
    """run(args, check=False) -> result of oscap_eval on the lab host, over SSH with become."""

    def _run(args, check=False):
        full = dict(datastream=DS, profile="anssi_bp28_high")
        full.update(args)
        return ansible_module(lab_host.name, lab_inventory, full, check=check)

    return _run


@pytest.fixture()
def scratch(lab_host):
    """A fresh directory on the lab host (owned by the SSH user), removed afterwards."""
    path = "/tmp/scapforge-oscap-test-%s" % uuid.uuid4().hex[:8]
    lab_host.ssh("mkdir -m 0755 %s" % path)
    yield path
    lab_host.ssh("sudo -n rm -rf --one-file-system %s" % path, check=False)


def assert_failed_cleanly(res, kind, *in_msg):
    assert res.get("failed") is True, res
    assert res["error_kind"] == kind, res
    for text in in_msg:
        assert text in res["msg"], res["msg"]
    assert "Traceback" not in json.dumps(res)
    assert "rules" not in res and "counts" not in res  # no partial result passed off as data


def workdir_of(res):
    results = res["cmd"][res["cmd"].index("--results") + 1]
    return os.path.dirname(results)


# ---------------------------------------------------------------- results


def test_three_rule_batch_with_the_required_rule(run, lab_host, scratch):
    """Case rule-with-requires: the batch names the required rule; results read back
    independently (lxml on the controller) from the kept results file agree."""
    rules = ["sshd_set_idle_timeout", "sshd_set_keepalive", "accounts_umask_etc_login_defs"]
    results_path = scratch + "/batch.xml"
    start = time.time()
    res = run({"rules": rules, "results_path": results_path})
    wall = time.time() - start
    assert not res.get("failed"), res
    full = [R + r for r in rules]
    assert res["requested_rules"] == full
    assert set(full) <= set(res["rules"])
    assert res["missing"] == []
    assert res["unmet_requires"] == []
    assert not any("hasn't been specified" in w for w in res["scanner_warnings"])
    assert res["counts"]["notselected"] == RULES_IN_BENCHMARK - 3
    assert sum(res["counts"].values()) == RULES_IN_BENCHMARK
    assert res["oscap_rc"] in (0, 2)
    assert res["oscap_rc"] == (0 if all(v == "pass" for v in res["rules"].values()) else 2)
    assert res["oscap_version"] == "1.3.7"
    assert res["content_version"] == "0.1.76"
    assert res["benchmark_id"] == "xccdf_org.ssgproject.content_benchmark_DEBIAN-12"
    assert res["profile"] == PROFILE
    assert res["start_time"].startswith("20") and res["end_time"] >= res["start_time"]
    assert res["changed"] is False
    assert res["results_path"] == results_path
    # Independent read of the same file with lxml.
    xml = lab_host.ssh("cat %s" % results_path, timeout=60).stdout.encode()
    root = etree.fromstring(xml, parser=etree.XMLParser(huge_tree=True))
    ns = {"x": XCCDF}
    for rule in full:
        values = root.xpath("//x:TestResult/x:rule-result[@idref=$r]/x:result/text()", namespaces=ns, r=rule)
        assert values == [res["rules"][rule]]
    # The private directory is gone.
    assert lab_host.ssh("test -e %s" % workdir_of(res), check=False).returncode == 1
    print("\n[timing] 3-rule batch: oscap %.2f s, ansible round trip %.2f s" % (res["elapsed"], wall), file=sys.stderr)


def test_skip_validation_gives_the_same_results_without_schema_checks(run):
    rules = ["accounts_umask_etc_login_defs", "file_permissions_etc_passwd"]
    checked, skipped = run({"rules": rules}), run({"rules": rules, "skip_validation": True})
    assert not checked.get("failed") and not skipped.get("failed"), (checked, skipped)
    assert "--skip-validation" in skipped["cmd"] and "--skip-validation" not in checked["cmd"]
    assert skipped["rules"] == checked["rules"] and skipped["counts"] == checked["counts"]


def test_progress_lines_give_the_same_results_without_a_results_document(run, lab_host):
    """results_source=progress (the loop's re-checks): oscap prints `rule:result` lines and
    writes no results document; the same rules get the same results as from the document."""
    rules = ["sshd_set_idle_timeout", "sshd_set_keepalive", "accounts_umask_etc_login_defs",
             "package_aide_installed", "file_permissions_etc_passwd"]
    lab_host.ssh("sudo sed -i 's/^UMASK.*/UMASK\t\t022/' /etc/login.defs")
    document = run({"rules": rules, "skip_validation": True})
    printed = run({"rules": rules, "skip_validation": True, "results_source": "progress"})
    assert not document.get("failed") and not printed.get("failed"), (document, printed)
    assert "--progress" in printed["cmd"] and "--results" not in printed["cmd"]
    assert printed["rules"] == document["rules"]
    assert printed["rules"][R + "accounts_umask_etc_login_defs"] == "fail"
    assert printed["rules"][R + "file_permissions_etc_passwd"] == "pass"
    assert printed["missing"] == [] and printed["oscap_rc"] == 2
    assert {k: v for k, v in printed["counts"].items() if k != "notselected"} == \
        {k: v for k, v in document["counts"].items() if k != "notselected"}
    assert "content_version" not in printed and document["content_version"] == "0.1.76"
    unknown = run({"rules": ["no_such_rule_xyz"], "results_source": "progress"})
    assert_failed_cleanly(unknown, "unknown_rule", R + "no_such_rule_xyz")
    both = run({"rules": rules, "results_source": "progress", "evidence": True, "arf_path": "/tmp/x.xml"})
    assert both.get("failed") and both["error_kind"] == "oscap_error" and "cmd" not in both, both
    assert "arf_path, evidence need one" in both["msg"], both["msg"]


def test_rule_without_its_required_rule_warns(run):
    """oscap 1.3.7 warns "requires rule ... hasn't been specified"; it comes back as data."""
    res = run({"rules": [R + "sshd_set_idle_timeout"]})
    assert not res.get("failed"), res
    assert res["unmet_requires"] == [{"rule": R + "sshd_set_idle_timeout", "requires": R + "sshd_set_keepalive"}]
    assert any("requires rule '%ssshd_set_keepalive', but it hasn't been specified" % R in w
               for w in res["scanner_warnings"])
    assert any("hasn't been specified" in str(w) for w in res.get("warnings", []))
    assert R + "sshd_set_keepalive" not in res["rules"]  # not evaluated: not a pass
    assert res["missing"] == []


def test_whole_profile_scan_with_arf_in_check_mode(run, lab_host, scratch):
    arf = scratch + "/arf.xml"
    start = time.time()
    res = run({"arf_path": arf, "results_path": scratch + "/all.xml"}, check=True)
    wall = time.time() - start
    assert not res.get("failed"), (res.get("error_kind"), res.get("msg"), res.get("oscap_rc"), res.get("stderr_tail"))
    counts = res["counts"]
    assert sum(counts.values()) == RULES_IN_BENCHMARK
    assert counts["notselected"] == 200  # the profile selects 391 of 591 rules
    assert len(res["rules"]) == RULES_IN_BENCHMARK - 200
    assert counts["pass"] > 50 and counts["fail"] > 50 and counts["notapplicable"] > 50
    assert res["rules"][R + "security_patches_up_to_date"] == "notchecked"
    assert res["missing"] == [] and res["requested_rules"] == []
    assert res["oscap_rc"] == 2
    head = lab_host.ssh("head -c 400 %s" % arf).stdout
    assert "asset-report-collection" in head
    print("\n[timing] whole profile anssi_bp28_high: oscap %.2f s, ansible round trip %.2f s, counts %s"
          % (res["elapsed"], wall, {k: v for k, v in counts.items() if v}), file=sys.stderr)


TAILORING = """<?xml version="1.0" encoding="UTF-8"?>
<xccdf:Tailoring xmlns:xccdf="http://checklists.nist.gov/xccdf/1.2" id="xccdf_scapforge_tailoring_test">
  <xccdf:benchmark href="%s"/>
  <xccdf:version time="2026-11-30T00:00:00">1</xccdf:version>
  <xccdf:Profile id="xccdf_scapforge_profile_extra" extends="%s">
    <xccdf:title>anssi_bp28_high and two more rules</xccdf:title>
    <xccdf:select idref="%spackage_telnetd_removed" selected="true"/>
    <xccdf:select idref="%ssudo_remove_nopasswd" selected="true"/>
  </xccdf:Profile>
</xccdf:Tailoring>
""" % (DS, PROFILE, R, R)


def test_rule_outside_the_profile_is_evaluated_and_unknown_rule_fails(run):
    """oscap 1.3.7 evaluates a benchmark rule the profile does not select (package_telnetd_removed
    and sudo_remove_nopasswd are notselected in a whole anssi_bp28_high scan); a rule id the
    benchmark lacks fails the whole scan."""
    rules = ["package_telnetd_removed", "sudo_remove_nopasswd"]
    res = run({"rules": rules})
    assert not res.get("failed"), res
    assert res["rules"][R + "package_telnetd_removed"] == "pass"  # telnetd is not installed
    assert res["rules"][R + "sudo_remove_nopasswd"] in ("pass", "fail")
    assert res["missing"] == []
    res = run({"rules": rules + ["no_such_rule_xyz"]})
    assert_failed_cleanly(res, "unknown_rule", R + "no_such_rule_xyz")
    assert res["oscap_rc"] == 1


def test_tailoring_content_profile(run):
    rules = ["package_telnetd_removed", "sudo_remove_nopasswd"]
    res = run({"rules": rules, "profile": "xccdf_scapforge_profile_extra", "tailoring_content": TAILORING})
    assert not res.get("failed"), res
    assert res["profile"] == "xccdf_scapforge_profile_extra"
    assert res["rules"][R + "package_telnetd_removed"] == "pass"
    assert res["rules"][R + "sudo_remove_nopasswd"] in ("pass", "fail")
    assert res["missing"] == []
    # the tailoring's profile exists only with the tailoring
    res = run({"rules": rules, "profile": "xccdf_scapforge_profile_extra"})
    assert_failed_cleanly(res, "unknown_profile", "xccdf_scapforge_profile_extra")


def test_tailoring_file_missing(run):
    res = run({"profile": "xccdf_scapforge_profile_extra", "tailoring_file": "/nonexistent/tailoring.xml"})
    assert_failed_cleanly(res, "oscap_error", "/nonexistent/tailoring.xml")


def test_invalid_tailoring_content(run):
    res = run({"profile": "xccdf_scapforge_profile_extra", "tailoring_content": "not xml"})
    assert_failed_cleanly(res, "oscap_error", "tailoring_content")


# ---------------------------------------------------------------- failures


def test_results_dir_missing(run):
    """Case results-dir-missing: clear error naming the path, no traceback, no data."""
    path = "/nonexistent-scapforge-%s/results.xml" % uuid.uuid4().hex[:6]
    res = run({"rules": ["sshd_set_keepalive", "sshd_set_idle_timeout"], "results_path": path})
    assert_failed_cleanly(res, "results_unwritable", path, "does not exist")


def test_arf_dir_missing(run):
    path = "/nonexistent-scapforge/arf.xml"
    res = run({"rules": ["sshd_set_keepalive"], "arf_path": path})
    assert_failed_cleanly(res, "results_unwritable", path)


def test_unknown_profile(run):
    res = run({"profile": "no_such_profile"})
    assert_failed_cleanly(res, "unknown_profile", "xccdf_org.ssgproject.content_profile_no_such_profile", DS)
    assert res["oscap_rc"] == 1


def test_missing_datastream(run):
    res = run({"datastream": "/usr/share/xml/scap/ssg/content/no-such-ds.xml"})
    assert_failed_cleanly(res, "datastream_missing", "/usr/share/xml/scap/ssg/content/no-such-ds.xml")


def test_invalid_datastream(run):
    """A file that is not XML: oscap's own "Unable to parse XML" message, classified."""
    res = run({"datastream": "/etc/hostname"})
    assert_failed_cleanly(res, "datastream_invalid", "/etc/hostname")
    assert res["oscap_rc"] == 1


def test_oscap_missing(run):
    res = run({"oscap_path": "/usr/local/bin/no-oscap-here"})
    assert_failed_cleanly(res, "oscap_missing", "/usr/local/bin/no-oscap-here")


def test_timeout_kills_the_scan(run, lab_host):
    res = run({"timeout": 1})
    assert_failed_cleanly(res, "timeout", "1 seconds")
    assert res["elapsed"] < 10
    assert lab_host.ssh("test -e %s" % workdir_of(res), check=False).returncode == 1


@pytest.mark.parametrize(
    "sig, kind, rc, words",
    [("SEGV", "scanner_crashed", -11, "scanner crashed"),
     ("ABRT", "scanner_crashed", -6, "scanner crashed"),
     ("KILL", "oom_killed", -9, "out of memory")],
)
def test_scanner_killed_by_a_signal(run, lab_host, scratch, sig, kind, rc, words):
    """Case scanner-crash: the real oscap, killed by a real signal mid-scan."""
    wrapper = scratch + "/oscap-" + sig
    lab_host.ssh("printf '#!/bin/sh\\n( sleep 1; kill -%s $$ ) &\\nexec /usr/bin/oscap \"$@\"\\n' > %s && chmod 0755 %s"
                 % (sig, wrapper, wrapper))
    res = run({"oscap_path": wrapper})  # the whole profile: runs long enough to be killed
    assert_failed_cleanly(res, kind, words)
    assert res["oscap_rc"] == rc
    assert "stderr" in res["msg"]


def test_scanner_crash_through_a_shell_reports_139(run, lab_host, scratch):
    """A shell between the module and oscap reports 128 + signal (139 for SIGSEGV)."""
    wrapper = scratch + "/oscap-shell"
    lab_host.ssh("printf '#!/bin/sh\\n/usr/bin/oscap \"$@\" &\\np=$!\\nsleep 1\\nkill -SEGV $p\\nwait $p\\n' > %s"
                 " && chmod 0755 %s" % (wrapper, wrapper))
    res = run({"oscap_path": wrapper})
    assert_failed_cleanly(res, "scanner_crashed", "SIGSEGV", "exit 139")
    assert res["oscap_rc"] == 139


# ---------------------------------------------------------------- chroot


CHROOT_DEBS = ("cron", "cron-daemon-common", "rsyslog", "libestr0", "libfastjson4", "liblognorm5")


@pytest.fixture(scope="module")
def service_chroot(lab):
    """A plain chroot (no systemd running) of the lab's base root, with cron and rsyslog
    installed, on a private copy-on-write overlay. Nothing of the controller is mounted
    into it except a fresh proc; everything is unmounted and removed afterwards."""
    if not lab.rootfs.is_dir():
        pytest.fail("the lab base root %s is missing (run `make lab`)" % lab.rootfs)
    top = Path(tempfile.mkdtemp(prefix="oscap-dev-"))
    debs = top / "debs"
    debs.mkdir()
    dl = subprocess.run(["apt-get", "download", *CHROOT_DEBS], cwd=str(debs), capture_output=True, text=True, timeout=300,
                        check=False)
    if dl.returncode != 0:
        subprocess.run(["rm", "-rf", "--one-file-system", str(top)], check=False)
        pytest.fail("apt-get download %s failed: %s" % (" ".join(CHROOT_DEBS), dl.stderr[-1000:]))
    for name in ("upper", "work", "merged"):
        (top / name).mkdir()
    merged = top / "merged"
    mounted = []
    try:
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        "lowerdir=%s,upperdir=%s,workdir=%s" % (lab.rootfs, top / "upper", top / "work"),
                        str(merged)], check=True)
        mounted.append(merged)
        subprocess.run(["mount", "-t", "proc", "proc", str(merged / "proc")], check=True)
        mounted.append(merged / "proc")
        (merged / "tmp" / "debs").mkdir()
        for deb in debs.iterdir():
            (merged / "tmp" / "debs" / deb.name).write_bytes(deb.read_bytes())
        policy = merged / "usr" / "sbin" / "policy-rc.d"  # never start services in the chroot
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        inst = subprocess.run(["chroot", str(merged), "sh", "-c",
                               "dpkg -i /tmp/debs/*.deb >/dev/null 2>&1; dpkg -i /tmp/debs/*.deb"],
                              capture_output=True, text=True, timeout=300,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"},
                              check=False)
        assert inst.returncode == 0, inst.stdout[-2000:] + inst.stderr[-2000:]
        yield merged
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", str(path)], check=False)
        still = [line for line in Path("/proc/mounts").read_text().splitlines() if str(top) in line]
        if not still:
            subprocess.run(["rm", "-rf", "--one-file-system", str(top)], check=False)
        else:
            print("NOT removing %s: still mounted: %s" % (top, still), file=sys.stderr)


def test_service_rules_in_chroot_are_error_not_fail(service_chroot):
    """Case service-rules-in-chroot: without a running systemd the service checks return
    error; error stays apart from fail and is classified environmental."""
    args = dict(datastream=DS, profile="anssi_bp28_high",
                rules=["service_rsyslog_enabled", "service_cron_enabled",
                       "service_auditd_enabled", "package_audit_installed"])
    res = ansible_module("%s," % service_chroot, "%s," % service_chroot, args,
                         connection="community.general.chroot")
    assert not res.get("failed"), res
    rules = res["rules"]
    assert rules[R + "service_rsyslog_enabled"] == "error"
    assert rules[R + "service_cron_enabled"] == "error"
    assert rules[R + "package_audit_installed"] == "fail"  # auditd is not installed: a real finding
    assert rules[R + "service_auditd_enabled"] == "notapplicable"
    assert res["counts"]["error"] == 2 and res["counts"]["fail"] == 1
    assert result_class(rules[R + "service_cron_enabled"]) == "environment"
    assert result_class(rules[R + "package_audit_installed"]) == "finding"
    assert res["oscap_rc"] == 2  # error results do not make oscap exit 1
    assert res["missing"] == []


# ---------------------------------------------------------------- OVAL evidence (seed 004)


@pytest.fixture()
def umask_022(lab_host):
    """/etc/login.defs on the lab host with the line ``UMASK<tab><tab>022`` (Debian's own
    value; anssi_bp28_high wants 077). The original file is put back afterwards, and the
    test checks that it was."""
    backup = "/var/tmp/scapforge-login.defs.%s" % uuid.uuid4().hex[:8]
    before = lab_host.ssh("sudo -n md5sum /etc/login.defs").stdout.split()[0]
    lab_host.ssh("sudo -n cp -a /etc/login.defs %s" % backup)
    try:
        lab_host.ssh("sudo -n sed -i -E 's/^UMASK[[:space:]].*/UMASK\\t\\t022/' /etc/login.defs")
        assert lab_host.ssh("grep -cP '^UMASK\\t\\t022$' /etc/login.defs").stdout.strip() == "1"
        yield
    finally:
        lab_host.ssh("sudo -n cp -a %s /etc/login.defs && sudo -n rm -f %s" % (backup, backup))
    assert lab_host.ssh("sudo -n md5sum /etc/login.defs").stdout.split()[0] == before


def test_evidence_of_a_failing_rule_shows_what_oval_looked_for_and_found(run, lab_host, umask_022):
    rules = ["accounts_umask_etc_login_defs", "no_direct_root_logins", "package_telnetd_removed"]
    res = run({"rules": rules, "evidence": True})
    assert not res.get("failed"), res
    assert "--oval-results" in res["cmd"]
    assert res["rules"] == {R + "accounts_umask_etc_login_defs": "fail", R + "no_direct_root_logins": "fail",
                            R + "package_telnetd_removed": "pass"}
    evidence = res["evidence"]
    assert set(evidence) == {R + "accounts_umask_etc_login_defs", R + "no_direct_root_logins"}  # no entry for the pass
    assert res["evidence_truncated"] is False
    assert "evidence_error" not in res and "evidence_omitted" not in res
    print("\n[evidence] accounts_umask_etc_login_defs on %s:\n%s"
          % (lab_host.name, json.dumps(evidence[R + "accounts_umask_etc_login_defs"], indent=1)), file=sys.stderr)

    umask = evidence[R + "accounts_umask_etc_login_defs"]
    assert umask["definition"] == "oval:ssg-accounts_umask_etc_login_defs:def:1"
    assert umask["result"] == "false" and "error" not in umask
    [test] = umask["tests"]
    assert (test["type"], test["result"]) == ("variable_test", "false")
    found = test["object"]["fields"]["var_ref"]
    assert found["values"] == ["18"]  # 022 read as an octal number
    [source] = found["from"]
    assert source["object"]["fields"]["filepath"] == "/etc/login.defs"
    [line] = source["items"]
    assert line["fields"]["text"] == "UMASK\t\t022"
    assert line["fields"]["subexpression"] == "022"
    [wanted] = test["state"]["fields"]["value"]["from_variables"]
    assert wanted["values"] == ["077"]
    assert wanted["xccdf_value"] == "xccdf_org.ssgproject.content_value_var_accounts_user_umask"

    securetty = evidence[R + "no_direct_root_logins"]
    assert {t["object"]["fields"]["filepath"] for t in securetty["tests"]} == {"/etc/securetty"}
    assert {t["object"]["flag"] for t in securetty["tests"]} == {"does not exist"}
    assert lab_host.ssh("test -e /etc/securetty", check=False).returncode == 1

    # the private directory, OVAL results files included, is gone
    assert lab_host.ssh("test -e %s" % workdir_of(res), check=False).returncode == 1
    # without the option: no --oval-results, no evidence keys
    res = run({"rules": rules})
    assert not res.get("failed"), res
    assert "--oval-results" not in res["cmd"]
    assert not any(key.startswith("evidence") for key in res)


def test_whole_profile_evidence_is_capped(run):
    res = run({"evidence": True})
    assert not res.get("failed"), res
    failing = sorted(r for r, v in res["rules"].items() if v == "fail")
    evidence = res["evidence"]
    assert len(failing) > 100
    assert set(evidence) <= set(failing)
    assert sorted(set(evidence) | set(res["evidence_omitted"])) == failing
    assert res["evidence_truncated"] is True
    assert len(json.dumps(evidence, sort_keys=True)) <= 100000
    assert not any("error" in e for e in evidence.values())
    assert all(1 <= len(e["tests"]) <= 8 for e in evidence.values() if not e["truncated"])
    print("\n[evidence] whole anssi_bp28_high: %d failing rules, %d with evidence, %d bytes, oscap %.1f s"
          % (len(failing), len(evidence), len(json.dumps(evidence)), res["elapsed"]), file=sys.stderr)


@pytest.mark.parametrize(
    "how, script, error",
    [("missing", 'for a; do shift; [ "$a" = --oval-results ] || set -- "$@" "$a"; done\\n'
                 'exec /usr/bin/oscap "$@"\\n',
      "oscap wrote no OVAL results file ssg-debian12-oval.xml.result.xml"),
     ("truncated", '/usr/bin/oscap "$@"; rc=$?\\n'
                   'for f in *.result.xml; do [ -f "$f" ] && head -c 2000 "$f" > "$f.t" && mv "$f.t" "$f"; done\\n'
                   'exit $rc\\n',
      "OVAL results file ssg-debian12-oval.xml.result.xml cannot be read: OVAL results are not well-formed XML")],
)
def test_bad_oval_results_do_not_fail_the_scan(run, lab_host, scratch, how, script, error):
    """A wrapper around the real oscap drops --oval-results, or cuts the OVAL results file
    it wrote: the scan still succeeds, each failing rule's evidence says why it is empty."""
    wrapper = "%s/oscap-%s" % (scratch, how)
    lab_host.ssh("printf '#!/bin/sh\\n%s' > %s && chmod 0755 %s" % (script.replace("'", "'\\''"), wrapper, wrapper))
    res = run({"rules": ["no_direct_root_logins", "package_telnetd_removed"], "evidence": True, "oscap_path": wrapper})
    assert not res.get("failed"), res
    assert res["rules"] == {R + "no_direct_root_logins": "fail", R + "package_telnetd_removed": "pass"}
    assert res["oscap_rc"] == 2
    assert list(res["evidence"]) == [R + "no_direct_root_logins"]
    entry = res["evidence"][R + "no_direct_root_logins"]
    assert entry["error"].startswith(error), entry
    assert entry["tests"] == [] and entry["definition"] == "oval:ssg-no_direct_root_logins:def:1"
