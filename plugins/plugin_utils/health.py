"""Can the controller still manage the host? A fresh login plus privilege escalation.

Checked after every applied fix (shared/cases sudo-nopasswd-lockout): a NEW connection,
not the multiplexed one the run holds open, because an sshd or PAM change only shows on a
new login; and the configured become (``sudo -n true`` for sudo without a password), because
a sudoers change only shows on a new escalation. The run's own connection stays open.

Limit: sshd reads its configuration when it starts or reloads, and the content's sshd fixes
do not reload it; a new login tests the running sshd, so an sshd_config that would refuse
the controller only shows at the next reload (``sshd -t`` in the fixes checks its syntax).
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
    if current._load_name in ("ssh", "ansible.builtin.ssh"):
        conn.set_option("ssh_args", fresh_ssh_args(current.get_option("ssh_args")))
    conn.set_become_plugin(current.become)
    conn._shell = current._shell
    return conn


def check_host(action) -> HealthReport:
    """Log in afresh and run ``true`` through the configured become; never raises.

    Without become configured the login alone is checked. Source: the lock-out cases in
    shared/cases/cases.yml (sudo-nopasswd-lockout, sudo-noexec-breaks-become).
    """

    started = time.monotonic()
    conn = None
    try:
        conn = fresh_connection(action)
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
