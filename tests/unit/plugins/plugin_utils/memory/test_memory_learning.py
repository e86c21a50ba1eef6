"""Usage, reinforcement, the dream pass and merge (memory/learning.py), with every number
checked against a hand computation written next to it.

Seed 000 fix 1 (+0.1 / -0.05, cap 1, floor 0), seed 004 (follow-aware category credit
2 x AVG(outcome x confidence x modifier) - 1 with >= 5 retrievals that have follow data,
else 2 x success rate - 1; modifiers 1.0 / 0.3 / 0.5; retirement at >= 3 outcomes and
utility < 0.3).
"""

import types

import pytest
from tinydb import Query, TinyDB
from tinydb.storages import MemoryStorage

from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import learning as G
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import lessons as L

SKILL = "anssi-debian12"
FP = {"os": "debian", "os_version": "12", "virtualization": "systemd-nspawn", "content_version": "0.1.76",
      "skill": SKILL}
UMASK = [{"name": "Set UMASK", "ansible.builtin.lineinfile": {"path": "/etc/login.defs", "regexp": "^UMASK",
                                                              "line": "UMASK 027"}}]


def store():
    db = TinyDB(storage=MemoryStorage)
    return types.SimpleNamespace(lessons=db.table("lessons"), evidence=db.table("evidence"), usage=db.table("usage"))


def mk(id_, kind, status="confirmed", rule=None, category=None, tasks=None, reason=None, rules=None, pattern=None):
    return {"id": id_, "kind": kind, "status": status, "scope": {"skill": SKILL, "rule": rule, "category": category},
            "cue": "cue of " + id_, "action": "action of " + id_, "fingerprint": dict(FP), "tasks": tasks,
            "reason": reason, "weight": 0.5, "confidence": L.confidence_for(status), "support": 1,
            "outcomes": {"remediated": 0, "escalated": 0}, "created": "2026-11-01T00:00:00Z",
            "updated": "2026-11-01T00:00:00Z", "dedupe_key": "k-" + id_, "rules": rules or {}, "pattern": pattern,
            "credit": None, "utility": None}


def lesson(s, id_):
    return s.lessons.get(Query().id == id_)


def show(s, doc, run, rule, category, outcome, reason, followed=None, mode="inject", attempts=(1,),
         from_memory=False, time=None):
    """One work item: the lesson shown at each attempt, then the rule's outcome."""
    for n in attempts:
        G.log_usage(s.usage, G.usage_rows([doc], run, "lab1", rule, category, n, mode, directive=followed,
                                          now=time))
    return G.reinforce(s.lessons, s.usage, s.evidence, run, "lab1", rule, outcome, reason, from_memory=from_memory,
                       now=time)


# ----------------------------------------------------------------------------- followed
def test_followed_compares_module_and_key_arguments():
    pos = mk("p", "positive", tasks=UMASK)
    same_change = [{"lineinfile": {"path": "/etc/login.defs", "regexp": "^UMASK", "line": "UMASK 027", "backup": True,
                                   "insertafter": "EOF"}}, {"ansible.builtin.package_facts": {}}]
    assert G.followed(pos, same_change) is True
    assert G.followed(pos, [{"lineinfile": {"path": "/etc/login.defs", "regexp": "^UMASK", "line": "UMASK 077"}}]) is False
    assert G.followed(pos, [{"ansible.builtin.replace": {"path": "/etc/login.defs", "regexp": "^UMASK",
                                                         "replace": "UMASK 027"}}]) is False
    assert G.followed(pos, None) is None
    neg = mk("n", "negative", tasks=UMASK)
    assert G.followed(neg, same_change) is False  # repeated the approach that failed
    assert G.followed(neg, [{"ansible.builtin.copy": {"dest": "/etc/login.defs", "content": "UMASK 027\n"}}]) is True


