#!/usr/bin/env python3
"""Benchmark: the agents on the residue rules of a fresh lab host (issue 18 item 9) — the fix
rate, the attempts, tokens per remediated rule and seconds, for one endpoint.

Boots a lab host fresh from the baseline and runs the main job (playbooks/remediate.yml, a
fresh memory store) over the residue rules with ``--endpoint``. The residue: the ten rules
of anssi_bp28_high that the content's own fixes leave failing on the lab (the trial of issue
18: PAM faillock and retry, login.defs hashing, rsyslog's remote host, chrony's service, two
AIDE rules, two audit rules, auditd's service). ``--replay DIR`` serves a recorded transcript
(a run's ``llm/`` folder) with tools/llm_replay.py instead: the figures of a recorded session
played back.

Prints a table and writes bench/results/agents.json: {endpoint, rules, wall_s, rc, worked,
remediated, fix_rate, worker_attempts, tokens, tokens_per_remediated, per_rule: {rule:
{outcome, reason, attempts, worker_attempts, tokens, seconds}}}.

Usage (as root, lab built):
    .venv/bin/python bench/agents.py --endpoint http://127.0.0.1:8800/v1 [--model NAME] [--host lab9]
    .venv/bin/python bench/agents.py --replay scapforge-runs/<run id>/llm [--rules r1,r2]
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "lab"))

import scapforge_lab  # noqa: E402

RULES = [
    "accounts_passwords_pam_faillock_deny", "accounts_password_pam_retry", "set_password_hashing_algorithm_logindefs",
    "rsyslog_remote_loghost", "service_chronyd_or_ntpd_enabled", "aide_verify_acls", "aide_verify_ext_attributes",
    "audit_rules_immutable", "audit_rules_usergroup_modification_passwd", "service_auditd_enabled",
]


def figures(report: dict) -> dict:
    """The benchmark's figures from one host report (``hosts/<host>.json`` of the summary)."""
    per_rule = {}
    for rule, outcome in sorted((report.get("rules") or {}).items()):
        log = outcome.get("attempt_log") or []
        per_rule[rule] = {"outcome": outcome.get("outcome"), "reason": outcome.get("reason"),
                          "attempts": len(log), "worker_attempts": sum(a.get("source") == "worker" for a in log),
                          "tokens": sum(int(a.get("tokens") or 0) for a in log),
                          "seconds": round(sum(float(a.get("seconds") or 0) for a in log), 1)}
    remediated = [r for r, f in per_rule.items() if f["outcome"] == "remediated"]
    tokens = int((report.get("llm") or {}).get("tokens") or sum(f["tokens"] for f in per_rule.values()))
    return {"worked": len(per_rule), "remediated": len(remediated),
            "fix_rate": round(len(remediated) / len(per_rule), 2) if per_rule else 0.0,
            "worker_attempts": sum(f["worker_attempts"] for f in per_rule.values()), "tokens": tokens,
            "tokens_per_remediated": round(tokens / len(remediated)) if remediated else None, "per_rule": per_rule}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(lab, name: str, rules: list, endpoint: str, model: str, workdir: str, timeout: float = 120.0) -> dict:
    lab.stop(name)
    hosts = lab.start([name])
    inventory = str(lab.write_inventory(os.path.join(workdir, "inventory.yml"), hosts))
    runs_dir = os.path.join(workdir, "runs")
    variables = {"scapforge_rules": rules, "scapforge_runs_dir": runs_dir, "scapforge_llm_base_url": endpoint,
                 "scapforge_llm_model": model, "scapforge_memory_path": os.path.join(workdir, "memory"),
                 "scapforge_llm_timeout": timeout}
    argv = ["ansible-playbook", "playbooks/remediate.yml", "-i", inventory, "-l", name, "-e", json.dumps(variables)]
    started = time.monotonic()
    with open(os.path.join(workdir, "agents.log"), "w") as log:
        proc = subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=False)
    wall = time.monotonic() - started
    with open(os.path.join(runs_dir, "latest", "hosts", "%s.json" % name)) as handle:
        report = json.load(handle)
    return dict(figures(report), rc=proc.returncode, wall_s=round(wall, 1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="the OpenAI-compatible base URL (http://127.0.0.1:8800/v1)")
    parser.add_argument("--replay", help="a recorded llm/ folder, served by tools/llm_replay.py")
    parser.add_argument("--model", default="bench")
    parser.add_argument("--host", default="lab9")
    parser.add_argument("--rules", default=",".join(RULES), help="short rule ids, comma-separated")
    parser.add_argument("--keep", action="store_true", help="leave the host up")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds one model call may take (a person playing the model through the relay: 1800)")
    args = parser.parse_args(argv)
    if bool(args.endpoint) == bool(args.replay):
        parser.error("give --endpoint or --replay")
    rules = args.rules.split(",")
    lab = scapforge_lab.Lab()
    workdir = tempfile.mkdtemp(prefix="scapforge-agents-")
    server = None
    endpoint, model = args.endpoint, args.model
    if args.replay:
        port = free_port()
        server = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "llm_replay.py"), args.replay,
                                   "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        endpoint, model = "http://127.0.0.1:%d/v1" % port, "replay"
        time.sleep(1.0)
    try:
        result = dict(run(lab, args.host, rules, endpoint, model, workdir, args.timeout), endpoint=args.replay or endpoint,
                      rules=rules, workdir=workdir)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        if not args.keep:
            lab.stop(args.host)
    print("| endpoint | rules worked | remediated | fix rate | Worker attempts | tokens | tokens per remediated | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    print("| %s | %d | %d | %.2f | %d | %d | %s | %.0f |" % (
        result["endpoint"], result["worked"], result["remediated"], result["fix_rate"], result["worker_attempts"],
        result["tokens"], result["tokens_per_remediated"], result["wall_s"]))
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "agents.json"), "w") as handle:
        json.dump(result, handle, indent=1)
    return result["rc"]


if __name__ == "__main__":
    sys.exit(main())
