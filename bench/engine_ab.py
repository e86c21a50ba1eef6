#!/usr/bin/env python3
"""Benchmark: this checkout's engine against a baseline checkout's, in one run, on one lab host.

Each round runs the main job (playbooks/remediate.yml, no LLM, a fresh memory store, bench/fleet.py's
25 rules) once from the baseline checkout and once from this one, in alternating order, each on
the same lab host booted fresh from the baseline. What is compared is the controller's own CPU
seconds per applied fix (the ansible-playbook process tree, bench/fleet.py) and the wall time;
the printed ratios are this checkout over the baseline, medians of the rounds. Controller CPU
is what the engine's code costs; wall time also carries whatever else the machine runs.

The baseline is a git worktree (issue 16 compared its redesign with a9cb4fe, the engine before it):
    git worktree add --detach /tmp/scapforge-base a9cb4fe && ln -s $PWD/.venv /tmp/scapforge-base/.venv

Writes bench/results/engine_ab.json. Usage (as root, lab built; about 2 minutes a run on a quiet machine):
    .venv/bin/python bench/engine_ab.py --baseline /tmp/scapforge-base [--host lab1] [--rounds 2]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "lab"))

import fleet  # noqa: E402
import scapforge_lab  # noqa: E402


def revision(root):
    return subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def side_env(root):
    """os.environ with Ansible's configuration (and so its collection path) taken from ``root``,
    and this interpreter's bin directory (the venv's ansible-playbook) first on PATH."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg"), PATH=path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a checkout of the baseline revision")
    parser.add_argument("--host", default="lab1")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rules", default=",".join(fleet.RULES), help="short rule ids, comma-separated")
    args = parser.parse_args(argv)
    sides = {"baseline": os.path.abspath(args.baseline), "head": ROOT}
    rules = args.rules.split(",")
    lab = scapforge_lab.Lab()
    workdir = tempfile.mkdtemp(prefix="scapforge-engine-ab-")
    result = {"rules": rules, "workdir": workdir, "host": args.host,
              "revisions": {name: revision(root) for name, root in sides.items()}, "runs": []}
    for n in range(args.rounds):
        order = ("baseline", "head") if n % 2 == 0 else ("head", "baseline")
        for name in order:
            run = fleet.run_once(lab, [args.host], rules, workdir, side_env(sides[name]), sides[name],
                                 label="%s-%d" % (name, n))
            result["runs"].append(dict(run, side=name, round=n))
    lab.stop(args.host)
    medians = {name: {key: statistics.median(r[key] for r in result["runs"] if r["side"] == name)
                      for key in ("wall_s", "controller_cpu_s", "cpu_per_fix_s", "fixes_applied")}
               for name in sides}
    result["medians"] = medians
    result["ratio"] = {key: round(medians["head"][key] / medians["baseline"][key], 2)
                       for key in ("wall_s", "controller_cpu_s", "cpu_per_fix_s") if medians["baseline"][key]}
    print("| side | revision | wall s | controller CPU s | CPU s per fix | fixes |")
    print("|---|---|---|---|---|---|")
    for name in sides:
        m = medians[name]
        print("| %s | %s | %.1f | %.1f | %.2f | %d |" % (
            name, result["revisions"][name], m["wall_s"], m["controller_cpu_s"], m["cpu_per_fix_s"], m["fixes_applied"]))
    print("head / baseline: wall %(wall_s)sx, controller CPU %(controller_cpu_s)sx, CPU per fix %(cpu_per_fix_s)sx"
          % result["ratio"])
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "engine_ab.json"), "w") as handle:
        json.dump(result, handle, indent=1)
    return 0 if all(r["rc"] == 0 for r in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
