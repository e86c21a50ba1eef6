"""The catalog's parts in plugins/plugin_utils/_content, each pinned on its own: ids, the
XHTML text, identifiers and Values read from elements, a profile's entries, a Value under a
profile, the fix rendering, and the disk cache's layout key."""

import shutil
from pathlib import Path

import pytest
from lxml import etree

from ansible_collections.scapforge.remediation.plugins.plugin_utils import catalog as catalog_mod
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content import disk_cache
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.datastream import (
    BenchmarkReader,
    rule_identifiers,
    value_of,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.errors import CatalogError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.ids import (
    full_id,
    short_id,
    sub_placeholder,
)
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.model import Item, Profile, Value
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.profiles import profile_entries
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.values import render_subs, value_under
from ansible_collections.scapforge.remediation.plugins.plugin_utils._content.xccdf import plain_text, xccdf_bool

NS = "xccdf_org.ssgproject.content_"
XNS = 'xmlns:x="http://checklists.nist.gov/xccdf/1.2" xmlns:h="http://www.w3.org/1999/xhtml"'
CONTENT = Path(catalog_mod.__file__).resolve().parent / "_content"


def elem(xml):
    return etree.fromstring(xml.replace("<x:E ", "<x:E %s " % XNS, 1))


def test_full_and_short_ids():
    assert full_id(NS, "sshd_disable_root_login", "rule") == NS + "rule_sshd_disable_root_login"
    assert full_id(NS, "xccdf_other_rule_x", "rule") == "xccdf_other_rule_x"
    assert short_id(NS, NS + "value_var_a", "value") == "var_a"
    assert short_id(NS, "xccdf_org.example_profile_base", "profile") == "base"  # another namespace
    assert short_id("", NS + "group_g", "group") == "g"
    assert short_id(NS, "plain", "rule") == "plain"
    assert sub_placeholder({"p1": "text"}, NS, "p1") == "text"
    assert sub_placeholder({}, NS, NS + "value_var_a") == "[var_a]"


def test_plain_text_keeps_pre_lines_breaks_blocks_and_fills_subs():
    text = elem('<x:E id="d">Set   <h:code>/etc/a</h:code>\nto <x:sub idref="v"/>.<h:pre>line 1\n  line 2</h:pre>'
                '<h:p>next</h:p>end</x:E>')
    assert plain_text(text, lambda idref: "<%s>" % idref) == "Set /etc/a to <v>.\nline 1\nline 2\n\nnext\nend"
    assert plain_text(None, str) == ""
    assert [xccdf_bool(v, True) for v in ("true", " 1 ", "false", "0", "yes", None)] == [
        True, True, False, False, False, True]


def test_rule_identifiers_by_shape_and_place():
    rule = elem('<x:E id="r">'
                '<x:ident system="https://nvd.nist.gov/cce/index.cfm">CCE-90839-2</x:ident>'
                '<x:ident system="other">CCE-1-2</x:ident><x:ident system="x">RHEL-09-000001</x:ident>'
                '<x:ident system="x">CCI-000366</x:ident>'
                '<x:reference href="https://public.cyber.mil/stigs/">RHEL-09-211010</x:reference>'
                '<x:reference href="https://example.org">RHEL-09-999999</x:reference>'
                '<x:reference href="x">SV-258134r1045265_rule</x:reference>'
                '<x:reference href="x">SRG-OS-000480-GPOS-00227</x:reference>'
                '<x:reference href="x">CCI-000366</x:reference></x:E>')
    assert rule_identifiers(rule) == {
        "cce": ("CCE-90839-2", "CCE-1-2"), "stig_id": ("RHEL-09-000001", "RHEL-09-211010"),
        "stig_rule": ("SV-258134r1045265_rule",), "srg": ("SRG-OS-000480-GPOS-00227",), "cci": ("CCI-000366",)}


def test_a_values_default_is_the_unselected_value_else_the_first():
    with_default = value_of(elem('<x:E id="v" type="number"><x:title>T</x:title><x:value selector="lo">1</x:value>'
                                 '<x:value>5</x:value><x:value selector="lo">2</x:value></x:E>'))
    assert with_default == Value(id="v", title="T", type="number", default="5", options={"lo": "1"})
    first = value_of(elem('<x:E id="w"><x:value selector="a">7</x:value><x:value selector="b">8</x:value></x:E>'))
    assert first.default == "7" and first.type == "string" and first.options == {"a": "7", "b": "8"}


def test_the_reader_links_groups_rules_and_clusters():
    bench = elem('<x:E id="b"><x:Group id="g" selected="false"><x:platform idref="#m"/>'
                 '<x:Rule id="%srule_r" cluster-id="c"><x:title>R</x:title><x:platform idref="#p"/></x:Rule>'
                 '</x:Group></x:E>' % NS)
    reader = BenchmarkReader(NS).read(bench)
    assert reader.items == {"g": Item("g", "group", False, None, None, [NS + "rule_r"]),
                            NS + "rule_r": Item(NS + "rule_r", "rule", True, "g", "c")}
    assert reader.clusters == {"c": [NS + "rule_r"]}
    rule = reader.rules[NS + "rule_r"]
    assert rule.short_id == "r" and rule.group_path == ("g",) and rule.platforms == ("#p", "#m")


def test_profile_entries_extend_the_parent_and_a_later_entry_wins():
    parent = Profile(id="p", short_id="p", title="", description="", selected_rules=(),
                     refine_values={"v": "lo"}, set_values={"w": "3"}, refine_rules={"r1": {"weight": "1"}},
                     selections={"r1": True})
    items = {"r1": Item("r1", "rule", True, None), "r2": Item("r2", "rule", True, None)}
    child = elem('<x:E id="c"><x:select idref="cl" selected="false"/><x:set-value idref="v">9</x:set-value>'
                 '<x:refine-value idref="w" selector="hi"/><x:refine-value idref="u"/>'
                 '<x:refine-rule idref="r1" severity="low"/></x:E>')
    selections, refine_values, set_values, refine_rules = profile_entries(child, items, {"cl": ["r1", "r2"]}, parent)
    assert selections == {"r1": False, "r2": False}
    assert refine_values == {"w": "hi"} and set_values == {"v": "9"}
    assert refine_rules == {"r1": {"weight": "1", "severity": "low"}}
    assert parent.refine_rules == {"r1": {"weight": "1"}}  # the parent's tables are copied, not changed


def _with(base, **changes):
    """``base`` with ``changes`` (a plain merge: pylint reads ``**dict(base, k=v)`` as a repeated keyword)."""
    return {**base, **changes}


def test_value_under_a_profile_set_then_refined_then_default():
    val = Value(id="v", title="", type="string", default="5", options={"lo": "1"})
    prof = Profile(id="p", short_id="p", title="", description="", selected_rules=(), refine_values={"v": "lo"},
                   set_values={}, refine_rules={}, selections={})
    assert value_under(val, None, "v") == "5" and value_under(val, prof, "v") == "1"
    assert value_under(val, Profile(**_with(prof.__dict__, set_values={"v": "x"})), "v") == "x"
    with pytest.raises(CatalogError, match="profile p refines Value short to selector 'hi', which it lacks"):
        value_under(val, Profile(**_with(prof.__dict__, refine_values={"v": "hi"})), "short")
    with pytest.raises(CatalogError, match="XCCDF Value v has no value"):
        value_under(Value(id="v", title="", type="string", default=None, options={}), None, "v")


def test_render_subs_quotes_a_whole_scalar_and_inserts_inside_text():
    sub = '<xccdf:sub idref="%s" use="legacy"/>'
    text = "a: !!str %s\nb: pre-%s-post\n- %s\n%s" % (sub % "v1", sub % "v2", sub % "v1", sub % "v2")
    values = {"v1": 'say "hi"', "v2": "02"}
    assert render_subs(text, values.__getitem__) == 'a: !!str "say \\"hi\\""\nb: pre-02-post\n- "say \\"hi\\""\n"02"'


def _copy_sources(tmp_path):
    dest = tmp_path / "src"
    shutil.copytree(CONTENT, dest / "_content", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(catalog_mod.__file__, dest / "catalog.py")
    return [str(dest / "catalog.py")] + sorted(str(p) for p in (dest / "_content").glob("*.py"))


def test_the_disk_layout_key_covers_catalog_and_every_content_module(tmp_path):
    sources = _copy_sources(tmp_path)
    key = disk_cache.layout_version(sources)
    assert key == catalog_mod._DISK_LAYOUT  # catalog.py and all of _content, nothing else
    assert disk_cache.layout_version(list(reversed(sources))) == key
    assert disk_cache.layout_version(sources, disk_format=disk_cache.DISK_FORMAT + 1) != key
    assert len(key) == 12 and int(key, 16) >= 0
    for path in sources:  # a change in any of them gives another key
        original = Path(path).read_bytes()
        Path(path).write_bytes(original + b"\n")
        assert disk_cache.layout_version(sources) != key, path
        Path(path).write_bytes(original)
    assert disk_cache.layout_version(sources[:-1]) != key  # a module more or less too
