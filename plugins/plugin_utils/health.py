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

On the run's own connection (issue 7 item 3, DESIGN decision 19): ``take_baseline`` records
the host once before any change, and ``check_after`` runs, in one round trip, ``sshd -t``,
``visudo -c``, the package database, the systemd units that were active and now failed, the
inventory's ``scapforge_health_commands``, and what the attempt changed beyond its rule: login
shells' exit code and stderr (case tmout-login-shells), owner and mode of the sensitive files
(case dotfile-symlink-owner), the mode of files it created under /etc (case
sudo-umask-then-new-files). Results are read from fixed-format lines carrying a per-call nonce,
never from words in free text (see "checks on the run's connection" below).

What users do (issue 17 item 6), beyond a fresh login and sudo, in the same round trip and
each with its own code: ``sshd -T`` (the effective configuration parses, not only the file:
``sshd_effective_config_invalid``); every module each PAM stack under /etc/pam.d names exists
in a module directory, loads (dlopen, RTLD_NOW) and has its stack type's function, and every
included file exists (``pam_module_broken``); a password change for a throwaway account
``scapforge-hc-<8 hex>``, set with chpasswd and changed with passwd on a pty as that user,
both through PAM, the account deleted in a ``finally`` (and any left by a killed probe at the
next one): ``password_change_failed``; the time and log services active in the baseline
still run, or a stand-in of the same class does (``core_service_stopped``). The two PAM
probes are plugins/module_utils/health_probe.py, sent as ``python3 -c``. Cost, measured on
a lab host (Debian 12, a loaded 2-core machine; medians): ``check_after`` 0.86 s -> 2.15 s,
i.e. about 1.3 s more per check: the password change 0.96 s (yescrypt hashes three times),
the PAM modules 0.27 s, the services 0.1 s, ``sshd -T`` 0.04 s.

Which side effects make an attempt unhealthy (roll back) and which are only reported:
unhealthy: a login shell that now fails or prints new stderr; a sensitive file whose owner,
group, mode or type changed; a file created unreadable to others under a directory other
users' logins read (/etc/profile.d, /etc/skel, /etc/bash_completion.d); a missing result.
Reported only: a created file or directory elsewhere under /etc whose mode looks made by the
umask (its siblings are readable, it is not); a sensitive file removed (a lock-out it causes
shows in ``check_host``).

