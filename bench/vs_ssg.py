#!/usr/bin/env python3
"""Benchmark: our loop (no LLM) vs the SCAP Security Guide's own profile playbook, side by side.

Two lab hosts are booted fresh from the same baseline. On one the SSG playbook for the profile
from the same content (``/usr/share/scap-security-guide/ansible/debian12-playbook-<profile>.yml``
from the pinned ssg-debian .deb) runs with play-level ``ignore_errors: true`` (so it does not
stop at its first failure) and ``--skip-tags`` naming the rules our skill treats as
access-impacting (run as the lab's sudo admin, file_permissions_sudo alone would lock it out);
on the other our main job runs with a fresh, empty memory store. Both start at the same time.
Our loop runs under Mitogen for Ansible (``--ours-strategy``, default ``mitogen_linear``, the
accelerator README's "Speed" section documents); the SSG playbook as its users run it, with
Ansible's ``linear`` strategy (``--ssg-strategy mitogen_linear`` gives it the same accelerator).
Then the bench scans each host itself (oscap on the host, results parsed here): pass, fail,
error, notapplicable, and regressions (rules that passed before the run and not after).

Prints a table and writes bench/results/vs_ssg.json: {"ours": {...}, "ssg": {...}, "ratio": {...}},
each side with wall_s, pass, fail, error, notapplicable, regressions, host and strategy.

Usage (as root, lab built; 12 minutes on a quiet machine, 25-30 with the linear strategy or a loaded one):
    .venv/bin/python bench/vs_ssg.py [--profile anssi_bp28_high] [--hosts lab5,lab6] [--keep]
                                     [--ours-strategy linear|mitogen_linear] [--ssg-strategy ...]
--keep leaves both hosts up afterwards (scan them again with oscap, or ssh in).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import yaml
from lxml import etree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "lab"))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import accelerate  # noqa: E402
import scapforge_lab  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils.skills import load_skill  # noqa: E402

DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
PROFILE_PREFIX = "xccdf_org.ssgproject.content_profile_"
RULE_PREFIX = "xccdf_org.ssgproject.content_rule_"
XCCDF = "{http://checklists.nist.gov/xccdf/1.2}"
COUNTED = ("pass", "fail", "error", "notapplicable")


def ssg_playbook(lab, profile, host, workdir):
    """The SSG playbook of ``profile`` from the pinned .deb, aimed at ``host``, with play-level
    ignore_errors; returns its path."""
    member = "./usr/share/scap-security-guide/ansible/debian12-playbook-%s.yml" % profile
    deb = lab.content_dir / ("ssg-debian_%s_all.deb" % scapforge_lab.SSG_VERSION)
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    text = subprocess.run(["tar", "-xO", member], input=tar, capture_output=True, check=True).stdout
    plays = yaml.safe_load(text)
    for play in plays:
        play["hosts"] = host
        play["ignore_errors"] = True
    path = os.path.join(workdir, "ssg-%s.yml" % profile)
    with open(path, "w") as handle:
        yaml.safe_dump(plays, handle, sort_keys=False)
    return path


def skipped_as_access_impacting(lab, profile):
    """Short ids of the profile's rules our skill skips as access-impacting (for the lab's
    sudo admin, the user both runs connect as)."""
    catalog = Catalog.from_path(str(lab.datastream))
    skill = load_skill("anssi-debian12")
    rules = catalog.profile(profile).selected_rules
    return sorted(catalog.rule(r).short_id for r in rules if skill.access_impact(r, scapforge_lab.USER))


def scan(host, profile):
    """{short rule id: result} from a full oscap evaluation run on the host by the bench."""
    host.ssh("sudo rm -f /tmp/bench-results.xml; sudo oscap xccdf eval --profile %s%s --results /tmp/bench-results.xml "
             "%s >/dev/null 2>&1; test -s /tmp/bench-results.xml" % (PROFILE_PREFIX, profile, DS), timeout=900)
    xml = subprocess.run(host.ssh_argv("sudo cat /tmp/bench-results.xml"), capture_output=True, check=True,
                         timeout=120).stdout
    root = etree.fromstring(xml, etree.XMLParser(huge_tree=True, resolve_entities=False, no_network=True))
    return {rr.get("idref")[len(RULE_PREFIX):]: rr.findtext(XCCDF + "result")
            for rr in root.iter(XCCDF + "rule-result")}


def in_parallel(*calls):
    """Run the no-argument callables at the same time; return when all are done."""
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def strategy_env(strategy):
    """Environment for ansible-playbook under ``strategy``: ``linear`` (Ansible's default) or
    ``mitogen_linear`` (Mitogen for Ansible, from requirements.txt; README "Speed")."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STRATEGY=strategy,
               PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"])
    return accelerate.mitogen_env(env) if strategy == accelerate.STRATEGY else env


def run_timed(argv, log_path, out, strategy="linear"):
    started = time.monotonic()
    out["strategy"] = strategy
    with open(log_path, "w") as log:
        proc = subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=strategy_env(strategy))
    out.update(wall_s=round(time.monotonic() - started, 1), rc=proc.returncode, log=log_path)


