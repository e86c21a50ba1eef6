#!/usr/bin/env python3
"""Supervise one lab host's ``systemd-nspawn``: boot it again when the container rebooted.

    nspawn_supervise.py --veth ve-labN --address 10.87.N.1/30 [--ip /usr/sbin/ip] -- NSPAWN_ARGV...

A ``reboot`` inside a booted container ends its ``systemd-nspawn`` with exit status 133
(systemd's "reboot requested"). The process that ran ``lab.py up`` is gone by then, so this
small process, started by ``Lab._boot`` in its place, runs nspawn and, on exit status 133
only, runs the same command line again: same overlay (the upper layer is kept), and once
nspawn has created the veth again, the controller side gets its address back (as
``Lab._boot`` gives it on the first boot). Any other exit status ends the supervisor with
that status; a signal ends it with 128 + the signal's number.

SIGTERM, SIGINT and SIGHUP are passed on to nspawn (SIGTERM shuts the container down
cleanly) and no restart follows. Its command line contains nspawn's, so the lab recognises
it as the host's process (``pid_alive(pid, ("systemd-nspawn", root))``).

Standard library only; the lab runs it as root with the controller's Python.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

#: systemd-nspawn's exit status when the container asked for a reboot.
REBOOT_STATUS = 133
#: more restarts than this within RESTART_WINDOW seconds: a boot loop, give up.
MAX_RESTARTS, RESTART_WINDOW = 5, 120.0
VETH_WAIT = 20.0


class Supervisor:
    """Runs ``argv`` (nspawn) until it exits with a status other than 133 or is signalled."""

    def __init__(self, argv, veth, address, ip="ip", log=None):
        self.argv = list(argv)
        self.veth = veth
        self.address = address
        self.ip = ip
        self.log = log or (lambda line: print("nspawn_supervise: " + line, flush=True))
        self.child = None
        self.stopping = None  # the signal number that asked us to stop

    def _on_signal(self, signum, _frame):
        self.stopping = signum
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def install_handlers(self):
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)

    def run(self):
        """Supervise; returns the exit status to end with (int)."""
        restarts, rebooted = [], False
        while True:
            self.child = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL)
            if self.stopping is not None:  # a signal came while nspawn was starting
                self.child.send_signal(self.stopping)
            if rebooted and not self.address_veth():
                return 1
            status = self.child.wait()
            if self.stopping is not None:
                return 128 + self.stopping
            if status != REBOOT_STATUS:
                self.log("nspawn exited %s: not restarting" % status)
                return status if status >= 0 else 128 - status
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < RESTART_WINDOW] + [now]
            if len(restarts) > MAX_RESTARTS:
                self.log("%d reboots within %.0f s: a boot loop, not restarting" % (len(restarts), RESTART_WINDOW))
                return status
            self.log("the container rebooted (nspawn exited %d): booting it again" % status)
            rebooted = True

    def address_veth(self):
        """Wait for nspawn to create the veth, then give its controller side the address and
        bring it up. Returns False (and stops nspawn) when the veth never appears."""
        deadline = time.monotonic() + VETH_WAIT
        while not os.path.exists("/sys/class/net/" + self.veth):
            if self.stopping is not None or self.child.poll() is not None:
                return True  # the outer loop reads the exit status
            if time.monotonic() > deadline:
                self.log("%s did not appear within %.0f s: stopping the container" % (self.veth, VETH_WAIT))
                self.child.terminate()
                self.child.wait()
                return False
            time.sleep(0.05)
        for argv in ([self.ip, "addr", "replace", self.address, "dev", self.veth],
                     [self.ip, "link", "set", self.veth, "up"]):
            proc = subprocess.run(argv, capture_output=True, text=True)
            if proc.returncode != 0:
                self.log("%s exited %d: %s" % (" ".join(argv), proc.returncode, proc.stderr.strip()))
        return True


def main(argv=None):
    parser = argparse.ArgumentParser(prog="nspawn_supervise.py", description=__doc__.splitlines()[0])
    parser.add_argument("--veth", required=True)
    parser.add_argument("--address", required=True, help="controller side, with its prefix (10.87.N.1/30)")
    parser.add_argument("--ip", default="ip")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no nspawn command line after --")
    supervisor = Supervisor(command, args.veth, args.address, args.ip)
    supervisor.install_handlers()
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