def test_followed_for_patterns_cautions_directives_and_text_only_lessons():
    pipe = mk("pf", "negative", pattern="dash_pipefail")
    assert G.followed(pipe, [{"ansible.builtin.shell": "set -o pipefail && grep x /etc/passwd | head -1"}]) is False
    assert G.followed(pipe, [{"ansible.builtin.shell": {"cmd": "set -o pipefail && grep x /etc/passwd | head -1",
                                                        "executable": "/bin/bash"}}]) is True
    assert G.followed(pipe, UMASK) is True
    caution = mk("c", "caution", reason="environment:read_only_proc_sys")
    assert G.followed(caution, [{"ansible.posix.sysctl": {"name": "kernel.x", "value": "1"}}]) is False
    assert G.followed(caution, []) is True
    assert G.followed(caution, None, directive=True) is True
    assert G.followed(mk("r", "negative", status="candidate"), UMASK) is None  # Reflector text: cannot be told


def test_usage_rows_are_logged_once():
    s = store()
    rows = G.usage_rows([mk("a", "positive"), mk("b", "negative")], "r1", "lab1",
                        "xccdf_org.ssgproject.content_rule_x", "cat", 2, "shadow", now="2026-11-30T00:00:00Z")
    assert [r["key"] for r in rows] == ["r1/lab1/x/2/a/shadow", "r1/lab1/x/2/b/shadow"]
    assert rows[0]["rule"] == "x" and rows[0]["outcome"] is None and rows[0]["followed"] is None
    assert G.log_usage(s.usage, rows) == 2
    assert G.log_usage(s.usage, rows) == 0 and len(s.usage) == 2
    with pytest.raises(ValueError):
        G.usage_rows([], "r", "h", "x", None, 1, "loud")


# ----------------------------------------------------------------------------- reinforcement
def test_reinforcement_numbers_cap_floor_and_idempotence():
    s = store()
    s.lessons.insert_multiple([mk("P", "positive", rule="a", category="cat"), mk("N", "negative", category="cat")])
    # P, by hand: 0.5 +0.1 r1 =0.6, +0.1 r2 =0.7, -0.05 r3 =0.65, +0.1 r4 =0.75, r5 0.85, r6 0.95,
    # r7 min(1.0, 1.05) = 1.0, -0.05 r8 = 0.95
    seq = ["remediated", "remediated", "escalated", "remediated", "remediated", "remediated", "remediated", "escalated"]
    expected = [0.6, 0.7, 0.65, 0.75, 0.85, 0.95, 1.0, 0.95]
    for i, (out, want) in enumerate(zip(seq, expected), start=1):
        reason = "verified" if out == "remediated" else "fix_ineffective"
        got = show(s, lesson(s, "P"), "r%d" % i, "a", "cat", out, reason, followed=True, attempts=(1, 2, 3),
                   time="2026-11-30T00:00:%02dZ" % i)
        assert got["reinforced"] == ["P"]
        assert lesson(s, "P")["weight"] == pytest.approx(want, abs=1e-9)
    assert lesson(s, "P")["outcomes"] == {"remediated": 6, "escalated": 2}
    # a second call for a finished work item, shadow rows and decisions from memory change nothing
    assert G.reinforce(s.lessons, s.usage, s.evidence, "r8", "lab1", "a", "remediated", "verified") == {
        "reinforced": [], "confirmed": []}
    show(s, lesson(s, "P"), "r9", "a", "cat", "remediated", "verified", mode="shadow")
    show(s, lesson(s, "P"), "r10", "a", "cat", "escalated", "fix_failed", mode="act", attempts=(0,), followed=True,
         from_memory=True)
    assert lesson(s, "P")["weight"] == pytest.approx(0.95) and sum(lesson(s, "P")["outcomes"].values()) == 8
    # floor: 0.5 - 10 x 0.05 = 0.0, an 11th escalation stays at 0.0
    for i in range(11):
        show(s, lesson(s, "N"), "f%d" % i, "b", "cat", "escalated", "fix_failed", time="2026-11-30T01:00:%02dZ" % i)
    assert lesson(s, "N")["weight"] == 0.0 and lesson(s, "N")["outcomes"] == {"remediated": 0, "escalated": 11}
    # replaying the stored usage gives what the steps built
    rows = s.usage.search(Query().lesson == "P")
    assert G.replay(lesson(s, "P"), rows) == (0.95, {"remediated": 6, "escalated": 2})


