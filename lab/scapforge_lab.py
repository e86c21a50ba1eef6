"""The scapforge lab: real Debian 12 hosts as booted systemd-nspawn containers.

Each host is a booted container (systemd is PID 1 inside, sshd runs as a service) on an
overlayfs root: the lower layer is one cached debootstrap root (never written after the
build), the upper layer is the host's own and is wiped on every start, so a reset to
baseline is: stop, wipe the upper layer, boot. A ``reboot`` inside a host boots it again on
the same upper layer (lab/nspawn_supervise.py). Ansible reaches a host over SSH at its own
address as the non-root user ``scapforge`` with passwordless sudo, like a production host.

Layout under the lab home (``$SCAPFORGE_LAB_HOME``, default ``/var/lib/scapforge-lab``)::

    base/rootfs/            debootstrap root + image tweaks (overlay lower layer)
    base/rootfs.json        what the root was built from (rebuild/re-tweak when it differs)
    content/                ssg-debian_<ver>_all.deb, the verified ssg-debian12-ds.xml and
                            ssg-rhel9-ds.xml (from ssg-nondebian, whose .deb is not kept)
    keys/id_ed25519[.pub]   the controller's SSH key pair for the lab
    hosts/labN/             upper/ work/ merged/ console.log tinyproxy.conf tinyproxy.log
    state/labN.json         pid of the host's nspawn supervisor, pid of its proxy, addresses

Network: host ``labN`` (N in 1..254) owns ``10.87.N.0/30``; the controller side ``ve-labN``
is ``10.87.N.1``, the container's ``host0`` is ``10.87.N.2``. No route leaves the /30, so
the only thing a host reaches is the controller's veth address, where a tinyproxy of ours
(one per host, listening on that address only, allowing only that /30, filtering to the
Debian mirror's host names) forwards apt's HTTP requests (DESIGN decision 11).

Safety: nothing of the controller is bind-mounted into a root; mounts are unmounted before
anything is removed and removal uses ``rm -rf --one-file-system``; processes are stopped
only by the PIDs recorded here, after checking their command line.

Everything here needs root (mount, nspawn, ip). Errors are raised as :class:`LabError`.
"""

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

DEFAULT_HOME = "/var/lib/scapforge-lab"
SUITE = "bookworm"
VARIANT = "minbase"
INCLUDE = ("python3", "python3-apt", "sudo", "openssh-server", "linux-base",
           "openscap-scanner", "systemd", "systemd-sysv", "dbus", "iproute2")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: runs each host's nspawn and boots it again after a reboot inside (exit status 133).
SUPERVISOR = Path(__file__).resolve().parent / "nspawn_supervise.py"

SSG_VERSION = "0.1.76-1"
SSG_POOL_URL = "http://deb.debian.org/debian/pool/main/s/scap-security-guide/"
SSG_CONTENT_DIR = "/usr/share/xml/scap/ssg/content/"
SSG_DEB_NAME = "ssg-debian_%s_all.deb" % SSG_VERSION
SSG_DEB_URL = SSG_POOL_URL + SSG_DEB_NAME
DATASTREAM_NAME = "ssg-debian12-ds.xml"
DATASTREAM_PATH = SSG_CONTENT_DIR + DATASTREAM_NAME
DATASTREAM_SHA256 = "ed594d33cfd38c6bbb91f2283fee7fe436641d1176861b67a474e11bf445062c"
# Controller-only content (the catalog's RHEL 9 tests; `-e scapforge_datastream_src=`): SSG
# 0.1.76's RHEL 9 datastream (DISA STIG V2R3 profile with RHEL-09 STIG ids) from trixie's
# ssg-nondebian; bookworm's 0.1.65 copy is a draft without STIG ids. Not in the base root,
# so it is not part of _image_spec: adding or changing it never rebuilds the image.
SSG_NONDEBIAN_DEB_NAME = "ssg-nondebian_%s_all.deb" % SSG_VERSION
SSG_NONDEBIAN_DEB_URL = SSG_POOL_URL + SSG_NONDEBIAN_DEB_NAME
RHEL9_DATASTREAM_NAME = "ssg-rhel9-ds.xml"
RHEL9_DATASTREAM_SHA256 = "94c2e4baf044ffa3b4b7068b138325f704020b3e9af1a9750bbd3806f78a134e"

USER = "scapforge"
# Bump when _apply_image changes what it writes into the base root.
IMAGE_VERSION = 1
NET_PREFIX = "10.87"
PROXY_PORT = 8642
MAX_INDEX = 254
NAME_RE = re.compile(r"^lab([1-9][0-9]{0,2})$")
# Hosts the per-host proxy forwards to, besides the mirror's own host name.
PROXY_ALLOWED_HOSTS = ("deb.debian.org", "security.debian.org")
SSH_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-o", "BatchMode=yes")


class LabError(RuntimeError):
    """A lab operation failed; the message says which step and what was seen."""


