"""Faults of the host's environment, not of the rule, injected for real on a lab host (issue 7
items 7 and 8): each is named apart from rule failures, nothing is left half-done, the host
stays manageable, and the fault never counts against the rule (the next run tries it again).

- the dpkg lock held by another process while a fix installs a package (package_audit_installed:
  ``package: name=auditd``): ``environment:package_manager_locked``;
- the target's /tmp full (a 1 MiB tmpfs mounted over it inside the container and filled): oscap
  cannot write its results there, so nothing can be judged; the run changes nothing and says
  ``environment:disk_full``;
- the connection dropped in the middle of an access-touching attempt (the controller's side of
  the host's veth taken down) under a short dead-man switch: the host stops with the connection
  lost, the switch restores the attempt's files by itself, a resumed run says so;
- oscap killed by SIGSEGV while it verifies a fix, and again when that scan is run once more
  (issue 17 item 8: a crashed scan is retried once; a wrapper in place of /usr/bin/oscap): the
  rule ends ``scanner_crash`` with no Worker attempt (case scanner-crash), later scans work.

Every test resets the host before and after. The row of each fault (what the product did, the
host after, seconds) is printed at the end (pytest -s) and kept in ``ROWS``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from lab_fixtures import REPO_ROOT
from llm_server import ScriptedLLM
from oscap_wrapper import calls, wrapped_oscap

PREFIX = "xccdf_org.ssgproject.content_rule_"
PROFILE = "xccdf_org.ssgproject.content_profile_anssi_bp28_high"
DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
ROWS: list[dict] = []


# ---------------------------------------------------------------------- helpers

def root(host, command: str, check: bool = True, timeout: int = 120) -> str:
    """A root shell command on the host through its own SSH session (sudo); stdout."""
    return host.ssh("sudo sh -c %s" % shlex.quote(command), check=check, timeout=timeout).stdout


def digests(host, paths) -> dict:
    out = root(host, "sha256sum %s 2>&1; true" % " ".join(shlex.quote(p) for p in paths))
    return {line.split()[-1]: line.split()[0] for line in out.splitlines() if len(line.split()) == 2}


def report_of(runs: Path, host, run_id: str = "latest") -> dict:
    return json.loads((runs / run_id / "hosts" / ("%s.json" % host.name)).read_text())


def events_of(runs: Path, run_id: str = "latest") -> list[dict]:
    path = runs / run_id / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def become_works(host) -> bool:
    """A brand-new SSH login with ``sudo -n`` running a program (what every module needs)."""
    return host.ssh("sudo -n env true", check=False, timeout=30).returncode == 0


def own_oscap(host, rules) -> dict:
    """oscap run by the test itself on the host: {short id: result}."""
    args = " ".join("--rule %s%s" % (PREFIX, r) for r in rules)
    out = host.ssh("cd / && sudo oscap xccdf eval --profile %s %s %s 2>/dev/null | tr -d '\\r' "
                   "| awk '/^Rule/{r=$2} /^Result/{print r, $2}'; true" % (PROFILE, args, DS), timeout=300).stdout
    return {line.split()[0][len(PREFIX):]: line.split()[1] for line in out.splitlines() if line.startswith(PREFIX)}


def playbook_argv(inventory, host, runs: Path, extra: dict) -> list[str]:
    """The main job's command line, as ``lab_fixtures.run_remediate`` builds it."""
    variables = dict(extra, scapforge_runs_dir=str(runs))
    variables.setdefault("scapforge_memory_path", str(runs / "memory"))
    return ["ansible-playbook", "playbooks/remediate.yml", "-i", str(inventory), "-l", host.name,
            "-e", json.dumps(variables)]


def timed(remediate, inventory, host, runs, extra):
    started = time.monotonic()
    proc = remediate(inventory, host.name, runs, extra)
    return proc, round(time.monotonic() - started, 1)


