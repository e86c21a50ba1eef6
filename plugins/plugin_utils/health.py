"""Can the controller still manage the host? A fresh login plus privilege escalation.

Checked after every applied fix (shared/cases sudo-nopasswd-lockout): a NEW connection,
not the multiplexed one the run holds open, because an sshd or PAM change only shows on a
new login; and the configured become (``sudo -n true`` for sudo without a password), because
a sudoers change only shows on a new escalation. The run's own connection stays open.

sshd reads its configuration only when it starts or reloads, and the content's sshd fixes
do not reload it: a new login tests the running sshd, not the new file. After a change to
sshd's configuration, ``check_sshd_config`` therefore starts a short-lived second sshd with
the new file on a spare port and logs in to it afresh (case sshd-match-override's cousin: a
PubkeyAuthentication no that would lock the controller out at the next reload).
"""

from __future__ import annotations

import dataclasses
import shlex
import time

from ansible.module_utils.common.text.converters import to_text

#: ssh options that force a brand-new TCP connection and authentication (OpenSSH ssh_config(5)).
FRESH_SSH_ARGS = "-o ControlMaster=no -o ControlPath=none -o BatchMode=yes -o ConnectTimeout=15 -o LogLevel=ERROR"
#: options of the user's ssh_args that would let the check ride on the open connection.
_MULTIPLEXING = ("controlmaster", "controlpath", "controlpersist")


def fresh_ssh_args(ssh_args: str | None) -> str:
    """The user's ``ssh_args`` without connection multiplexing, plus ``FRESH_SSH_ARGS``.

    Everything else the user set (IdentityFile, ProxyJump, -F config) is kept: the check must
    log in the way the next Ansible run will. Handles ``-o Key=value`` and ``-oKey=value``.
    """
    words = shlex.split(ssh_args or "")
    kept: list[str] = []
    skip_next = False
    for index, word in enumerate(words):
        if skip_next:
            skip_next = False
            continue
        option = None
        if word == "-o" and index + 1 < len(words):
            option, skip_next = words[index + 1], True
        elif word.startswith("-o") and len(word) > 2:
            option = word[2:]
        if option is not None:
            if option.split("=", 1)[0].split()[0].strip().lower() in _MULTIPLEXING:
                continue
            kept.extend(["-o", option])
        else:
            kept.append(word)
    return " ".join([shlex.join(kept), FRESH_SSH_ARGS]).strip()


@dataclasses.dataclass
class HealthReport:
    """``healthy`` is True when a fresh login and escalation both succeeded; ``detail`` says
    which step failed and how (stderr trimmed to 400 characters); ``seconds`` the wall time."""

    healthy: bool
    detail: str
    seconds: float

    def to_dict(self) -> dict:
        return {"healthy": self.healthy, "detail": self.detail, "seconds": round(self.seconds, 2)}


def _is_ssh(conn) -> bool:
    """True for Ansible's OpenSSH connection plugin, whose options these checks rewrite."""
    return conn._load_name in ("ssh", "ansible.builtin.ssh")


def fresh_connection(action):
    """A new connection plugin instance with the options of ``action``'s connection.

    For the ``ssh`` plugin the multiplexing options are replaced by ``FRESH_SSH_ARGS`` so the
    check cannot ride on the open ControlMaster; the user's other ssh_args are kept. The become plugin is shared (same method,
    user and flags). Raises ansible.errors.AnsibleError if the plugin cannot be loaded.
    """
    current = action._connection
    loader = action._shared_loader_obj.connection_loader
    conn = loader.get(current._load_name, action._play_context, None)
    conn._options = dict(current._options)  # already resolved for this host by TaskExecutor
    if _is_ssh(current):
        conn.set_option("ssh_args", fresh_ssh_args(current.get_option("ssh_args")))
    conn.set_become_plugin(current.become)
    conn._shell = current._shell
    return conn


#: Port of the throw-away sshd that proves a new sshd_config still lets the controller in.
CHECK_SSHD_PORT = 2299
#: stderr of ssh that means "nothing answered", not "refused the controller".
_UNREACHABLE = ("Connection refused", "Connection timed out", "No route to host", "Network is unreachable")


