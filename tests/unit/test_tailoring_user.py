"""A user's own XCCDF 1.2 tailoring file (issue 8 item 5) on the real Debian 12 datastream:
the catalog view resolves its profiles like the benchmark's (selection, Values for
render_fix), refuses a bad file naming it and the id at fault, leaves the shared cached
catalog alone, and the loop's helpers pick the profile and the scan's tailoring from it."""

import ast
import dataclasses
import json
import os

import pytest
import yaml
from lxml import etree

from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import XCCDF12_NS, Catalog, CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import (
    LoopError,
    load_tailoring,
    resolve_profile,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.loop import LoopOptions
from ansible_collections.scapforge.remediation.plugins.plugin_utils._run import setup
from ansible_collections.scapforge.remediation.plugins.plugin_utils.tailoring import build_tailoring

from test_tailoring import debian12_datastream
import module_docs

X = "{%s}" % XCCDF12_NS
RULE = "xccdf_org.ssgproject.content_rule_"
VALUE = "xccdf_org.ssgproject.content_value_"
HIGH = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
CUSTOM = HIGH + "_customized"
SOURCE = "/srv/site/anssi-high-tailoring.xml"


def tailoring_xml(body, profile_id=CUSTOM, extends=HIGH, more=""):
    """A tailoring document with one profile (``body``: its select/refine elements)."""
    return ("""<?xml version="1.0" encoding="UTF-8"?>
<xccdf:Tailoring xmlns:xccdf="%s" id="xccdf_site_tailoring_anssi">
  <!-- written by hand -->
  <xccdf:version time="2026-11-30T00:00:00">1</xccdf:version>
  <xccdf:Profile id="%s"%s>
    <xccdf:title>ANSSI high, site values</xccdf:title>
    %s
  </xccdf:Profile>
  %s
</xccdf:Tailoring>
""" % (XCCDF12_NS, profile_id, ' extends="%s"' % extends if extends else "", body, more)).encode()


SITE = tailoring_xml("""
    <xccdf:select idref="%(r)ssshd_set_max_auth_tries" selected="true"/>
    <xccdf:select idref="%(r)sfile_permissions_etc_passwd" selected="false"/>
    <xccdf:refine-value idref="%(v)svar_accounts_user_umask" selector="027"/>
    <xccdf:set-value idref="%(v)ssshd_max_auth_tries_value">2</xccdf:set-value>
    <xccdf:refine-rule idref="%(r)saccounts_umask_etc_login_defs" severity="high"/>
""" % {"r": RULE, "v": VALUE})


@pytest.fixture(scope="module")
def cat():
    return Catalog.from_path(debian12_datastream())


@pytest.fixture(scope="module")
def site(cat):
    return cat.with_tailoring(SITE, SOURCE)


def _set_fact(tasks_yaml, name):
    """The value a rendered fix's ``XCCDF Value`` set_fact task gives ``name``."""
    for task in yaml.safe_load(tasks_yaml):
        if name in (task.get("set_fact") or {}):
            return task["set_fact"][name]
    raise AssertionError("no set_fact of %s" % name)


def test_values_from_refine_value_and_set_value_reach_render_fix(cat, site):
    assert site.value("var_accounts_user_umask", CUSTOM) == "027"
    assert cat.value("var_accounts_user_umask", HIGH) == "077"  # the base profile's
    assert _set_fact(site.render_fix("accounts_umask_etc_login_defs", CUSTOM), "var_accounts_user_umask") == "027"
    # a literal that is none of the Value's selectors (3, 4, 5, 10)
    assert "2" not in cat.value_selectors("sshd_max_auth_tries_value")
    assert _set_fact(site.render_fix("sshd_set_max_auth_tries", CUSTOM), "sshd_max_auth_tries_value") == "2"
    assert "MaxAuthTries" in site.describe("sshd_set_max_auth_tries", CUSTOM)


def test_select_outside_the_base_profile_and_unselect(cat, site):
    base, custom = cat.profile(HIGH), site.tailoring_profile("anssi_bp28_high_customized")
    assert RULE + "sshd_set_max_auth_tries" not in base.selected_rules
    assert RULE + "file_permissions_etc_passwd" in base.selected_rules
    assert set(custom.selected_rules) == (set(base.selected_rules) | {RULE + "sshd_set_max_auth_tries"}) \
        - {RULE + "file_permissions_etc_passwd"}
    assert custom.extends == HIGH and custom.title == "ANSSI high, site values"
    assert custom.refine_rules[RULE + "accounts_umask_etc_login_defs"] == {"severity": "high"}
    assert site.datastream_ancestor(CUSTOM).id == HIGH


def test_the_shared_catalog_is_left_alone(cat, site):
    assert CUSTOM in site.profiles and CUSTOM not in cat.profiles
    assert cat.tailoring is None
    with pytest.raises(CatalogError):
        cat.profile(CUSTOM)
    assert Catalog.from_path(debian12_datastream()) is cat  # still the cached object
    assert site.rules is cat.rules  # a view shares what it does not change
    assert site.sha256 == cat.sha256


def test_the_tailoring_record(site):
    info = site.tailoring
    assert info.name == "anssi-high-tailoring.xml" and info.source == SOURCE
    assert len(info.sha256) == 64 and info.profile_ids == (CUSTOM,)
    assert info.id == "xccdf_site_tailoring_anssi"
    root = etree.fromstring(info.xml.encode())  # what oscap gets: UTF-8, comments dropped
    assert root.tag == X + "Tailoring" and "written by hand" not in info.xml


def test_wrong_profile_id_lists_the_tailorings_ids(site):
    with pytest.raises(LoopError) as err:
        resolve_profile(site, "anssi_bp28_high_custom")
    assert err.value.reason == "profile"
    assert SOURCE in str(err.value) and CUSTOM in str(err.value)
    with pytest.raises(LoopError, match="not in tailoring file"):  # the benchmark's own: not the tailoring's
        resolve_profile(site, "anssi_bp28_high")
    assert resolve_profile(site, CUSTOM).id == CUSTOM


@pytest.mark.parametrize("data, words", [
    (b"<xccdf:Tailoring xmlns:xccdf='%s'><xccdf:Profile" % XCCDF12_NS.encode(), ["not well-formed XML"]),
    (b"", ["Document is empty"]),
    (b"<Benchmark xmlns='%s' id='x'/>" % XCCDF12_NS.encode(), ["not an XCCDF 1.2 tailoring file", "<Benchmark>"]),
    (b"<Tailoring xmlns='http://checklists.nist.gov/xccdf/1.1'/>", ["not an XCCDF 1.2 tailoring", "xccdf/1.1"]),
    (b"<xccdf:Tailoring xmlns:xccdf='%s'/>" % XCCDF12_NS.encode(), ["holds no xccdf:Profile"]),
])
def test_malformed_or_wrong_documents(cat, data, words):
    with pytest.raises(CatalogError) as err:
        cat.with_tailoring(data, SOURCE)
    for word in words:
        assert word in str(err.value)
    assert SOURCE in str(err.value)


@pytest.mark.parametrize("body, extends, offending", [
    ('<xccdf:select idref="%ssshd_no_such_rule" selected="true"/>' % RULE, HIGH, RULE + "sshd_no_such_rule"),
    ('<xccdf:refine-rule idref="%sno_such_rule" severity="low"/>' % RULE, HIGH, RULE + "no_such_rule"),
    ('<xccdf:refine-value idref="%svar_no_such" selector="1"/>' % VALUE, HIGH, VALUE + "var_no_such"),
    ('<xccdf:set-value idref="%svar_no_such">1</xccdf:set-value>' % VALUE, HIGH, VALUE + "var_no_such"),
    ('<xccdf:refine-value idref="%svar_accounts_user_umask" selector="002"/>' % VALUE, HIGH, "'002'"),
    ("", HIGH + "_nope", HIGH + "_nope"),
])
def test_unknown_ids_are_named_with_the_file(cat, body, extends, offending):
    with pytest.raises(CatalogError) as err:
        cat.with_tailoring(tailoring_xml(body, extends=extends), SOURCE)
    message = str(err.value)
    assert SOURCE in message and offending in message and CUSTOM in message


def test_profile_ids_must_be_new(cat):
    with pytest.raises(CatalogError, match="already used by xccdf_org.ssgproject.content_benchmark_DEBIAN-12"):
        cat.with_tailoring(tailoring_xml("", profile_id=HIGH), SOURCE)
    twice = tailoring_xml("", more='<xccdf:Profile id="%s"><xccdf:title>b</xccdf:title></xccdf:Profile>' % CUSTOM)
    with pytest.raises(CatalogError, match="already used by the file"):
        cat.with_tailoring(twice, SOURCE)


def test_a_profile_extending_one_of_the_same_file(cat):
    # oscap 1.3.7 resolves this too (checked on the lab); the generated merge extends the benchmark's
    child = '<xccdf:Profile id="%s_b" extends="%s"><xccdf:title>b</xccdf:title>' \
            '<xccdf:select idref="%ssshd_disable_empty_passwords" selected="true"/></xccdf:Profile>' % (
                CUSTOM, CUSTOM, RULE)
    view = cat.with_tailoring(tailoring_xml('<xccdf:refine-value idref="%svar_accounts_user_umask" selector="027"/>'
                                            % VALUE, more=child), SOURCE)
    prof = view.tailoring_profile(CUSTOM + "_b")
    assert view.value("var_accounts_user_umask", prof.id) == "027"
    assert RULE + "sshd_disable_empty_passwords" in prof.selected_rules
    assert view.datastream_ancestor(prof.id).id == HIGH
    xml, pid = build_tailoring(view, prof.id, select=["sshd_set_keepalive"])
    merged = etree.fromstring(xml).find(X + "Profile")
    assert merged.get("extends") == HIGH
    assert merged.find(X + "refine-value").get("selector") == "027"


def test_a_profile_without_extends_starts_from_the_benchmark_defaults(cat):
    view = cat.with_tailoring(tailoring_xml('<xccdf:select idref="%ssshd_set_max_auth_tries" selected="true"/>'
                                            % RULE, extends=None), SOURCE)
    prof = view.tailoring_profile(CUSTOM)
    assert prof.extends is None and view.datastream_ancestor(CUSTOM) is None
    assert set(prof.selected_rules) == set(cat.effective_selection({RULE + "sshd_set_max_auth_tries": True}))


def test_merge_keeps_the_users_changes_and_adds_the_extra_rules(cat, site):
    """Rules outside the tailored profile: one generated document, extending the benchmark
    profile, whose selection is the user's plus the extra rules and whose Values are the user's."""
    extra = [RULE + "sshd_disable_empty_passwords", RULE + "sshd_set_idle_timeout"]
    xml, pid = build_tailoring(site, CUSTOM, select=extra)
    assert pid == CUSTOM + "_scapforge"
    prof = etree.fromstring(xml).find(X + "Profile")
    assert prof.get("extends") == HIGH
    selections = dict(cat.profile(HIGH).selections)
    selections.update({s.get("idref"): s.get("selected") == "true" for s in prof.findall(X + "select")})
    custom = site.tailoring_profile(CUSTOM)
    expected = set(custom.selected_rules) | set(extra) | {RULE + "sshd_set_keepalive"}  # required by idle timeout
    assert set(cat.effective_selection(selections)) == expected
    refined = {e.get("idref"): e.get("selector") for e in prof.findall(X + "refine-value")}
    literal = {e.get("idref"): e.text for e in prof.findall(X + "set-value")}
    assert refined == {VALUE + "var_accounts_user_umask": "027"}
    assert literal == {VALUE + "sshd_max_auth_tries_value": "2"}
    assert prof.find(X + "refine-rule").attrib == {"idref": RULE + "accounts_umask_etc_login_defs", "severity": "high"}
    # the merged document is itself a valid tailoring of the benchmark, with the same Values
    again = cat.with_tailoring(xml, "merged.xml")
    assert set(again.tailoring_profile(pid).selected_rules) == expected
    assert again.value("sshd_max_auth_tries_value", pid) == "2"


class _Setup:
    """The setup step's tailoring helpers for one catalog view and profile."""

    def __init__(self, view, profile_id):
        self.catalog, self.profile = view, resolve_profile(view, profile_id)

    def _scan_tailoring(self, outside):
        return setup._scan_tailoring(self.catalog, self.profile, outside)

    def _tailoring_record(self, scan_profile):
        return setup.tailoring_record(self.catalog, self.profile, scan_profile)


def _loop(view, profile_id):
    return _Setup(view, profile_id)


def test_every_scan_uses_the_users_tailoring(cat, site):
    loop = _loop(site, CUSTOM)
    xml, pid = loop._scan_tailoring([])
    assert (xml, pid) == (site.tailoring.xml, CUSTOM)
    xml, pid = loop._scan_tailoring([RULE + "sshd_disable_empty_passwords"])
    assert pid == CUSTOM + "_scapforge"
    assert etree.fromstring(xml.encode()).find(X + "Profile").get("extends") == HIGH
    record = loop._tailoring_record(pid)
    assert record == {"file": "anssi-high-tailoring.xml", "sha256": site.tailoring.sha256, "profile": CUSTOM,
                      "scan_profile": pid}
    json.dumps(record)
    plain = _loop(cat, "anssi_bp28_high")
    assert plain._scan_tailoring([]) == (None, HIGH) and plain._tailoring_record(HIGH) is None


def test_load_tailoring_reads_the_controller_file(cat, tmp_path):
    path = tmp_path / "site.xml"
    path.write_bytes(SITE)
    assert load_tailoring(cat, str(path)).tailoring.profile_ids == (CUSTOM,)
    with pytest.raises(LoopError) as err:
        load_tailoring(cat, str(tmp_path / "missing.xml"))
    assert err.value.reason == "tailoring" and "missing.xml" in str(err.value)
    path.write_bytes(SITE.replace(b"sshd_set_max_auth_tries", b"sshd_set_max_auth_triez"))
    with pytest.raises(LoopError) as err:
        load_tailoring(cat, str(path))
    assert err.value.reason == "tailoring" and RULE + "sshd_set_max_auth_triez" in str(err.value)


def _assignments(path):
    """{name: literal value} of a module's top-level constant assignments (read, not imported:
    importing a plugin needs ansible's collection loader)."""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, (ast.Dict, ast.Tuple, ast.Constant))}


def test_options_flow_from_the_role_to_the_loop():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    action = dict(_assignments(os.path.join(root, "plugins", "action", "ralph.py")),
                  **_assignments(os.path.join(root, "plugins", "module_utils", "ralph_options.py")))
    assert action["ARGUMENT_SPEC"]["tailoring_src"] == {"type": "path"}
    assert "tailoring_src" in action["_PASSED_AS_IS"]
    assert "tailoring_src" in {f.name for f in dataclasses.fields(LoopOptions)}
    assert module_docs.options("ralph")["tailoring_src"]["type"] == "path"
    with open(os.path.join(root, "roles", "remediate", "defaults", "main.yml")) as handle:
        assert yaml.safe_load(handle)["scapforge_tailoring_src"] == ""
    with open(os.path.join(root, "roles", "remediate", "meta", "argument_specs.yml")) as handle:
        assert "scapforge_tailoring_src" in yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    with open(os.path.join(root, "roles", "remediate", "tasks", "main.yml")) as handle:
        assert 'tailoring_src: "{{ scapforge_tailoring_src or omit }}"' in handle.read()