def assert_next_run_remediates(remediate, inventory, host, tmp_path: Path, rule: str) -> None:
    """The fault does not count against the rule: a next run with the same lesson store
    works the rule again (not decided from memory) and OpenSCAP proves the fix."""
    runs = tmp_path / "again"
    proc, _seconds = timed(remediate, inventory, host, runs,
                           {"scapforge_rules": [rule], "scapforge_memory_path": str(tmp_path / "memory")})
    assert proc.returncode == 0, proc.stdout[-4000:]
    again = report_of(runs, host)["rules"][rule]
    assert (again["outcome"], again["reason"], again["from_memory"]) == ("remediated", "verified", None), again


def row(fault, did, reachable, become, rule_state, data_lost, seconds):
    ROWS.append({"fault": fault, "product": did, "reachable": reachable, "become": become, "rule": rule_state,
                 "data_lost": data_lost, "seconds": seconds})


@pytest.fixture(scope="module", autouse=True)
def print_rows():
    yield
    print("\nfault | what the product did | reachable | become | rule state | data lost | seconds")
    for r in ROWS:
        print("%(fault)s | %(product)s | %(reachable)s | %(become)s | %(rule)s | %(data_lost)s | %(seconds)s" % r)


# ---------------------------------------------------------------------- (a) the dpkg lock

#: holds dpkg's two locks the way apt and dpkg take them (fcntl record locks: ``flock(1)``
#: would not stop apt), writes its pid, then waits.
LOCK_HOLDER = """
import fcntl, os, time
held = [open(p, "a") for p in ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock")]
for f in held:
    fcntl.lockf(f, fcntl.LOCK_EX)
with open("/run/scapforge-dpkg-holder.pid", "w") as out:
    out.write(str(os.getpid()))
time.sleep(900)
"""
DPKG_STATE = ("/var/lib/dpkg/status",)


def test_dpkg_lock_held_by_another_process(lab, lab_host, lab_inventory, tmp_path, remediate):
    rule = "package_audit_installed"
    host = lab.reset([lab_host.name])[0]
    holder = None
    try:
        root(host, "rm -f /run/scapforge-dpkg-holder.pid; setsid -f python3 -c %s </dev/null >/dev/null 2>&1"
             % shlex.quote(LOCK_HOLDER))
        for dummy in range(50):
            holder = root(host, "cat /run/scapforge-dpkg-holder.pid 2>/dev/null; true").strip() or None
            if holder:
                break
            time.sleep(0.1)
        assert holder and holder.isdigit(), "the lock holder did not start"
        assert "is another process using it" in root(host, "apt-get install -y -q auditd 2>&1; true")
        before = digests(host, DPKG_STATE)
        proc, seconds = timed(remediate, lab_inventory, host, tmp_path, {"scapforge_rules": [rule]})
        assert proc.returncode == 0, proc.stdout[-4000:]
        report = report_of(tmp_path, host)
        outcome = report["rules"][rule]
        assert (outcome["outcome"], outcome["reason"]) == ("escalated", "environment:package_manager_locked"), outcome
        assert [(a["verdict"], a["reason"], a["changed"]) for a in outcome["attempt_log"]] == [
            ("failed", "environment:package_manager_locked", False)]
        assert "Unable to acquire the dpkg frontend lock" in outcome["detail"]
        assert report["stopped"] is None
        # the lock was held the whole time: the holder still runs
        assert root(host, "kill -0 %s && echo alive" % holder).strip() == "alive"
        # nothing half-done: no package unpacked or half-configured, dpkg's database as before
        assert root(host, "dpkg --audit").strip() == ""
        assert digests(host, DPKG_STATE) == before
        assert root(host, "dpkg-query -W -f '${Status}' auditd 2>&1; true").startswith("dpkg-query: no packages")
        assert root(host, "ls -A /var/lib/dpkg/updates").strip() == ""
        health = [e["data"] for e in events_of(tmp_path) if e["event"] == "health" and e["rule"] == rule]
        assert health and health[-1]["healthy"] is True and health[-1]["checks"]["pkgdb"]["ok"] is True
    finally:
        if holder:
            root(host, "kill %s; rm -f /run/scapforge-dpkg-holder.pid" % holder, check=False)
    for dummy in range(50):
        if root(host, "kill -0 %s 2>/dev/null && echo alive; true" % holder).strip() != "alive":
            break
        time.sleep(0.1)
    assert root(host, "kill -0 %s 2>/dev/null && echo alive; true" % holder).strip() == ""
    row("dpkg lock held by another process (%s)" % rule, "escalated environment:package_manager_locked, "
        "nothing installed", "yes", become_works(host), own_oscap(host, [rule]).get(rule), "none", seconds)
    try:
        # the fault does not count against the rule: with the lock free, the next run installs it
        assert_next_run_remediates(remediate, lab_inventory, host, tmp_path, rule)
        assert root(host, "dpkg-query -W -f '${Status}' auditd") == "install ok installed"
        assert root(host, "dpkg --audit").strip() == ""
    finally:
        lab.reset([lab_host.name])


