"""The dead-man switch and the command and lab checkpoint providers, for real on a lab host.

- systemd: armed for 20 s, then sudo AND sshd are broken for the connecting user (the
  sudoers rule asks for a password, sshd denies the user): nothing the controller can do
  reaches the host, and the target restores itself; a fresh login with sudo works again,
  the timer is gone, the result says verified (case sudo-nopasswd-lockout, issue 7).
- sleep (no systemd used): the same for sudo, armed over an SSH connection that closes
  right after the module (no ControlMaster), so the sleeper outlives its session.
- disarm in time (both methods, through FilesCheckpoint.arm/disarm from an action plugin):
  nothing is restored, the unit or process is gone.
- the command provider with plain shell commands (a tar of a directory) round trip.
- the lab provider: the host's overlay reset from the controller, verified by a fresh login
  with sudo. It resets this host; the module's teardown resets it again only when needed.

What the host says is read through separate SSH sessions; the timings (arm, disarm, how late
the switch fired) are printed at the end (pytest -s).
"""
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ACTION_PLUGINS = REPO_ROOT / "tests" / "integration" / "fixtures" / "action_plugins"
MODULE = "scapforge.remediation.checkpoint"
ROOT = "/var/lib/scapforge/checkpoints"
SUDOERS = "/etc/sudoers.d/scapforge"
SSHD_CONFIG = "/etc/ssh/sshd_config"
SCRATCH = "/var/tmp/scapforge-deadman"
NO_MULTIPLEXING = "-o ControlMaster=no -o ControlPath=none -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
TIMINGS = []
STATE = {"reset_by_lab_provider": False}


def _env(**extra):
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **extra)


def module(lab_host, inventory, args, label=None, **env):
    """Run the checkpoint module on the host (ansible ad hoc, become); return its result."""
    argv = [str(BIN / "ansible"), "-i", str(inventory), lab_host.name, "-b", "-m", MODULE, "-a", json.dumps(args)]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env=_env(ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1", **env),
                          check=False)
    wall = time.monotonic() - started
    assert proc.stdout.strip().startswith("{"), proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][lab_host.name]
    TIMINGS.append((label or args["state"], result.get("elapsed"), round(wall, 2)))
    return result


def sh(lab_host, command, check=True):
    """A shell command as root on the host (its own SSH session, sudo); stdout."""
    return lab_host.ssh("sudo sh -c %s" % shlex.quote(command), check=check).stdout


def login_and_sudo(lab_host):
    """(exit status, stderr) of a brand-new SSH login running ``sudo -n true``."""
    proc = lab_host.ssh("sudo -n true", check=False, timeout=20, connect_timeout=3)
    return proc.returncode, proc.stderr.strip()


def wait_for_login_and_sudo(lab_host, seconds):
    """Poll a fresh login + sudo once a second; the monotonic time it first worked, or None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if login_and_sudo(lab_host)[0] == 0:
            return time.monotonic()
        time.sleep(1)
    return None


def sha256(lab_host, path):
    return sh(lab_host, "sha256sum " + shlex.quote(path)).split()[0]


def wait_for_result(lab_host, cid, seconds):
    """True once the fired switch has written deadman/result.json, polling for up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if sh(lab_host, "[ -e %s/%s/deadman/result.json ] && echo fired || echo quiet" % (ROOT, cid)).strip() == "fired":
            return True
        time.sleep(0.5)
    return False


def unit_load_states(lab_host, unit):
    out = sh(lab_host, "systemctl show -p LoadState --value %s.timer %s.service" % (unit, unit))
    return out.split()