sshd's Match blocks (case sshd-match-override, issue 7 item 4): the lines inside each Match
block of /etc/ssh/sshd_config and /etc/ssh/sshd_config.d/*.conf, whitespace normalised, are
compared with the run's baseline. A line the baseline had that is now removed or changed (a
fix that deduplicates ``PermitRootLogin`` and deletes the ``Match User backup`` override with
it) is unhealthy: the attempt is rolled back and the override named. A line or block added
is only reported (a global directive appended after the last Match block lands inside it:
case sshd-match-block). Why against the baseline and not the state before the attempt: the
baseline is the configuration a human wrote before the run, and only that is protected. An
earlier attempt that was kept cannot have removed or changed a baseline line (it would have
been rolled back), so it can only have added lines; a later attempt that changes or removes a
line an earlier kept attempt added is not held against it (nothing of the human's is lost),
while one that touches a baseline line always goes to a human (``side_effect_rolled_back``),
even when the rule asks for exactly that change. The price: an addition kept from an earlier
attempt is reported again by every later check while it stays (its ``what`` says "since the
run began"); it never changes a verdict.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import posixpath
import re
import secrets
import shlex
import stat
import time
import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError

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


#: ``HealthReport.codes``: what a verdict found, for code to decide on (``detail`` is for
#: people and may be reworded). Unhealthy unless said otherwise.
LOGIN_FAILED = "login_failed"  # the fresh login raised (no session; Ansible refused the become prompt)
UNREACHABLE = "unreachable"  # the fresh login found nothing answering (ssh: refused, timed out, no route)
BECOME_FAILED = "become_failed"  # logged in; the probe through the configured become exited non-zero
NOT_SSH = "not_ssh"  # healthy: not an ssh connection, sshd's configuration not checked
SSHD_CHECK_FAILED = "sshd_check_failed"  # the check sshd could not be started (the round trip failed)
SSHD_CONFIG_INVALID = "sshd_config_invalid"  # ``sshd -t`` refuses the new configuration
SSHD_UNPROVEN = "sshd_check_unproven"  # healthy: the check sshd did not answer; only ``sshd -t`` passed
SSHD_LOGIN_FAILED = "sshd_login_failed"  # the fresh login to the check sshd failed ...
SSHD_BECOME_FAILED = "sshd_become_failed"  # ... or its become did
SUDOERS_INVALID = "sudoers_invalid"  # ``visudo -c`` fails (and did not before any change)
PACKAGE_DB_BROKEN = "package_db_broken"  # dpkg --audit lists new problems / rpm --verifydb fails
UNIT_FAILED = "unit_failed"  # a systemd unit active before any change has failed
HEALTH_COMMAND_FAILED = "health_command_failed"  # one of the inventory's scapforge_health_commands
SIDE_EFFECT_PREFIX = "side_effect:"  # + a finding's kind (sensitive_file, login_shell, created_mode, sshd_match, unverified)
CHECKS_INCOMPLETE = "checks_incomplete"  # the check script did not run to its end
CHECKS_NOT_RUN = "checks_not_run"  # the check script could not be built (a bad user name)
DEADMAN_FIRED = "deadman_fired"  # the dead-man switch fired before the controller confirmed health
# what users do (issue 17 item 6): each check its own code
SSHD_EFFECTIVE_INVALID = "sshd_effective_config_invalid"  # ``sshd -T`` fails (and did not before any change)
PAM_MODULE_BROKEN = "pam_module_broken"  # a module a PAM stack names is missing, does not load, or an include is gone
PASSWORD_CHANGE_FAILED = "password_change_failed"  # a throwaway account's password change through PAM failed
CORE_SERVICE_STOPPED = "core_service_stopped"  # the time or log service active before any change runs no more
#: the code of each failed check of ``check_after`` (user_1.. -> HEALTH_COMMAND_FAILED)
CHECK_CODES = {"sshd_t": SSHD_CONFIG_INVALID, "visudo_c": SUDOERS_INVALID, "pkgdb": PACKAGE_DB_BROKEN,
               "units": UNIT_FAILED, "script": CHECKS_INCOMPLETE, "sshd_effective": SSHD_EFFECTIVE_INVALID,
               "pam_modules": PAM_MODULE_BROKEN, "passwd_change": PASSWORD_CHANGE_FAILED,
               "services": CORE_SERVICE_STOPPED}


@dataclasses.dataclass
class HealthReport:
    """``healthy`` is True when every check passed; ``detail`` says which step failed and how
    (stderr trimmed to 400 characters); ``seconds`` the wall time.

    ``codes``: the verdict's codes (the constants above), one per thing found: what failed,
    or a caveat on a healthy verdict (``not_ssh``, ``sshd_check_unproven``); empty for a
    plain pass. Code decides on these, never on ``detail``. ``checks`` ({name: {"ok": bool,
    "detail": str}}) and ``side_effects`` (findings, see ``side_effect_findings``) are filled
    by ``check_after``; ``check_host`` and ``check_sshd_config`` leave them empty, and
    ``to_dict`` of a plain pass then gives the three keys of old.
    """

    healthy: bool
    detail: str
    seconds: float
    checks: dict = dataclasses.field(default_factory=dict)
    side_effects: list = dataclasses.field(default_factory=list)
    codes: list = dataclasses.field(default_factory=list)

    @property
    def code(self) -> str:
        """The first code; ``ok`` for a plain pass, ``unhealthy`` for a failure given none."""
        if self.codes:
            return self.codes[0]
        return "ok" if self.healthy else "unhealthy"

    def to_dict(self) -> dict:
        out = {"healthy": self.healthy, "detail": self.detail, "seconds": round(self.seconds, 2)}
        if self.codes:
            out["codes"] = list(self.codes)
        if self.checks:
            out["checks"] = {name: dict(value) for name, value in self.checks.items()}
        if self.side_effects:
            out["side_effects"] = [dict(f) for f in self.side_effects]
        return out


#: Mitogen's connection plugins and the Ansible plugin each stands for (Mitogen's mitogen_ssh
#: "accepts every option the vanilla ssh plugin accepts": its DOCUMENTATION is ssh's). The
#: fully qualified names matter: Mitogen's strategy redirects a request for plain ``ssh`` or
#: ``local`` to its own plugin (ansible_mitogen/strategy.py, REDIRECTED_CONNECTION_PLUGINS).
#: sudo, su and doas are privilege changes on the controller itself.
MITOGEN_STANDS_FOR = {"mitogen_ssh": "ansible.builtin.ssh", "mitogen_local": "ansible.builtin.local",
                      "mitogen_sudo": "ansible.builtin.local", "mitogen_su": "ansible.builtin.local",
                      "mitogen_doas": "ansible.builtin.local"}


def plain_connection_name(conn) -> str:
    """The name of the Ansible connection plugin ``conn`` is, or stands for when it is one of
    Mitogen's (``mitogen_ssh`` -> ``ansible.builtin.ssh``); ``""`` when it has no name.

    Source: Mitogen for Ansible, ansible_mitogen/plugins/connection/ (0.3.54).
    """
    name = getattr(conn, "_load_name", "") or ""
    return MITOGEN_STANDS_FOR.get(name.rsplit(".", 1)[-1], name)


def _is_ssh(conn) -> bool:
    """True for Ansible's OpenSSH connection plugin (or Mitogen's stand-in for it), whose
    options these checks rewrite."""
    return plain_connection_name(conn) in ("ssh", "ansible.builtin.ssh")


def fresh_connection(session):
    """A new connection plugin instance with the options of ``action``'s connection.

    For the ``ssh`` plugin the multiplexing options are replaced by ``FRESH_SSH_ARGS`` so the
    check cannot ride on the open ControlMaster; the user's other ssh_args are kept. The become plugin is shared (same method,
    user and flags). Never one of Mitogen's plugins: its connections are pooled, so a "new" one
    would not log in afresh; for Mitogen's ssh and local, Ansible's own plugin is loaded.
    Raises ansible.errors.AnsibleError if the plugin cannot be loaded, or if it is a Mitogen
    plugin without an Ansible counterpart here (docker, podman, kubectl...): the check fails
    closed, and at the run's start that stops the host before any change.
    """
    current = session.parts().connection
    loader = session.parts().shared_loader_obj.connection_loader
    name = plain_connection_name(current)
    if name.rsplit(".", 1)[-1].startswith("mitogen_"):
        raise AnsibleError("a fresh login cannot be proved through Mitogen's %s connection (Mitogen pools its "
                           "connections); run without the accelerator, or over ssh" % name)
    conn = loader.get(name, session.parts().play_context, None)
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


def _login_code(ssh_says: str, otherwise: str) -> str:
    """UNREACHABLE when what ssh printed (its stderr, or the connection error that carries it:
    ssh's output, not ours) says nothing answered; else ``otherwise``."""
    return UNREACHABLE if any(marker in ssh_says for marker in _UNREACHABLE) else otherwise


#: what the fresh login runs through become: a program, not the shell builtin ``true``, since
#: sudo's ``Defaults noexec`` lets the shell start but stops it from running anything (what
#: every Ansible module needs: case sudo-noexec-breaks-become).
PROBE_COMMAND = "env true"


def check_host(session, port: int | None = None) -> HealthReport:
    """Log in afresh and run ``env true`` (PROBE_COMMAND) through the configured become; never raises.

    Without become configured the login alone is checked. ``port`` overrides the
    connection's port (the check sshd). Source: the lock-out cases in shared/cases/cases.yml
    (sudo-nopasswd-lockout, sudo-noexec-breaks-become).
    """
    started = time.monotonic()
    conn = None
    try:
        conn = fresh_connection(session)
        if port is not None:
            conn.set_option("port", port)
            if _is_ssh(conn):
                # the check sshd serves the same host keys: look them up under the host's
                # own known_hosts entry, not "[host]:port" (host_key_checking stays on)
                alias = "-o HostKeyAlias=%s" % shlex.quote(str(conn.get_option("host")))
                conn.set_option("ssh_args", "%s %s" % (conn.get_option("ssh_args"), alias))
        command = PROBE_COMMAND
        if conn.become is not None:
            command = conn.become.build_become_command(PROBE_COMMAND, conn._shell)
        rc, _stdout, stderr = conn.exec_command(command, sudoable=conn.become is not None)
        err = to_text(stderr, errors="surrogate_or_replace").strip()
        if rc != 0:
            code = _login_code(err, BECOME_FAILED if conn.become is not None else LOGIN_FAILED)
            return HealthReport(False, "fresh login + become exited %s: %s" % (rc, err[-400:]), time.monotonic() - started,
                                codes=[code])
        return HealthReport(True, "fresh login and %s ok" % (conn.become.name if conn.become else "login"), time.monotonic() - started)
    except Exception as exc:  # any failure to log in or escalate is the answer, not a crash
        return HealthReport(False, "fresh login + become failed: %s" % (to_text(exc)[-400:],), time.monotonic() - started,
                            codes=[_login_code(to_text(exc), LOGIN_FAILED)])
    finally:
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


def check_sshd_config(session, port: int = CHECK_SSHD_PORT) -> HealthReport:
    """Prove the host's NEW sshd configuration still lets the controller in; never raises.

    On the run's own connection (with become): ``sshd -t``, then a second sshd in the
    foreground on ``port`` with the new file (its own pid file; ``timeout`` ends it after 60 s
    whatever happens), a fresh login with become to that port, and the check sshd is stopped.
    Only for the ssh connection plugin. If nothing answers on the port (a firewall), the
    report is healthy with a detail saying the file was only syntax-checked.
    """
    started = time.monotonic()
    if not _is_ssh(session.parts().connection):
        return HealthReport(True, "not an ssh connection: sshd configuration not checked", 0.0, codes=[NOT_SSH])
    start = (
        "/usr/sbin/sshd -t || exit 97; "
        "timeout 60 /usr/sbin/sshd -D -p {port} -o PidFile=/run/scapforge-sshd-check.pid "
        "</dev/null >/dev/null 2>&1 & pid=$!; echo SSHD_PID=$pid; i=0; "
        "while [ $i -lt 50 ]; do kill -0 $pid 2>/dev/null || exit 98; "
        "ss -ltn 2>/dev/null | grep -q ':{port} ' && exit 0; sleep 0.1; i=$((i+1)); done; exit 99"
    ).format(port=port)
    try:
        res = session.run_command(start, sudoable=True)
    except Exception as exc:
        return HealthReport(False, "could not start a check sshd: %s" % to_text(exc)[-400:], time.monotonic() - started,
                            codes=[SSHD_CHECK_FAILED])
    out = to_text(res.get("stdout", ""))
    if res.get("rc") == 97:
        return HealthReport(False, "the new sshd configuration does not parse (sshd -t): %s"
                            % to_text(res.get("stderr", "")).strip()[-400:], time.monotonic() - started,
                            codes=[SSHD_CONFIG_INVALID])
    pid = out.rsplit("SSHD_PID=", 1)[-1].split()[0] if "SSHD_PID=" in out else ""
    if res.get("rc") in (98, 99):  # it died at start (port taken?) or never listened: no proof either way
        _kill(session, pid)
        return HealthReport(True, "the check sshd on port %d did not start listening (rc %s): the new "
                            "configuration was only syntax-checked (sshd -t)" % (port, res.get("rc")),
                            time.monotonic() - started, codes=[SSHD_UNPROVEN])
    try:
        status = check_host(session, port=port)
    finally:
        _kill(session, pid)
    if UNREACHABLE in status.codes:
        return HealthReport(True, "no answer from a check sshd on port %d: the new configuration was only "
                            "syntax-checked (sshd -t)" % port, time.monotonic() - started, codes=[SSHD_UNPROVEN])
    label = "sshd with the new configuration: " + status.detail
    codes = [] if status.healthy else [SSHD_BECOME_FAILED if BECOME_FAILED in status.codes else SSHD_LOGIN_FAILED]
    return HealthReport(status.healthy, label, time.monotonic() - started, codes=codes)


def _kill(session, pid: str) -> None:
    """Stop the check sshd (``timeout`` ends it anyway within 60 s); never raises."""
    if pid.isdigit():
        try:
            session.run_command("kill %s 2>/dev/null; true" % pid, sudoable=True)
        except Exception:
            pass


# ====================================================================== checks on the run's connection
#
# One shell script per call, run through the run's own connection with become (one round trip).
# Every check's result comes back as ONE fixed-format line written by the script itself:
#
#     SCAPFORGE_CHECK <nonce> <name> <rc|skip>
#
# and whatever a check printed comes back only as prefixed lines:
#
#     SCAPFORGE_DATA <nonce> <name> <one line of its output>
#
# The nonce is random per call. A check's output (a user command, a file it cats, sshd's
# messages) is captured by the script and re-emitted line by line behind the DATA prefix, so
# a command printing "SCAPFORGE_CHECK <nonce> sshd_t 0", "OK" or "UNHEALTHY" can never start a
# result line: the verdict is the exit code the script wrote. A missing result line, a result
# line given twice, or a malformed one counts as failed. The script ends with
# ``SCAPFORGE_END <nonce>``. (A deliberately hostile root command could still write to the
# script's own stdout descriptor; the inventory's commands run as root anyway and are trusted.)

CHECK_PREFIX = "SCAPFORGE_CHECK"
DATA_PREFIX = "SCAPFORGE_DATA"
END_PREFIX = "SCAPFORGE_END"
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
_RC_RE = re.compile(r"^(?:[0-9]{1,3}|skip)$")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$")
#: a unit name as systemctl lists it (escaped characters appear as \x2d and the like)
_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.(service|socket|target|mount|automount|swap|path|timer|slice|scope|device)$")

#: Files whose owner, group and mode must not change under an attempt (case dotfile-symlink-owner).
SENSITIVE_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/passwd", "/etc/group", "/etc/sudoers")
#: Directories whose every entry is sensitive as well (globbed on the target).
SENSITIVE_DIRS = ("/etc/sudoers.d",)
#: Directories whose files other users' logins read: a file there that they cannot read makes
#: the fix silently not apply to them (case sudo-umask-then-new-files: /etc/profile.d/tmout.sh 0600).
USER_READ_DIRS = ("/etc/profile.d", "/etc/skel", "/etc/bash_completion.d")
#: Where created files are checked for a umask-dependent mode (the brief: files the fix creates).
CREATED_ROOTS = ("/etc/",)
#: Login shells tried after every attempt, as root and as the connecting user (case tmout-login-shells).
LOGIN_SHELLS = ("sh", "bash")
#: At most this many created paths are examined per call (a reported finding counts the rest).
MAX_CREATED = 200
#: sshd's configuration files whose Match blocks are compared with the baseline: the main file
#: and the directory its stock Include reads (Debian 12, RHEL 9).
SSHD_CONFIG_FILES = ("/etc/ssh/sshd_config",)
SSHD_CONFIG_DIRS = ("/etc/ssh/sshd_config.d",)
#: At most this many lines of sshd configuration come back per call; more and the comparison
#: counts as not made (an ``unverified`` finding), never as lines removed.
MAX_SSHD_LINES = 4000
#: Seconds each check may run on the target (``timeout``, where the target has it).
CHECK_TIMEOUTS = {"sshd_t": 30, "visudo_c": 30, "pkgdb": 120, "units": 30, "user": 60, "login": 20, "pam": 60,
                  "passwd": 100}
#: The checks of what users do (issue 17 item 6), run in the baseline and, when the baseline
#: has them, after every attempt: ``sshd -T``, the PAM stacks' modules, a password change.
USER_PATH_CHECKS = ("sshd_effective", "pam_modules", "passwd_change")
#: The time and log services: each one active in the baseline must still run, unless one of
#: its class that did not run before runs in its place (chrony for systemd-timesyncd).
CORE_SERVICES = {
    "time": ("chrony.service", "chronyd.service", "systemd-timesyncd.service", "ntp.service", "ntpd.service",
             "ntpsec.service", "openntpd.service"),
    "log": ("rsyslog.service", "syslog-ng.service", "systemd-journald.service"),
}
#: the account names the password check creates (and deletes): ``scapforge-hc-<8 hex>``
THROWAWAY_PREFIX = "scapforge-hc-"
_SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class HealthError(ScapforgeError):
    """The baseline could not be taken (no answer, become failed, the script's end line
    missing). The message carries the reason, 600 characters at most."""

    kind = "baseline"


@dataclasses.dataclass
class RawCheck:
    """One check as the target reported it: ``rc`` (0-255; None when no valid result line came
    back), ``skipped`` (the script said the check does not apply here, with why in ``data``),
    ``data`` (its output lines, at most the lines the script kept), ``conflict`` (its result
    line came more than once: counted as failed)."""

    rc: int | None = None
    skipped: bool = False
    data: list = dataclasses.field(default_factory=list)
    conflict: bool = False

    @property
    def reported(self) -> bool:
        return (self.rc is not None or self.skipped) and not self.conflict


def new_nonce() -> str:
    """A fresh random marker for one script run (16 hex characters)."""
    return secrets.token_hex(8)


def parse_output(text: str, nonce: str) -> tuple[dict[str, RawCheck], bool]:
    """Read a check script's stdout: ({name: RawCheck}, whether the end line came).

    Only lines that split on single spaces into exactly ``SCAPFORGE_CHECK <nonce> <name>
    <rc|skip>`` (name ``[a-z][a-z0-9_]*``, rc 0-255) are results; ``SCAPFORGE_DATA <nonce>
    <name> <text>`` lines are output. Lines are split on ``\\n`` only (a ``\\r`` inside a line
    does not start a new one; a trailing one, as a pty adds, is dropped). Everything else,
    a wrong nonce included, is ignored. Pure; never raises.
    """
    checks: dict[str, RawCheck] = {}
    ended = False
    for line in (text or "").split("\n"):
        if line.endswith("\r"):
            line = line[:-1]
        if line.startswith(CHECK_PREFIX + " "):
            parts = line.split(" ")
            if len(parts) != 4 or parts[1] != nonce or not _NAME_RE.match(parts[2]) or not _RC_RE.match(parts[3]):
                continue
            raw = checks.setdefault(parts[2], RawCheck())
            if raw.rc is not None or raw.skipped:
                raw.conflict = True
            elif parts[3] == "skip":
                raw.skipped = True
            elif int(parts[3]) <= 255:
                raw.rc = int(parts[3])
            else:
                raw.conflict = True
        elif line.startswith(DATA_PREFIX + " "):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] == nonce and _NAME_RE.match(parts[2]):
                checks.setdefault(parts[2], RawCheck()).data.append(parts[3] if len(parts) == 4 else "")
        elif line == "%s %s" % (END_PREFIX, nonce):
            ended = True
    return checks, ended


# ---------------------------------------------------------------------- the script

_PRELUDE = r"""N=%(nonce)s
umask 022
cd / 2>/dev/null
PATH=%(path)s; export PATH
LC_ALL=C; export LC_ALL
_sf_t() { _s=$1; shift; if command -v timeout >/dev/null 2>&1; then timeout "$_s" "$@"; else "$@"; fi; }
_sf_out() {
  [ -n "$2" ] && printf '%%s\n' "$2" | head -n "${3:-40}" | cut -c 1-400 | sed "s/^/SCAPFORGE_DATA $N $1 /"
  return 0
}
_sf_emit() { _sf_out "$1" "$3" "$4"; printf 'SCAPFORGE_CHECK %%s %%s %%s\n' "$N" "$1" "$2"; }
_sf_skip() { _sf_out "$1" "$2"; printf 'SCAPFORGE_CHECK %%s %%s skip\n' "$N" "$1"; }
_sf_stat() {
  stat -c "$1 %%f %%u %%g %%U %%G %%n" -- "$2" 2>/dev/null || printf '%%s absent - - - - %%s\n' "$1" "$2"
}
_sf_has() { command -v "$1" >/dev/null 2>&1; }
_sf_systemd() { [ -d /run/systemd/system ] && _sf_has systemctl; }
_sf_python() { for _p in python3 /usr/libexec/platform-python; do command -v "$_p" 2>/dev/null && return 0; done; return 1; }
U=%(user)s
[ -n "$U" ] || U=${SUDO_USER:-}
case "$U" in root|*[!A-Za-z0-9_.\$-]*) U= ;; esac
_sf_login() {
  _sh=$(command -v "$3" 2>/dev/null) || { _sf_skip "$1" "$3 not installed"; return 0; }
  _h=$(getent passwd "$2" 2>/dev/null | cut -d: -f6); [ -n "$_h" ] || _h=/
  if [ "$2" = root ]; then _r=""
  elif _sf_has runuser; then _r="runuser -u $2 --"
  else _sf_skip "$1" "runuser not installed"; return 0; fi
  _o=$(_sf_t %(login_s)s $_r env -i HOME="$_h" USER="$2" LOGNAME="$2" SHELL="$_sh" TERM=dumb PATH=%(path)s \
       "$_sh" -l -c true 2>&1 >/dev/null </dev/null)
  _sf_emit "$1" $? "$_o"
}
_o=$( printf 'user=%%s\n' "$U"
      _sf_has sshd && echo sshd=1
      _sf_has visudo && echo visudo=1
      _sf_has runuser && echo runuser=1
      if _sf_has dpkg; then echo pkg=dpkg; elif _sf_has rpm; then echo pkg=rpm; fi
      _sf_systemd && echo systemd=1 )
_sf_emit facts 0 "$_o"
"""

_SHELL_CHECKS = {
    "sshd_t": r"""if _sf_has sshd; then _o=$(_sf_t %(sshd_t_s)s sshd -t 2>&1 </dev/null); _sf_emit sshd_t $? "$_o"
else _sf_skip sshd_t "sshd not installed"; fi
""",
    "visudo_c": r"""if _sf_has visudo; then _o=$(_sf_t %(visudo_c_s)s visudo -c 2>&1 </dev/null); _sf_emit visudo_c $? "$_o"
else _sf_skip visudo_c "visudo not installed"; fi
""",
    # dpkg --audit exits 0 even when it lists problems: the output is judged (``_judge_pkgdb``)
    "pkgdb": r"""if _sf_has dpkg; then _o=$(_sf_t %(pkgdb_s)s dpkg --audit 2>&1 </dev/null); _sf_emit pkgdb $? "$_o" 200
elif _sf_has rpm; then _o=$(_sf_t %(pkgdb_s)s rpm --verifydb 2>&1 </dev/null); _sf_emit pkgdb $? "$_o" 200
else _sf_skip pkgdb "neither dpkg nor rpm"; fi
""",
    "units_active": r"""if _sf_systemd; then
  _o=$(_sf_t %(units_s)s systemctl list-units --state=active --all --no-legend --plain --full --no-pager \
       2>&1 </dev/null)
  _sf_emit units_active $? "$_o" 5000
else _sf_skip units_active "no running systemd"; fi
""",
    "units_failed": r"""if _sf_systemd; then
  _o=$(_sf_t %(units_s)s systemctl list-units --state=failed --all --no-legend --plain --full --no-pager \
       2>&1 </dev/null)
  _sf_emit units_failed $? "$_o" 5000
else _sf_skip units_failed "no running systemd"; fi
""",
    # ``sshd -T``: the effective configuration is parsed and printed (to /dev/null); only its
    # complaints come back
    "sshd_effective": r"""if _sf_has sshd; then _o=$(_sf_t %(sshd_t_s)s sshd -T 2>&1 >/dev/null </dev/null)
  _sf_emit sshd_effective $? "$_o"
else _sf_skip sshd_effective "sshd not installed"; fi
""",
    # health_probe.py (module_utils) with the target's Python: see its docstring
    "pam_modules": r"""if [ ! -d /etc/pam.d ]; then _sf_skip pam_modules "no /etc/pam.d"
elif _py=$(_sf_python); then _o=$(_sf_t %(pam_s)s "$_py" -c "$_sf_probe" pam 2>&1 </dev/null)
  _sf_emit pam_modules $? "$_o" 400
else _sf_skip pam_modules "no python3"; fi
""",
    "passwd_change": r"""if ! _sf_has useradd || ! _sf_has chpasswd || ! _sf_has passwd; then
  _sf_skip passwd_change "useradd, chpasswd or passwd not installed"
elif _py=$(_sf_python); then _o=$(_sf_t %(passwd_s)s "$_py" -c "$_sf_probe" passwd 2>&1 </dev/null)
  _sf_emit passwd_change $? "$_o" 40
else _sf_skip passwd_change "no python3"; fi
""",
    # one line per unit of CORE_SERVICES, in order (systemctl is-active prints one per unit)
    "services": r"""if _sf_systemd; then _o=$(_sf_t %(units_s)s systemctl is-active %(core_units)s 2>&1 </dev/null)
  _sf_emit services 0 "$_o" 40
else _sf_skip services "no running systemd"; fi
""",
    "files": r"""_o=$(for _f in %(sensitive)s; do case "$_f" in *'*') continue;; esac; _sf_stat F "$_f"; done)
_sf_emit files 0 "$_o" 2000
""",
    # each file (F <path>), its lines that are not blank or comments (L <line>), then an end
    # mark (E): without it the output was cut and nothing is compared (``sshd_match_blocks``)
    "sshd_match": r"""_o=$(for _f in %(sshd_configs)s; do
  case "$_f" in *'*'*) continue;; esac; [ -f "$_f" ] || continue
  printf 'F %%s\n' "$_f"; grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' -- "$_f" 2>/dev/null | sed 's/^/L /'
done; echo E)
_sf_emit sshd_match 0 "$_o" %(sshd_lines)s
""",
}

_LOGIN_CHECK = r"""_sf_login login_%(shell)s_root root %(shell)s
if [ -n "$U" ]; then _sf_login login_%(shell)s_user "$U" %(shell)s
else _sf_skip login_%(shell)s_user "no connecting user other than root"; fi
"""

# each created path (C), its directory (D) and up to 64 other entries of that directory (S)
_CREATED_CHECK = r"""_o=$(for _p in %(paths)s; do
  [ -e "$_p" ] || [ -L "$_p" ] || continue
  _sf_stat C "$_p"; _d=${_p%%/*}; [ -n "$_d" ] || _d=/; _sf_stat D "$_d"; _n=0
  for _s in "$_d"/* "$_d"/.[!.]*; do
    [ -e "$_s" ] || continue; [ -L "$_s" ] && continue
    _n=$((_n+1)); [ $_n -gt 64 ] && break; _sf_stat S "$_s"
  done
done)
_sf_emit created 0 "$_o" 20000
"""

_USER_CHECK = "_o=$(_sf_t %(user_s)s sh -c %(command)s 2>&1 </dev/null); _sf_emit %(name)s $? \"$_o\"\n"


def core_units() -> list[str]:
    """The units of CORE_SERVICES in the order the ``services`` check asks systemd about them."""
    return [unit for units in CORE_SERVICES.values() for unit in units]


@functools.lru_cache(maxsize=1)
def probe_source() -> str:
    """The text of the target-side probe (plugins/module_utils/health_probe.py), run with
    ``python3 -c`` by the pam_modules and passwd_change checks."""
    return (pathlib.Path(__file__).resolve().parents[1] / "module_utils" / "health_probe.py").read_text(encoding="utf-8")


def user_check_name(index: int) -> str:
    """The check name of the inventory's ``index``-th (from 0) health command: ``user_1``, ..."""
    return "user_%d" % (index + 1)


def build_script(nonce: str, checks: t.Iterable[str], *, commands: t.Sequence[str] = (), user: str | None = None,
                 created: t.Sequence[str] = (), prepend: str = "") -> str:
    """The POSIX sh script for one round trip (pure; the target runs it with /bin/sh as root).

    checks: names from ``sshd_t visudo_c pkgdb units_active units_failed files sshd_match login created``
    and those of what users do, ``sshd_effective pam_modules passwd_change services``
    (``login`` adds ``login_<sh>_root`` / ``login_<sh>_user`` for sh and bash; ``created``
    stats ``created`` with its directory and siblings). ``commands``: the inventory's health
    commands, run with ``sh -c`` as ``user_1``... ``user``: the connecting user (else the
    target's ``$SUDO_USER``; "root" for none). ``prepend``: shell run after the prelude, before the
    checks (``undo_sensitive_changes``' chown/chmod). Raises ValueError for a nonce that is not hex or a user name
    that is not a plain login name.
    """
    if not re.match(r"^[0-9a-f]{8,64}$", nonce or ""):
        raise ValueError("nonce must be 8 to 64 hex characters")
    if user and not _USER_RE.match(user):
        raise ValueError("user %r is not a plain login name" % (user,))
    values = {
        "nonce": nonce, "path": _SAFE_PATH, "user": shlex.quote(user or ""),
        "login_s": CHECK_TIMEOUTS["login"], "sshd_t_s": CHECK_TIMEOUTS["sshd_t"],
        "visudo_c_s": CHECK_TIMEOUTS["visudo_c"], "pkgdb_s": CHECK_TIMEOUTS["pkgdb"],
        "units_s": CHECK_TIMEOUTS["units"], "user_s": CHECK_TIMEOUTS["user"],
        "sensitive": " ".join([shlex.quote(p) for p in SENSITIVE_FILES] +
                              ["%s/*" % shlex.quote(d) for d in SENSITIVE_DIRS]),
        "sshd_configs": " ".join([shlex.quote(p) for p in SSHD_CONFIG_FILES] +
                                 ["%s/*.conf" % shlex.quote(d) for d in SSHD_CONFIG_DIRS]),
        "sshd_lines": MAX_SSHD_LINES, "pam_s": CHECK_TIMEOUTS["pam"], "passwd_s": CHECK_TIMEOUTS["passwd"],
        "core_units": " ".join(core_units()),
    }
    checks = list(checks)
    parts = [_PRELUDE % values, prepend]
    if "pam_modules" in checks or "passwd_change" in checks:
        parts.append("_sf_probe=%s\n" % shlex.quote(probe_source()))
    for name in checks:
        if name in _SHELL_CHECKS:
            parts.append(_SHELL_CHECKS[name] % values)
        elif name == "login":
            parts.extend(_LOGIN_CHECK % {"shell": shell} for shell in LOGIN_SHELLS)
        elif name == "created":
            paths = list(created)[:MAX_CREATED]
            quoted = " ".join(shlex.quote(p) for p in paths) or "''"
            parts.append(_CREATED_CHECK % {"paths": quoted})
        else:
            raise ValueError("unknown check %r" % (name,))
    for index, command in enumerate(commands):
        parts.append(_USER_CHECK % dict(values, command=shlex.quote(str(command)), name=user_check_name(index)))
    parts.append("printf 'SCAPFORGE_END %s\\n' \"$N\"\n")
    return "".join(parts)


def _run_script(session, script: str) -> tuple[str, str, int | None, str]:
    """Run ``script`` on the run's own connection with become: (stdout, stderr, rc, error).
    ``error`` is the exception's text when the connection failed (stdout then empty)."""
    try:
        res = session.run_command(script, sudoable=True)
    except Exception as exc:  # a lost connection or a refused become is an answer, not a crash
        return "", "", None, to_text(exc)[-600:]
    return (to_text(res.get("stdout", ""), errors="surrogate_or_replace"),
            to_text(res.get("stderr", ""), errors="surrogate_or_replace"), res.get("rc"), "")


# ---------------------------------------------------------------------- stat lines

def _parse_stat(line: str) -> tuple[str, dict] | None:
    """``<tag> <hexmode> <uid> <gid> <owner> <group> <path>`` -> (tag, entry) or None.
    entry: path, kind (file, dir, link, other, absent), mode ("0640"), uid, gid, owner, group."""
    parts = line.split(" ", 6)
    if len(parts) != 7 or not parts[6].startswith("/"):
        return None
    tag, raw_mode, uid, gid, owner, group, path = parts
    if raw_mode == "absent":
        return tag, {"path": path, "kind": "absent"}
    try:
        mode = int(raw_mode, 16)
        uid_n, gid_n = int(uid), int(gid)
    except ValueError:
        return None
    kind = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "link"}.get(stat.S_IFMT(mode), "other")
    return tag, {"path": path, "kind": kind, "mode": "%04o" % stat.S_IMODE(mode), "uid": uid_n, "gid": gid_n,
                 "owner": owner, "group": group}


def _describe(entry: dict | None) -> str:
    if not entry or entry.get("kind") == "absent":
        return "absent"
    return "%s %s:%s %s" % (entry["kind"], entry["owner"], entry["group"], entry["mode"])


def _unit_names(lines: t.Iterable[str]) -> list[str]:
    """Unit names from ``systemctl list-units --plain --no-legend`` lines (first word that
    looks like a unit; a leading status bullet is skipped)."""
    names = []
    for line in lines:
        for word in line.split():
            if _UNIT_RE.match(word):
                names.append(word)
                break
    return names


# ---------------------------------------------------------------------- the baseline

@dataclasses.dataclass
class HostBaseline:
    """What the host looked like before any change, taken once per run (``take_baseline``).

    user: the connecting user checked for login shells ("" when only root is).
    facts: {"sshd", "visudo", "runuser", "systemd": bool, "pkg": "dpkg" | "rpm" | ""}.
    active_units: units systemd listed as active. pkgdb: {"rc", "output"} of ``dpkg --audit``
    or ``rpm --verifydb``. results: {check name: {"rc": int | None, "skipped": bool,
    "detail": str}} for sshd_t, visudo_c, pkgdb, units_active, the user checks and the login
    shells (login_<sh>_<root|user>, detail = its stderr). commands: the user health commands
    run then. files: {path: {kind, mode "0640", uid, gid, owner, group}} of SENSITIVE_FILES
    and SENSITIVE_DIRS' entries. taken_at: epoch seconds; seconds: wall time of the round trip.
    sshd_match: the Match blocks of sshd's configuration files (``sshd_match_blocks``:
    {path: [{"match": header, "lines": [line, ...]}]}), or None when they were not read (then
    ``check_after`` does not compare them). pam_problems: what the ``pam_modules`` probe found
    wrong before any change (``pam_problems``: {"missing pam_x.so": "stacks: why"}), None when
    it was not run or said nothing readable; the user-path checks (USER_PATH_CHECKS) are run
    after an attempt only when ``results`` has them (a baseline taken before they existed).
    """

    user: str
    facts: dict
    active_units: list
    pkgdb: dict
    results: dict
    commands: list
    files: dict
    taken_at: float
    seconds: float
    sshd_match: dict | None = None
    pam_problems: dict | None = None

    @property
    def failing(self) -> dict:
        """Checks that already failed before any change: {name: detail}. A check failing the
        same way after an attempt is not held against it (see ``check_after``)."""
        return {name: r.get("detail", "") for name, r in self.results.items()
                if not r.get("skipped") and r.get("rc") not in (0,) and not name.startswith("login_")}

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (for the run directory and events); ``from_dict`` reads it back."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "HostBaseline":
        """The inverse of ``to_dict``. Raises TypeError/KeyError on a dict of another shape
        (a field with a default, such as ``sshd_match``, may be missing)."""
        fields = dataclasses.fields(cls)
        required = {f.name for f in fields if f.default is dataclasses.MISSING}
        return cls(**{f.name: data[f.name] for f in fields if f.name in required or f.name in data})


def _detail(raw: RawCheck | None, limit: int = 400) -> str:
    return "\n".join(raw.data)[:limit] if raw else ""


def _facts(raw: RawCheck | None) -> dict:
    values = dict(line.split("=", 1) for line in (raw.data if raw else []) if "=" in line)
    return {"user": values.get("user", ""), "sshd": values.get("sshd") == "1", "visudo": values.get("visudo") == "1",
            "runuser": values.get("runuser") == "1", "systemd": values.get("systemd") == "1",
            "pkg": values.get("pkg", "")}


def _login_names() -> list[str]:
    return ["login_%s_%s" % (shell, who) for shell in LOGIN_SHELLS for who in ("root", "user")]


def baseline_from_output(text: str, nonce: str, commands: t.Sequence[str], seconds: float = 0.0,
                         taken_at: float | None = None) -> HostBaseline:
    """Build a HostBaseline from the baseline script's stdout (pure). Raises HealthError when
    the end line or the facts are missing (the script did not run to its end)."""
    raw, ended = parse_output(text, nonce)
    if not ended or "facts" not in raw or not raw["facts"].reported:
        raise HealthError("the baseline script did not run to its end: %s" % (text or "no output")[-600:])
    facts = _facts(raw.get("facts"))
    user = facts.pop("user")
    results = {}
    names = ["sshd_t", "visudo_c", "pkgdb", "units_active"] + _login_names() + \
        [user_check_name(i) for i in range(len(commands))] + [n for n in USER_PATH_CHECKS if n in raw]
    for name in names:
        r = raw.get(name)
        results[name] = {"rc": r.rc if r and r.reported else None, "skipped": bool(r and r.skipped and r.reported),
                         "detail": "\n".join(r.data)[:2000] if r else "no result line"}
    files = {}
    for line in raw["files"].data if "files" in raw else []:
        parsed = _parse_stat(line)
        if parsed and parsed[0] == "F":
            files[parsed[1]["path"]] = {k: v for k, v in parsed[1].items() if k != "path"}
    pkg = raw.get("pkgdb")
    match = raw.get("sshd_match")
    pam = raw.get("pam_modules")
    return HostBaseline(
        user=user, facts=facts,
        active_units=sorted(set(_unit_names(raw["units_active"].data))) if "units_active" in raw else [],
        pkgdb={"rc": pkg.rc if pkg else None, "output": "\n".join(pkg.data) if pkg else ""},
        results=results, commands=[str(c) for c in commands], files=files,
        taken_at=time.time() if taken_at is None else taken_at, seconds=round(seconds, 3),
        sshd_match=sshd_match_blocks(match.data) if match is not None and match.reported else None,
        pam_problems=pam_problems(pam.data) if pam is not None and pam.rc == 0 else None)


def _remote_user(session) -> str | None:
    user = session.remote_user()
    return user if user and _USER_RE.match(str(user)) else None


def take_baseline(session, commands: t.Sequence[str] = (), user: str | None = None) -> HostBaseline:
    """Record the host before any change, in one round trip on the run's own connection (with
    become): the facts, ``sshd -t``, ``visudo -c``, the package database, the active systemd
    units, the user health ``commands`` (``scapforge_health_commands``), the login shells (sh
    and bash, as root and as ``user``: default the connection's remote user, else the
    target's ``$SUDO_USER``), owner/mode of the sensitive files, sshd's Match blocks, and what
    users do (USER_PATH_CHECKS: ``sshd -T``, the PAM stacks' modules, a throwaway account's
    password change).

    Raises HealthError when the script did not run to its end (no connection, become refused).
    """
    started = time.monotonic()
    nonce = new_nonce()
    script = build_script(nonce, ["sshd_t", "visudo_c", "pkgdb", "units_active", "files", "sshd_match", "login",
                                  *USER_PATH_CHECKS], commands=commands, user=user or _remote_user(session))
    stdout, stderr, rc, error = _run_script(session, script)
    try:
        return baseline_from_output(stdout, nonce, commands, time.monotonic() - started)
    except HealthError:
        raise HealthError("the baseline could not be taken (rc %s): %s" % (rc, (error or stderr or stdout)[-600:])) from None


# ---------------------------------------------------------------------- after an attempt

def _judge_rc(raw: RawCheck | None, base: dict | None) -> dict:
    """ok/detail for a check judged by its exit code, against the baseline's result."""
    base = base or {}
    if raw is None or not raw.reported:
        why = "result line given more than once" if raw is not None and raw.conflict else "no result line"
        return {"ok": False, "detail": "%s: %s" % (why, _detail(raw)) if raw and raw.data else why}
    if raw.skipped:
        if base.get("skipped") or base.get("rc") is None:
            return {"ok": True, "detail": "not run: %s" % _detail(raw)}
        return {"ok": False, "detail": "ran before any change, now not: %s" % _detail(raw)}
    if raw.rc == 0:
        return {"ok": True, "detail": "exit 0"}
    if base.get("rc") == raw.rc and not base.get("skipped"):
        return {"ok": True, "detail": "exit %d, as before any change: %s" % (raw.rc, _detail(raw))}
    return {"ok": False, "detail": "exit %d%s: %s" % (raw.rc, " (timed out)" if raw.rc == 124 else "", _detail(raw))}


def _judge_pkgdb(raw: RawCheck | None, baseline: HostBaseline) -> dict:
    """``dpkg --audit`` exits 0 even when it lists problems: its output must be empty (or the
    baseline's); ``rpm --verifydb`` is judged by its exit code."""
    verdict = _judge_rc(raw, baseline.results.get("pkgdb"))
    if not verdict["ok"] or raw is None or raw.skipped or raw.rc != 0:
        return verdict
    output = "\n".join(raw.data)
    if not output.strip():
        return {"ok": True, "detail": "%s: no problem listed" % (baseline.facts.get("pkg") or "package database")}
    if output == baseline.pkgdb.get("output"):
        return {"ok": True, "detail": "the same problems as before any change: %s" % output[:300]}
    return {"ok": False, "detail": "%s lists problems: %s" % (
        "dpkg --audit" if baseline.facts.get("pkg") == "dpkg" else "the package database", output[:400])}


def _judge_units(raw: RawCheck | None, baseline: HostBaseline) -> dict:
    if raw is None or not raw.reported:
        return _judge_rc(raw, None)
    if raw.skipped:
        if baseline.facts.get("systemd"):
            return {"ok": False, "detail": "systemd ran before any change, now not: %s" % _detail(raw)}
        return {"ok": True, "detail": "not run: %s" % _detail(raw)}
    if raw.rc != 0:
        return {"ok": False, "detail": "systemctl exited %d: %s" % (raw.rc, _detail(raw))}
    failed = sorted(set(_unit_names(raw.data)))
    active = set(baseline.active_units)
    newly = [u for u in failed if u in active]
    others = [u for u in failed if u not in active]
    if newly:
        return {"ok": False, "detail": "active before, failed now: %s" % ", ".join(newly)[:400], "units": newly}
    if others:
        return {"ok": True, "detail": "failed, but not active before any change: %s" % ", ".join(others)[:300]}
    return {"ok": True, "detail": "no unit that was active has failed"}


def _finding(kind: str, what: str, before: str, after: str, unhealthy: bool, **where) -> dict:
    return dict({"kind": kind, "path": None, "shell": None, "user": None}, **where,
                what=what, before=before, after=after, unhealthy=unhealthy)


def _login_findings(raw: dict[str, RawCheck], baseline: HostBaseline) -> list[dict]:
    """Login shells whose exit code or stderr differ from the baseline (case tmout-login-shells).
    Both are unhealthy: a login that now fails or prints errors is a fix with a side effect."""
    findings = []
    for name in _login_names():
        shell, who = name.split("_")[1:]
        user = "root" if who == "root" else (baseline.user or "")
        base = baseline.results.get(name) or {}
        now = raw.get(name)
        if base.get("skipped") and (now is None or now.skipped):
            continue
        where = {"shell": "%s -l -c true" % shell, "user": user}
        if now is None or not now.reported:
            findings.append(_finding("unverified", "no result line for %s as %s" % (where["shell"], user),
                                     "", _detail(now), True, **where))
            continue
        if now.skipped:
            findings.append(_finding("login_shell", "ran before any change, now not", "exit %s" % base.get("rc"),
                                     _detail(now), True, **where))
            continue
        before_err = base.get("detail", "") if base.get("rc") is not None else ""
        before_lines = set(before_err.split("\n")) if before_err else set()
        new_lines = [line for line in now.data if line not in before_lines]
        if now.rc != base.get("rc") and now.rc != 0:
            findings.append(_finding("login_shell", "exit code changed", "exit %s" % base.get("rc"),
                                     "exit %d: %s" % (now.rc, "\n".join(now.data)[:300]), True, **where))
        elif new_lines:
            findings.append(_finding("login_shell", "new output on stderr", before_err[:300] or "(empty)",
                                     "\n".join(new_lines)[:300], True, **where))
    return findings


def _file_findings(raw: RawCheck | None, baseline: HostBaseline) -> list[dict]:
    """Sensitive files whose kind, owner, group or mode differ from the baseline (case
    dotfile-symlink-owner): unhealthy. A sensitive file gone since the baseline: reported."""
    if raw is None or not raw.reported:
        return [_finding("unverified", "no result line for the sensitive files", "", _detail(raw), True)]
    now = {}
    for line in raw.data:
        parsed = _parse_stat(line)
        if parsed and parsed[0] == "F":
            now[parsed[1]["path"]] = parsed[1]
    findings = []
    for path, before in sorted(baseline.files.items()):
        after = now.get(path)
        if before.get("kind") == "absent":
            continue
        if after is None or after.get("kind") == "absent":
            findings.append(_finding("sensitive_file", "removed", _describe(before), "absent", False, path=path))
            continue
        changed = [key for key in ("kind", "uid", "gid", "mode") if before.get(key) != after.get(key)]
        if changed:
            what = {"kind": "file type", "uid": "owner", "gid": "group", "mode": "mode"}
            findings.append(_finding("sensitive_file", "%s changed" % " and ".join(what[k] for k in changed),
                                     _describe(before), _describe(after), True, path=path))
    return findings


def _expected_mode(kind: str, siblings: list[dict], parent: dict | None) -> int | None:
    """The mode the directory's other entries of the same kind mostly have; with none, 0644 for
    a file and 0755 for a directory when the directory is open to others (o+x), else None."""
    modes = [int(s["mode"], 8) for s in siblings if s.get("kind") == kind]
    if modes:
        return max(set(modes), key=lambda m: (modes.count(m), m))
    if parent and parent.get("kind") == "dir" and int(parent["mode"], 8) & 0o001:
        return 0o644 if kind == "file" else 0o755
    return None


def _created_findings(raw: RawCheck | None, created: t.Sequence[str], modes_asked: t.Collection[str]) -> list[dict]:
    """Files and directories the attempt created under /etc whose mode looks made by the umask
    (case sudo-umask-then-new-files): others cannot read (file) or enter (directory) it, while
    the directory's other entries (or 0644/0755 when it has none) let them. Unhealthy under
    USER_READ_DIRS (the fix silently does not apply to users); reported elsewhere. Paths in
    ``modes_asked`` (the attempt's tasks set their mode) are not judged."""
    if not created:
        return []
    if raw is None or not raw.reported:
        return [_finding("unverified", "no result line for the files the attempt created", "", _detail(raw), True)]
    entries: dict[str, dict] = {}
    dirs: dict[str, dict] = {}
    for line in raw.data:
        parsed = _parse_stat(line)
        if parsed is None:
            continue
        tag, entry = parsed
        if tag == "D":
            dirs[entry["path"]] = entry
        elif tag in ("C", "S"):
            entries.setdefault(entry["path"], entry)
    created_set = set(created)
    findings = []
    for path in created:
        entry = entries.get(path)
        if path in modes_asked or entry is None or entry.get("kind") not in ("file", "dir"):
            continue
        parent_path = posixpath.dirname(path) or "/"
        siblings = [e for p, e in entries.items() if posixpath.dirname(p) == parent_path and p not in created_set]
        expected = _expected_mode(entry["kind"], siblings, dirs.get(parent_path))
        need = 0o004 if entry["kind"] == "file" else 0o005
        mode = int(entry["mode"], 8)
        if expected is None or (mode & need) == need or (expected & need) != need:
            continue
        unhealthy = any(path.startswith(d + "/") for d in USER_READ_DIRS)
        findings.append(_finding(
            "created_mode", "created %s, %s; its directory's other entries are %04o" % (
                entry["mode"], "others cannot read it" if entry["kind"] == "file" else "others cannot enter it",
                expected),
            "absent", "%s (expected %04o)" % (_describe(entry), expected | (mode & ~0o777)), unhealthy, path=path))
    return findings


# ---------------------------------------------------------------------- sshd Match blocks

_SSHD_LINE_RE = re.compile(r"^([^\s=]+)(?:\s*=\s*|\s+|$)(.*)$")


def sshd_line(text: str) -> str | None:
    """One sshd_config line with its whitespace normalised ("Keyword arg arg"), or None for a
    blank line or a comment. sshd_config(5): keywords are case-insensitive and separated from
    their arguments by whitespace or an optional ``=``; ``#`` at the start makes a comment."""
    text = (text or "").strip()
    if not text or text.startswith("#"):
        return None
    found = _SSHD_LINE_RE.match(text)
    if not found:
        return " ".join(text.split())
    keyword, rest = found.groups()
    return " ".join([keyword] + rest.split())


def sshd_line_key(line: str) -> str:
    """What two lines are compared by: the keyword in lower case, the arguments as written."""
    keyword, _sep, rest = line.partition(" ")
    return ("%s %s" % (keyword.lower(), rest)).strip()


def match_blocks(lines: t.Iterable[str]) -> list[dict]:
    """The Match blocks of one sshd configuration file (pure): [{"match": "Match User backup",
    "lines": ["PermitRootLogin yes", ...]}] in file order, lines whitespace-normalised by
    ``sshd_line``. A block runs from its Match line to the next Match line or the end of the
    file (sshd_config(5)); lines before the first Match line are global and not returned."""
    blocks: list[dict] = []
    for text in lines:
        line = sshd_line(text)
        if line is None:
            continue
        if sshd_line_key(line).split(" ", 1)[0] == "match":
            blocks.append({"match": line, "lines": []})
        elif blocks:
            blocks[-1]["lines"].append(line)
    return blocks


def sshd_match_blocks(data: t.Sequence[str]) -> dict | None:
    """The ``sshd_match`` check's output lines -> {path: match_blocks(its lines)} (pure), or
    None when the output was cut (no end mark ``E``) or is malformed. Files without a Match
    block map to []."""
    files: dict[str, list[str]] = {}
    current = None
    ended = False
    for row in data:
        if ended:
            return None  # nothing may follow the end mark
        if row == "E":
            ended = True
        elif row.startswith("F /"):
            current = row[2:]
            files.setdefault(current, [])
        elif row.startswith("L ") and current is not None:
            files[current].append(row[2:])
        else:
            return None
    if not ended:
        return None
    return {path: match_blocks(lines) for path, lines in files.items()}


def _block_keys(blocks: dict) -> dict[tuple[str, str, int], list[str]]:
    """{(path, match key, n-th block with that header in the file): lines}."""
    keyed: dict[tuple[str, str, int], list[str]] = {}
    for path, entries in blocks.items():
        seen: dict[str, int] = {}
        for block in entries:
            key = sshd_line_key(block["match"])
            seen[key] = seen.get(key, 0) + 1
            keyed[(path, key, seen[key])] = [block["match"]] + list(block["lines"])
    return keyed


def match_findings(before: dict, after: dict) -> list[dict]:
    """Compare the Match blocks of the baseline (``before``) and now (``after``), both as
    ``sshd_match_blocks`` gives them (pure). Findings of kind ``sshd_match`` (path = the file):
    a block the baseline had that is gone, a line of it removed, or a line of it changed (a
    removed line and an added one with the same keyword): unhealthy; a line added to a block,
    or a block added: reported. Case sshd-match-override."""
    old, new = _block_keys(before), _block_keys(after)
    findings = []
    for key, lines in old.items():
        path, header = key[0], lines[0]
        if key not in new:
            findings.append(_finding("sshd_match", "the block '%s' was removed, with: %s" % (
                header, "; ".join(lines[1:]) or "(no lines)"), "\n".join(lines), "absent", True, path=path))
            continue
        now = list(new[key][1:])
        removed = []
        for line in lines[1:]:
            match = next((i for i, other in enumerate(now) if sshd_line_key(other) == sshd_line_key(line)), None)
            if match is None:
                removed.append(line)
            else:
                now.pop(match)
        for line in removed:
            keyword = sshd_line_key(line).split(" ", 1)[0]
            same = next((i for i, other in enumerate(now) if sshd_line_key(other).split(" ", 1)[0] == keyword), None)
            if same is None:
                findings.append(_finding("sshd_match", "removed from the block '%s': %s" % (header, line),
                                         line, "absent", True, path=path))
            else:
                changed = now.pop(same)
                findings.append(_finding("sshd_match", "changed in the block '%s': %s -> %s" % (header, line, changed),
                                         line, changed, True, path=path))
        for line in now:
            findings.append(_finding("sshd_match", "added to the block '%s' since the run began: %s" % (header, line),
                                     "absent", line, False, path=path))
    for key, lines in new.items():
        if key not in old:
            findings.append(_finding("sshd_match", "the block '%s' was added since the run began, with: %s" % (
                lines[0], "; ".join(lines[1:]) or "(no lines)"), "absent", "\n".join(lines), False, path=key[0]))
    return findings


def _sshd_match_findings(raw: RawCheck | None, before: dict) -> list[dict]:
    if raw is None or not raw.reported:
        return [_finding("unverified", "no result line for sshd's Match blocks", "", _detail(raw), True)]
    after = sshd_match_blocks(raw.data)
    if after is None:
        return [_finding("unverified", "sshd's configuration came back cut or malformed (more than %d lines?)"
                         % MAX_SSHD_LINES, "", _detail(raw, 200), True)]
    return match_findings(before, after)


def judge_after(raw: dict[str, RawCheck], ended: bool, baseline: HostBaseline, commands: t.Sequence[str],
                created: t.Sequence[str] = (), modes_asked: t.Collection[str] = (),
                side_effects: bool = True) -> tuple[dict, list]:
    """The verdicts of one after-attempt script run (pure): (checks, findings).

    checks: {name: {"ok": bool, "detail": str}} for sshd_t, visudo_c, pkgdb, units, each user
    check (user_1..) and, with ``side_effects``, ``side_effects`` (not ok when a finding is
    unhealthy). A check is judged against the baseline: failing the same way as before any
    change is ok (the detail says so). findings: see ``side_effect_findings``.
    """
    checks = {
        "sshd_t": _judge_rc(raw.get("sshd_t"), baseline.results.get("sshd_t")),
        "visudo_c": _judge_rc(raw.get("visudo_c"), baseline.results.get("visudo_c")),
        "pkgdb": _judge_pkgdb(raw.get("pkgdb"), baseline),
        "units": _judge_units(raw.get("units_failed"), baseline),
    }
    checks.update(judge_user_paths(raw, baseline))
    for index, command in enumerate(commands):
        name = user_check_name(index)
        base = baseline.results.get(name) if index < len(baseline.commands) and \
            baseline.commands[index] == str(command) else None
        verdict = _judge_rc(raw.get(name), base or {"rc": None})
        verdict["detail"] = "%s: %s" % (str(command)[:120], verdict["detail"])
        checks[name] = verdict
    findings: list[dict] = []
    if side_effects:
        findings = side_effect_findings(raw, baseline, created, modes_asked)
        bad = [f for f in findings if f["unhealthy"]]
        checks["side_effects"] = {
            "ok": not bad,
            "detail": "; ".join("%s %s: %s" % (f["kind"], f["path"] or "%s as %s" % (f["shell"], f["user"]), f["what"])
                                for f in findings)[:600] or "none",
        }
    if not ended:
        checks["script"] = {"ok": False, "detail": "the script did not run to its end"}
    return checks, findings


def judge_user_paths(raw: dict[str, RawCheck], baseline: HostBaseline) -> dict:
    """The verdicts of the checks of what users do (pure, issue 17 item 6): ``services``
    always; ``sshd_effective``, ``pam_modules`` and ``passwd_change`` when the baseline ran
    them. Each judged against the baseline, as the other checks."""
    checks = {"services": judge_services(raw.get("services"), baseline)}
    if "sshd_effective" in baseline.results:
        checks["sshd_effective"] = _judge_rc(raw.get("sshd_effective"), baseline.results["sshd_effective"])
    if "pam_modules" in baseline.results:
        checks["pam_modules"] = judge_pam(raw.get("pam_modules"), baseline)
    if "passwd_change" in baseline.results:
        checks["passwd_change"] = judge_passwd(raw.get("passwd_change"), baseline)
    return checks


def pam_problems(lines: t.Sequence[str]) -> dict | None:
    """The ``pam_modules`` probe's lines -> {"<kind> <module or file>": "<stacks>: <why>"}
    (pure; kinds missing, load, symbol, include: see module_utils/health_probe.py), or None
    when the output is cut or malformed (no closing ``N <count>`` line, or another line)."""
    found: dict[str, str] = {}
    for index, row in enumerate(lines):
        if row.startswith("N ") and row[2:].isdigit() and index == len(lines) - 1:
            return found
        parts = row.split(" ", 4)
        if len(parts) < 4 or parts[0] != "P" or parts[1] not in ("missing", "load", "symbol", "include"):
            return None
        found["%s %s" % (parts[1], parts[2])] = "%s: %s" % (parts[3], parts[4] if len(parts) > 4 else "")
    return None


def judge_pam(raw: RawCheck | None, baseline: HostBaseline) -> dict:
    """Every module the PAM stacks name exists, loads and has its stack type's function, and
    every included file exists, but for the problems the baseline already had (pure)."""
    verdict = _judge_rc(raw, baseline.results.get("pam_modules"))
    if not verdict["ok"] or raw is None or raw.skipped or raw.rc != 0:
        return verdict
    now = pam_problems(raw.data)
    if now is None:
        return {"ok": False, "detail": "the PAM probe's output came back cut or malformed: %s" % _detail(raw, 300)}
    before = baseline.pam_problems or {}
    new = {key: why for key, why in now.items() if key not in before}
    if new:
        return {"ok": False, "detail": "PAM: %s" % "; ".join("%s (%s)" % item for item in sorted(new.items()))[:600],
                "problems": sorted(new)}
    if now:
        return {"ok": True, "detail": "the same PAM problems as before any change: %s" % ", ".join(sorted(now))[:300]}
    return {"ok": True, "detail": "every module the PAM stacks name is there and loads (%s)" % raw.data[-1][2:]}


def judge_passwd(raw: RawCheck | None, baseline: HostBaseline) -> dict:
    """A throwaway account's password change through PAM worked (exit 0) or failed as it did
    before any change (pure). The detail names the step that failed (useradd, chage,
    chpasswd, passwd) and an account left behind (exit 3)."""
    verdict = _judge_rc(raw, baseline.results.get("passwd_change"))
    if raw is None or not raw.reported or raw.skipped or raw.rc == 0:
        return verdict
    steps = [row.split(" ", 3) for row in raw.data if row.startswith("S ")]
    failed = ["%s exited %s: %s" % (p[1], p[2], p[3] if len(p) > 3 else "") for p in steps if len(p) > 2 and p[2] != "0"]
    left = [row[2:] for row in raw.data if row.startswith("L ")]
    why = "; ".join(failed + ["account left behind: %s" % ", ".join(left)] * bool(left)) or _detail(raw, 300)
    return {"ok": verdict["ok"], "detail": ("as before any change: " if verdict["ok"] else "password change failed: ") + why[:500]}


#: what ``systemctl is-active`` prints for a unit that runs (a restart in flight included)
_RUNNING_STATES = ("active", "reloading", "activating", "refreshing")


def judge_services(raw: RawCheck | None, baseline: HostBaseline) -> dict:
    """Every unit of CORE_SERVICES (time, log) active in the baseline (``baseline.active_units``)
    still runs (pure), unless a unit of the same class that did not run before runs now in its
    place (chrony for systemd-timesyncd: said, not held against the attempt). A unit of the
    class that ran all along is no stand-in (rsyslog stopped while journald runs: logs on
    disk stop). ``raw.data``: one state per unit of ``core_units()``."""
    wanted = {cls: [u for u in units if u in baseline.active_units] for cls, units in CORE_SERVICES.items()}
    wanted = {cls: units for cls, units in wanted.items() if units}
    if raw is None or not raw.reported:
        return _judge_rc(raw, None)
    if raw.skipped:
        if wanted:
            return {"ok": False, "detail": "systemd ran before any change, now not: %s" % _detail(raw)}
        return {"ok": True, "detail": "not run: %s" % _detail(raw)}
    units = core_units()
    if len(raw.data) != len(units):
        return {"ok": False, "detail": "systemctl is-active gave %d lines for %d units: %s" % (
            len(raw.data), len(units), _detail(raw, 300))}
    running = {unit for unit, state in zip(units, raw.data) if state.strip() in _RUNNING_STATES}
    stopped, notes = [], []
    for cls, before in sorted(wanted.items()):
        gone = [u for u in before if u not in running]
        if not gone:
            continue
        instead = [u for u in CORE_SERVICES[cls] if u in running and u not in before]
        if instead:
            notes.append("the %s service is now %s (was %s)" % (cls, ", ".join(instead), ", ".join(gone)))
        else:
            stopped.append("the %s service %s ran before any change and runs no more" % (cls, ", ".join(gone)))
    if stopped:
        return {"ok": False, "detail": "; ".join(stopped + notes)}
    if not wanted:
        return {"ok": True, "detail": "no time or log service ran before any change"}
    return {"ok": True, "detail": "; ".join(notes) or "still running: %s" % ", ".join(sum(wanted.values(), []))}


def side_effect_findings(raw: dict[str, RawCheck], baseline: HostBaseline, created: t.Sequence[str] = (),
                         modes_asked: t.Collection[str] = ()) -> list[dict]:
    """What an attempt changed beyond its rule (pure). Each finding: {"kind", "path", "shell",
    "user", "what", "before", "after", "unhealthy"}; kinds:

    - ``login_shell`` (case tmout-login-shells): ``sh -l -c true`` / ``bash -l -c true`` as
      root or the connecting user exits non-zero or prints new stderr lines. Unhealthy.
    - ``sensitive_file`` (case dotfile-symlink-owner): owner, group, mode or type of
      /etc/shadow, gshadow, passwd, group, sudoers, sudoers.d/* changed: unhealthy; removed:
      reported (a lock-out it causes shows in ``check_host``).
    - ``created_mode`` (case sudo-umask-then-new-files): see ``_created_findings``; unhealthy
      under /etc/profile.d, /etc/skel, /etc/bash_completion.d, reported elsewhere.
    - ``sshd_match`` (case sshd-match-override): a line inside a Match block of sshd's
      configuration that the baseline had is removed or changed (or its whole block is gone):
      unhealthy; a line or block added since the baseline: reported (``match_findings``).
    - ``unverified``: a result line is missing; unhealthy (a missing result counts as failed).
    """
    findings = _login_findings(raw, baseline)
    findings += _file_findings(raw.get("files"), baseline)
    if baseline.sshd_match is not None:
        findings += _sshd_match_findings(raw.get("sshd_match"), baseline.sshd_match)
    wanted = [p for p in created if p.startswith(CREATED_ROOTS)]
    findings += _created_findings(raw.get("created"), wanted[:MAX_CREATED], set(modes_asked))
    if len(wanted) > MAX_CREATED:
        findings.append(_finding("created_mode", "%d more created paths not examined (at most %d are)"
                                 % (len(wanted) - MAX_CREATED, MAX_CREATED), "", "", False))
    return findings


def check_after(session, baseline: HostBaseline, commands: t.Sequence[str] = (), *, created: t.Sequence[str] = (),
                modes_asked: t.Collection[str] = (), side_effects: bool = True) -> HealthReport:
    """Check the host after an attempt, in one round trip on the run's own connection (with
    become); never raises.

    Runs ``sshd -t`` (when sshd exists), ``visudo -c`` (when visudo exists), ``dpkg --audit``
    / ``rpm --verifydb``, the failed systemd units (against ``baseline.active_units``), the
    time and log services, the checks of what users do that the baseline ran (``sshd -T``,
    the PAM modules, a password change: ``judge_user_paths``), the
    inventory's ``commands`` (``scapforge_health_commands``: each must exit 0), and with
    ``side_effects`` the login shells, the sensitive files and the mode of ``created`` (paths
    absent before the attempt; only those under /etc are judged; ``modes_asked``: those
    whose mode the attempt's tasks set). Returns a HealthReport with ``checks`` and
    ``side_effects`` (findings); ``healthy`` is True when every check is ok. A fresh login
    is not part of it: that is ``check_host``. Sources: issue 7 item 3, DESIGN decision 19,
    cases tmout-login-shells, sudo-umask-then-new-files, dotfile-symlink-owner.
    """
    started = time.monotonic()
    nonce = new_nonce()
    names = ["sshd_t", "visudo_c", "pkgdb", "units_failed", "services"] + [n for n in USER_PATH_CHECKS if n in baseline.results]
    if side_effects:
        names += ["files", "login"] + (["sshd_match"] if baseline.sshd_match is not None else []) + \
            (["created"] if created else [])
    wanted = [p for p in created if isinstance(p, str) and p.startswith(CREATED_ROOTS)]
    try:
        script = build_script(nonce, names, commands=commands, user=baseline.user or "root", created=wanted)
    except ValueError as exc:
        return HealthReport(False, "health checks not run: %s" % exc, time.monotonic() - started, codes=[CHECKS_NOT_RUN])
    stdout, stderr, rc, error = _run_script(session, script)
    raw, ended = parse_output(stdout, nonce)
    checks, findings = judge_after(raw, ended, baseline, commands, wanted, modes_asked, side_effects)
    if not ended:  # same verdict as judge_after's, with what the connection said
        checks["script"] = {"ok": False, "detail": "the script did not run to its end (rc %s): %s"
                            % (rc, (error or stderr or stdout).strip()[-400:])}
    failed = {name: v for name, v in checks.items() if not v["ok"]}
    if failed:
        detail = "failed: " + "; ".join("%s: %s" % (n, v["detail"][:200]) for n, v in failed.items())
    else:
        detail = "%d checks ok" % len(checks)
        if findings:
            detail += "; %d side effect(s) reported" % len(findings)
    return HealthReport(not failed, detail[:1200], time.monotonic() - started, checks=checks, side_effects=findings,
                        codes=verdict_codes(checks, findings))


def verdict_codes(checks: dict, findings: t.Sequence[dict]) -> list[str]:
    """The codes of ``judge_after``'s verdicts (pure): one per failed check, in check order
    (``CHECK_CODES``; a user check: HEALTH_COMMAND_FAILED, once), and for failed side
    effects ``side_effect:<kind>`` once per kind of unhealthy finding."""
    codes: list[str] = []
    for name, verdict in checks.items():
        if verdict["ok"]:
            continue
        if name == "side_effects":
            found = [SIDE_EFFECT_PREFIX + f["kind"] for f in findings if f["unhealthy"]] or [SIDE_EFFECT_PREFIX + "unverified"]
        else:
            found = [CHECK_CODES.get(name) or (HEALTH_COMMAND_FAILED if name.startswith("user_") else name + "_failed")]
        codes.extend(c for c in found if c not in codes)
    return codes


def check_side_effects(session, baseline: HostBaseline, created: t.Sequence[str] = (),
                       modes_asked: t.Collection[str] = ()) -> list[dict]:
    """Only the side-effect part of ``check_after``, in its own round trip: the findings
    (see ``side_effect_findings``). Never raises: a failed round trip gives ``unverified``
    findings."""
    report = check_after(session, baseline, (), created=created, modes_asked=modes_asked, side_effects=True)
    return report.side_effects


def undo_sensitive_changes(session, findings: t.Sequence[dict], baseline: HostBaseline) -> dict:
    """Put back owner, group and mode of the sensitive files named by ``sensitive_file``
    findings, from the baseline, in one round trip with become, and read them back (case
    dotfile-symlink-owner: a chown that followed a user's symlink to /etc/shadow is undone
    even though no checkpoint covered /etc/shadow). Returns {"restored": [paths], "verified":
    bool, "mismatches": ["path: now ..."]}; never raises."""
    paths = [f["path"] for f in findings if f.get("kind") == "sensitive_file" and f.get("path") in baseline.files
             and baseline.files[f["path"]].get("kind") == "file"]
    if not paths:
        return {"restored": [], "verified": True, "mismatches": []}
    nonce = new_nonce()
    lines = []
    for path in paths:
        entry = baseline.files[path]
        quoted = shlex.quote(path)
        lines.append("[ -L %s ] || { chown -h %d:%d %s && chmod %s %s; }" % (quoted, entry["uid"], entry["gid"], quoted,
                                                                             entry["mode"], quoted))
    script = build_script(nonce, ["files"], user="root", prepend="\n".join(lines) + "\n")
    stdout, stderr, rc, error = _run_script(session, script)
    raw, _ended = parse_output(stdout, nonce)
    remaining = [f for f in _file_findings(raw.get("files"), baseline) if f["unhealthy"]]
    mismatches = ["%s: now %s" % (f["path"], f["after"]) for f in remaining if f.get("path") in paths or not f["path"]]
    if error:
        mismatches.append("round trip failed: %s" % error[:300])
    return {"restored": paths, "verified": not mismatches, "mismatches": mismatches}