@dataclasses.dataclass
class LabHost:
    """One running lab host, as the controller reaches it.

    Attributes:
        name: ``labN``.
        index: N (1..254), which fixes the addresses.
        address: the container's own address (host0), where SSH listens.
        host_address: the controller's side of the veth (``ve-labN``), where the proxy listens.
        user: the SSH user (``scapforge``, passwordless sudo).
        key_path: the private key that user accepts.
        root: the merged overlay directory the container runs on (a controller path).
        pid: PID of the process that runs the host's ``systemd-nspawn`` (lab/nspawn_supervise.py,
            which boots it again after a reboot inside; its command line holds nspawn's).
        proxy_url: the apt proxy URL the host uses (``http://<host_address>:<port>``).
        proxy_pid: PID of the host's tinyproxy, or None.
    """

    name: str
    index: int
    address: str
    host_address: str
    user: str
    key_path: Path
    root: Path
    pid: int
    proxy_url: str
    proxy_pid: int = None

    def ssh_argv(self, command=None, connect_timeout=5):
        """The ``ssh`` command line (list of str) that runs ``command`` on this host."""
        argv = ["ssh", "-i", str(self.key_path), *SSH_OPTIONS,
                "-o", "ConnectTimeout=%d" % connect_timeout,
                "%s@%s" % (self.user, self.address)]
        if command is not None:
            argv.append(command)
        return argv

    def ssh(self, command, timeout=120, check=True, connect_timeout=5):
        """Run a shell command on the host as ``user`` over SSH.

        Returns the CompletedProcess (text stdout/stderr). Raises LabError when ``check``
        and the command exits non-zero, or when it runs longer than ``timeout`` seconds.
        """
        try:
            proc = subprocess.run(self.ssh_argv(command, connect_timeout), capture_output=True,
                                  text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise LabError("%s: %r ran over %ss" % (self.name, command, timeout)) from exc
        if check and proc.returncode != 0:
            raise LabError("%s: %r exited %d: %s" % (self.name, command, proc.returncode,
                                                     (proc.stderr or proc.stdout).strip()[-2000:]))
        return proc


# ---------------------------------------------------------------- small helpers

def _run(argv, timeout=600, **kwargs):
    """Run argv, raise LabError with its output when it fails; return the CompletedProcess."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise LabError("%s ran over %ss" % (" ".join(map(str, argv)), timeout)) from exc
    if proc.returncode != 0:
        raise LabError("%s exited %d: %s" % (" ".join(map(str, argv)), proc.returncode,
                                             (proc.stderr + proc.stdout).strip()[-3000:]))
    return proc


def _tool(name):
    """Absolute path of a controller tool (also searching the sbin directories)."""
    path = shutil.which(name) or shutil.which(
        name, path="/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin")
    if not path:
        raise LabError("%s not found: install the lab's Debian packages (make deps)" % name)
    return path


def sha256_file(path):
    """Hex sha256 of a file's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _unescape_mount(field):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(path):
    """Mount points (list of str, deepest first) at or under ``path``, from /proc/mounts."""
    prefix = os.path.realpath(str(path))
    found = []
    with open("/proc/mounts") as handle:
        for line in handle:
            point = _unescape_mount(line.split()[1])
            if point == prefix or point.startswith(prefix.rstrip("/") + "/"):
                found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def _umount_all(path):
    """Unmount everything at or under ``path``; raise LabError if a mount stays."""
    for point in mounts_under(path):
        for attempt in range(20):
            proc = subprocess.run([_tool("umount"), point], capture_output=True, text=True)
            if proc.returncode == 0 or point not in mounts_under(point):
                break
            time.sleep(0.25)
    left = mounts_under(path)
    if left:
        raise LabError("still mounted, not removing anything: %s" % ", ".join(left))


def _remove_tree(path):
    """Unmount anything under ``path``, then ``rm -rf --one-file-system`` it."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    _umount_all(path)
    _run([_tool("rm"), "-rf", "--one-file-system", "--", str(path)])


def _write_atomic(path, data, mode=0o644):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix="." + path.name + ".")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, mode)
        os.replace(tmp, str(path))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _write_in_root(root, relpath, text, mode=0o644, uid=0, gid=0):
    """Write a file inside a container root without following any symlink out of it."""
    root = os.path.realpath(str(root))
    target = os.path.join(root, relpath.lstrip("/"))
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    if os.path.realpath(parent) != parent or not parent.startswith(root + "/"):
        raise LabError("refusing to write %s: a parent directory is a symlink" % relpath)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    if os.path.lexists(target) and not os.path.isfile(target):
        raise LabError("refusing to write %s: not a regular file" % relpath)
    fd = os.open(target, flags, mode)
    try:
        os.write(fd, text.encode())
        os.fchmod(fd, mode)
        os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def pid_alive(pid, must_contain=()):
    """True when ``pid`` (int or None) runs, is not a zombie, and its command line holds
    every string in ``must_contain`` (a substring of some argument each)."""
    if not pid:
        return False
    try:
        with open("/proc/%d/stat" % pid) as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            cmdline = handle.read().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    if state in ("Z", "X"):
        _reap(pid)
        return False
    words = [w.decode(errors="replace") for w in cmdline]
    return all(any(needle in w for w in words) for needle in must_contain)


def _reap(pid):
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _stop_pid(pid, must_contain, timeout):
    """SIGTERM ``pid`` (only if its command line matches), wait, SIGKILL after ``timeout`` s."""
    if not pid_alive(pid, must_contain):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid, must_contain):
            return
        time.sleep(0.1)
    if pid_alive(pid, must_contain):
        os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        _reap(pid)
        if not pid_alive(pid, must_contain):
            return
        time.sleep(0.1)
    raise LabError("pid %d did not exit after SIGKILL" % pid)


def _children(pid):
    """PIDs (list of int) whose parent is ``pid`` (int or None), from /proc."""
    if not pid:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def nspawn_roots(name):
    """The ``-D`` roots (list of str) of the running systemd-nspawn commands (or the
    supervisors that hold one on their command line) whose machine is ``name`` (``-M``).
    A root under another lab home means ``ve-<name>`` belongs to that home."""
    roots = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                words = [w.decode(errors="replace") for w in handle.read().split(b"\0")]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        starts = [i for i, w in enumerate(words) if os.path.basename(w) == "systemd-nspawn"]
        if not starts:
            continue
        args = words[starts[0] + 1:]
        options = dict(zip(args, args[1:]))
        if options.get("-M") == name and options.get("-D"):
            roots.append(options["-D"])
    return sorted(set(roots))


def _tail(path, lines=30):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no %s)" % path


def _port_open(address, port, timeout=0.5):
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------- the lab

class Lab:
    """The lab under one home directory.

    Args:
        home: the lab home (str or Path); default ``$SCAPFORGE_LAB_HOME`` or
            ``/var/lib/scapforge-lab``. Must be outside any git checkout.
        mirror: the Debian mirror for debootstrap and the hosts' apt (default
            ``$SCAPFORGE_LAB_MIRROR`` or http://deb.debian.org/debian).
        log: a callable taking one str for progress lines (default: print).

    All methods need root and raise LabError on failure.
    """

    def __init__(self, home=None, mirror=None, log=print):
        self.home = Path(home or os.environ.get("SCAPFORGE_LAB_HOME") or DEFAULT_HOME).resolve()
        self.mirror = (mirror or os.environ.get("SCAPFORGE_LAB_MIRROR") or DEFAULT_MIRROR).rstrip("/")
        self.log = log or (lambda line: None)
        self.rootfs = self.home / "base" / "rootfs"
        self.rootfs_stamp = self.home / "base" / "rootfs.json"
        self.content_dir = self.home / "content"
        self.datastream = self.content_dir / DATASTREAM_NAME
        self.rhel9_datastream = self.content_dir / RHEL9_DATASTREAM_NAME
        self.key_path = self.home / "keys" / "id_ed25519"
        self.state_dir = self.home / "state"
        self.hosts_dir = self.home / "hosts"
        self._procs = {}
        self._lock_depth = 0
        self._lock_fd = None

    # ------------------------------------------------------------ locking

    @contextlib.contextmanager
    def _locked(self):
        """Serialise lab changes across processes (flock on <home>/.lock); re-entrant."""
        if self._lock_depth == 0:
            self.home.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(str(self.home / ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0:
                os.close(self._lock_fd)
                self._lock_fd = None

    # ------------------------------------------------------------ build

    def _check_root(self):
        if os.geteuid() != 0:
            raise LabError("the lab needs root (mount, systemd-nspawn, ip)")

    def _rootfs_spec(self):
        return {"suite": SUITE, "variant": VARIANT, "include": sorted(INCLUDE)}

    def _image_spec(self):
        pub = (self.key_path.with_suffix(".pub")).read_text().strip()
        return {"version": IMAGE_VERSION, "user": USER,
                "pubkey_sha256": hashlib.sha256(pub.encode()).hexdigest(),
                "datastream_sha256": DATASTREAM_SHA256}

    def _read_stamp(self):
        try:
            return json.loads(self.rootfs_stamp.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def build(self):
        """Make the cached pieces exist; cheap when they already do (idempotent).

        Steps: verified SSG datastreams (Debian 12 for the hosts, RHEL 9 for the controller's
        tests; each .deb downloaded only when its datastream is missing), SSH key pair,
        debootstrap root (about 95 s, only when missing or built from another spec), the
        image tweaks (user, sudoers, networkd, datastream...). Returns a dict of the
        seconds each step took. Raises LabError when the base root must change while
        hosts run on it, or on any failed step.
        """
        self._check_root()
        times = {}
        with self._locked():
            for step, func in (("content", self._build_content), ("keys", self._build_keys),
                               ("rootfs", self._build_rootfs), ("image", self._build_image)):
                start = time.monotonic()
                func()
                times[step] = round(time.monotonic() - start, 2)
        return times

    def _build_content(self):
        """The verified datastreams in the content directory: ssg-debian12-ds.xml (the .deb
        is kept there) and ssg-rhel9-ds.xml (its 37 MB .deb is removed once unpacked)."""
        self._fetch_datastream(SSG_DEB_URL, DATASTREAM_NAME, DATASTREAM_SHA256, keep_deb=True)
        self._fetch_datastream(SSG_NONDEBIAN_DEB_URL, RHEL9_DATASTREAM_NAME,
                               RHEL9_DATASTREAM_SHA256, keep_deb=False)

    def _fetch_datastream(self, url, name, sha256, keep_deb):
        """Make ``content/<name>`` exist with the pinned ``sha256`` (hex): nothing to do when
        it already does; otherwise download the .deb at ``url`` (unless ``keep_deb`` left it
        there from an earlier build), ``dpkg-deb -x`` it into a temporary directory and copy
        out ``/usr/share/xml/scap/ssg/content/<name>``. Raises LabError naming the URL and the
        pinned digest when the download fails or the file is missing or differs."""
        target = self.content_dir / name
        if target.is_file() and sha256_file(target) == sha256:
            return
        self.content_dir.mkdir(parents=True, exist_ok=True)
        what = "%s from %s (pinned sha256 %s)" % (name, url, sha256)
        with tempfile.TemporaryDirectory(dir=str(self.content_dir)) as tmpdir:
            deb = self.content_dir / url.rsplit("/", 1)[1]
            if not keep_deb:
                deb = Path(tmpdir) / deb.name
            if not deb.is_file():
                self.log("downloading %s" % url)
                part = deb.with_name(deb.name + ".part")
                try:
                    _run([_tool("curl"), "-fsSL", "--retry", "3", "-o", str(part), url], timeout=300)
                except LabError as exc:
                    raise LabError("cannot fetch %s: %s" % (what, exc)) from exc
                os.replace(str(part), str(deb))
            unpacked = Path(tmpdir) / "x"
            again = " (delete %s to download it again)" % deb if keep_deb else ""
            try:
                _run([_tool("dpkg-deb"), "-x", str(deb), str(unpacked)])
            except LabError as exc:
                raise LabError("cannot unpack %s%s: %s" % (what, again, exc)) from exc
            extracted = unpacked / (SSG_CONTENT_DIR + name).lstrip("/")
            if not extracted.is_file():
                raise LabError("%s has no %s: cannot get %s%s"
                               % (deb.name, SSG_CONTENT_DIR + name, what, again))
            digest = sha256_file(extracted)
            if digest != sha256:
                raise LabError("%s in %s from %s has sha256 %s, not the pinned %s: wrong or "
                               "corrupt content%s" % (name, deb.name, url, digest, sha256, again))
            part = target.with_name(target.name + ".part")
            shutil.copyfile(str(extracted), str(part))
            os.chmod(str(part), 0o644)
            os.replace(str(part), str(target))
        self.log("datastream verified: %s" % target)

    def _build_keys(self):
        if self.key_path.is_file() and self.key_path.with_suffix(".pub").is_file():
            return
        self.key_path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(str(self.key_path.parent), 0o700)
        for path in (self.key_path, self.key_path.with_suffix(".pub")):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        _run([_tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", "scapforge-lab",
              "-f", str(self.key_path)])

    def _overlays_on_rootfs(self):
        """Mount points of overlays (anyone's) whose lower layers include the base root."""
        rootfs = str(self.rootfs)
        points = []
        with open("/proc/mounts") as handle:
            for line in handle:
                fields = line.split()
                if fields[2] != "overlay":
                    continue
                for option in fields[3].split(","):
                    if option.startswith("lowerdir=") and rootfs in [
                            _unescape_mount(p) for p in option[len("lowerdir="):].split(":")]:
                        points.append(_unescape_mount(fields[1]))
        return points

    def _require_no_hosts(self, why):
        running = [state["name"] for state in self._states() if self._state_running(state)]
        running += self._overlays_on_rootfs()
        if running:
            raise LabError("%s, but hosts run on the base root: %s (run `lab.py down` or unmount them first)"
                           % (why, ", ".join(running)))

    def _build_rootfs(self):
        stamp = self._read_stamp()
        if self.rootfs.is_dir() and stamp.get("rootfs") == self._rootfs_spec():
            return
        self._require_no_hosts("the base root must be (re)built")
        partial = self.rootfs.with_name("rootfs.partial")
        _remove_tree(partial)
        self.log("debootstrap %s (%s) from %s: about 2 minutes" % (SUITE, VARIANT, self.mirror))
        try:
            _run([_tool("debootstrap"), "--variant=" + VARIANT, "--include=" + ",".join(INCLUDE),
                  SUITE, str(partial), self.mirror], timeout=1800)
        finally:
            # debootstrap mounts proc/sys (and may bind /dev) inside its target: never leave one.
            _umount_all(partial)
        _remove_tree(self.rootfs)
        with contextlib.suppress(FileNotFoundError):
            self.rootfs_stamp.unlink()
        os.replace(str(partial), str(self.rootfs))
        _write_atomic(self.rootfs_stamp, json.dumps({"rootfs": self._rootfs_spec()}, indent=1))

    def _build_image(self):
        stamp = self._read_stamp()
        spec = self._image_spec()
        ds_in_root = self.rootfs / DATASTREAM_PATH.lstrip("/")
        if stamp.get("image") == spec and ds_in_root.is_file():
            return
        self._require_no_hosts("the image tweaks must be (re)applied")
        self.log("applying the image tweaks to %s" % self.rootfs)
        self._apply_image()
        stamp["image"] = spec
        _write_atomic(self.rootfs_stamp, json.dumps(stamp, indent=1))

    def _apply_image(self):
        """Idempotent changes to the base root: a chroot with no bind mounts, or plain files."""
        root = self.rootfs
        if mounts_under(root):
            raise LabError("something is mounted under %s" % root)
        chroot = _tool("chroot")
        passwd = (root / "etc/passwd").read_text()
        if not re.search(r"^%s:" % USER, passwd, re.M):
            _run([chroot, str(root), "useradd", "--create-home", "--shell", "/bin/bash",
                  "--user-group", "--comment", "scapforge lab admin", USER])
        # '*': no password, but not a locked account (a '!' locks key logins once UsePAM is off).
        _run([chroot, str(root), "usermod", "-p", "*", USER])
        entry = next(line for line in (root / "etc/passwd").read_text().splitlines()
                     if line.startswith(USER + ":"))
        uid, gid, home = int(entry.split(":")[2]), int(entry.split(":")[3]), entry.split(":")[5]
        ssh_dir = "%s/.ssh" % home
        os.makedirs(str(root) + ssh_dir, mode=0o700, exist_ok=True)
        os.chown(str(root) + ssh_dir, uid, gid)
        os.chmod(str(root) + ssh_dir, 0o700)
        pub = self.key_path.with_suffix(".pub").read_text().strip()
        _write_in_root(root, ssh_dir + "/authorized_keys", pub + "\n", 0o600, uid, gid)
        _write_in_root(root, "/etc/sudoers.d/" + USER, "%s ALL=(ALL) NOPASSWD: ALL\n" % USER, 0o440)
        _run([chroot, str(root), "visudo", "-cf", "/etc/sudoers.d/" + USER])
        systemctl = _tool("systemctl")
        _run([systemctl, "--root=" + str(root), "enable", "systemd-networkd.service", "ssh.service"])
        # No unattended apt runs in the lab: they would race the loop for the dpkg lock and
        # move the baseline.
        _run([systemctl, "--root=" + str(root), "disable", "apt-daily.timer",
              "apt-daily-upgrade.timer"])
        ds_target = root / DATASTREAM_PATH.lstrip("/")
        ds_target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(str(self.datastream), str(ds_target))
        os.chmod(str(ds_target), 0o644)
        if sha256_file(ds_target) != DATASTREAM_SHA256:
            raise LabError("datastream copy in the base root does not match its sha256")

    # ------------------------------------------------------------ per host

    @staticmethod
    def index_of(name):
        """N of ``labN`` (1..254); raises LabError for any other name."""
        match = NAME_RE.match(name or "")
        if not match or not 1 <= int(match.group(1)) <= MAX_INDEX:
            raise LabError("lab host names are lab1..lab%d, not %r" % (MAX_INDEX, name))
        return int(match.group(1))

    def _addresses(self, index):
        base = "%s.%d" % (NET_PREFIX, index)
        return base + ".2", base + ".1", base + ".0/30"

    def _state_path(self, name):
        return self.state_dir / (name + ".json")

    def _states(self):
        if not self.state_dir.is_dir():
            return []
        states = []
        for path in sorted(self.state_dir.glob("lab*.json")):
            with contextlib.suppress(ValueError, FileNotFoundError):
                states.append(json.loads(path.read_text()))
        return sorted(states, key=lambda s: s.get("index", 0))

    def _state_running(self, state):
        return pid_alive(state.get("pid"), ("systemd-nspawn", state.get("root", "?")))

    def _host_from_state(self, state):
        return LabHost(name=state["name"], index=state["index"], address=state["address"],
                       host_address=state["host_address"], user=USER, key_path=self.key_path,
                       root=Path(state["root"]), pid=state["pid"], proxy_url=state["proxy_url"],
                       proxy_pid=state.get("proxy_pid"))

    def hosts(self):
        """The running hosts (list of LabHost, by index); a host whose nspawn died is left out."""
        return [self._host_from_state(s) for s in self._states() if self._state_running(s)]

    def host(self, name):
        """The running LabHost called ``name``; raises LabError when it does not run."""
        for host in self.hosts():
            if host.name == name:
                return host
        raise LabError("%s does not run" % name)

    def up(self, count=1, timeout=90):
        """Build if needed, then make lab1..lab<count> run (booting the missing ones).

        Hosts beyond ``count`` that already run are left running. Waits until each answers
        over SSH as ``scapforge`` with ``sudo -n true``. Returns list[LabHost] for lab1..N.
        """
        if not 1 <= count <= MAX_INDEX:
            raise LabError("count must be 1..%d" % MAX_INDEX)
        return self.start(["lab%d" % i for i in range(1, count + 1)], timeout=timeout)

    def start(self, names, timeout=90):
        """Boot the named hosts that do not run yet, each from a fresh (baseline) upper layer.

        Returns list[LabHost] in the order given, once every one answers SSH + sudo.
        """
        self._check_root()
        for name in names:
            self.index_of(name)
        with self._locked():
            self.build()
            running = {h.name for h in self.hosts()}
            for name in names:
                if name not in running:
                    self._boot(name)
            hosts = [self.host(name) for name in names]
        self.wait_ready(hosts, timeout=timeout)
        return hosts

    def reset(self, names=None, timeout=90):
        """Stop, wipe the upper layer and boot again: the named hosts (default: all running).

        Returns list[LabHost] once each answers SSH + sudo.
        """
        with self._locked():
            if names is None:
                names = [h.name for h in self.hosts()]
            for name in names:
                self.index_of(name)
                self.stop(name)
            for name in names:
                self._boot(name)
            hosts = [self.host(name) for name in names]
        self.wait_ready(hosts, timeout=timeout)
        return hosts

    def down(self):
        """Stop every host, unmount everything, remove the host layers and the proxies.

        The cached base root, content and keys stay (the next build is then cheap).
        """
        self._check_root()
        with self._locked():
            names = {s["name"] for s in self._states()}
            if self.hosts_dir.is_dir():
                names |= {p.name for p in self.hosts_dir.iterdir() if NAME_RE.match(p.name)}
            for name in sorted(names, key=self.index_of):
                self.stop(name)
                _remove_tree(self.hosts_dir / name)
            left = mounts_under(self.home)
            if left:
                raise LabError("mounts left under %s: %s" % (self.home, ", ".join(left)))

    def foreign_roots(self, name):
        """Roots of running hosts named ``name`` that another lab home started (list of str):
        they hold ``ve-<name>``, which this home must neither delete nor create again."""
        own = str(self.hosts_dir / name / "merged")
        return [root for root in nspawn_roots(name) if root != own]

    def stop(self, name, wipe=True):
        """Stop one host: SIGTERM its nspawn (clean shutdown), its proxy, drop its veth,
        unmount its overlay and (``wipe``) remove its upper/work layers. No-op if stopped.
        A ``ve-<name>`` that a host of another lab home holds is left alone (two homes on
        one machine: stopping lab1 here once cut the other home's lab1 off mid-run)."""
        self.index_of(name)
        with self._locked():
            state = {}
            with contextlib.suppress(FileNotFoundError, ValueError):
                state = json.loads(self._state_path(name).read_text())
            hostdir = self.hosts_dir / name
            if state:
                marks = ("systemd-nspawn", state.get("root", "?"))
                nspawns = [pid for pid in _children(state.get("pid")) if pid_alive(pid, marks)]
                _stop_pid(state.get("pid"), marks, 60)
                for pid in nspawns:  # the supervisor passes SIGTERM on; if it was killed, nspawn is left
                    _stop_pid(pid, marks, 60)
                proc = self._procs.pop(name, None)
                if proc is not None:
                    with contextlib.suppress(Exception):
                        proc.wait(timeout=5)
                _stop_pid(state.get("proxy_pid"), ("tinyproxy", str(hostdir / "tinyproxy.conf")), 10)
            veth = "ve-" + name
            if os.path.exists("/sys/class/net/" + veth) and not self.foreign_roots(name):
                subprocess.run([_tool("ip"), "link", "del", veth], capture_output=True)
            _umount_all(hostdir / "merged")
            if wipe:
                for part in ("upper", "work"):
                    _remove_tree(hostdir / part)
            with contextlib.suppress(FileNotFoundError):
                self._state_path(name).unlink()

    def _boot(self, name):
        """Mount a fresh overlay for ``name``, write its per-host files, start nspawn, give
        ve-<name> its address, start its proxy, record the state. Does not wait for SSH."""
        index = self.index_of(name)
        foreign = self.foreign_roots(name)
        if foreign:
            raise LabError("%s runs already from another lab home (%s) and holds ve-%s: stop it there, "
                           "or use another host name" % (name, ", ".join(foreign), name))
        address, host_address, subnet = self._addresses(index)
        hostdir = self.hosts_dir / name
        merged, upper, work = hostdir / "merged", hostdir / "upper", hostdir / "work"
        self.stop(name)  # leftovers of a crashed run: unmount and wipe
        for path in (merged, upper, work):
            path.mkdir(parents=True, exist_ok=True)
        _run([_tool("mount"), "-t", "overlay", "scapforge-" + name, "-o",
              "lowerdir=%s,upperdir=%s,workdir=%s" % (self.rootfs, upper, work), str(merged)])
        proxy_url = "http://%s:%d" % (host_address, PROXY_PORT)
        self._write_host_files(merged, name, address, host_address, proxy_url)
        console = open(str(hostdir / "console.log"), "wb")
        veth, ip = "ve-" + name, _tool("ip")
        nspawn = [_tool("systemd-nspawn"), "--register=no", "--keep-unit", "-D", str(merged), "-b",
                  "--network-veth", "-M", name, "--console=read-only"]
        # The recorded pid is the supervisor's: it boots the host again after a reboot inside
        # (nspawn exits 133) and its command line holds nspawn's, so hosts() and stop() know it.
        argv = [sys.executable, str(SUPERVISOR), "--veth", veth, "--address", host_address + "/30",
                "--ip", ip, "--", *nspawn]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        console.close()
        self._procs[name] = proc
        state = {"name": name, "index": index, "pid": proc.pid, "address": address,
                 "host_address": host_address, "subnet": subnet, "root": str(merged),
                 "proxy_url": proxy_url, "proxy_pid": None, "started": time.time()}
        self.state_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self._state_path(name), json.dumps(state, indent=1))
        deadline = time.monotonic() + 20
        while not os.path.exists("/sys/class/net/" + veth):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LabError("%s: nspawn %s before %s appeared; console:\n%s"
                               % (name, "exited %s" % proc.returncode if proc.poll() is not None
                                  else "still running", veth, _tail(hostdir / "console.log")))
            time.sleep(0.05)
        _run([ip, "addr", "add", host_address + "/30", "dev", veth])
        _run([ip, "link", "set", veth, "up"])
        state["proxy_pid"] = self._start_proxy(name, hostdir, host_address, subnet)
        _write_atomic(self._state_path(name), json.dumps(state, indent=1))

    def _write_host_files(self, merged, name, address, host_address, proxy_url):
        """Files that differ per host, written into the fresh upper layer before boot."""
        machine_id = uuid.uuid5(uuid.NAMESPACE_URL, "scapforge-lab:" + name).hex
        files = {
            "/etc/hostname": name + "\n",
            "/etc/hosts": ("127.0.0.1\tlocalhost\n127.0.1.1\t%s\n"
                           "::1\tlocalhost ip6-localhost ip6-loopback\n" % name),
            "/etc/machine-id": machine_id + "\n",
            "/etc/systemd/network/10-host0.network": (
                "# scapforge lab: a static /30 shared with ve-%s on the controller\n"
                "[Match]\nName=host0\n\n[Network]\nAddress=%s/30\n"
                "LinkLocalAddressing=no\nIPv6AcceptRA=no\n" % (name, address)),
            "/etc/apt/apt.conf.d/01scapforge-proxy": (
                "// scapforge lab: packages come through the controller's proxy on ve-%s\n"
                'Acquire::http::Proxy "%s";\n' % (name, proxy_url)),
        }
        for relpath, text in files.items():
            _write_in_root(merged, relpath, text, 0o444 if relpath == "/etc/machine-id" else 0o644)

    def _start_proxy(self, name, hostdir, host_address, subnet):
        """Start a tinyproxy of ours on ``host_address`` only; return its PID."""
        mirror_host = re.sub(r"^[a-z]+://([^/:]+).*$", r"\1", self.mirror)
        allowed = sorted(set(PROXY_ALLOWED_HOSTS) | {mirror_host})
        filter_path = hostdir / "tinyproxy.filter"
        _write_atomic(filter_path, "".join("^%s$\n" % re.escape(h) for h in allowed))
        conf = hostdir / "tinyproxy.conf"
        _write_atomic(conf, "\n".join([
            "# scapforge lab proxy for %s (decision 11); started and stopped by lab.py" % name,
            "User nobody", "Group nogroup",
            "Port %d" % PROXY_PORT, "Listen %s" % host_address,
            "Timeout 600", "MaxClients 20",
            "Allow %s" % subnet,
            "Filter \"%s\"" % filter_path, "FilterDefaultDeny Yes", "FilterType ere",
            "FilterURLs Off", "FilterCaseSensitive Off",
            "ConnectPort 443",
            "DisableViaHeader Yes",
            "LogLevel Notice", ""]))
        log = open(str(hostdir / "tinyproxy.log"), "ab")
        proc = subprocess.Popen([_tool("tinyproxy"), "-d", "-c", str(conf)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
        log.close()
        self._procs[name + ":proxy"] = proc
        deadline = time.monotonic() + 10
        while not _port_open(host_address, PROXY_PORT):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LabError("%s: tinyproxy did not listen on %s:%d; log:\n%s"
                               % (name, host_address, PROXY_PORT, _tail(hostdir / "tinyproxy.log")))
            time.sleep(0.05)
        return proc.pid

    def wait_ready(self, hosts, timeout=90):
        """Wait until every host answers ``sudo -n true`` over SSH as scapforge.

        Raises LabError (with the console tail) when one does not within ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        for host in hosts:
            while True:
                if not pid_alive(host.pid, ("systemd-nspawn",)):
                    raise LabError("%s: nspawn exited; console:\n%s"
                                   % (host.name, _tail(self.hosts_dir / host.name / "console.log")))
                if _port_open(host.address, 22):
                    proc = host.ssh("sudo -n true", timeout=15, check=False, connect_timeout=2)
                    if proc.returncode == 0:
                        break
                if time.monotonic() > deadline:
                    raise LabError("%s: no SSH + sudo at %s after %ss; console:\n%s"
                                   % (host.name, host.address, timeout,
                                      _tail(self.hosts_dir / host.name / "console.log")))
                time.sleep(0.2)
            self._settle_boot(host, max(10, int(deadline - time.monotonic())))

    #: waits for the boot to end, then starts each failed unit once more; prints the state and
    #: the units still failed.
    _SETTLE = ("systemctl is-system-running --wait >/dev/null 2>&1; "
               "failed=$(systemctl --failed --no-legend --plain | awk '{print $1}'); "
               "for u in $failed; do systemctl reset-failed \"$u\"; systemctl restart \"$u\"; done; "
               "echo \"retried: $(echo $failed)\"; systemctl is-system-running; systemctl --failed --no-legend --plain")

    def _settle_boot(self, host, timeout):
        """Make sure the host's boot ended with no failed unit (a host's baseline must not
        depend on a race of its boot): a unit that failed is started once more. Seen on the
        lab: systemd-sysusers exiting 219/CGROUP when two hosts boot at the same moment.

        Raises LabError naming the units still failed after that retry.
        """
        proc = host.ssh("sudo sh -c %s" % shlex.quote(self._SETTLE), timeout=timeout + 30, check=False)
        lines = proc.stdout.strip().splitlines()
        retried = lines[0][len("retried: "):] if lines and lines[0].startswith("retried: ") else ""
        if retried:
            self.log("%s: units failed at boot, started again: %s" % (host.name, retried))
        state = lines[1].strip() if len(lines) > 1 else ""
        if state != "running":
            raise LabError("%s: boot ended %r; failed units: %s" % (host.name, state or proc.stderr.strip()[-300:],
                                                                     "; ".join(lines[2:]) or "none"))

    # ------------------------------------------------------------ inventory

    def inventory(self, hosts=None):
        """The Ansible inventory (a dict, YAML-ready) for ``hosts`` (default: the running ones):
        group ``lab``, connection as scapforge over SSH with sudo."""
        hosts = self.hosts() if hosts is None else hosts
        return {"all": {"children": {"lab": {
            "hosts": {h.name: {"ansible_host": h.address, "scapforge_lab_proxy": h.proxy_url}
                      for h in hosts},
            "vars": {
                "ansible_user": USER,
                "ansible_become": True,
                "ansible_become_method": "sudo",
                "ansible_ssh_private_key_file": str(self.key_path),
                "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_ssh_common_args":
                    "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                # The controller's copy of the same content: parsed there, trusted (decision 2).
                "scapforge_datastream_src": str(self.datastream),
            }}}}}

    def write_inventory(self, path, hosts=None):
        """Write :meth:`inventory` as YAML to ``path``; returns the Path."""
        path = Path(path)
        text = ("# Generated by lab/lab.py (scapforge lab under %s); do not edit.\n" % self.home
                + yaml.safe_dump(self.inventory(hosts), sort_keys=False, default_flow_style=False))
        _write_atomic(path, text)
        return path

    def status(self):
        """A dict: home, base root built or not, and each recorded host with running true/false."""
        stamp = self._read_stamp()
        return {
            "home": str(self.home),
            "rootfs": str(self.rootfs) if self.rootfs.is_dir() else None,
            "image": stamp.get("image"),
            "datastream": str(self.datastream) if self.datastream.is_file() else None,
            "rhel9_datastream": (str(self.rhel9_datastream) if self.rhel9_datastream.is_file()
                                 else None),
            "hosts": [dict(s, running=self._state_running(s),
                           proxy_running=pid_alive(s.get("proxy_pid"), ("tinyproxy",)))
                      for s in self._states()],
            "mounts": mounts_under(self.home),
        }
