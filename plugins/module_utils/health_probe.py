# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Target-side probes of the health checks that exercise what users do (issue 17 item 6).

Run by the controller's health script (``health.build_script``) as root with the target's Python
(3.9, stdlib only): ``python3 -c <this file> pam|passwd``. Each probe prints fixed-format
lines on stdout (the controller parses them, ``health.pam_problems`` and the ``passwd_change``
verdict) and exits 0 when it could make its observation (the observation itself may be bad).

- ``pam``: every stack under /etc/pam.d: each module it names exists in a PAM module
  directory, loads (``dlopen`` with RTLD_NOW: every symbol resolves) and has the function of
  the stack's type (auth: ``pam_sm_authenticate``, account: ``pam_sm_acct_mgmt``, session:
  ``pam_sm_open_session``, password: ``pam_sm_chauthtok``); each file an ``include`` /
  ``substack`` / ``@include`` names exists. One line per problem:
  ``P <kind> <module or file> <stacks, comma separated> <why>`` (kind: missing, load,
  symbol, include); then ``N <count of modules checked>``. A module named only with a
  leading ``-`` type (pam.conf(5): "do not log if missing") may be missing.
- ``passwd``: a password change for a throwaway account, through PAM: ``useradd`` an account
  named ``scapforge-hc-<8 hex>`` (no home, no group of its own), set a first password with
  ``chpasswd`` (PAM's ``chpasswd`` service: on Debian it includes common-password), then as
  that user change it with ``passwd`` on a pty (PAM's ``passwd`` service, the path a user
  takes), and check that /etc/shadow's hash changed. The account (and its home, mail spool,
  faillock tally, /etc/security/opasswd lines) is deleted in a ``finally`` and on SIGTERM;
  leftovers of an earlier killed probe (``scapforge-hc-*``) are deleted first. Lines:
  ``S <step> <rc> <output>`` per step, ``L <name>`` when an account could not be deleted.
  Exit 0 when the change worked and nothing was left, 1 when a step failed, 3 when an
  account was left. shadow-utils rewrites its backups (/etc/passwd-, shadow-, group-,
  gshadow-, subuid-, subgid-) on every useradd and userdel, so the probe puts them back as they
  were (bytes, mode, owner, times; removed when there was none): a host whose rules already
  pass is left as it was (issue 21: ComplianceAsCode's ``.pass.sh`` scenarios).
"""

import ctypes
import os
import pty
import pwd
import re
import secrets
import select
import signal
import subprocess
import sys
import time

PAM_DIR = "/etc/pam.d"
#: where libpam looks for modules (its compile-time default per distribution)
MODULE_DIRS = ("/lib/x86_64-linux-gnu/security", "/usr/lib/x86_64-linux-gnu/security", "/lib/aarch64-linux-gnu/security",
               "/usr/lib/aarch64-linux-gnu/security", "/lib64/security", "/usr/lib64/security", "/lib/security",
               "/usr/lib/security")
FUNCTIONS = {"auth": "pam_sm_authenticate", "account": "pam_sm_acct_mgmt", "session": "pam_sm_open_session",
             "password": "pam_sm_chauthtok"}
PREFIX = "scapforge-hc-"
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STEP_TIMEOUT = 20
#: the backups useradd and userdel write over (shadow-utils' commonio: ``<file>-``)
ACCOUNT_BACKUPS = ("/etc/passwd-", "/etc/shadow-", "/etc/group-", "/etc/gshadow-", "/etc/subuid-", "/etc/subgid-")


def pam_lines(text):
    """The PAM configuration lines of one file (comments dropped, ``\\`` continuations joined)."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = pending + raw
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    if pending.strip():
        out.append(pending.split("#", 1)[0].strip())
    return out


def pam_references(text):
    """[(type, optional, control, target)] of one PAM file (pam.d(5)): type without its
    ``-``; control ``include``/``substack`` (target: a file of /etc/pam.d) or the module's
    control (target: its path); ``@include`` lines give ("@include", False, "include", file)."""
    refs = []
    for line in pam_lines(text):
        words = line.split()
        if words[0] == "@include":
            if len(words) > 1:
                refs.append(("@include", False, "include", words[1]))
            continue
        kind = words[0]
        optional = kind.startswith("-")
        rest = words[1:]
        control = ""
        if rest and rest[0].startswith("["):
            taken = []
            while rest:
                taken.append(rest.pop(0))
                if taken[-1].endswith("]"):
                    break
            control = " ".join(taken)
        elif rest:
            control = rest.pop(0)
        if rest:
            refs.append((kind.lstrip("-").lower(), optional, control, rest[0]))
    return refs


def _stacks(pam_dir):
    stacks = {}
    try:
        names = sorted(os.listdir(pam_dir))
    except OSError:
        return stacks
    for name in names:
        path = os.path.join(pam_dir, name)
        if name.startswith(".") or not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                stacks[name] = pam_references(handle.read())
        except OSError as exc:
            stacks[name] = [("@include", False, "unreadable", str(exc))]
    return stacks


def locate(module, dirs=MODULE_DIRS):
    """The path of a module named in a stack: an absolute path as given, else the first of
    ``dirs`` that has it (``$ISA`` dropped as libpam does on 64-bit)."""
    module = module.replace("$ISA/", "").replace("$ISA", "")
    if module.startswith("/"):
        return module if os.path.isfile(module) else None
    for directory in dirs:
        path = os.path.join(directory, module)
        if os.path.isfile(path):
            return path
    return None


def _load(path, kinds):
    """None when ``path`` loads and has the function of each of ``kinds``, else (kind, why)."""
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as exc:
        return "load", str(exc)
    missing = [FUNCTIONS[k] for k in sorted(kinds) if k in FUNCTIONS and not hasattr(lib, FUNCTIONS[k])]
    if missing:
        return "symbol", "no %s" % ", ".join(missing)
    return None


def pam_probe(pam_dir=PAM_DIR, dirs=MODULE_DIRS):
    """The problem lines of every stack (see the module's docstring)."""
    stacks = _stacks(pam_dir)
    modules = {}  # module -> {"stacks": set, "kinds": set, "required": bool}
    lines = []
    for stack, refs in stacks.items():
        for kind, optional, control, target in refs:
            if control == "unreadable":
                lines.append("P include %s %s unreadable: %s" % (stack, stack, target))
            elif control in ("include", "substack"):
                if not os.path.isfile(os.path.join(pam_dir, target)):
                    lines.append("P include %s %s no such file in %s" % (target, stack, pam_dir))
            else:
                entry = modules.setdefault(target, {"stacks": set(), "kinds": set(), "required": False})
                entry["stacks"].add(stack)
                entry["kinds"].add(kind)
                entry["required"] = entry["required"] or not optional
    for module in sorted(modules):
        entry = modules[module]
        where = ",".join(sorted(entry["stacks"]))
        path = locate(module, dirs)
        if path is None:
            if entry["required"]:
                lines.append("P missing %s %s not in %s" % (module, where, " ".join(d for d in dirs if os.path.isdir(d))))
            continue
        problem = _load(path, entry["kinds"])
        if problem:
            lines.append("P %s %s %s %s" % (problem[0], module, where, " ".join(problem[1].split())[:300]))
    lines.append("N %d" % len(modules))
    return lines


# ---------------------------------------------------------------------- the password change

#: the characters of each class, in two disjoint halves: the first password takes from one,
#: the second from the other, so pam_unix's ``obscure`` never finds them "too similar" (it
#: counts the old password's characters found in the new one) and pwquality's difok holds
_CLASSES = (("ABCDEFGHJKLM", "NPQRSTUVWXYZ"), ("abcdefghijkm", "nopqrstuvwxyz"), ("2345", "6789"), ("%+,-", ".=@^_"))


def new_password(half=0):
    """24 characters cycling upper, lower, digit, punctuation (passes pwquality's classes,
    repeats and length rules as profiles set them: minlen up to 24, minclass 4), from the
    ``half`` (0 or 1) of each class: two passwords of different halves share no character."""
    return "".join(secrets.choice(_CLASSES[i % 4][half]) for i in range(24))


def _run(argv, data=None):
    try:
        proc = subprocess.run(argv, input=data, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=STEP_TIMEOUT, env={"PATH": SAFE_PATH, "LC_ALL": "C"}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def _shadow_hash(name):
    try:
        with open("/etc/shadow", encoding="utf-8", errors="replace") as handle:
            for row in handle:
                fields = row.split(":")
                if fields[0] == name and len(fields) > 1:
                    return fields[1]
    except OSError:
        pass
    return None


def _converse(fd, proc, old, new):
    """Answer passwd's prompts on the pty: ``old`` for the current password, ``new`` for the
    others; returns (what passwd printed, its exit code)."""
    out, pending, deadline = "", "", time.monotonic() + STEP_TIMEOUT
    answers = 0
    while time.monotonic() < deadline:
        ready, _w, _x = select.select([fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(fd, 4096).decode("utf-8", "replace")
            except OSError:  # EIO: every end of the pty's other side is closed (passwd ended)
                chunk = ""
            if not chunk:
                break
            out += chunk
            pending += chunk
            if re.search(r"(?i)password[^:\n]*:\s*$", pending) and answers < 6:
                os.write(fd, ((old if re.search(r"(?i)(current|old)", pending) else new) + "\n").encode())
                pending, answers = "", answers + 1
        elif proc.poll() is not None:
            break
    else:
        proc.kill()
        out += "\n(timed out after %ds)" % STEP_TIMEOUT
    try:
        return out, proc.wait(timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        return out, proc.wait()


def user_passwd(name, old, new):
    """Change ``name``'s password as that user with ``passwd`` on a pty: (rc, output)."""
    entry = pwd.getpwnam(name)
    passwd = next((os.path.join(d, "passwd") for d in SAFE_PATH.split(":") if os.path.isfile(os.path.join(d, "passwd"))), None)
    if passwd is None:
        return 127, "passwd not installed"
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([passwd], stdin=slave, stdout=slave, stderr=slave, close_fds=True, start_new_session=True,
                                user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd="/",
                                env={"PATH": SAFE_PATH, "LC_ALL": "C", "HOME": "/", "USER": name, "LOGNAME": name})
    except OSError as exc:
        os.close(master)
        os.close(slave)
        return 127, str(exc)
    os.close(slave)
    try:
        out, rc = _converse(master, proc, old, new)
    finally:
        os.close(master)
    return (rc if rc >= 0 else 128 - rc), out


def delete_account(name):
    """Delete the account, its home and spool, its faillock tally and its opasswd lines;
    True when it is gone."""
    _run(["userdel", "-r", "-f", name])
    for path in ("/var/run/faillock/" + name, "/var/lib/faillock/" + name, "/var/mail/" + name):
        try:
            os.unlink(path)
        except OSError:
            pass
    _drop_opasswd(name)
    try:
        pwd.getpwnam(name)
    except KeyError:
        return True
    return False


def _drop_opasswd(name, path="/etc/security/opasswd"):
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            rows = handle.readlines()
    except OSError:
        return
    kept = [r for r in rows if r.split(":", 1)[0] != name]
    if len(kept) == len(rows):
        return
    info = os.stat(path)
    tmp = path + ".scapforge-hc"
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.writelines(kept)
    os.chown(tmp, info.st_uid, info.st_gid)
    os.chmod(tmp, info.st_mode & 0o7777)
    os.rename(tmp, path)


def save_backups(paths=ACCOUNT_BACKUPS):
    """{path: (bytes, stat) or None when it does not exist} of the account files' backups."""
    saved = {}
    for path in paths:
        try:
            with open(path, "rb") as handle:
                saved[path] = (handle.read(), os.stat(path))
        except FileNotFoundError:
            saved[path] = None
    return saved


def restore_backups(saved):
    """Put each backup back as :func:`save_backups` found it (atomically, with its mode, owner
    and times); remove one that did not exist. Returns the paths it could not restore."""
    failed = []
    for path, was in sorted(saved.items()):
        try:
            if was is None:
                if os.path.lexists(path):
                    os.unlink(path)
                continue
            data, info = was
            tmp = path + ".scapforge-hc"
            with open(tmp, "wb") as handle:
                handle.write(data)
            os.chown(tmp, info.st_uid, info.st_gid)
            os.chmod(tmp, info.st_mode & 0o7777)
            os.utime(tmp, ns=(info.st_atime_ns, info.st_mtime_ns))
            os.rename(tmp, path)
        except OSError:
            failed.append(path)
    return failed


def _steps(name, emit):
    old, new = new_password(0), new_password(1)
    rc, out = _run(["useradd", "-M", "-N", "-s", "/bin/sh", "-c", "scapforge health check (temporary)", name])
    emit("useradd", rc, out)
    if rc != 0:
        return False
    rc, out = _run(["chage", "-m", "0", "-M", "99999", "-E", "-1", name])
    emit("chage", rc, out)
    rc, out = _run(["chpasswd"], ("%s:%s\n" % (name, old)).encode())
    emit("chpasswd", rc, out)
    if rc != 0:
        return False
    first = _shadow_hash(name)
    rc, out = user_passwd(name, old, new)
    changed = first is not None and _shadow_hash(name) not in (None, first)
    emit("passwd", rc if rc != 0 or changed else 1, out if changed or rc != 0 else out + "\n(the hash in /etc/shadow did not change)")
    return rc == 0 and changed


def passwd_probe(emit_line=print):
    """The password change (see the module's docstring); returns the exit code."""
    def emit(step, rc, out):
        said = " | ".join(x.strip() for x in (out or "").splitlines() if x.strip())[:300]
        emit_line("S %s %d %s" % (step, rc, said))  # pylint: disable=ansible-bad-function

    left = [e.pw_name for e in pwd.getpwall() if e.pw_name.startswith(PREFIX) and not delete_account(e.pw_name)]
    name = PREFIX + secrets.token_hex(4)
    ok = False

    def on_term(_signum, _frame):
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    backups = save_backups()
    try:
        ok = _steps(name, emit)
    finally:
        if not delete_account(name):
            left.append(name)
        if not left:  # with an account left, the backups hold it too: shadow-utils' own state stands
            for path in restore_backups(backups):
                emit("restore", 1, "could not restore %s" % path)
        for each in left:
            emit_line("L %s" % each)  # pylint: disable=ansible-bad-function
    if left:
        return 3
    return 0 if ok else 1


def main(argv):
    if argv[1:] == ["pam"]:
        for line in pam_probe():
            print(line)  # pylint: disable=ansible-bad-function  # run as a script on the target, not a module
        return 0
    if argv[1:] == ["passwd"]:
        return passwd_probe()
    print("usage: health_probe pam|passwd", file=sys.stderr)  # pylint: disable=ansible-bad-function
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))  # pylint: disable=ansible-bad-function