def test_a_pass_that_is_not_the_fixs_doing_neither_rewards_nor_confirms():
    """Issue 17 item 5: remediated/passes_after_other_fixes and remediated/passes_without_fix
    are no evidence for a lesson shown to the rule: weight 0.5 stays, no outcome counted."""
    s = store()
    s.lessons.insert(mk("P", "positive", rule="a", category="cat"))
    for i, reason in enumerate(sorted(G.NOT_BY_ITS_FIX)):
        got = show(s, lesson(s, "P"), "n%d" % i, "a", "cat", "remediated", reason, followed=True, attempts=(1,))
        assert got == {"reinforced": [], "confirmed": []}
    assert lesson(s, "P")["weight"] == 0.5 and sum((lesson(s, "P").get("outcomes") or {}).values()) == 0
    assert G.NOT_BY_ITS_FIX == {"passes_after_other_fixes", "passes_without_fix"}


def test_caution_is_reinforced_when_its_prediction_holds():
    s = store()
    s.lessons.insert(mk("C", "caution", reason="environment:read_only_proc_sys",
                        rules={"sysctl_a": {"reason": "environment:read_only_proc_sys"}}))
    show(s, lesson(s, "C"), "r1", "sysctl_a", "kernel", "escalated", "environment:read_only_proc_sys")  # held: +0.1
    show(s, lesson(s, "C"), "r2", "sysctl_z", "kernel", "remediated", "verified")  # a rule it does not name: nothing
    show(s, lesson(s, "C"), "r3", "sysctl_a", "kernel", "remediated", "verified")  # wrong for its rule: -0.05
    assert lesson(s, "C")["weight"] == pytest.approx(0.55)  # 0.5 + 0.1 - 0.05
    assert lesson(s, "C")["outcomes"] == {"remediated": 1, "escalated": 1}


def test_a_reflector_candidate_is_confirmed_when_its_own_rule_is_then_remediated():
    s = store()
    s.lessons.insert(mk("R", "negative", status="candidate", rule="audit_x", category="audit"))
    s.evidence.insert({"lesson": "R", "source_kind": "reflection", "source_id": "r0/lab9/audit_x/2", "run_id": "r0",
                       "host": "lab9", "time": "2026-11-29T00:00:00Z", "detail": "", "rule": "audit_x", "attempt": 2,
                       "source": "worker", "reason": "fix_ineffective", "tasks_sha": None})
    assert show(s, lesson(s, "R"), "r1", "audit_y", "audit", "remediated", "verified")["confirmed"] == []
    assert show(s, lesson(s, "R"), "r1", "audit_x", "audit", "escalated", "attempt_budget")["confirmed"] == []
    got = show(s, lesson(s, "R"), "r2", "audit_x", "audit", "remediated", "verified", time="2026-11-30T00:00:00Z")
    assert got["confirmed"] == ["R"]
    doc = lesson(s, "R")
    assert doc["status"] == "confirmed" and doc["confidence"] == 1.0 and doc["support"] == 2
    assert sorted(r["source_id"] for r in s.evidence.search(Query().lesson == "R")) == [
        "r0/lab9/audit_x/2", "r2/lab1/audit_x"]