def run_steps(tmp_path, lab_host, inventory, provider, cid, steps, options=None, attach=False):
    """Run the checkpoint_provider_steps action plugin (a real action plugin) on the host."""
    report_path = tmp_path / ("report-%s-%s.json" % (cid, "attach" if attach else "open"))
    play = [{"hosts": lab_host.name, "gather_facts": False, "tasks": [{"checkpoint_provider_steps": {
        "provider": provider, "options": options or {}, "id": cid, "steps": steps, "attach": attach,
        "report_path": str(report_path)}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), "-l", lab_host.name,
                           str(tmp_path / "play.yml")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                          env=_env(ANSIBLE_ACTION_PLUGINS=str(ACTION_PLUGINS)), check=False)
    assert proc.returncode == 0 and report_path.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(report_path.read_text())
    for entry in report["steps"]:
        assert "error" not in entry, entry
    return report


@pytest.fixture(scope="module", autouse=True)
def reset_at_the_end(lab, lab_host):
    """Print the timings; put the host back to its baseline (lab.reset) unless the lab
    provider's test has just done exactly that."""
    yield
    if TIMINGS:
        print("\ndead-man switch calls (target seconds / ansible wall seconds):")
        for call, target, wall in TIMINGS:
            print("  %-44s %8s s  %6.2f s" % (call, target, wall))
    if not STATE["reset_by_lab_provider"]:
        lab.reset([lab_host.name])


@pytest.fixture
def host(lab_host):
    """The host with sudoers and sshd_config saved aside by the test user; if a test leaves
    them broken and the switch did not heal them, the teardown cannot log in: the module's
    final lab.reset does it."""
    sh(lab_host, "mkdir -p %s" % SCRATCH)
    yield lab_host
    if login_and_sudo(lab_host)[0] == 0:
        sh(lab_host, "rm -rf %s %s/dm-*" % (SCRATCH, ROOT), check=False)


def test_systemd_switch_heals_sudo_and_sshd_with_the_controller_locked_out(host, lab_inventory):
    sudoers_sum, sshd_sum = sha256(host, SUDOERS), sha256(host, SSHD_CONFIG)
    cid = "dm-%d-systemd" % os.getpid()
    saved = module(host, lab_inventory, {"state": "save", "id": cid, "fresh": True, "paths": [SUDOERS, SSHD_CONFIG]},
                   label="save (sudoers, sshd_config)")
    assert saved["saved"] == [SUDOERS, SSHD_CONFIG]
    armed_at = time.monotonic()
    armed = module(host, lab_inventory, {"state": "arm", "id": cid, "timeout": 20, "method": "systemd",
                                         "post_restore": ["systemctl reload ssh"]}, label="arm (systemd, 20 s)")
    dm = armed["deadman"]
    assert armed["changed"] is True and dm["armed"] is True and dm["method"] == "systemd"
    assert dm["unit"] == "scapforge-deadman-" + cid and dm["timeout"] == 20 and dm["pid"] is None
    assert unit_load_states(host, dm["unit"]) == ["loaded", "loaded"]
    assert sh(host, "systemctl is-active %s.timer" % dm["unit"]).strip() == "active"

    # the lock-out: sudo wants a password, sshd refuses the user; nothing more runs as root from here
    host.ssh("sudo sh -c %s" % shlex.quote(
        "printf 'scapforge ALL=(ALL) ALL\\n' > %s && echo 'DenyUsers scapforge' >> %s && systemctl reload ssh"
        % (SUDOERS, SSHD_CONFIG)))
    for dummy in range(20):                     # sshd re-executes on reload: a moment of "Connection refused"
        rc, err = login_and_sudo(host)
        if "Connection refused" not in err:
            break
        time.sleep(0.25)
    assert rc == 255 and "Permission denied" in err, err           # a fresh login is refused
    broken_at = time.monotonic()

    healed_at = wait_for_login_and_sudo(host, 60)
    assert healed_at is not None, "the dead-man switch did not restore login + sudo within 60 s"
    assert 18 <= healed_at - armed_at <= 40, healed_at - armed_at  # not before its time, not much after
    status = module(host, lab_inventory, {"state": "status", "id": cid}, label="status (after firing)")
    dm = status["deadman"]
    assert dm["fired"] is True and dm["armed"] is False and dm["lost"] is False
    result = dm["result"]
    assert result["verified"] is True and result["mismatches"] == [] and result["error"] is None
    assert result["restored"] == [SSHD_CONFIG, SUDOERS] and result["method"] == "systemd"   # parents first, by name
    assert result["post_restore"] == [{"command": "systemctl reload ssh", "rc": 0, "output": "",
                                       "seconds": result["post_restore"][0]["seconds"]}]
    assert 0 <= result["fired_at"] - dm["fires_at"] < 5              # AccuracySec=1s
    assert unit_load_states(host, dm["unit"]) == ["not-found", "not-found"]   # the timer removed itself
    assert sha256(host, SUDOERS) == sudoers_sum and sha256(host, SSHD_CONFIG) == sshd_sum
    journal = sh(host, "journalctl -q -o cat -u %s.service" % dm["unit"])
    assert "restored 2, removed 0, verified" in journal

    off = module(host, lab_inventory, {"state": "disarm", "id": cid}, label="disarm (after firing)")
    assert off["changed"] is True and off["deadman"]["fired"] is True and off["deadman"]["cancelled"] is False
    assert off["deadman"]["result"] == result
    again = module(host, lab_inventory, {"state": "disarm", "id": cid})
    assert again["changed"] is False and again["deadman"]["fired"] is True
    gone = module(host, lab_inventory, {"state": "discard", "id": cid})
    assert gone["discarded"] is True and gone["deadman"]["fired"] is True
    TIMINGS.append(("locked out -> login + sudo work again", None, round(healed_at - broken_at, 2)))
    TIMINGS.append(("systemd fired after fires_at", None, round(result["fired_at"] - dm["fires_at"], 2)))
    TIMINGS.append(("fired restore + post_restore (target)", result["seconds"], 0.0))


def test_sleep_switch_heals_sudo_without_systemd_after_its_session_closed(host, lab_inventory):
    sudoers_sum = sha256(host, SUDOERS)
    cid = "dm-%d-sleep" % os.getpid()
    module(host, lab_inventory, {"state": "save", "id": cid, "fresh": True, "paths": [SUDOERS]})
    armed = module(host, lab_inventory, {"state": "arm", "id": cid, "timeout": 12, "method": "sleep"},
                   label="arm (sleep, 12 s, no ControlMaster)", ANSIBLE_SSH_ARGS=NO_MULTIPLEXING)
    dm = armed["deadman"]
    assert dm["method"] == "sleep" and dm["unit"] is None and dm["pid"] > 1
    assert dm["method_why"] == "method=sleep was asked for"
    ps = host.ssh("ps -o sid=,args= -p %d" % dm["pid"]).stdout.split()
    assert ps[0] == str(dm["pid"])                                   # it leads a session of its own
    assert ps[1:4] == ["/bin/sh", "-c", "sleep"] and dm["program"] in ps
    host.ssh("sudo sh -c %s" % shlex.quote("printf 'scapforge ALL=(ALL) ALL\\n' > %s" % SUDOERS))
    rc, err = login_and_sudo(host)
    assert rc == 1 and "a password is required" in err, err

    healed_at = wait_for_login_and_sudo(host, 45)
    assert healed_at is not None, "the sleep dead-man switch did not restore sudo within 45 s"
    assert host.ssh("ps -p %d" % dm["pid"], check=False).returncode == 1   # the sleeper ended
    off = module(host, lab_inventory, {"state": "disarm", "id": cid}, label="disarm (after firing)")
    result = off["deadman"]["result"]
    assert off["deadman"]["fired"] is True and result["verified"] is True and result["method"] == "sleep"
    assert result["restored"] == [SUDOERS] and result["pid"] == dm["pid"]
    assert 0 <= result["fired_at"] - dm["fires_at"] < 3
    assert sha256(host, SUDOERS) == sudoers_sum
    log = sh(host, "cat %s/%s/deadman/fire.log" % (ROOT, cid))
    assert "restored 1, removed 0, verified" in log
    TIMINGS.append(("sleep fired after fires_at", None, round(result["fired_at"] - dm["fires_at"], 2)))


@pytest.mark.parametrize("method", ["systemd", "sleep"])
def test_disarmed_in_time_nothing_is_restored(tmp_path, host, lab_inventory, method):
    """Through FilesCheckpoint.arm/disarm in an action plugin: arm before the first change,
    arm again (no-op), a task changes a file under the checkpoint, disarm: cancelled, the
    unit or process is gone, and past its time nothing was put back."""
    target = "%s/%s.conf" % (SCRATCH, method)
    sh(host, "printf 'setting=1\\n' > %s" % target)
    cid = "dm-%d-disarm-%s" % (os.getpid(), method)
    report = run_steps(tmp_path, host, lab_inventory, "files", cid, [
        {"arm": {"timeout": 8, "method": method}},
        {"arm": {"timeout": 60, "method": method}},
        {"task": {"module": "ansible.builtin.lineinfile", "args": {"path": target, "line": "setting=2",
                                                                   "regexp": "^setting="}}},
        {"deadman_status": {}},
        {"disarm": {}},
        {"disarm": {}},
    ])
    armed, again, task, status, off, twice = (e.get("result") for e in report["steps"])
    assert armed["armed"] is True and armed["method"] == method and armed["timeout"] == 8
    assert again["armed"] is True and again["timeout"] == 8 and (again["unit"], again["pid"]) == (armed["unit"],
                                                                                                  armed["pid"])
    assert report["steps"][2]["covered"] == [target] and task["changed"] is True
    assert status["armed"] is True and 0 < status["fires_in"] <= 8
    assert off["cancelled"] is True and off["fired"] is False and off["result"] is None and off["armed"] is False
    assert off["detail"] == "dead-man switch disarmed before it fired (%s stopped)" % (
        "systemd timer %s.timer" % armed["unit"] if method == "systemd" else "process %d" % armed["pid"])
    assert twice["cancelled"] is True and twice["fired"] is False
    if method == "systemd":
        assert unit_load_states(host, armed["unit"]) == ["not-found", "not-found"]
    else:
        assert host.ssh("ps -p %d" % armed["pid"], check=False).returncode == 1
    time.sleep(max(0.0, armed["fires_at"] + 3 - time.time()))      # the container shares this clock
    assert sh(host, "cat %s" % target) == "setting=2\n"              # nothing restored it
    assert sh(host, "[ -e %s/%s/deadman/result.json ] && echo fired || echo quiet" % (ROOT, cid)).strip() == "quiet"
    calls = report["checkpoint"]["calls"]
    assert [c["state"] for c in calls] == ["arm", "arm", "save", "status", "disarm", "disarm"]
    TIMINGS.append(("provider arm (%s)" % method, calls[0]["target_seconds"], calls[0]["seconds"]))
    TIMINGS.append(("provider disarm (%s)" % method, calls[4]["target_seconds"], calls[4]["seconds"]))


def test_a_verified_restore_disarms_the_switch(tmp_path, host, lab_inventory):
    target = SCRATCH + "/restored.conf"
    sh(host, "printf 'a=1\\n' > %s" % target)
    cid = "dm-%d-restore" % os.getpid()
    report = run_steps(tmp_path, host, lab_inventory, "files", cid, [
        {"arm": {"timeout": 300}},
        {"task": {"module": "ansible.builtin.lineinfile", "args": {"path": target, "line": "a=2", "regexp": "^a="}}},
        {"restore": {}},
    ])
    armed, _task, restore = (e["result"] for e in report["steps"])
    assert restore["verified"] is True and restore["restored"] == [target]
    assert restore["detail"] == ("restored 1, removed 0, verified; dead-man switch disarmed before it fired "
                                 "(systemd timer %s.timer stopped)" % armed["unit"])
    assert report["steps"][2]["deadman"]["cancelled"] is True
    assert unit_load_states(host, armed["unit"]) == ["not-found", "not-found"]
    assert sh(host, "cat %s; [ -e %s/%s ] || echo discarded" % (target, ROOT, cid)) == "a=1\ndiscarded\n"


def test_a_later_controller_finds_the_fired_switch_and_its_result(tmp_path, host, lab_inventory):
    """The resume case: the controller that armed the switch is gone (its process ended right
    after the change); the switch fires; a new controller process attaches to the checkpoint
    by id, learns that it fired and how it went, and its restore is a verified no-op that
    says so and discards the checkpoint."""
    target = SCRATCH + "/resume.conf"
    sh(host, "printf 'r=1\\n' > %s" % target)
    cid = "dm-%d-resume" % os.getpid()
    first = run_steps(tmp_path, host, lab_inventory, "files", cid, [
        {"arm": {"timeout": 5}},
        {"task": {"module": "ansible.builtin.lineinfile", "args": {"path": target, "line": "r=2", "regexp": "^r="}}},
    ])
    armed = first["steps"][0]["result"]
    time.sleep(max(0.0, armed["fires_at"] - time.time()))
    # the fired program's own python start and restore run on a loaded lab host: wait for its
    # result rather than a fixed margin (the systemd test above bounds how late it fires)
    assert wait_for_result(host, cid, 60), "the dead-man switch left no result within 60 s of fires_at"
    assert sh(host, "cat %s" % target) == "r=1\n"                   # restored by the target alone
    later = run_steps(tmp_path, host, lab_inventory, "files", cid, [{"deadman_status": {}}, {"restore": {}}],
                      attach=True)
    status, restore = (e["result"] for e in later["steps"])
    assert status["fired"] is True and status["armed"] is False and status["result"]["verified"] is True
    assert status["result"]["restored"] == [target] and status["detail"].startswith(
        "restored on the target by the dead-man switch (systemd) at ")
    assert status["detail"].endswith(" UTC: restored 1, removed 0, verified")
    assert restore["verified"] is True and restore["restored"] == [] and restore["removed"] == []
    assert restore["detail"].startswith("restored 0, removed 0, verified; restored on the target by the dead-man "
                                        "switch (systemd) at ")
    assert sh(host, "[ -e %s/%s ] && echo kept || echo discarded" % (ROOT, cid)).strip() == "discarded"


def test_command_provider_tar_round_trip(tmp_path, host, lab_inventory):
    data = SCRATCH + "/data"
    sh(host, "mkdir -p %s/sub && printf 'A=1\\n' > %s/a.conf && printf 'B=2\\n' > %s/sub/b.conf && chmod 0640 %s/a.conf"
       % (data, data, data, data))
    snap = SCRATCH + "/snap-{id}"
    options = {
        "snapshot": "tar -C %s -cpf %s.tar data && cd %s && find data | sort | xargs stat -c '%%n %%a %%U' > %s.meta && "
                    "find data -type f | sort | xargs sha256sum > %s.sums && echo snapshot {id} of {host}"
                    % (SCRATCH, snap, SCRATCH, snap, snap),
        "restore": "rm -rf %s && tar -C %s -xpf %s.tar" % (data, SCRATCH, snap),
        "verify": "cd %s && sha256sum --quiet -c %s.sums && find data | sort | xargs stat -c '%%n %%a %%U' | "
                  "cmp - %s.meta" % (SCRATCH, snap, snap),
        "discard": "rm -f %s.tar %s.sums %s.meta" % (snap, snap, snap),
        "timeout": 60,
    }
    before = sh(host, "cd %s && find data -printf '%%p %%m %%u\\n' | sort && find data -type f | sort | xargs sha256sum"
                % SCRATCH)
    cid = "cmd-%d-1" % os.getpid()
    report = run_steps(tmp_path, host, lab_inventory, "command", cid, [
        {"task": {"module": "ansible.builtin.lineinfile", "args": {"path": data + "/a.conf", "line": "A=2",
                                                                   "regexp": "^A="}}},
        {"task": {"module": "ansible.builtin.copy", "args": {"dest": data + "/new.conf", "content": "N\n"}}},
        {"task": {"module": "ansible.builtin.file", "args": {"path": data + "/sub/b.conf", "mode": "0600"}}},
        {"restore": {}},
    ], options)
    assert report["whole_host"] is True and report["supports_deadman"] is False
    steps = report["steps"]
    assert [s["covered"] for s in steps[:3]] == [[data + "/a.conf"], [data + "/new.conf"], [data + "/sub/b.conf"]]
    assert all(s["result"]["changed"] for s in steps[:3])
    restore = steps[3]["result"]
    assert restore["verified"] is True and restore["mismatches"] == []
    assert restore["restored"] == [data + "/a.conf", data + "/new.conf", data + "/sub/b.conf"]
    calls = report["checkpoint"]["calls"]
    assert [c["what"] for c in calls] == ["snapshot", "restore", "verify"]
    assert calls[0]["output"] == "snapshot %s of %s" % (cid, host.name)   # {id} and {host} substituted
    assert calls[0]["command"].startswith("tar -C %s -cpf %s/snap-%s.tar data" % (SCRATCH, SCRATCH, cid))
    after = sh(host, "cd %s && find data -printf '%%p %%m %%u\\n' | sort && find data -type f | sort | xargs sha256sum"
               % SCRATCH)
    assert after == before

    # verify fails: the restore is not verified, and the detail carries the command's output
    cid2 = "cmd-%d-2" % os.getpid()
    report = run_steps(tmp_path, host, lab_inventory, "command", cid2, [
        {"task": {"module": "ansible.builtin.lineinfile", "args": {"path": data + "/a.conf", "line": "A=3",
                                                                   "regexp": "^A="}}},
        {"restore": {}},
        {"discard": {}},
    ], dict(options, restore="true", verify=options["verify"] + " || { echo 'a.conf: FAILED'; exit 4; }"))
    restore = report["steps"][1]["result"]
    assert restore["verified"] is False and restore["restored"] == [] and len(restore["mismatches"]) == 1
    mismatch = restore["mismatches"][0]
    assert mismatch.startswith("verify command exited 4: ") and mismatch.endswith("\na.conf: FAILED"), mismatch
    assert "data/a.conf: FAILED" in mismatch and "\r" not in mismatch   # sha256sum's own words, one \n per line
    assert restore["detail"].startswith("snapshot restored by command (exit 0); verify exited 4: ")
    assert [c["what"] for c in report["checkpoint"]["calls"]] == ["snapshot", "restore", "verify", "discard"]
    left = sh(host, "ls %s" % SCRATCH).split()
    assert "snap-%s.tar" % cid in left and not [n for n in left if n.startswith("snap-%s." % cid2)]


def test_lab_provider_resets_the_host_and_proves_login_and_sudo(tmp_path, host, lab_inventory):
    """Last in this file: the restore resets this host's overlay (lab/lab.py reset, run on
    the controller), so everything since it booted is gone; verified by a fresh login + sudo."""
    marker = "/etc/scapforge-lab-provider-marker"
    issue = sh(host, "cat /etc/issue")
    report = run_steps(tmp_path, host, lab_inventory, "lab", "lab-%d-1" % os.getpid(), [
        {"task": {"module": "ansible.builtin.copy", "args": {"dest": marker, "content": "x\n"}}},
        {"task": {"module": "ansible.builtin.lineinfile", "args": {"path": "/etc/issue", "line": "hardened"}}},
        {"restore": {}},
    ])
    STATE["reset_by_lab_provider"] = True
    restore = report["steps"][2]["result"]
    assert restore["verified"] is True and restore["mismatches"] == [], restore
    assert restore["restored"] == [marker, "/etc/issue"]
    assert "lab/lab.py reset %s (exit 0), back to the lab baseline: every change since the host booted is gone" \
        % host.name in restore["detail"]
    assert restore["detail"].endswith("fresh login and sudo ok")
    assert report["whole_host"] is True
    calls = report["checkpoint"]["calls"]
    assert [c["what"] for c in calls] == ["restore", "verify"] and calls[0]["argv"][0] == sys.executable
    assert sh(host, "[ -e %s ] && echo there || echo gone" % marker).strip() == "gone"
    assert sh(host, "cat /etc/issue") == issue
    assert login_and_sudo(host)[0] == 0
    TIMINGS.append(("lab provider restore (reset + verify)", None, restore["seconds"]))
