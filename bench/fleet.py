#!/usr/bin/env python3
"""Benchmark: one host vs four hosts (forks 4) — wall time, host-rules per minute and the
controller's own CPU seconds per applied fix.

Each side boots its lab hosts fresh from the baseline and runs the main job
(playbooks/remediate.yml, no LLM, a fresh memory store) over the same rules. The controller's
CPU is the ansible-playbook process tree's user + system seconds (``getrusage(RUSAGE_CHILDREN)``
around the run: every worker process and every ssh client it waited for; the ssh
ControlPersist masters detach and are not counted). On a real fleet the targets are other
machines and the controller is what must scale; here the lab's targets share the same cores,
so host-rules per minute alone understates it.

Prints a table and writes bench/results/fleet.json: {"rules": [...], "runs": {"1": {...},
"4": {...}}, "strategy": ...}, each run with hosts, wall_s, rules_worked, fixes_applied, host_rules_per_min,
controller_cpu_s and cpu_per_fix_s.

Usage (as root, lab built; about 5 minutes with the default rules):
    .venv/bin/python bench/fleet.py [--hosts lab41,lab42,lab43,lab44] [--rules r1,r2,...]
                                    [--strategy linear|mitogen_linear]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "lab"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import accelerate  # noqa: E402
import scapforge_lab  # noqa: E402

#: 25 rules that fail on the lab's baseline and have a vendor fix (file permissions, umask,
#: a service, sysctl): no package download, so the figures measure the loop, not the mirror.
RULES = [
    "directory_permissions_etc_sudoersd", "no_direct_root_logins", "accounts_users_home_files_permissions",
    "accounts_umask_etc_bashrc", "accounts_umask_etc_login_defs", "accounts_umask_etc_profile",
    "service_rsyslog_enabled", "sysctl_net_ipv6_conf_all_accept_ra_defrtr", "sysctl_net_ipv6_conf_all_accept_ra_pinfo",
    "sysctl_net_ipv6_conf_all_accept_ra_rtr_pref", "sysctl_net_ipv6_conf_all_accept_redirects",
    "sysctl_net_ipv6_conf_all_accept_source_route", "sysctl_net_ipv6_conf_all_autoconf",
    "sysctl_net_ipv6_conf_all_max_addresses", "sysctl_net_ipv6_conf_all_router_solicitations",
    "sysctl_net_ipv4_conf_all_accept_redirects", "sysctl_net_ipv4_conf_all_accept_source_route",
    "sysctl_net_ipv4_conf_all_rp_filter", "sysctl_net_ipv4_conf_all_secure_redirects",
    "sysctl_net_ipv4_conf_default_accept_redirects", "sysctl_net_ipv4_conf_default_rp_filter",
    "sysctl_net_ipv4_tcp_syncookies", "sysctl_kernel_dmesg_restrict", "sysctl_fs_suid_dumpable",
    "sysctl_kernel_randomize_va_space",
]


def children_cpu():
    """User + system CPU seconds of this process's waited-for descendants so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(lab, names, rules, workdir, env=None, root=ROOT, label=None):
    """Boot ``names`` fresh, run the main job of the checkout at ``root`` over them with
    forks = len(names), in ``env`` (default os.environ); its figures."""
    label = label or str(len(names))
    for name in names:
        lab.stop(name)
    hosts = lab.start(names)
    inventory = str(lab.write_inventory(os.path.join(workdir, "inventory-%s.yml" % label), hosts))
    runs_dir = os.path.join(workdir, "runs-%s" % label)
    argv = ["ansible-playbook", "playbooks/remediate.yml", "-i", inventory, "-l", ",".join(names),
            "--forks", str(len(names)),
            "-e", json.dumps({"scapforge_rules": rules, "scapforge_runs_dir": runs_dir,
                              "scapforge_memory_path": os.path.join(workdir, "memory-%s" % label)})]
    cpu_before, started = children_cpu(), time.monotonic()
    with open(os.path.join(workdir, "fleet-%s.log" % label), "w") as log:
        proc = subprocess.run(argv, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env)
    wall, cpu = time.monotonic() - started, children_cpu() - cpu_before
    with open(os.path.join(runs_dir, "latest", "summary.json")) as handle:
        summary = json.load(handle)
    fixes = 0
    with open(os.path.join(runs_dir, "latest", "events.jsonl")) as handle:
        for line in handle:
            fixes += json.loads(line).get("event") == "fix_applied"
    worked = sum(len(summary["hosts"][h].get("rules") or {}) for h in names if h in summary["hosts"])
    return {"hosts": names, "rc": proc.returncode, "wall_s": round(wall, 1), "rules_worked": worked,
            "fixes_applied": fixes, "host_rules_per_min": round(worked / (wall / 60.0), 1),
            "controller_cpu_s": round(cpu, 1), "cpu_per_fix_s": round(cpu / max(fixes, 1), 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="lab41,lab42,lab43,lab44", help="four lab hosts (the first also runs alone)")
    parser.add_argument("--rules", default=",".join(RULES), help="short rule ids, comma-separated")
    parser.add_argument("--keep", action="store_true", help="leave the hosts up")
    parser.add_argument("--strategy", default="linear", choices=("linear", accelerate.STRATEGY),
                        help="Ansible strategy of the runs (mitogen_linear: README \"Speed\")")
    args = parser.parse_args(argv)
    env = accelerate.mitogen_env() if args.strategy == accelerate.STRATEGY else None
    names = args.hosts.split(",")
    rules = args.rules.split(",")
    lab = scapforge_lab.Lab()
    workdir = tempfile.mkdtemp(prefix="scapforge-fleet-")
    result = {"rules": rules, "workdir": workdir, "strategy": args.strategy, "runs": {}}
    try:
        for count in (1, len(names)):
            result["runs"][str(count)] = run_once(lab, names[:count], rules, workdir, env)
    finally:
        if not args.keep:
            for name in names:
                lab.stop(name)
    print("| hosts | wall s | rules worked | fixes applied | host-rules/min | controller CPU s | CPU s per fix |")
    print("|---|---|---|---|---|---|---|")
    for count, run in sorted(result["runs"].items()):
        print("| %s | %.0f | %d | %d | %.1f | %.1f | %.2f |" % (
            count, run["wall_s"], run["rules_worked"], run["fixes_applied"], run["host_rules_per_min"],
            run["controller_cpu_s"], run["cpu_per_fix_s"]))
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "fleet.json"), "w") as handle:
        json.dump(result, handle, indent=1)
    return 0 if all(run["rc"] == 0 for run in result["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