# ----------------------------------------------------------------------------- the dream pass
def test_dream_pass_category_credit_and_retirement_by_hand():
    s = store()
    s.lessons.insert_multiple([
        mk("PA", "positive", rule="audit_a", category="audit"), mk("NA", "negative", rule="audit_b", category="audit"),
        mk("CK", "caution", reason="environment:read_only_proc_sys",
           rules={"sysctl_a": {}, "sysctl_b": {}}),
        mk("PK", "positive", rule="kmod_a", category="kernel"),
        mk("PS", "positive", rule="sshd_a", category="ssh"),
        mk("RX", "negative", rule="pam_a", category="pam"), mk("RK", "positive", rule="pam_b", category="pam"),
    ])
    n = iter(range(1000))

    def item(doc_id, rule, category, outcome, reason, followed):
        show(s, lesson(s, doc_id), "w%03d" % next(n), rule, category, outcome, reason, followed=followed)

    # audit, 6 retrievals:        value = outcome x confidence x modifier
    item("PA", "audit_a", "audit", "remediated", "verified", True)         # 1 x 1.0 x 1.0 = 1.0
    item("PA", "audit_a", "audit", "remediated", "verified", True)         # 1.0
    item("PA", "audit_a", "audit", "remediated", "verified", False)        # 1 x 1.0 x 0.3 = 0.3
    item("PA", "audit_a", "audit", "remediated", "verified", None)         # 1 x 1.0 x 0.5 = 0.5
    item("NA", "audit_b", "audit", "escalated", "fix_ineffective", True)   # 0
    item("NA", "audit_b", "audit", "escalated", "fix_failed", False)       # 0
    # 5 with follow data -> follow-aware: AVG = 2.8 / 6 = 0.46667; signal = 2 x 0.46667 - 1 = -0.0667
    # (legacy would say 2 x 4/6 - 1 = +0.3333: wins that did not come from followed advice count less)
    #
    # kernel, 4 retrievals: cautions whose prediction held (reason environment:..., confidence 0.5, modifier 1.0)
    item("CK", "sysctl_a", "kernel", "escalated", "environment:read_only_proc_sys", None)   # 1 x 0.5 x 1.0 = 0.5
    item("CK", "sysctl_b", "kernel", "escalated", "environment:read_only_proc_sys", None)   # 0.5
    item("CK", "sysctl_a", "kernel", "escalated", "environment:read_only_proc_sys", None)   # 0.5
    item("CK", "sysctl_c", "kernel", "escalated", "environment:read_only_proc_sys", None)   # not its rule: no value
    item("PK", "kmod_a", "kernel", "remediated", "verified", True)                          # 1.0
    # 4 with follow data (< 5) -> legacy: success rate 4/4 = 1.0; signal = 2 x 1.0 - 1 = 1.0
    #
    # ssh, 5 retrievals, 2 with follow data -> legacy: 4 successes of 5 = 0.8; signal = 2 x 0.8 - 1 = 0.6
    for followed in (None, None, None, True):
        item("PS", "sshd_a", "ssh", "remediated", "verified", followed)    # 0.5, 0.5, 0.5, 1.0
    item("PS", "sshd_a", "ssh", "escalated", "fix_ineffective", False)     # 0
    #
    # pam, 6 retrievals, 5 with follow data -> follow-aware
    item("RX", "pam_a", "pam", "remediated", "verified", False)            # 0.3
    item("RX", "pam_a", "pam", "escalated", "fix_failed", None)            # 0
    item("RX", "pam_a", "pam", "escalated", "fix_ineffective", True)       # 0
    for dummy in range(3):
        item("RK", "pam_b", "pam", "remediated", "verified", False)        # 0.3 each
    # AVG = (0.3 + 0 + 0 + 0.9) / 6 = 0.2; signal = 2 x 0.2 - 1 = -0.6
    result = G.dream(s.lessons, s.usage, now="2026-12-01T00:00:00Z")
    cats = result["categories"]
    assert cats["audit"]["formula"] == "follow_aware" and cats["audit"]["retrievals"] == 6
    assert cats["audit"]["with_follow"] == 5 and cats["audit"]["signal"] == pytest.approx(-0.0667, abs=1e-4)
    assert (cats["kernel"]["formula"], cats["kernel"]["retrievals"], cats["kernel"]["signal"]) == ("legacy", 4, 1.0)
    assert (cats["ssh"]["formula"], cats["ssh"]["with_follow"], cats["ssh"]["signal"]) == ("legacy", 2, 0.6)
    assert (cats["pam"]["formula"], cats["pam"]["signal"]) == ("follow_aware", pytest.approx(-0.6))
    # utility = AVG of the lesson's own values:
    # PA (1 + 1 + 0.3 + 0.5) / 4 = 0.7; NA 0; CK 0.5; PK 1.0; PS 2.5 / 5 = 0.5; RX 0.3 / 3 = 0.1; RK 0.9 / 3 = 0.3
    assert result["utility"] == pytest.approx({"PA": 0.7, "NA": 0.0, "CK": 0.5, "PK": 1.0, "PS": 0.5, "RX": 0.1,
                                               "RK": 0.3})
    # retired: >= 3 outcomes and utility < 0.3 -> RX only (NA has 2 outcomes; RK sits at exactly 0.3;
    # CK's prediction held 3 times)
    assert result["retired"] == ["RX"]
    assert lesson(s, "RX")["status"] == "retired" and lesson(s, "RK")["status"] == "confirmed"
    assert lesson(s, "CK")["status"] == "confirmed" and lesson(s, "NA")["status"] == "confirmed"
    # confidence = 1.0 x (1 + signal) / 2: PA (1 - 0.0667)/2 = 0.4667; PK 1.0; PS 0.8; RK 0.2; CK no category: 1.0
    assert lesson(s, "PA")["confidence"] == pytest.approx(0.4667, abs=1e-4)
    assert [lesson(s, i)["confidence"] for i in ("PK", "PS", "RK", "CK")] == pytest.approx([1.0, 0.8, 0.2, 1.0])
    assert lesson(s, "PA")["credit"] == pytest.approx(-0.0667, abs=1e-4) and lesson(s, "CK")["credit"] is None
    # evidence and usage untouched; a second pass retires nothing more
    assert G.dream(s.lessons, s.usage)["retired"] == []


