#!/usr/bin/env python3
"""Benchmark: seconds per rule re-check on a lab host, one rule per oscap call vs batched.

One ansible-playbook run on the host calls the real scapforge.remediation.oscap_eval module as
the loop does in its verification: first one validating call (the run's first scan), then
ROUNDS x 8 calls of one rule each and ROUNDS calls of the 8 rules together, all with
``skip_validation`` (the loop skips schema validation after its first scan). Each call is made
twice, interleaved: reading oscap's ``--progress`` lines (``results_source=progress``, what the
loop's re-checks do) and reading the XCCDF results document (the baseline, what they did
before). Task durations come from Ansible's json callback (module transfer, become, oscap,
results). Prints median and p95 and the ratio progress / document of the same run, writes
bench/results/verify.json. Issue 9's target: one rule's re-check <= 1.0 s median.
Read-only: oscap evaluates, nothing on the host changes.

Usage (lab up, from the repository root):
    .venv/bin/python bench/verify.py [--host lab1] [--inventory inventory/lab.yml] [--rounds 3]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = [
    "accounts_umask_etc_login_defs", "accounts_umask_etc_profile", "file_permissions_sshd_config",
    "sshd_disable_root_login", "sudo_add_umask", "package_audit_installed",
    "file_permissions_etc_passwd", "sysctl_kernel_dmesg_restrict",
]
DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
PROFILE = "anssi_bp28_high"


def task(name, rules, skip, source="results_file"):
    return {"name": name, "scapforge.remediation.oscap_eval": {
        "datastream": DS, "profile": PROFILE, "rules": rules, "skip_validation": skip, "results_source": source}}


def seconds(task):
    duration = task["duration"]
    start, end = (datetime.datetime.fromisoformat(duration[k].replace("Z", "+00:00")) for k in ("start", "end"))
    return (end - start).total_seconds()


def p95(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="lab1")
    parser.add_argument("--inventory", default="inventory/lab.yml")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    tasks = [task("validate", RULES[:1], False)]
    for n in range(args.rounds):
        for rule in RULES:
            tasks.append(task("single %d %s" % (n, rule), [rule], True, "progress"))
            tasks.append(task("document single %d %s" % (n, rule), [rule], True))
        tasks.append(task("batch %d" % n, RULES, True, "progress"))
        tasks.append(task("document batch %d" % n, RULES, True))
    play = [{"hosts": args.host, "gather_facts": False, "become": True, "tasks": tasks}]
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as handle:
        yaml.safe_dump(play, handle, sort_keys=False)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    proc = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", args.inventory, handle.name],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    os.unlink(handle.name)
    if proc.returncode != 0:
        sys.exit("the playbook failed:\n%s" % (proc.stdout[-3000:] + proc.stderr[-2000:]))
    times = {t["task"]["name"]: seconds(t["task"]) for t in json.loads(proc.stdout)["plays"][0]["tasks"]}
    single = [v for k, v in times.items() if k.startswith("single")]
    batch = [v for k, v in times.items() if k.startswith("batch")]
    document_single = [v for k, v in times.items() if k.startswith("document single")]
    document_batch = [v for k, v in times.items() if k.startswith("document batch")]
    figures = {
        "host": args.host, "rounds": args.rounds, "rules_per_batch": len(RULES),
        "first_validating_s": round(times["validate"], 2),
        "single_median_s": round(statistics.median(single), 2), "single_p95_s": round(p95(single), 2),
        "batch_median_s": round(statistics.median(batch), 2), "batch_p95_s": round(p95(batch), 2),
        "batch_per_rule_median_s": round(statistics.median(batch) / len(RULES), 2),
        "document_single_median_s": round(statistics.median(document_single), 2),
        "document_batch_median_s": round(statistics.median(document_batch), 2),
        "single_ratio_progress_to_document": round(statistics.median(single) / statistics.median(document_single), 2),
    }
    print("| re-check (--progress lines, as the loop) | median s | p95 s | results document, median s |")
    print("|---|---|---|---|")
    print("| one rule per call | %.2f | %.2f | %.2f |" % (
        figures["single_median_s"], figures["single_p95_s"], figures["document_single_median_s"]))
    print("| %d rules in one call | %.2f | %.2f | %.2f |" % (
        len(RULES), figures["batch_median_s"], figures["batch_p95_s"], figures["document_batch_median_s"]))
    print("| per rule, batched | %.2f | | |" % figures["batch_per_rule_median_s"])
    print("one rule, progress / document: %.2fx" % figures["single_ratio_progress_to_document"])
    print("first call (validating): %.2f s" % figures["first_validating_s"])
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "verify.json"), "w") as out:
        json.dump(figures, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
