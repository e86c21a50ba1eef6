"""The lab, for real: booted Debian 12 containers reached over SSH, and a controller left
exactly as it was (devices, sysctls, mounts) after a host is built and destroyed."""

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scapforge_lab import (DATASTREAM_PATH, DATASTREAM_SHA256, PROXY_PORT, LabError, _children, _port_open,
                           mounts_under, pid_alive, sha256_file)

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# A name reserved for this test, so it never touches the hosts other tests (or people) use.
SCRATCH_HOST = "lab254"
SYSCTLS = ("net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv6/conf/all/forwarding",
           "net/ipv4/conf/all/send_redirects", "kernel/dmesg_restrict", "kernel/kptr_restrict",
           "kernel/randomize_va_space", "kernel/sysrq", "kernel/yama/ptrace_scope",
           "kernel/unprivileged_bpf_disabled", "fs/protected_symlinks", "fs/protected_hardlinks",
           "fs/suid_dumpable")


def _sysctls():
    values = {}
    for name in SYSCTLS:
        path = Path("/proc/sys") / name
        if path.exists():
            values[name] = path.read_text().strip()
    return values


def _dev_null():
    info = os.stat("/dev/null")
    return stat.S_ISCHR(info.st_mode), os.major(info.st_rdev), os.minor(info.st_rdev)


def _ansible_env():
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
                PATH="%s:%s" % (BIN, os.environ.get("PATH", "")))


def test_host_answers_ssh_as_scapforge_with_sudo(lab_host):
    out = lab_host.ssh("id -un; sudo -n id -u; hostname; cat /etc/machine-id; ip -4 -br addr show host0")
    user, root_uid, hostname, machine_id, addr = out.stdout.strip().splitlines()
    assert user == "scapforge"
    assert root_uid == "0"
    assert hostname == lab_host.name
    assert len(machine_id) == 32 and machine_id != "0" * 32
    assert lab_host.address + "/30" in addr
    # systemd is PID 1 and the boot finished with no failed unit.
    state = lab_host.ssh("systemctl is-system-running --wait", check=False, timeout=60)
    assert state.stdout.strip() == "running", lab_host.ssh("systemctl --failed", check=False).stdout


def test_ansible_reaches_host_over_ssh_with_generated_inventory(lab_host, lab_inventory):
    hostvars = json.loads(subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(lab_inventory), "--host", lab_host.name],
        capture_output=True, text=True, check=True, env=_ansible_env()).stdout)
    assert hostvars["ansible_host"] == lab_host.address
    assert hostvars["ansible_user"] == "scapforge" and hostvars["ansible_become"] is True
    ping = subprocess.run([str(BIN / "ansible"), lab_host.name, "-i", str(lab_inventory),
                           "-m", "ping", "-o"], capture_output=True, text=True, timeout=120,
                          env=_ansible_env(), cwd=str(REPO_ROOT), check=False)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert '"ping": "pong"' in ping.stdout
    become = subprocess.run([str(BIN / "ansible"), lab_host.name, "-i", str(lab_inventory),
                             "-m", "command", "-a", "id -un", "-o"], capture_output=True,
                            text=True, timeout=120, env=_ansible_env(), cwd=str(REPO_ROOT), check=False)
    assert become.returncode == 0, become.stdout + become.stderr
    assert "(stdout) root" in become.stdout


def test_oscap_and_verified_datastream_on_host(lab, lab_host):
    assert lab_host.ssh("oscap --version").stdout.startswith("OpenSCAP command line tool (oscap) 1.3")
    digest = lab_host.ssh("sha256sum %s" % DATASTREAM_PATH).stdout.split()[0]
    assert digest == DATASTREAM_SHA256
    assert sha256_file(lab.datastream) == DATASTREAM_SHA256