def test_a_lesson_shown_out_of_its_scope_is_neither_credited_nor_penalised_nor_retired():
    """Issue 19, seen 2 and item 5: package_audit_installed's verified fix, shown (selection
    fills prompts with same-category lessons) at four audit-rule attempts that could not have
    followed it, keeps its weight and status; only its own rule's outcome counts.

    By hand: weight 0.5; the 4 audit_rules_* items are outside its scope (rule
    package_audit_installed, not named by its evidence): no success value, no reinforcement,
    no usage value. The one in-scope item (package_audit_installed remediated, followed): +0.1
    -> 0.6, value 1 x 1.0 x 1.0 = 1.0, utility 1.0 over 1 outcome (< 3: never retired anyway).
    Before issue 19 the four escalations counted: weight 0.5 - 4 x 0.05 = 0.3 then + 0.1 = 0.4,
    utility (0 x 4 + 1.0) / 5 = 0.2 < 0.3 with 5 outcomes: retired."""
    s = store()
    s.lessons.insert(mk("PKG", "positive", rule="package_audit_installed", category="audit",
                        rules={"package_audit_installed": {"reason": "verified"}}))
    for n, rule in enumerate(("audit_rules_immutable", "audit_rules_login_events", "audit_rules_mac_modification",
                              "audit_rules_time_stime")):
        show(s, lesson(s, "PKG"), "o%02d" % n, rule, "audit", "escalated", "fix_ineffective", followed=False)
    assert lesson(s, "PKG")["weight"] == 0.5 and lesson(s, "PKG")["outcomes"] == {"remediated": 0, "escalated": 0}
    assert [G.in_scope(lesson(s, "PKG"), {"rule": r, "category": "audit"})
            for r in ("audit_rules_immutable", "package_audit_installed")] == [False, True]
    show(s, lesson(s, "PKG"), "own", "package_audit_installed", "audit", "remediated", "verified", followed=True)
    assert lesson(s, "PKG")["weight"] == pytest.approx(0.6)
    result = G.dream(s.lessons, s.usage, now="2026-12-03T00:00:00Z")
    assert result["utility"]["PKG"] == pytest.approx(1.0) and result["retired"] == []
    assert lesson(s, "PKG")["status"] == "confirmed"


@pytest.mark.parametrize("doc, row, expected", [
    # a rule lesson: its rule, or a rule its evidence names; never another rule of its category
    (mk("a", "positive", rule="r1", category="c"), {"rule": "r1", "category": "c"}, True),
    (mk("a", "positive", rule="r1", category="c"), {"rule": "r2", "category": "c"}, False),
    (mk("a", "negative", rule="r1", category="c", rules={"r2": {}}), {"rule": "r2", "category": "x"}, True),
    # a category lesson: a rule of its category
    (mk("a", "negative", category="c"), {"rule": "r9", "category": "c"}, True),
    (mk("a", "negative", category="c"), {"rule": "r9", "category": "d"}, False),
    # a skill-wide lesson (a task-shape cause): any rule of the skill could have followed it
    (mk("a", "negative", pattern="dash_pipefail"), {"rule": "r9", "category": "d"}, True),
    # a caution: only the rules its evidence names
    (mk("a", "caution", rules={"r1": {}}), {"rule": "r1", "category": "c"}, True),
    (mk("a", "caution", rules={"r1": {}}), {"rule": "r2", "category": "c"}, False),
])
def test_in_scope(doc, row, expected):
    assert G.in_scope(doc, row) is expected