def figures(before, after, host, timed):
    counts = {value: sum(1 for v in after.values() if v == value) for value in COUNTED}
    regressions = sorted(r for r, v in before.items() if v == "pass" and after.get(r) != "pass")
    return dict(timed, host=host, regressions=regressions, **counts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="anssi_bp28_high")
    parser.add_argument("--hosts", default="lab5,lab6", help="SSG host, our host")
    parser.add_argument("--keep", action="store_true", help="leave both hosts up")
    parser.add_argument("--ours-strategy", default="mitogen_linear", choices=("linear", "mitogen_linear"),
                        help="Ansible strategy of our loop (default: mitogen_linear, README \"Speed\")")
    parser.add_argument("--ssg-strategy", default="linear", choices=("linear", "mitogen_linear"),
                        help="Ansible strategy of the SSG playbook (default: linear, as its users run it)")
    args = parser.parse_args(argv)
    ssg_name, ours_name = args.hosts.split(",")
    lab = scapforge_lab.Lab()
    for name in (ssg_name, ours_name):
        lab.stop(name)  # fresh: from the baseline root
    ssg_host, ours_host = lab.start([ssg_name, ours_name])
    workdir = tempfile.mkdtemp(prefix="scapforge-vs-ssg-")
    inventory = str(lab.write_inventory(os.path.join(workdir, "inventory.yml"), [ssg_host, ours_host]))
    try:
        before, after = {}, {}
        in_parallel(*(lambda h=h: before.__setitem__(h.name, scan(h, args.profile)) for h in (ssg_host, ours_host)))
        skip = skipped_as_access_impacting(lab, args.profile)
        playbook = ssg_playbook(lab, args.profile, ssg_name, workdir)
        ssg, ours = {}, {}
        runs = [
            (["ansible-playbook", "-i", inventory, "-l", ssg_name, playbook, "--skip-tags", ",".join(skip)],
             os.path.join(workdir, "ssg.log"), ssg, args.ssg_strategy),
            (["ansible-playbook", "playbooks/remediate.yml", "-i", inventory, "-l", ours_name,
              "-e", json.dumps({"scapforge_profile": PROFILE_PREFIX + args.profile,
                                "scapforge_runs_dir": os.path.join(workdir, "runs"),
                                "scapforge_memory_path": os.path.join(workdir, "memory")})],
             os.path.join(workdir, "ours.log"), ours, args.ours_strategy),
        ]
        in_parallel(*(lambda run=run: run_timed(*run) for run in runs))
        in_parallel(*(lambda h=h: after.__setitem__(h.name, scan(h, args.profile)) for h in (ssg_host, ours_host)))
        result = {"profile": args.profile, "skipped_access_impacting": skip, "workdir": workdir,
                  "ssg": figures(before[ssg_name], after[ssg_name], ssg_name, ssg),
                  "ours": figures(before[ours_name], after[ours_name], ours_name, ours)}
        result["ratio"] = {"wall_s": round(result["ours"]["wall_s"] / result["ssg"]["wall_s"], 2),
                           "pass": round(result["ours"]["pass"] / max(result["ssg"]["pass"], 1), 2)}
        ours_pass = {r for r, v in after[ours_name].items() if v == "pass"}
        ssg_pass = {r for r, v in after[ssg_name].items() if v == "pass"}
        result["same_passing"] = ours_pass == ssg_pass
        result["pass_only_ours"], result["pass_only_ssg"] = sorted(ours_pass - ssg_pass), sorted(ssg_pass - ours_pass)
        print("| | wall s | pass | fail | error | notapplicable | regressions | host | strategy |")
        print("|---|---|---|---|---|---|---|---|---|")
        for side in ("ssg", "ours"):
            f = result[side]
            print("| %s | %.0f | %d | %d | %d | %d | %d | %s | %s |" % (
                side, f["wall_s"], f["pass"], f["fail"], f["error"], f["notapplicable"], len(f["regressions"]),
                f["host"], f["strategy"]))
        print("ours/ssg: wall %.2fx, pass %.2fx; identical passing sets: %s (only ours: %s; only SSG: %s)" % (
            result["ratio"]["wall_s"], result["ratio"]["pass"], result["same_passing"],
            ", ".join(result["pass_only_ours"]) or "none", ", ".join(result["pass_only_ssg"]) or "none"))
        os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
        with open(os.path.join(ROOT, "bench", "results", "vs_ssg.json"), "w") as handle:
            json.dump(result, handle, indent=1)
    finally:
        if not args.keep:
            for name in (ssg_name, ours_name):
                lab.stop(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