def test_packages_come_only_through_the_lab_proxy(lab_host):
    routes = lab_host.ssh("ip route; ip -6 route").stdout
    assert "default" not in routes, routes
    update = lab_host.ssh("sudo -n apt-get update", timeout=180)
    assert "deb.debian.org/debian bookworm" in update.stdout
    # The proxy forwards to the Debian mirror only.
    probe = lab_host.ssh(
        "python3 -c \"import urllib.request as u; o=u.build_opener(u.ProxyHandler("
        "{'http': '%s'}));\ntry: o.open('http://example.com/', timeout=10)\n"
        "except Exception as e: print(e)\"" % lab_host.proxy_url)
    assert "403" in probe.stdout, probe.stdout


FLAKY_UNIT = "[Service]\nType=oneshot\nExecStart=/bin/sh -c '%s'\n"


def test_a_unit_failed_at_boot_is_started_again_and_one_that_keeps_failing_is_named(lab, lab_host):
    # what Lab.wait_ready does after every boot (seen: systemd-sysusers 219/CGROUP when two
    # hosts boot at once)
    def failing_unit(script):
        lab_host.ssh("printf %s | sudo tee /etc/systemd/system/scapforge-flaky.service >/dev/null && "
                     "sudo systemctl daemon-reload; sudo systemctl start scapforge-flaky; true"
                     % shlex.quote(FLAKY_UNIT % script))
    try:
        failing_unit("test -e /run/flaky-ok || { touch /run/flaky-ok; exit 1; }")
        assert lab_host.ssh("systemctl is-system-running", check=False).stdout.strip() == "degraded"
        lab._settle_boot(lab_host, 30)
        assert lab_host.ssh("systemctl is-system-running", check=False).stdout.strip() == "running"
        failing_unit("exit 1")
        with pytest.raises(LabError, match="boot ended 'degraded'; failed units: scapforge-flaky.service"):
            lab._settle_boot(lab_host, 30)
    finally:
        lab.reset([lab_host.name])


def test_reset_brings_host_back_to_baseline(lab, lab_host):
    lab_host.ssh("sudo -n touch /etc/scapforge-marker && echo changed > ~/marker")
    assert lab_host.ssh("ls /etc/scapforge-marker ~/marker", check=False).returncode == 0
    old_pid = lab.host(lab_host.name).pid
    (host,) = lab.reset([lab_host.name])
    assert host.pid != old_pid and host.address == lab_host.address
    gone = host.ssh("ls /etc/scapforge-marker ~/marker", check=False)
    assert gone.returncode != 0 and "No such file" in gone.stderr
    assert host.ssh("sudo -n id -u").stdout.strip() == "0"