# ----------------------------------------------------------------------------- merge
def host_report(host, rules):
    return {"host": host, "run_id": "r1", "rules": {
        short: {"outcome": "escalated" if reason != "verified" else "remediated", "reason": reason,
                "category": cat, "detail": ""} for short, (reason, cat) in rules.items()}}


PIPE = [{"ansible.builtin.shell": "set -o pipefail && grep x /etc/passwd | head -1"}]


def attempts_for(rules, line="1"):
    out = {}
    for short, (reason, _cat) in rules.items():
        if reason == "fix_failed":
            out[short] = [{"number": 1, "source": "vendor", "tasks": PIPE, "verdict": "failed", "reason": "fix_failed",
                           "report": {"ok": False, "error": "/bin/sh: %s: set: Illegal option -o pipefail" % line}}]
        elif reason == "verified":
            out[short] = [{"number": 1, "source": "vendor", "tasks": UMASK, "verdict": "passed", "reason": "verified"}]
    return out


def test_merge_is_a_union_without_duplicate_evidence_and_recomputes_support():
    a, b = store(), store()
    common = {"aide_verify_acls": ("fix_failed", "integrity"), "accounts_umask_etc_login_defs": ("verified", "accounts"),
              "sysctl_a": ("environment:read_only_proc_sys", "kernel")}
    only_b = {"aide_check_audit_tools": ("fix_failed", "integrity"), "sysctl_b": ("environment:read_only_proc_sys",
                                                                                  "kernel"),
              "accounts_tmout": ("verified", "accounts")}
    L.record(a.lessons, a.evidence, L.extract(host_report("lab1", common), attempts_for(common), FP, SKILL),
             now="2026-11-30T10:00:00Z")
    # b saw the same lab1 run (the same evidence keys) and a lab2 run with three more rules
    L.record(b.lessons, b.evidence, L.extract(host_report("lab1", common), attempts_for(common), FP, SKILL),
             now="2026-11-30T11:00:00Z")
    L.record(b.lessons, b.evidence, L.extract(host_report("lab2", dict(common, **only_b)),
                                              attempts_for(dict(common, **only_b), line="7"), FP, SKILL),
             now="2026-11-30T12:00:00Z")
    assert (len(a.lessons), len(a.evidence)) == (3, 3)   # pipefail, umask positive, caution
    assert (len(b.lessons), len(b.evidence)) == (4, 9)   # + tmout positive; 3 (lab1) + 6 (lab2)
    # usage: lab1 in a remediated the umask rule with the lesson shown; b has the same row and a later escalation
    umask = [d for d in a.lessons.all() if d["kind"] == "positive"][0]
    for s in (a, b):
        show(s, umask, "r1", "accounts_umask_etc_login_defs", "accounts", "remediated", "verified", followed=True,
             time="2026-11-30T10:30:00Z")
    show(b, umask, "r2", "accounts_umask_etc_login_defs", "accounts", "escalated", "fix_ineffective", followed=True,
         time="2026-11-30T12:30:00Z")
    counts = G.merge(b, a)
    # lessons: union by dedupe key = 4; evidence: 3 shared keys + 6 new = 9, none twice
    assert counts == {"lessons_added": 1, "lessons_updated": 3, "evidence_added": 6, "usage_added": 1}
    assert len(a.lessons) == 4 and len(a.evidence) == 9
    keys = [L.evidence_key(e) for e in a.evidence.all()]
    assert len(keys) == len(set(keys))
    pipe = [d for d in a.lessons.all() if d.get("pattern") == "dash_pipefail"][0]
    caution = [d for d in a.lessons.all() if d["kind"] == "caution"][0]
    # support = rows: pipefail lab1/aide_verify_acls, lab2/aide_verify_acls, lab2/aide_check_audit_tools = 3
    assert pipe["support"] == 3 and sorted(pipe["rules"]) == ["aide_check_audit_tools", "aide_verify_acls"]
    assert caution["support"] == 3 and sorted(caution["rules"]) == ["sysctl_a", "sysctl_b"]
    for doc in a.lessons.all():
        assert doc["support"] == len(a.evidence.search(Query().lesson == doc["id"]))
    # weight replayed over the merged usage in time order: 0.5 +0.1 (r1) -0.05 (r2) = 0.55
    merged_umask = lesson(a, umask["id"])
    assert merged_umask["weight"] == pytest.approx(0.55)
    assert merged_umask["outcomes"] == {"remediated": 1, "escalated": 1}
    # merging again changes nothing
    before = sorted(map(str, a.lessons.all())), len(a.evidence), len(a.usage)
    assert G.merge(b, a) == {"lessons_added": 0, "lessons_updated": 4, "evidence_added": 0, "usage_added": 0}
    assert (sorted(map(str, a.lessons.all())), len(a.evidence), len(a.usage)) == before