def check_host(action, port: int | None = None) -> HealthReport:
    """Log in afresh and run ``true`` through the configured become; never raises.

    Without become configured the login alone is checked. ``port`` overrides the
    connection's port (the check sshd). Source: the lock-out cases in shared/cases/cases.yml
    (sudo-nopasswd-lockout, sudo-noexec-breaks-become).
    """
    started = time.monotonic()
    conn = None
    try:
        conn = fresh_connection(action)
        if port is not None:
            conn.set_option("port", port)
            if _is_ssh(conn):
                # the check sshd serves the same host keys: look them up under the host's
                # own known_hosts entry, not "[host]:port" (host_key_checking stays on)
                alias = "-o HostKeyAlias=%s" % shlex.quote(str(conn.get_option("host")))
                conn.set_option("ssh_args", "%s %s" % (conn.get_option("ssh_args"), alias))
        command = "true"
        if conn.become is not None:
            command = conn.become.build_become_command("true", conn._shell)
        rc, _stdout, stderr = conn.exec_command(command, sudoable=conn.become is not None)
        err = to_text(stderr, errors="surrogate_or_replace").strip()
        if rc != 0:
            return HealthReport(False, "fresh login + become exited %s: %s" % (rc, err[-400:]), time.monotonic() - started)
        return HealthReport(True, "fresh login and %s ok" % (conn.become.name if conn.become else "login"), time.monotonic() - started)
    except Exception as exc:  # any failure to log in or escalate is the answer, not a crash
        return HealthReport(False, "fresh login + become failed: %s" % (to_text(exc)[-400:],), time.monotonic() - started)
    finally:
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


def check_sshd_config(action, port: int = CHECK_SSHD_PORT) -> HealthReport:
    """Prove the host's NEW sshd configuration still lets the controller in; never raises.

    On the run's own connection (with become): ``sshd -t``, then a second sshd in the
    foreground on ``port`` with the new file (its own pid file; ``timeout`` ends it after 60 s
    whatever happens), a fresh login with become to that port, and the check sshd is stopped.
    Only for the ssh connection plugin. If nothing answers on the port (a firewall), the
    report is healthy with a detail saying the file was only syntax-checked.
    """
    started = time.monotonic()
    if not _is_ssh(action._connection):
        return HealthReport(True, "not an ssh connection: sshd configuration not checked", 0.0)
    start = (
        "/usr/sbin/sshd -t || exit 97; "
        "timeout 60 /usr/sbin/sshd -D -p {port} -o PidFile=/run/scapforge-sshd-check.pid "
        "</dev/null >/dev/null 2>&1 & pid=$!; echo SSHD_PID=$pid; i=0; "
        "while [ $i -lt 50 ]; do kill -0 $pid 2>/dev/null || exit 98; "
        "ss -ltn 2>/dev/null | grep -q ':{port} ' && exit 0; sleep 0.1; i=$((i+1)); done; exit 99"
    ).format(port=port)
    try:
        res = action._low_level_execute_command(start, sudoable=True)
    except Exception as exc:
        return HealthReport(False, "could not start a check sshd: %s" % to_text(exc)[-400:], time.monotonic() - started)
    out = to_text(res.get("stdout", ""))
    if res.get("rc") == 97:
        return HealthReport(False, "the new sshd configuration does not parse (sshd -t): %s"
                            % to_text(res.get("stderr", "")).strip()[-400:], time.monotonic() - started)
    pid = out.rsplit("SSHD_PID=", 1)[-1].split()[0] if "SSHD_PID=" in out else ""
    if res.get("rc") in (98, 99):  # it died at start (port taken?) or never listened: no proof either way
        _kill(action, pid)
        return HealthReport(True, "the check sshd on port %d did not start listening (rc %s): the new "
                            "configuration was only syntax-checked (sshd -t)" % (port, res.get("rc")),
                            time.monotonic() - started)
    try:
        status = check_host(action, port=port)
    finally:
        _kill(action, pid)
    if not status.healthy and any(marker in status.detail for marker in _UNREACHABLE):
        return HealthReport(True, "no answer from a check sshd on port %d: the new configuration was only "
                            "syntax-checked (sshd -t)" % port, time.monotonic() - started)
    label = "sshd with the new configuration: " + status.detail
    return HealthReport(status.healthy, label, time.monotonic() - started)


def _kill(action, pid: str) -> None:
    """Stop the check sshd (``timeout`` ends it anyway within 60 s); never raises."""
    if pid.isdigit():
        try:
            action._low_level_execute_command("kill %s 2>/dev/null; true" % pid, sudoable=True)
        except Exception:
            pass