def test_build_and_destroy_leave_controller_untouched(lab):
    sysctls, dev_null = _sysctls(), _dev_null()
    assert dev_null == (True, 1, 3)
    mounts_before = set(mounts_under(lab.home))
    times = lab.build()
    assert times["rootfs"] < 5 and times["image"] < 5, times  # cached: nothing rebuilt

    (host,) = lab.start([SCRATCH_HOST])
    hostdir = lab.hosts_dir / SCRATCH_HOST
    assert str(hostdir / "merged") in mounts_under(lab.home)
    assert os.path.exists("/sys/class/net/ve-" + SCRATCH_HOST)
    # Inside, /proc/sys is read-only: writing a kernel-wide sysctl (its current value) fails.
    current = sysctls["kernel/dmesg_restrict"]
    write = host.ssh("sudo -n sh -c 'echo %s > /proc/sys/kernel/dmesg_restrict'" % current,
                     check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr, write
    # The container's own PID namespace: its PID 1 is its systemd, not the controller's init.
    assert host.ssh("sudo -n cat /proc/1/comm").stdout.strip() == "systemd"

    lab.stop(SCRATCH_HOST)
    assert not pid_alive(host.pid, ("systemd-nspawn",))
    assert not pid_alive(host.proxy_pid, ("tinyproxy",))
    assert host.name not in [h.name for h in lab.hosts()]
    assert not os.path.exists("/sys/class/net/ve-" + SCRATCH_HOST)
    assert mounts_under(hostdir) == []
    assert not (hostdir / "upper").exists() and not (hostdir / "work").exists()
    assert set(mounts_under(lab.home)) == mounts_before
    assert _dev_null() == (True, 1, 3)
    assert _sysctls() == sysctls


BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


def _nspawns(root):
    """PIDs of the systemd-nspawn processes (supervisor included) running ``root``."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and pid_alive(int(p), ("systemd-nspawn", str(root)))]


def _new_boot_id(host, old, timeout=120):
    """The host's boot id once it answers SSH with one other than ``old``; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = host.ssh(BOOT_ID, check=False, timeout=15, connect_timeout=2)
        if proc.returncode == 0 and proc.stdout.strip() not in ("", old):
            return proc.stdout.strip()
        time.sleep(1)
    raise AssertionError("%s: no new boot id over SSH within %ss" % (host.name, timeout))


def test_a_reboot_inside_boots_the_host_again_on_its_own_layer_and_stop_ends_it(lab, lab_host):
    before = lab.host(lab_host.name)
    (first_nspawn,) = [p for p in _children(before.pid) if pid_alive(p, ("systemd-nspawn", str(before.root)))]
    old_boot = lab_host.ssh(BOOT_ID).stdout.strip()
    lab_host.ssh("echo kept | sudo -n tee /etc/scapforge-reboot-marker >/dev/null")
    try:
        started = time.monotonic()
        lab_host.ssh("sudo -n systemctl reboot", check=False, timeout=30)
        assert _new_boot_id(lab_host, old_boot) != old_boot
        print("reboot took %.1f s" % (time.monotonic() - started))
        assert lab_host.ssh("cat /etc/scapforge-reboot-marker").stdout.strip() == "kept"  # same upper layer
        after = lab.host(lab_host.name)  # still recognised, by the same supervisor
        assert after.pid == before.pid
        nspawns = [p for p in _children(after.pid) if pid_alive(p, ("systemd-nspawn", str(after.root)))]
        assert len(nspawns) == 1 and nspawns[0] != first_nspawn
        assert "the container rebooted (nspawn exited 133)" in (lab.hosts_dir / after.name / "console.log").read_text(
            errors="replace")
        assert _port_open(after.host_address, PROXY_PORT)  # the veth address came back, the proxy answers on it
        lab.wait_ready([after], timeout=60)  # sudo works and no unit failed
        lab.stop(after.name)
        assert _nspawns(after.root) == []
        assert after.name not in [h.name for h in lab.hosts()]
    finally:
        if lab_host.name not in [h.name for h in lab.hosts()]:
            lab.start([lab_host.name])


def test_a_host_of_another_lab_home_is_neither_booted_over_nor_cut_off(lab):
    """Two lab homes on one machine (a fresh-machine `make demo` beside the main lab): a host
    name running from the other home is refused here, and stopping it here leaves its veth."""
    name, veth = "lab250", "ve-lab250"
    foreign_root = "/var/tmp/scapforge-other-home/hosts/%s/merged" % name
    subprocess.run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "vp-lab250"], check=True)
    # a process with the command line the other home's supervisor has (it never boots anything)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--",
                               "/usr/bin/systemd-nspawn", "--register=no", "-D", foreign_root, "-b",
                               "--network-veth", "-M", name], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not lab.foreign_roots(name) and time.monotonic() < deadline:  # until its exec is done
            time.sleep(0.05)
        assert lab.foreign_roots(name) == [foreign_root]
        with pytest.raises(LabError, match="lab250 runs already from another lab home .*/scapforge-other-home/"):
            lab.start([name])
        lab.stop(name)
        assert Path("/sys/class/net/" + veth).exists()  # still the other home's
        assert not (lab.hosts_dir / name / "merged").is_mount()
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["ip", "link", "del", veth], check=False)
    assert lab.foreign_roots(name) == []
    assert lab.foreign_roots("lab1") == []  # the hosts of this home are its own