# ---------------------------------------------------------------------- (b) /tmp full

def test_target_tmp_full(lab, lab_host, lab_inventory, tmp_path, remediate):
    """oscap 1.3.7 writes its OVAL results under /tmp/oscap.XXXXXX whatever TMPDIR says: with
    /tmp full no scan can finish, so no fix can be judged. The right outcome: nothing runs, the
    host's report names the disk (``environment:disk_full``, "No space left on device"), and once
    /tmp has room the next run works the rule as if nothing happened."""
    rule = "accounts_umask_etc_login_defs"
    host = lab.reset([lab_host.name])[0]
    files = ("/etc/login.defs",)
    mounted = False
    try:
        before = digests(host, files)
        root(host, "mount -t tmpfs -o size=1m,mode=1777 scapforge-full /tmp")
        mounted = True
        root(host, "dd if=/dev/zero of=/tmp/fill bs=64k 2>/dev/null; true")
        assert root(host, "df --output=avail /tmp | tail -1").strip() == "0"
        proc, seconds = timed(remediate, lab_inventory, host, tmp_path, {"scapforge_rules": [rule]})
        report = report_of(tmp_path, host)
        assert report["error"]["reason"] == "environment:disk_full", report["error"]
        assert "No space left on device" in report["error"]["msg"] and "/tmp/oscap." in report["error"]["msg"]
        assert report["rules"] == {}
        assert proc.returncode != 0  # the loop's task fails for this host, with the reason
        assert digests(host, files) == before
        assert root(host, "test -e /var/lib/scapforge/checkpoints && echo yes; true").strip() == ""
        assert become_works(host)
    finally:
        if mounted:
            root(host, "rm -f /tmp/fill; umount /tmp", check=False)
    assert "scapforge-full" not in root(host, "findmnt -n -o SOURCE /tmp")
    row("target /tmp full (1 MiB tmpfs, filled)", "run refused before any change: environment:disk_full",
        "yes", become_works(host), own_oscap(host, [rule]).get(rule), "none", seconds)
    try:
        assert_next_run_remediates(remediate, lab_inventory, host, tmp_path, rule)
    finally:
        lab.reset([lab_host.name])


# ---------------------------------------------------------------------- (c) the connection dropped

SWITCH = 30  # seconds: the dead-man switch of the test
KEEPALIVE = "-o ServerAliveInterval=2 -o ServerAliveCountMax=3"  # ssh gives up ~6 s after the link went
COMMON_ACCOUNT = "/etc/pam.d/common-account"
DROP_RULE = "accounts_passwords_pam_faillock_deny"  # no content fix: the (scripted) Worker writes one
DROP_TASKS = {"tasks": [
    {"name": "Mark the account stack", "ansible.builtin.lineinfile": {
        "path": COMMON_ACCOUNT, "line": "# scapforge fault test: connection dropped here", "insertafter": "EOF"}},
    {"name": "Take a while", "ansible.builtin.command": "sleep 40"},
], "rationale": "the account stack first, then a slow step"}


