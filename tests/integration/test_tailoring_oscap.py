"""A generated tailoring file, run for real: oscap 1.3.7 on a lab host evaluates rules the
profile does not select (decision 5), leaves out the one unselected, and uses the values
the tailoring sets."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from lxml import etree

from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import XCCDF12_NS, Catalog
from ansible_collections.scapforge.remediation.plugins.plugin_utils.tailoring import build_tailoring

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "lab"))

from scapforge_lab import DATASTREAM_PATH, DATASTREAM_SHA256  # noqa: E402

X = "{%s}" % XCCDF12_NS
RULE = "xccdf_org.ssgproject.content_rule_"
VALUE = "xccdf_org.ssgproject.content_value_"
HIGH = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"


def _ssh(host, command, data=None, timeout=300):
    proc = subprocess.run(host.ssh_argv(command), input=data, capture_output=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout, proc.stderr.decode(errors="replace")


@pytest.fixture(scope="module")
def catalog(lab_host):
    """The catalog of the datastream the lab host has (fetched from it, checked by sha256)."""
    rc, data, err = _ssh(lab_host, "cat %s" % shlex.quote(DATASTREAM_PATH))
    assert rc == 0, err
    cat = Catalog.from_bytes(data, source="%s:%s" % (lab_host.name, DATASTREAM_PATH))
    assert cat.sha256 == DATASTREAM_SHA256
    return cat


def test_tailoring_selects_rules_outside_profile(lab_host, catalog):
    base = catalog.profile(HIGH)
    outside = [RULE + "sudo_remove_nopasswd", RULE + "sshd_set_idle_timeout"]
    assert not set(outside) & set(base.selected_rules)
    xml, pid = build_tailoring(catalog, HIGH, select=outside,
                               unselect=["accounts_umask_etc_login_defs"],
                               values={"var_accounts_user_umask": "027", "var_sudo_umask": "0066"})
    expected = (set(base.selected_rules) | set(outside) | {RULE + "sshd_set_keepalive"}) \
        - {RULE + "accounts_umask_etc_login_defs"}

    rc, out, err = _ssh(lab_host, "umask 077; d=$(mktemp -d /tmp/scapforge-tailor.XXXXXX) && cat > $d/t.xml && echo $d",
                        data=xml)
    assert rc == 0, err
    workdir = out.decode().strip()
    try:
        command = "sudo -n oscap xccdf eval --tailoring-file {d}/t.xml --profile {p} --results {d}/r.xml {ds}".format(
            d=workdir, p=shlex.quote(pid), ds=shlex.quote(DATASTREAM_PATH))
        rc, out, err = _ssh(lab_host, command)
        assert rc in (0, 2), "oscap exited %d: %s" % (rc, err[-2000:])  # 2: some rule failed
        rc, results, err = _ssh(lab_host, "sudo -n cat %s/r.xml" % workdir)
        assert rc == 0, err
    finally:
        _ssh(lab_host, "sudo -n rm -rf --one-file-system %s" % shlex.quote(workdir))

    test_result = etree.fromstring(results, etree.XMLParser(huge_tree=True)).find(".//" + X + "TestResult")
    assert test_result.find(X + "profile").get("idref") == pid
    outcome = {rr.get("idref"): rr.findtext(X + "result") for rr in test_result.iter(X + "rule-result")}
    evaluated = {rid for rid, res in outcome.items() if res != "notselected"}
    assert evaluated == expected
    # the lab user has passwordless sudo, so this one must fail; the sshd one gets a real
    # result (the stock sshd_config fails it, another test may have fixed it)
    assert outcome[RULE + "sudo_remove_nopasswd"] == "fail"
    assert outcome[RULE + "sshd_set_idle_timeout"] in ("pass", "fail")
    assert outcome[RULE + "accounts_umask_etc_login_defs"] == "notselected"
    set_values = {e.get("idref"): e.text for e in test_result.findall(X + "set-value")}
    assert set_values[VALUE + "var_accounts_user_umask"] == "027"  # refine-value selector
    assert set_values[VALUE + "var_sudo_umask"] == "0066"  # set-value literal
    print("\ntailored scan on %s: %d rules evaluated, results %s" % (
        lab_host.name, len(evaluated),
        {r: sum(1 for v in outcome.values() if v == r) for r in sorted(set(outcome.values()))}))
