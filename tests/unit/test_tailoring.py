"""Tailoring files for the real Debian 12 datastream: the document's shape and the exact
selection it produces (checked with the catalog's XCCDF selection logic; the integration
test test_tailoring_oscap.py runs the same kind of file through oscap 1.3.7 on a lab host)."""

import os
from pathlib import Path

import pytest
from lxml import etree

from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import (
    XCCDF12_NS,
    Catalog,
    CatalogError,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.tailoring import build_tailoring

X = "{%s}" % XCCDF12_NS
RULE = "xccdf_org.ssgproject.content_rule_"
VALUE = "xccdf_org.ssgproject.content_value_"
GROUP = "xccdf_org.ssgproject.content_group_"
HIGH = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"


def debian12_datastream():
    home = Path(os.environ.get("SCAPFORGE_LAB_HOME", "/var/lib/scapforge-lab"))
    for path in (os.environ.get("SCAPFORGE_DATASTREAM"), home / "content" / "ssg-debian12-ds.xml",
                 home / "content/x/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"):
        if path and Path(path).is_file():
            return Path(path)
    pytest.fail("ssg-debian12-ds.xml not found (set SCAPFORGE_DATASTREAM or run `make lab`)")


@pytest.fixture(scope="module")
def cat():
    return Catalog.from_path(debian12_datastream())


def _profile(xml):
    root = etree.fromstring(xml)
    assert root.tag == X + "Tailoring"
    profiles = root.findall(X + "Profile")
    assert len(profiles) == 1
    return root, profiles[0]


def _selection_after(cat, base_id, profile_elem):
    """The rules selected by a tailored profile, per XCCDF (base selections, then ours)."""
    selections = dict(cat.profile(base_id).selections)
    for sel in profile_elem.findall(X + "select"):
        selections[sel.get("idref")] = sel.get("selected") == "true"
    return set(cat.effective_selection(selections))


def test_select_rules_outside_profile(cat):
    xml, pid = build_tailoring(cat, "anssi_bp28_high",
                               select=["sshd_set_idle_timeout", "sudo_remove_nopasswd"],
                               unselect=["accounts_umask_etc_login_defs"])
    assert pid == HIGH + "_scapforge"
    assert xml.startswith(b"<?xml version='1.0' encoding='UTF-8'?>")
    root, prof = _profile(xml)
    assert [c.tag for c in root] == [X + "status", X + "version", X + "Profile"]
    assert prof.get("id") == pid and prof.get("extends") == HIGH
    selects = [(s.get("idref"), s.get("selected")) for s in prof.findall(X + "select")]
    # sshd_set_idle_timeout <requires> sshd_set_keepalive: selected with it (decision 6)
    assert selects == [(RULE + "sshd_set_idle_timeout", "true"), (RULE + "sudo_remove_nopasswd", "true"),
                       (RULE + "sshd_set_keepalive", "true"),
                       (RULE + "accounts_umask_etc_login_defs", "false")]
    base = set(cat.profile(HIGH).selected_rules)
    after = _selection_after(cat, HIGH, prof)
    assert after - base == {RULE + "sshd_set_idle_timeout", RULE + "sudo_remove_nopasswd",
                            RULE + "sshd_set_keepalive"}
    assert base - after == {RULE + "accounts_umask_etc_login_defs"}
    assert len(after) == 391 + 3 - 1


def test_without_requires(cat):
    xml, _tailored_id = build_tailoring(cat, HIGH, select=[RULE + "sshd_set_idle_timeout"], include_requires=False)
    _root, prof = _profile(xml)
    assert [s.get("idref") for s in prof.findall(X + "select")] == [RULE + "sshd_set_idle_timeout"]


def test_rule_inside_a_group_the_profile_deselects(cat):
    # anssi_bp28_high deselects the group account_expiration; one of its rules is wanted
    base = cat.profile(HIGH)
    assert base.selections[GROUP + "account_expiration"] is False
    inside = cat.rules_under(GROUP + "account_expiration")
    assert RULE + "account_unique_name" in inside
    xml, _tailored_id = build_tailoring(cat, HIGH, select=["account_unique_name"])
    _root, prof = _profile(xml)
    selects = {s.get("idref"): s.get("selected") for s in prof.findall(X + "select")}
    assert selects[RULE + "account_unique_name"] == "true"
    assert selects[GROUP + "account_expiration"] == "true"
    after = _selection_after(cat, HIGH, prof)
    # exactly one rule more: re-selecting the group brings nothing else in
    assert after - set(base.selected_rules) == {RULE + "account_unique_name"}
    assert set(base.selected_rules) <= after


def test_values_refine_and_set(cat):
    xml, _tailored_id = build_tailoring(cat, "anssi_bp28_high",
                                        values={"var_accounts_user_umask": "027", VALUE + "var_sudo_umask": "0066"})
    _root, prof = _profile(xml)
    refine = [(e.get("idref"), e.get("selector")) for e in prof.findall(X + "refine-value")]
    assert refine == [(VALUE + "var_accounts_user_umask", "027")]
    setv = [(e.get("idref"), e.text) for e in prof.findall(X + "set-value")]
    assert setv == [(VALUE + "var_sudo_umask", "0066")]  # not a selector: a literal
    assert prof.findall(X + "select") == []


def test_errors(cat):
    with pytest.raises(CatalogError, match="'nope' is not in"):
        build_tailoring(cat, "nope")
    with pytest.raises(CatalogError, match="sshd_nope"):
        build_tailoring(cat, HIGH, select=["sshd_nope"])
    with pytest.raises(CatalogError, match="both selected and unselected"):
        build_tailoring(cat, HIGH, select=["sshd_set_keepalive"], unselect=["sshd_set_keepalive"])
    with pytest.raises(CatalogError, match="var_nope"):
        build_tailoring(cat, HIGH, values={"var_nope": "1"})
    with pytest.raises(CatalogError, match="xccdf_<ns>_profile_<name>"):
        build_tailoring(cat, HIGH, profile_id="my profile")
