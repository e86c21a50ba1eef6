#!/usr/bin/env python3
"""Benchmark: verifying N rules one oscap call each (the baseline) vs one batched call.

Runs the real scapforge.remediation.oscap_eval module over SSH against a lab host, both ways,
in the same run, and prints wall seconds and the ratio baseline/batched (higher is better).
Read-only: oscap evaluates, nothing on the host changes.

Usage (lab up, from the repository root):
    .venv/bin/python bench/verify_batch.py [--host lab1] [--inventory inventory/lab.yml] [--rounds 2]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from verify import DS, PROFILE, RULES  # bench/ is sys.path[0]: the same 8 rules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def oscap_eval(host, inventory, rules):
    args = json.dumps({"datastream": DS, "profile": PROFILE, "rules": rules})
    started = time.monotonic()
    proc = subprocess.run(
        [os.path.join(ROOT, ".venv/bin/ansible"), host, "-i", inventory, "-b", "-m",
         "scapforge.remediation.oscap_eval", "-a", args, "-o"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")),
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit("oscap_eval failed: %s" % (proc.stdout[-2000:] + proc.stderr[-2000:]))
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="lab1")
    parser.add_argument("--inventory", default="inventory/lab.yml")
    parser.add_argument("--rounds", type=int, default=2)
    opts = parser.parse_args()
    one_each, batched = [], []
    for _ in range(opts.rounds):
        one_each.append(sum(oscap_eval(opts.host, opts.inventory, [rule]) for rule in RULES))
        batched.append(oscap_eval(opts.host, opts.inventory, RULES))
    base, fast = statistics.median(one_each), statistics.median(batched)
    print("rules: %d, rounds: %d" % (len(RULES), opts.rounds))
    print("one call per rule (baseline): %.2f s" % base)
    print("one batched call:             %.2f s" % fast)
    print("ratio baseline/batched:       %.2fx" % (base / fast))


if __name__ == "__main__":
    main()
