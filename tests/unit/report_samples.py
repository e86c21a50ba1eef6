"""Host reports for the report tests, built over the real lab datastreams (SSG 0.1.76): the
shape the loop writes (plugins/plugin_utils/_run/report.py), the numbers of a full
anssi_bp28_high run on the lab (issue 20's "what was seen")."""

from __future__ import annotations

from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils import skills
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog

from test_catalog import lab_datastream

ANSSI = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"


def _outcome(short, outcome, reason, attempts=0, detail="", **more):
    return dict({"rule": short, "outcome": outcome, "reason": reason, "attempts": attempts, "detail": detail,
                 "modules": [], "changed_tasks": [], "attempt_log": [], "lessons_shown": [], "from_memory": None,
                 "side_effects": [], "waiver": None}, **more)


def debian_full_run() -> HR.HostReport:
    """A full anssi_bp28_high run on a Debian 12 host: every selected rule has a result;
    47 kernel_config rules end environment:kernel_config, 6 access-impacting rules are
    skipped and still fail, 2 waived, 3 rules became applicable, 1 regression-free remediation
    with a diff per remediated rule."""
    catalog = Catalog.from_path(lab_datastream("ssg-debian12-ds.xml"))
    skill = skills.load_skill("anssi-debian12")
    profile = catalog.profile(ANSSI)
    selected = list(profile.selected_rules)
    shorts = [catalog.rule(r).short_id for r in selected]
    kernel = [s for s in shorts if s.startswith("kernel_config_")][:47]
    access = [s for s in shorts if s.startswith(("sshd_", "sudo_")) and s not in kernel][:6]
    others = [s for s in shorts if s not in kernel and s not in access]
    waived, remediated, human, na = others[:2], others[2:114], others[114:160], others[160:170]
    became, passing = others[170:173], others[173:]
    before, after, rules = {}, {}, {}
    full = {catalog.rule(r).short_id: r for r in selected}
    for s in kernel + access + waived + remediated + human:
        before[full[s]] = "fail"
    for s in passing:
        before[full[s]] = after[full[s]] = "pass"
    for s in na:
        before[full[s]] = after[full[s]] = "notapplicable"
    for s in became:
        before[full[s]], after[full[s]] = "notapplicable", "fail" if s == became[0] else "pass"
    for s in kernel:
        after[full[s]] = "fail"
        rules[s] = _outcome(s, "escalated", "environment:kernel_config", 1,
                            "the running kernel's build configuration cannot be changed on a running host")
    for s in access:
        after[full[s]] = "fail"
        rules[s] = _outcome(s, "skipped", "access_impacting", 0, "the fix can cut the controller off")
    for s in waived:
        after[full[s]] = "fail"
        waiver = {"rule": s, "reason": "<b>kiosk</b> build hosts", "expires": "2099-01-31"}
        rules[s] = _outcome(s, "skipped", "waived", 0, "waived until 2099-01-31", waiver=waiver)
    for i, s in enumerate(remediated):
        after[full[s]] = "pass"
        log = [{"attempt": 1, "source": "vendor", "verdict": "passed", "reason": "verified", "rolled_back": None,
                "changed": True, "seconds": 2.5, "modules": ["ansible.builtin.lineinfile"],
                "tasks": "- name: Set %s\n  ansible.builtin.lineinfile:\n    path: /etc/x%d.conf\n    line: x=1\n" % (s, i),
                "diffs": [{"task": "Set %s" % s, "module": "ansible.builtin.lineinfile",
                           "diff": "--- before: /etc/x%d.conf\n+++ after: /etc/x%d.conf\n+x=1\n" % (i, i)}]}]
        rules[s] = _outcome(s, "remediated", "verified", 1, attempt_log=log, changed_tasks=["Set %s (lineinfile)" % s],
                            modules=["ansible.builtin.lineinfile"])
    reasons = ["fix_ineffective", "llm_unavailable", "fix_failed", "no_effect"]
    for i, s in enumerate(human):
        after[full[s]] = "fail"
        log = [{"attempt": 1, "source": "vendor", "verdict": "failed", "reason": "fix_failed", "rolled_back": True,
                "changed": True, "seconds": 1.0, "tasks": "- name: t\n  ansible.builtin.command: /bin/false\n",
                "diffs": []}] if i % 4 != 1 else []
        rules[s] = _outcome(s, "escalated", reasons[i % 4], len(log), "still fails <script>alert(1)</script>",
                            attempt_log=log)
    for s, rule in rules.items():
        rule.update(HR.rule_meta(catalog.rule(full[s]), profile), category=skill.category_of(catalog.rule(full[s])))
    counts = {}
    for o in rules.values():
        key = "%s/%s" % (o["outcome"], o["reason"])
        counts[key] = counts.get(key, 0) + 1

    def tally(results):
        out = {}
        for v in results.values():
            out[v] = out.get(v, 0) + 1
        return out
    return {"host": "lab7", "run_id": "20261201T120000Z-0001", "profile": ANSSI, "tailoring": None,
            "content": {"sha256": catalog.sha256, "benchmark_version": catalog.benchmark_version, "oscap_version": "1.3.7"},
            "check_mode": False, "llm": None, "memory": {"shown": 3, "created": 5, "reinforced": 1, "retired": 0},
            "resumed": {"count": 1, "interrupted": []}, "health_baseline": {"failing": {}},
            "before": tally(before), "after": tally(after), "after_scan": "rescan", "outcomes": dict(sorted(counts.items())),
            "regressions": [], "picked_up_by_rescan": [became[0]], "not_work_items": {},
            "still_failing": sorted(s for s in shorts if after.get(full[s]) == "fail"), "reboot_required": [],
            "rebooted": None, "stopped": None, "seconds": 1234.5, "rules": rules,
            "scan_results": HR.scan_results(catalog, skill, before, after, profile),
            "waivers": [rules[s]["waiver"] for s in waived], "expired_waivers": [],
            "arf": {"before": "arf/lab7-before.xml", "after": "arf/lab7-after.xml"}, "error": None}