def veth(host, state: str) -> None:
    subprocess.run(["ip", "link", "set", "ve-%s" % host.name, state], check=True, capture_output=True, timeout=10)


def wait_for(predicate, seconds: float, step: float = 0.1):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return None


def test_connection_dropped_mid_attempt(lab, lab_host, lab_inventory, tmp_path):
    host = lab.reset([lab_host.name])[0]
    run_id = "drop-test"
    runs = tmp_path / "runs"
    link_down = False
    try:
        before = digests(host, (COMMON_ACCOUNT,))
        common_args = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null " + KEEPALIVE
        with ScriptedLLM() as llm:
            llm.script_agents({None: DROP_TASKS})
            extra = {"scapforge_rules": [DROP_RULE], "scapforge_llm_base_url": llm.url,
                     "scapforge_llm_model": "scripted", "scapforge_llm_max_attempts": 1,
                     "scapforge_deadman_seconds": SWITCH, "scapforge_run_id": run_id,
                     "ansible_ssh_common_args": common_args}
            started = time.monotonic()
            proc = subprocess.Popen(playbook_argv(lab_inventory, host, runs, extra), cwd=REPO_ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                armed = wait_for(lambda: [e for e in events_of(runs, run_id) if e["event"] == "deadman"
                                          and e["data"].get("step") == "armed"], 600)
                assert armed, "the attempt never armed its dead-man switch"
                # drop the link once the first task changed the file (read in the container's root,
                # a controller path): the attempt is then in its slow second task
                marked = Path(str(host.root), COMMON_ACCOUNT.lstrip("/"))
                assert wait_for(lambda: "scapforge fault test" in marked.read_text(), 120), "the task never ran"
                veth(host, "down")
                link_down = True
                dropped_at = time.monotonic()
                out, _err = proc.communicate(timeout=600)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        # the switch fires on the target by itself; read its result from the container's root
        # (a controller path: the link is still down)
        opened = [json.loads(x) for x in (runs / run_id / "progress" / ("%s.jsonl" % host.name)).read_text()
                  .splitlines() if '"open"' in x]
        assert [o["rule"] for o in opened] == [PREFIX + DROP_RULE]
        result = Path(str(host.root), "var/lib/scapforge/checkpoints", run_id, opened[0]["checkpoint"],
                      "deadman", "result.json")
        fired = wait_for(lambda: result.is_file() and json.loads(result.read_text()), SWITCH + 60, 0.5)
        assert fired and fired.get("verified") is True, fired
        veth(host, "up")
        link_down = False
        recovered = wait_for(lambda: become_works(host), 60, 1)
        seconds = round(time.monotonic() - started, 1)
        assert recovered, "no login after the link came back"

        report = report_of(runs, host, run_id)
        assert report["stopped"] and "connection lost during %s" % DROP_RULE in report["stopped"], report["stopped"]
        assert "dead-man switch restores it by itself" in report["stopped"]
        outcome = report["rules"][DROP_RULE]
        assert (outcome["outcome"], outcome["reason"]) == ("escalated", "unhealthy"), outcome
        assert [a["verdict"] for a in outcome["attempt_log"]] == ["unhealthy"]
        assert "connection lost during the attempt" in outcome["attempt_log"][0]["detail"]
        assert time.monotonic() - dropped_at > SWITCH / 2  # the test really waited for the switch
        # the host's files are back, by the switch, and the host is manageable
        assert digests(host, (COMMON_ACCOUNT,)) == before
        assert "scapforge fault test" not in root(host, "cat %s" % COMMON_ACCOUNT)
        assert become_works(host)
        assert wait_for(lambda: root(host, "pgrep -x sleep || true").strip() == "", 30, 1)  # the task's own end

        # the same run again: it finds the interrupted attempt, already restored by the switch
        proc2 = subprocess.run(playbook_argv(lab_inventory, host, runs, dict(extra, ansible_ssh_common_args=common_args)),
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200, check=False)
        assert proc2.returncode == 0, proc2.stdout[-4000:]
        resumed = report_of(runs, host, run_id)["resumed"]
        assert resumed["count"] == 1
        assert [(i["rule"], i["rolled_back"], i["by"]) for i in resumed["interrupted"]] == [
            (DROP_RULE, True, "dead-man switch")], resumed
        assert digests(host, (COMMON_ACCOUNT,)) == before
        row("connection dropped mid-attempt (ve-%s down, switch %d s)" % (host.name, SWITCH),
            "host stopped: connection lost; the switch restored %s by itself; resume: rolled back by the "
            "dead-man switch" % COMMON_ACCOUNT, "yes (after the link came back)", become_works(host),
            "unhealthy (attempt undone)", "none", seconds)
    finally:
        if link_down:
            veth(host, "up")
        lab.reset([lab_host.name])


# ---------------------------------------------------------------------- (d) oscap killed

#: the oscap calls that crash kill themselves with SIGSEGV first.
SEGV = """    echo "scapforge fault test: SIGSEGV on call $n" >&2
    kill -SEGV $$"""


def test_oscap_killed_by_a_signal_while_verifying(lab, lab_host, lab_inventory, tmp_path, remediate):
    rule = "accounts_umask_etc_login_defs"
    host = lab.reset([lab_host.name])[0]
    files = ("/etc/login.defs",)
    before = digests(host, files)
    with wrapped_oscap(host, [2, 3], SEGV):
        with ScriptedLLM() as llm:  # an endpoint is there: the product must still not ask a Worker
            llm.script(lambda b: True, {"verdict": "PLAN", "plan": "p", "tasks": [], "diagnosis": "d"}, times=None)
            extra = {"scapforge_rules": [rule], "scapforge_llm_base_url": llm.url, "scapforge_llm_model": "scripted"}
            proc, seconds = timed(remediate, lab_inventory, host, tmp_path, extra)
            asked = list(llm.requests)
        assert proc.returncode == 0, proc.stdout[-4000:]
        # baseline, verify (killed), the verify run once more (killed again), rescan
        assert calls(host) == 4
        report = report_of(tmp_path, host)
        outcome = report["rules"][rule]
        assert (outcome["outcome"], outcome["reason"]) == ("escalated", "scanner_crash"), outcome
        assert [(a["source"], a["verdict"], a["reason"], a["rolled_back"]) for a in outcome["attempt_log"]] == [
            ("vendor", "failed", "scanner_crash", True)]
        assert "scanner crashed: oscap was killed by SIGSEGV" in outcome["detail"]
        assert "scapforge fault test: SIGSEGV on call 3" in outcome["detail"]  # the retried scan's word
        assert asked == []  # never a Worker (nor an Architect) for a scanner crash
        verify = [e["data"] for e in events_of(tmp_path) if e["event"] == "verify"]
        assert verify and verify[0].get("error_kind") == "scanner_crashed" and verify[0].get("tries") == 2
        retries = [e["data"] for e in events_of(tmp_path) if e["event"] == "scan_retry"]
        assert [(r["label"], r["error_kind"]) for r in retries] == [("verify", "scanner_crashed")]
        assert "SIGSEGV on call 2" in retries[0]["msg"]
        # later scans work: the rescan after the crash gave the run its counts
        assert report["after"] is not None and report["after_scan"] in ("rescan", "final")
        assert report["after"].get("fail", 0) >= 1 and report["stopped"] is None
        assert digests(host, files) == before  # the unjudged fix was rolled back
    after = own_oscap(host, [rule])
    row("oscap killed by SIGSEGV while verifying (%s)" % rule, "escalated scanner_crash, fix rolled back, "
        "no Worker call, rescan ok", "yes", become_works(host), after.get(rule), "none", seconds)
    try:
        assert after == {rule: "fail"}  # the scanner works again; the rule was left as it was
        assert_next_run_remediates(remediate, lab_inventory, host, tmp_path, rule)
    finally:
        lab.reset([lab_host.name])