def test_merge_keeps_the_stronger_status():
    a, b = store(), store()
    a.lessons.insert(mk("S", "negative", status="candidate", rule="x", category="c"))
    b.lessons.insert(dict(mk("S", "negative", status="confirmed", rule="x", category="c"), tasks=UMASK))
    G.merge(b, a)
    doc = lesson(a, "S")
    assert doc["status"] == "confirmed" and doc["confidence"] == 1.0 and doc["tasks"] == UMASK


def test_merge_takes_an_outcome_that_only_the_source_has():
    a, b = store(), store()
    doc = mk("P", "positive", rule="x", category="c")
    a.lessons.insert(doc)
    b.lessons.insert(doc)
    rows = G.usage_rows([doc], "r1", "lab1", "x", "c", 1, "inject", directive=True, now="2026-11-30T00:00:00Z")
    G.log_usage(a.usage, rows)  # a logged the retrieval, then stopped before the outcome
    G.log_usage(b.usage, rows)
    G.reinforce(b.lessons, b.usage, b.evidence, "r1", "lab1", "x", "remediated", "verified", now="2026-11-30T00:01:00Z")
    assert G.merge(b, a)["usage_added"] == 0
    assert a.usage.all()[0]["outcome"] == "remediated" and len(a.usage) == 1
    assert lesson(a, "P")["weight"] == pytest.approx(0.6) and lesson(a, "P")["outcomes"]["remediated"] == 1


def test_an_end_that_judges_no_fix_neither_rewards_nor_penalises():
    """Issue 18: llm_error (the endpoint went down) and needs_human (an agent's cannot_fix for a
    person) say nothing about the lessons shown: weight 0.5 stays, no outcome counted."""
    s = store()
    s.lessons.insert(mk("N", "negative", rule="a", category="cat"))
    for i, reason in enumerate(sorted(G.NO_FIX_JUDGED)):
        got = show(s, lesson(s, "N"), "e%d" % i, "a", "cat", "escalated", reason, followed=False, attempts=(1,))
        assert got == {"reinforced": [], "confirmed": []}
    assert lesson(s, "N")["weight"] == 0.5 and sum((lesson(s, "N").get("outcomes") or {}).values()) == 0
    assert G.NO_FIX_JUDGED == {"llm_error", "needs_human"}
    # an escalation that does judge the fix still costs the lesson shown
    assert show(s, lesson(s, "N"), "f", "a", "cat", "escalated", "fix_failed", followed=False)["reinforced"] == ["N"]
    assert lesson(s, "N")["weight"] == 0.45


def test_an_environment_end_judges_no_advice_but_confirms_its_caution():
    """Issue 19: chronyd ended environment:no_sys_time with the pipefail lesson in its prompt.
    That lesson gets no penalty (weight 0.5, nothing counted), so the services category keeps no
    credit (None) and the caution of that rule still decides; the caution itself is credited."""
    s = store()
    s.lessons.insert(mk("N", "negative"))  # skill-wide: in scope for any rule
    s.lessons.insert(mk("C", "caution", rule="chrony", category="services", reason="environment:no_sys_time",
                        rules={"chrony": {}}))
    assert show(s, lesson(s, "N"), "e1", "chrony", "services", "escalated", "environment:no_sys_time",
                followed=False, attempts=(1,)) == {"reinforced": [], "confirmed": []}
    assert lesson(s, "N")["weight"] == 0.5 and sum((lesson(s, "N").get("outcomes") or {}).values()) == 0
    assert show(s, lesson(s, "C"), "e2", "chrony", "services", "escalated", "environment:no_sys_time",
                attempts=(1,))["reinforced"] == ["C"]
    assert lesson(s, "C")["weight"] == 0.6
