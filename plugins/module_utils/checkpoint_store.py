# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint store: save files on the target, restore them, verify the restore.

Target-side code for the module ``scapforge.remediation.checkpoint`` (its DOCUMENTATION is
the user's reference) and for the dead-man switch's restore program: this file imports the
standard library only and nothing of Ansible, so that the module can copy it, unchanged,
next to the program it leaves on the target (``checkpoint_deadman``), and that program runs
it with any Python 3.9 or later, without Ansible, sudo or sshd.

Layout of a checkpoint: ``ROOT/ID/manifest.json`` (records, one per path), ``ROOT/ID/blobs/
<sha256>`` (file contents, once per content) and, once a dead-man switch was armed,
``ROOT/ID/deadman/`` (the program, ``armed.json``, ``result.json``, ``fire.log``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import time

FORMAT = 1
ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
CHUNK = 1 << 20
TMP_PREFIX = ".scapforge-ckpt."
VIRTUAL_FS = frozenset((
    "proc", "sysfs", "cgroup", "cgroup2", "debugfs", "securityfs", "configfs", "tracefs", "bpf",
    "pstore", "efivarfs", "devpts", "mqueue", "hugetlbfs", "fusectl", "binfmt_misc", "devtmpfs",
    "autofs", "rpc_pipefs", "nsfs",
))
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class CheckpointFailed(Exception):
    """A call that cannot proceed; carries the closed ``error_kind``."""

    def __init__(self, error_kind, msg):
        Exception.__init__(self, msg)
        self.error_kind = error_kind
        self.msg = msg


class Uncoverable(Exception):
    """A path that cannot be saved faithfully; the message says why."""


# ---------------------------------------------------------------- paths and mounts

def normalise(path):
    """An absolute, normalised path ('//x' and trailing slashes folded), or raise Uncoverable."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise Uncoverable("not an absolute path")
    if "\x00" in path:
        raise Uncoverable("path contains a NUL byte")
    norm = os.path.normpath(path)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    return norm


def ancestors(path):
    """Parent directories of an absolute normalised path, nearest first, '/' excluded."""
    out = []
    parent = os.path.dirname(path)
    while parent not in ("/", ""):
        out.append(parent)
        parent = os.path.dirname(parent)
    return out


def depth_key(path):
    """Sort key putting parents before their children."""
    return (path.count("/"), path)


def _unescape_mount(field):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def read_mounts():
    """{mount point: filesystem type} from /proc/self/mountinfo ({} when unreadable)."""
    mounts = {}
    try:
        with open("/proc/self/mountinfo", "r") as fh:
            for line in fh:
                left, _sep, right = line.partition(" - ")
                fields = left.split()
                if len(fields) >= 5 and right:
                    mounts[_unescape_mount(fields[4])] = right.split()[0]
    except (IOError, OSError):
        pass
    return mounts


def fs_type(path, mounts):
    """Filesystem type of the mount holding path (longest mount-point prefix), or None."""
    best = None
    for point in mounts:
        if path == point or point == "/" or path.startswith(point.rstrip("/") + "/"):
            if best is None or len(point) > len(best):
                best = point
    return mounts.get(best) if best else None


# ---------------------------------------------------------------- no-follow file system access

def open_dir(path):
    """fd of directory ``path``, opened one component at a time with O_NOFOLLOW.

    Raises OSError (ELOOP or ENOTDIR when a component is a symlink, ENOENT when missing).
    """
    fd = os.open("/", DIR_FLAGS)
    try:
        for comp in path.split("/"):
            if not comp:
                continue
            nfd = os.open(comp, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def lstat_at(dir_fd, name):
    """os.lstat of name in dir_fd, or None when it does not exist."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise


_KINDS = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "fifo"),
          (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"))


def kind_of(st):
    """'absent', 'file', 'dir', 'symlink', or the name of a special kind."""
    if st is None:
        return "absent"
    return next((name for test, name in _KINDS if test(st.st_mode)), "special file")


def open_file_at(dir_fd, name, st):
    """Read-only fd of the regular file ``name`` (O_NOFOLLOW), checked to be the inode ``st``."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    fst = os.fstat(fd)
    if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise OSError(errno.EAGAIN, "file changed while it was read")
    return fd


def sha256_fd(fd):
    """(hexdigest, size in bytes) of what fd holds from its start."""
    digest = hashlib.sha256()
    size = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, CHUNK)
        if not chunk:
            break
        size += len(chunk)
        digest.update(chunk)
    return digest.hexdigest(), size


def temp_name(name):
    """A fresh temporary name next to ``name`` (created with O_EXCL by the caller)."""
    return "%s%s.%s.tmp" % (TMP_PREFIX, name[:100], binascii.hexlify(os.urandom(6)).decode("ascii"))


def meta(st):
    """The recorded metadata of a stat result."""
    return {"mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid}


# ---------------------------------------------------------------- extended attributes, ACLs, SELinux labels
#
# POSIX ACLs are the extended attributes system.posix_acl_access and system.posix_acl_default
# (acl(5)), the SELinux context is security.selinux (selinux(8)), file capabilities are
# security.capability (capabilities(7)): saving every extended attribute the process can list
# (xattr(7): trusted.* only with CAP_SYS_ADMIN) covers them all, with no getfacl, setfacl or
# chcon on the target. security.ima and security.evm are left out: the kernel maintains them
# from the content, which the restore puts back.

XATTR_SKIP = frozenset(("security.ima", "security.evm"))
ACL_ACCESS = "system.posix_acl_access"
ACL_DEFAULT = "system.posix_acl_default"
SELINUX = "security.selinux"
_ACL_TAGS = {0x01: "user", 0x02: "user", 0x04: "group", 0x08: "group", 0x10: "mask", 0x20: "other"}
_NO_XATTRS = (errno.ENOTSUP, getattr(errno, "EOPNOTSUPP", errno.ENOTSUP))


def at_path(dir_fd, name, path):
    """A path naming ``name`` in the directory ``dir_fd`` (whose path is dirname(``path``))
    without resolving its parents again.

    /proc/self/fd/N is the directory the fd holds (opened with O_NOFOLLOW all the way), so
    only ``name`` itself is looked up; pass follow_symlinks=False to act on a symlink itself.
    Without /proc, ``path`` itself (its parents are then resolved again).
    """
    if os.path.isdir("/proc/self/fd"):
        return "/proc/self/fd/%d/%s" % (dir_fd, name)
    return path


def _xattr_call(func, target, *args):
    """os.*xattr on an fd (int) or on a path without following a final symlink."""
    if isinstance(target, int):
        return func(target, *args)
    return func(target, *args, follow_symlinks=False)


def read_xattrs(target):
    """{name: value (bytes)} of every extended attribute of ``target`` (an fd, or a path as
    :func:`at_path` gives) that this process can list, XATTR_SKIP excepted; None when the
    filesystem has no extended attributes. Raises OSError when one cannot be read."""
    try:
        names = _xattr_call(os.listxattr, target)
    except OSError as exc:
        if exc.errno in _NO_XATTRS:
            return None
        raise
    out = {}
    for name in names:
        if name in XATTR_SKIP:
            continue
        try:
            out[name] = _xattr_call(os.getxattr, target, name)
        except OSError as exc:
            if exc.errno == errno.ENODATA:  # removed since it was listed
                continue
            raise OSError(exc.errno, "extended attribute %s cannot be read: %s" % (name, exc.strerror))
    return out


def encode_xattrs(values):
    """The manifest form of read_xattrs() output: {name: base64 text}."""
    return dict((name, base64.b64encode(value).decode("ascii")) for name, value in values.items())


def decode_xattrs(encoded):
    """The inverse of :func:`encode_xattrs`."""
    return dict((name, base64.b64decode(value)) for name, value in (encoded or {}).items())


def acl_text(value):
    """A POSIX ACL xattr value as getfacl's short numeric form ("user::rw-,user:65534:r--,
    group::r--,mask::r--,other::---"); the value in hex when it is not a version-2 ACL.

    Layout (Linux include/uapi/linux/posix_acl_xattr.h): a little-endian u32 version (2),
    then 8-byte entries: u16 tag, u16 permissions (r=4 w=2 x=1), u32 uid/gid."""
    if len(value) < 4 or (len(value) - 4) % 8 or struct.unpack("<I", value[:4])[0] != 2:
        return "0x" + binascii.hexlify(value).decode("ascii")
    out = []
    for offset in range(4, len(value), 8):
        tag, perm, ident = struct.unpack("<HHI", value[offset:offset + 8])
        qualifier = "%d" % ident if tag in (0x02, 0x08) else ""
        out.append("%s:%s:%s%s%s" % (_ACL_TAGS.get(tag, "tag%d" % tag), qualifier, "r" if perm & 4 else "-",
                                     "w" if perm & 2 else "-", "x" if perm & 1 else "-"))
    return ",".join(out)


def xattr_label(name):
    """How a mismatch names an attribute: "ACL", "default ACL", "SELinux context", "xattr NAME"."""
    return {ACL_ACCESS: "ACL", ACL_DEFAULT: "default ACL", SELINUX: "SELinux context",
            "security.capability": "file capabilities"}.get(name, "xattr " + name)


def xattr_show(name, value):
    """A short, readable form of an attribute value (ACLs as text, labels without the NUL)."""
    if name in (ACL_ACCESS, ACL_DEFAULT):
        return acl_text(value)
    text = value[:-1] if value.endswith(b"\x00") else value
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    if decoded is not None and decoded.isprintable() and len(decoded) <= 80:
        return decoded if name == SELINUX else repr(decoded)
    return "sha256:%s (%d bytes)" % (hashlib.sha256(value).hexdigest()[:12], len(value))


def xattr_differences(current, saved):
    """What differs between two {name: bytes} maps, one line each, e.g.
    "ACL user::rw-,group::r--,other::r-- != saved user::rw-,user:65534:r--,...",
    "xattr user.origin added ('x')", "SELinux context missing (saved system_u:object_r:etc_t:s0)"."""
    out = []
    for name in sorted(set(current) | set(saved)):
        label = xattr_label(name)
        if name not in saved:
            out.append("%s added (%s)" % (label, xattr_show(name, current[name])))
        elif name not in current:
            out.append("%s missing (saved %s)" % (label, xattr_show(name, saved[name])))
        elif current[name] != saved[name]:
            out.append("%s %s != saved %s" % (label, xattr_show(name, current[name]), xattr_show(name, saved[name])))
    return out


def apply_xattrs(target, saved):
    """Make the attributes of ``target`` (fd or no-follow path) equal ``saved`` ({name: bytes}):
    remove the listed ones not saved, set the ones that differ. Returns True when it changed
    anything; raises OSError (the first failure, naming the attribute)."""
    current = read_xattrs(target)
    if current is None:
        if saved:
            raise OSError(errno.ENOTSUP, "extended attributes are not supported here any more")
        return False
    changed = False
    for name in sorted(current):
        if name not in saved:
            try:
                _xattr_call(os.removexattr, target, name)
            except OSError as exc:
                raise OSError(exc.errno, "%s cannot be removed: %s" % (xattr_label(name), exc.strerror))
            changed = True
    for name in sorted(saved):
        if current.get(name) != saved[name]:
            try:
                _xattr_call(os.setxattr, target, name, saved[name])
            except OSError as exc:
                raise OSError(exc.errno, "%s cannot be set: %s" % (xattr_label(name), exc.strerror))
            changed = True
    return changed


def remove_tree_at(dir_fd, name, path, dev, mounts, removed):
    """Remove ``name`` in dir_fd like ``rm -rf --one-file-system``: never into another
    filesystem or a mount point (raise OSError naming it). Appends removed paths."""
    st = lstat_at(dir_fd, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        removed.append(path)
        return
    if st.st_dev != dev or path in mounts:
        raise OSError(errno.EBUSY, "%s is a mount point: not removed" % path)
    fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    problems = []
    try:
        for child in os.listdir(fd):
            try:
                remove_tree_at(fd, child, os.path.join(path, child), dev, mounts, removed)
            except OSError as exc:
                problems.append(exc)
    finally:
        os.close(fd)
    if problems:
        raise problems[0]
    os.rmdir(name, dir_fd=dir_fd)
    removed.append(path)


# ---------------------------------------------------------------- the store

class Store:
    """One checkpoint directory: ``root/id/manifest.json`` and ``root/id/blobs/<sha256>``."""

    def __init__(self, root, cid):
        self.root = root
        self.id = cid
        self.path = os.path.join(root, cid)
        self.blobs = os.path.join(self.path, "blobs")
        self.manifest_path = os.path.join(self.path, "manifest.json")
        self.manifest = None
        self._root_fd = None
        self.locked = False

    # -- root and lock
    def check_root(self, create, wait=None):
        """Make sure root is a directory of ours (0700), creating it when ``create``; lock it
        (``flock``), waiting for the lock at most ``wait`` seconds when given (then
        ``self.locked`` says whether it was taken), else as long as it takes.

        Returns False when it does not exist and create is False. A second call is a no-op.
        """
        if self._root_fd is not None:
            return True
        try:
            st = os.lstat(self.root)
        except OSError:
            st = None
        if st is None:
            if not create:
                return False
            os.makedirs(self.root, 0o700)
            st = os.lstat(self.root)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise CheckpointFailed("root_unsafe", "checkpoint root %s is not a directory (or is a symlink)" % self.root)
        if st.st_uid != os.geteuid():
            raise CheckpointFailed("root_unsafe", "checkpoint root %s belongs to uid %d, not to us (uid %d)"
                                   % (self.root, st.st_uid, os.geteuid()))
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(self.root, 0o700)
        self._root_fd = os.open(self.root, DIR_FLAGS)
        if wait is None:
            fcntl.flock(self._root_fd, fcntl.LOCK_EX)
            self.locked = True
            return True
        deadline = time.time() + wait
        while True:
            try:
                fcntl.flock(self._root_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.locked = True
                return True
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.time() >= deadline:
                    return True
            time.sleep(0.2)

    def close(self):
        """Release the lock (closing the root's fd)."""
        if self._root_fd is not None:
            os.close(self._root_fd)
            self._root_fd = None
            self.locked = False

    def exists(self):
        return os.path.isfile(self.manifest_path) and not os.path.islink(self.path)

    # -- manifest
    def load(self):
        """Read the manifest; raise CheckpointFailed(missing / corrupt)."""
        if not self.exists():
            raise CheckpointFailed("missing", "checkpoint %s does not exist under %s (never saved, discarded, "
                                   "or its directory was deleted): nothing to restore" % (self.id, self.root))
        try:
            with open(self.manifest_path, "r") as fh:
                data = json.load(fh)
        except (IOError, OSError, ValueError) as exc:
            raise CheckpointFailed("corrupt", "checkpoint %s: manifest %s cannot be read: %s"
                                   % (self.id, self.manifest_path, exc))
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("records"), dict):
            raise CheckpointFailed("corrupt", "checkpoint %s: manifest %s is not a format-%d checkpoint manifest"
                                   % (self.id, self.manifest_path, FORMAT))
        self.manifest = data
        return data

    def new(self):
        now = time.time()
        self.manifest = {"format": FORMAT, "id": self.id, "created": now, "updated": now, "covered": [],
                         "uncovered": {}, "records": {}, "bytes": 0}
        return self.manifest

    def save_manifest(self):
        """Write the manifest atomically (temporary file, fsync, rename)."""
        if not os.path.isdir(self.path):
            os.mkdir(self.path, 0o700)
        if not os.path.isdir(self.blobs):
            os.mkdir(self.blobs, 0o700)
        self.manifest["updated"] = time.time()
        tmp = self.manifest_path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.manifest, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, self.manifest_path)

    # -- blobs
    def blob_path(self, digest):
        return os.path.join(self.blobs, digest)

    def has_blob(self, digest):
        return os.path.isfile(self.blob_path(digest))

    def put_blob(self, src_fd, limit, known):
        """Copy src_fd into blobs/<sha256> while hashing it; return (sha256, size).

        A content already in ``known`` (or on disk) is not stored twice. Raises Uncoverable
        when the file turns out larger than ``limit`` bytes (it grew after its lstat)."""
        for directory in (self.path, self.blobs):
            if not os.path.isdir(directory):
                os.mkdir(directory, 0o700)
        tmp = os.path.join(self.blobs, "incoming.%d.tmp" % os.getpid())
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        digest = hashlib.sha256()
        size = 0
        try:
            os.lseek(src_fd, 0, os.SEEK_SET)
            while True:
                chunk = os.read(src_fd, CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise Uncoverable("file grew over the %d-byte cap while it was read" % limit)
                digest.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
            os.fsync(out)
        except BaseException:
            os.close(out)
            os.unlink(tmp)
            raise
        os.close(out)
        hexdigest = digest.hexdigest()
        if hexdigest in known or self.has_blob(hexdigest):
            os.unlink(tmp)
        else:
            os.rename(tmp, self.blob_path(hexdigest))
        return hexdigest, size

    def remove(self):
        shutil.rmtree(self.path)


# ---------------------------------------------------------------- save

class Saver:
    """Plans and performs ``state=save`` for one call (check mode: plans only, reads no content)."""

    def __init__(self, store, params, mounts, check_mode):
        self.store = store
        self.m = store.manifest
        self.records = self.m["records"]
        self.params = params
        self.mounts = mounts
        self.check_mode = check_mode
        self.result = {"saved": [], "already": [], "within": {}, "resolved": {}, "link_targets": {}, "uncovered": {}}
        self.changed = False
        self.digests = set(rec.get("sha256") for rec in self.records.values() if rec.get("sha256"))
        self.top_bytes = 0
        self.top_digests = set()

    def covering(self, path):
        """The recorded path that already covers ``path`` (itself or an ancestor), else None.

        Any recorded ancestor but a symlink or a shallow directory covers it: a saved
        directory lists all its entries (one not listed was absent then), an absent ancestor
        is removed whole, and a file is put back in place of whatever stands there now."""
        if path in self.records:
            return path
        for parent in ancestors(path):
            rec = self.records.get(parent)
            if rec is not None and rec["kind"] != "symlink" and not rec.get("shallow"):
                return parent
        return None

    def add(self, requested, shallow=False):
        """Save one requested path (a directory without its entries when ``shallow``),
        recording the outcome in self.result."""
        try:
            path = normalise(requested)
        except Uncoverable as exc:
            self.result["uncovered"][str(requested)] = str(exc)
            return
        if path in self.m["uncovered"]:
            self.result["uncovered"][path] = self.m["uncovered"][path]
            return
        try:
            real = self.real_path(path)
        except Uncoverable as exc:
            self.uncover(path, str(exc))
            return
        if real != path:
            self.result["resolved"][path] = real
            if real in self.m["uncovered"]:
                self.result["uncovered"][path] = "resolves to %s, which is uncovered: %s" % (real, self.m["uncovered"][real])
                return
        outcome = self.save_top(real, shallow)
        if outcome is None:
            if real != path:
                self.result["uncovered"][path] = "resolves to %s: %s" % (real, self.result["uncovered"].pop(real))
            return
        if outcome == "already":
            self.result["already"].append(path)
        elif outcome == "saved":
            self.result["saved"].append(path)
        else:
            self.result["within"][path] = outcome
        if self.params["link_targets"] and self.records.get(real, {}).get("kind") == "symlink":
            self.save_link_target(real, shallow)

    def real_path(self, path):
        """path with its parent directory resolved (symlinked components followed); raise Uncoverable
        for '/', the checkpoint root and virtual filesystems."""
        real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if real == "/" or path == "/":
            raise Uncoverable("the root directory cannot be checkpointed")
        root = os.path.realpath(self.store.root)
        if real == root or real.startswith(root + "/") or root.startswith(real + "/"):
            raise Uncoverable("contains or is inside the checkpoint root %s" % self.store.root)
        fstype = fs_type(real, self.mounts)
        if fstype in VIRTUAL_FS:
            raise Uncoverable("on a virtual filesystem (%s)" % fstype)
        return real

    def uncover(self, path, why):
        self.result["uncovered"][path] = why
        if self.m["uncovered"].get(path) != why:
            self.m["uncovered"][path] = why
            self.changed = True

    def save_top(self, path, shallow=False):
        """Save one real path. Returns 'saved', 'already', the covering ancestor, or None (uncovered).

        A directory saved shallow and now asked for in full gets its current entries added
        (its own first record is kept)."""
        cover = self.covering(path)
        upgrade = cover == path and not shallow and self.records[path].get("shallow")
        if cover == path and not upgrade:
            return "already"
        if cover is not None and not upgrade:
            return cover
        self.top_bytes = 0
        self.top_digests = set()
        try:
            new = self.collect(path, shallow, upgrade)
        except Uncoverable as exc:
            self.uncover(path, str(exc))
            return None
        except OSError as exc:
            self.uncover(path, "cannot be read: %s" % exc)
            return None
        self.records.update(new)
        self.m["bytes"] += self.top_bytes
        self.digests |= self.top_digests
        if upgrade:
            del self.records[path]["shallow"]
        if path not in self.m["covered"]:
            self.m["covered"].append(path)
        self.changed = True
        return "saved"

    def save_link_target(self, link, shallow=False):
        """Also save the final target of a saved symlink, when it is not covered yet."""
        try:
            target = self.real_path(os.path.realpath(link))
        except Uncoverable as exc:
            self.uncover(os.path.realpath(link), "target of %s: %s" % (link, exc))
            return
        if target == link:
            return
        if target in self.m["uncovered"]:
            self.result["uncovered"][target] = self.m["uncovered"][target]
            return
        outcome = self.save_top(target, shallow)
        if outcome is None:
            self.uncover(target, "target of %s: %s" % (link, self.m["uncovered"][target]))
        else:
            self.result["link_targets"][link] = target

    def budget_check(self, new):
        cap = self.params["max_entries"]
        if len(self.records) + len(new) > cap:
            raise Uncoverable("more than %d entries would be recorded (the checkpoint's cap)" % cap)
        total = self.m["bytes"] + self.top_bytes
        if total > self.params["max_total_bytes"]:
            raise Uncoverable("would bring the checkpoint to %d bytes or more, over its %d-byte cap"
                              % (total, self.params["max_total_bytes"]))

    def collect(self, path, shallow=False, upgrade=False):
        """Records (path -> record) of path, of its entries when a directory (unless
        ``shallow``), of its missing parents when absent; file contents go to blobs on the way.
        ``upgrade``: path is recorded shallow, collect its entries only. Raises Uncoverable, OSError."""
        try:
            pfd = open_dir(os.path.dirname(path))
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise
            return self.collect_absent(path)
        try:
            name = os.path.basename(path)
            st = lstat_at(pfd, name)
            if st is None:
                return self.collect_absent(path)
            new = {}
            if upgrade:
                if kind_of(st) != "dir":
                    raise Uncoverable("saved earlier without its entries, and no longer a directory")
                self.collect_entries(pfd, name, path, new, st.st_dev)
            else:
                self.collect_at(pfd, name, path, st, new, st.st_dev, shallow)
            return new
        finally:
            os.close(pfd)

    def collect_absent(self, path):
        """An absent path and its absent parents, up to the nearest one that exists or is covered."""
        new = {path: {"kind": "absent"}}
        for parent in ancestors(path):
            if os.path.lexists(parent) or self.covering(parent) is not None:
                break
            new[parent] = {"kind": "absent"}
        self.budget_check(new)
        return new

    def collect_at(self, dir_fd, name, path, st, new, dev, shallow=False):
        """Record ``name`` (in dir_fd, at ``path``) into ``new``, recursing into directories
        (not into a top directory saved ``shallow``)."""
        is_top = not new
        kind = kind_of(st)
        if kind not in ("file", "dir", "symlink"):
            raise Uncoverable("is a %s" % kind if is_top else "holds a %s (%s)" % (kind, path))
        if path in self.records:  # saved earlier on its own: the first save wins
            return
        if kind == "dir" and not is_top and (st.st_dev != dev or path in self.mounts):
            raise Uncoverable("holds a mount point (%s)" % path)
        rec = {"kind": kind}
        rec.update(meta(st))
        try:
            xattrs = read_xattrs(at_path(dir_fd, name, path))
        except OSError as exc:
            raise Uncoverable("%s%s" % ("" if is_top else path + ": ", exc.strerror or exc))
        if xattrs is not None:
            rec["xattrs"] = encode_xattrs(xattrs)
        new[path] = rec
        self.budget_check(new)
        if kind == "file":
            cap = self.params["max_file_bytes"]
            if st.st_size > cap:
                raise Uncoverable("%sfile of %d bytes is over the %d-byte cap"
                                  % ("" if is_top else path + ": ", st.st_size, cap))
            rec["mtime_ns"] = st.st_mtime_ns
            rec["sha256"], rec["size"] = self.capture(dir_fd, name, st)
            self.budget_check(new)
        elif kind == "symlink":
            rec["target"] = os.readlink(name, dir_fd=dir_fd)
        elif shallow and is_top:
            rec["shallow"] = True
        else:
            self.collect_entries(dir_fd, name, path, new, dev)

    def collect_entries(self, dir_fd, name, path, new, dev):
        """Record every entry of directory ``name`` (recursively) into ``new``."""
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        try:
            for child in sorted(os.listdir(fd)):
                cst = lstat_at(fd, child)
                if cst is not None:
                    self.collect_at(fd, child, os.path.join(path, child), cst, new, dev)
        finally:
            os.close(fd)

    def capture(self, dir_fd, name, st):
        """(sha256, size) of a regular file, its content stored as a blob (once per content).
        Check mode: (None, size from stat), nothing read or written."""
        if self.check_mode:
            self.top_bytes += st.st_size
            return None, st.st_size
        fd = open_file_at(dir_fd, name, st)
        try:
            digest, size = self.store.put_blob(fd, self.params["max_file_bytes"], self.digests | self.top_digests)
        finally:
            os.close(fd)
        if digest not in self.digests and digest not in self.top_digests:
            self.top_digests.add(digest)
            self.top_bytes += size
        return digest, size


def do_save(store, params, mounts, check_mode):
    exists = store.check_root(create=not check_mode)
    if exists and store.exists():
        if params["fresh"]:
            raise CheckpointFailed("exists", "checkpoint %s already exists under %s (left by an earlier attempt?); "
                                   "restore or discard it first" % (store.id, store.root))
        store.load()
    else:
        store.new()
    saver = Saver(store, params, mounts, check_mode)
    seen = set()
    for requested, shallow in [(p, False) for p in params["paths"]] + [(p, True) for p in params["shallow"]]:
        if requested not in seen:  # a path asked for in full and shallow is saved in full
            seen.add(requested)
            saver.add(requested, shallow)
    if saver.changed and not check_mode:
        store.save_manifest()
    if not check_mode and store.exists():
        prune_blobs(store)
    out = summary(store, exists_now=store.exists() or (check_mode and saver.changed))
    out.update(saver.result)  # uncovered: this call's paths only
    out["changed"] = saver.changed
    return out


def prune_blobs(store):
    """Remove blobs no record references (left by a path that turned out uncoverable)."""
    wanted = set(rec.get("sha256") for rec in store.manifest["records"].values())
    try:
        names = os.listdir(store.blobs)
    except OSError:
        return
    for name in names:
        if name not in wanted:
            try:
                os.unlink(os.path.join(store.blobs, name))
            except OSError:
                pass


def summary(store, exists_now):
    m = store.manifest
    covered = list(m["covered"])
    return {
        "exists": bool(exists_now),
        "covered": covered,
        "uncovered": dict(m["uncovered"]),
        "entries": len(m["records"]),
        "bytes": m["bytes"],
        "kinds": dict((p, m["records"][p]["kind"]) for p in covered if p in m["records"]),
        "xattrs": dict((p, sorted(m["records"][p]["xattrs"])) for p in covered
                       if m["records"].get(p, {}).get("xattrs")),
        "shallow": [p for p in covered if m["records"].get(p, {}).get("shallow")],
    }


# ---------------------------------------------------------------- compare, restore, verify

def differences(store, path, rec, mounts):
    """What differs between the host and the record of ``path``: (list of str, current kind).

    Compared: kind, mode, uid, gid, extended attributes (ACLs and SELinux context among them,
    when recorded), sha256 of a file, target of a symlink, entries of a directory (one not
    in the checkpoint is "unexpected entry NAME").
    """
    try:
        pfd = open_dir(os.path.dirname(path))
    except OSError as exc:
        if rec["kind"] == "absent" and exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return [], "absent"
        return ["parent directory cannot be opened without following links: %s" % exc.strerror], None
    try:
        st = lstat_at(pfd, os.path.basename(path))
        kind = kind_of(st)
        if kind != rec["kind"]:
            return ["is %s, saved as %s" % (kind, rec["kind"])], kind
        if kind == "absent":
            return [], kind
        diffs = []
        cur = meta(st)
        if cur["mode"] != rec["mode"]:
            diffs.append("mode %04o != saved %04o" % (cur["mode"], rec["mode"]))
        if cur["uid"] != rec["uid"]:
            diffs.append("uid %d != saved %d" % (cur["uid"], rec["uid"]))
        if cur["gid"] != rec["gid"]:
            diffs.append("gid %d != saved %d" % (cur["gid"], rec["gid"]))
        if "xattrs" in rec:  # checkpoints saved before extended attributes were saved have none
            current = read_xattrs(at_path(pfd, os.path.basename(path), path)) or {}
            diffs.extend(xattr_differences(current, decode_xattrs(rec["xattrs"])))
        if kind == "file":
            fd = open_file_at(pfd, os.path.basename(path), st)
            try:
                digest, _size = sha256_fd(fd)
            finally:
                os.close(fd)
            if digest != rec["sha256"]:
                diffs.append("sha256 %s != saved %s" % (digest[:12], rec["sha256"][:12]))
        elif kind == "symlink":
            target = os.readlink(os.path.basename(path), dir_fd=pfd)
            if target != rec["target"]:
                diffs.append("link target %s != saved %s" % (target, rec["target"]))
        elif kind == "dir" and not rec.get("shallow"):
            fd = os.open(os.path.basename(path), DIR_FLAGS, dir_fd=pfd)
            try:
                names = os.listdir(fd)
            finally:
                os.close(fd)
            records = store.manifest["records"]
            for name in sorted(names):
                if os.path.join(path, name) not in records:
                    diffs.append("unexpected entry %s" % name)
        return diffs, kind
    finally:
        os.close(pfd)


class Restorer:
    """Performs ``state=restore`` (or plans it in check mode)."""

    def __init__(self, store, mounts, check_mode):
        self.store = store
        self.records = store.manifest["records"]
        self.mounts = mounts
        self.check_mode = check_mode
        self.restored = []
        self.removed = []
        self.failures = []

    def run(self):
        for path in sorted(self.records, key=depth_key):
            rec = self.records[path]
            try:
                diffs, kind = differences(self.store, path, rec, self.mounts)
            except OSError as exc:
                diffs, kind = ["cannot be read: %s" % exc], None
            if not diffs:
                continue
            if self.check_mode:
                self.plan(path, rec, kind, diffs)
                continue
            try:
                self.restore_one(path, rec)
            except OSError as exc:
                # the path leads the line; the temporary name in exc.filename would only confuse
                why = "[Errno %d] %s" % (exc.errno, exc.strerror) if exc.errno and exc.strerror else str(exc)
                self.failures.append("%s: restore failed: %s" % (path, why))

    def plan(self, path, rec, kind, diffs):
        if rec["kind"] == "absent":
            self.removed.append(path)
            return
        extra = [d[len("unexpected entry "):] for d in diffs if d.startswith("unexpected entry ")]
        self.removed.extend(os.path.join(path, n) for n in extra)
        if len(extra) != len(diffs):
            self.restored.append(path)

    def restore_one(self, path, rec):
        name = os.path.basename(path)
        try:
            pfd = open_dir(os.path.dirname(path))
        except OSError as exc:
            if rec["kind"] == "absent" and exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return
            raise OSError(exc.errno, "parent directory %s: %s" % (os.path.dirname(path), exc.strerror))
        try:
            dev = os.fstat(pfd).st_dev
            st = lstat_at(pfd, name)
            kind = kind_of(st)
            if rec["kind"] == "absent":
                remove_tree_at(pfd, name, path, dev, self.mounts, self.removed)
                return
            if kind not in ("absent", rec["kind"]):
                remove_tree_at(pfd, name, path, dev, self.mounts, self.removed)
                st = None
            if rec["kind"] == "file":
                self.restore_file(pfd, name, path, rec, st)
            elif rec["kind"] == "symlink":
                self.restore_link(pfd, name, path, rec, st)
            else:
                self.restore_dir(pfd, name, path, rec, st)
        finally:
            os.close(pfd)

    def restore_file(self, pfd, name, path, rec, st):
        if st is not None:
            fd = open_file_at(pfd, name, st)
            try:
                digest, _size = sha256_fd(fd)
                if digest == rec["sha256"]:
                    self.fix_meta_fd(fd, st, rec, path)
                    return
            finally:
                os.close(fd)
        tmp = temp_name(name)
        blob = self.store.blob_path(rec["sha256"])
        try:
            src = os.open(blob, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise OSError(exc.errno, "saved copy %s is missing: %s" % (blob, exc.strerror))
        try:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=pfd)
            try:
                check = hashlib.sha256()
                while True:
                    chunk = os.read(src, CHUNK)
                    if not chunk:
                        break
                    check.update(chunk)
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view):]
                if check.hexdigest() != rec["sha256"]:
                    raise OSError(errno.EIO, "saved copy %s is corrupt (sha256 %s)" % (blob, check.hexdigest()[:12]))
                os.fchown(out, rec["uid"], rec["gid"])
                os.fchmod(out, rec["mode"])  # after chown, which clears setuid/setgid
                if "xattrs" in rec:  # after chown, which clears file capabilities
                    apply_xattrs(out, decode_xattrs(rec["xattrs"]))
                    if stat.S_IMODE(os.fstat(out).st_mode) != rec["mode"]:
                        os.fchmod(out, rec["mode"])
                if "mtime_ns" in rec:
                    os.utime(out, ns=(rec["mtime_ns"], rec["mtime_ns"]))
                os.fsync(out)
                os.close(out)
                out = None
                os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
            except BaseException:
                if out is not None:
                    os.close(out)
                try:
                    os.unlink(tmp, dir_fd=pfd)
                except OSError:
                    pass
                raise
        finally:
            os.close(src)
        self.restored.append(path)

    def restore_link(self, pfd, name, path, rec, st):
        xattrs = decode_xattrs(rec["xattrs"]) if "xattrs" in rec else None
        if st is not None and os.readlink(name, dir_fd=pfd) == rec["target"]:
            changed = False
            if (st.st_uid, st.st_gid) != (rec["uid"], rec["gid"]):
                os.chown(name, rec["uid"], rec["gid"], dir_fd=pfd, follow_symlinks=False)
                changed = True
            if xattrs is not None and apply_xattrs(at_path(pfd, name, path), xattrs):
                changed = True
            if changed:
                self.restored.append(path)
            return
        tmp = temp_name(name)
        os.symlink(rec["target"], tmp, dir_fd=pfd)
        try:
            os.chown(tmp, rec["uid"], rec["gid"], dir_fd=pfd, follow_symlinks=False)
            if xattrs is not None:
                apply_xattrs(at_path(pfd, tmp, os.path.join(os.path.dirname(path), tmp)), xattrs)
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=pfd)
            except OSError:
                pass
            raise
        self.restored.append(path)

    def restore_dir(self, pfd, name, path, rec, st):
        if st is None:
            os.mkdir(name, 0o700, dir_fd=pfd)
            st = lstat_at(pfd, name)
            self.restored.append(path)
        fd = os.open(name, DIR_FLAGS, dir_fd=pfd)
        try:
            dev = os.fstat(fd).st_dev  # the directory's own filesystem (it may be a mount point itself)
            self.fix_meta_fd(fd, st, rec, path)
            if rec.get("shallow"):
                return
            problems = []
            for child in sorted(os.listdir(fd)):
                cpath = os.path.join(path, child)
                if cpath not in self.records:
                    try:
                        remove_tree_at(fd, child, cpath, dev, self.mounts, self.removed)
                    except OSError as exc:
                        problems.append(exc)
            if problems:
                raise problems[0]
        finally:
            os.close(fd)

    def fix_meta_fd(self, fd, st, rec, path):
        """Owner, mode and extended attributes of an open file or directory (in that order:
        chown clears setuid/setgid and file capabilities, an ACL sets the group mode bits)."""
        changed = False
        if (st.st_uid, st.st_gid) != (rec["uid"], rec["gid"]):
            os.fchown(fd, rec["uid"], rec["gid"])
            changed = True
        if changed or stat.S_IMODE(st.st_mode) != rec["mode"]:
            os.fchmod(fd, rec["mode"])
            changed = True
        if "xattrs" in rec and apply_xattrs(fd, decode_xattrs(rec["xattrs"])):
            changed = True
            if stat.S_IMODE(os.fstat(fd).st_mode) != rec["mode"]:
                os.fchmod(fd, rec["mode"])
        if changed and path not in self.restored:
            self.restored.append(path)


def verify(store, mounts):
    """Mismatch lines ("path: what differs") for every record, after a restore."""
    out = []
    for path in sorted(store.manifest["records"], key=depth_key):
        try:
            diffs, _kind = differences(store, path, store.manifest["records"][path], mounts)
        except OSError as exc:
            diffs = ["cannot be read: %s" % exc]
        out.extend("%s: %s" % (path, d) for d in diffs)
    return out


def do_restore(store, params, mounts, check_mode, before_discard=None):
    """state=restore. ``before_discard``: called (no argument) right before a verified
    checkpoint is deleted; what it returns is the result's ``deadman``."""
    store.check_root(create=False)
    store.load()
    restorer = Restorer(store, mounts, check_mode)
    restorer.run()
    # after a real restore: what still differs, each failure first with its cause
    mismatches = restorer.failures + verify(store, mounts)
    verified = not mismatches
    discarded = False
    extra = {}
    if verified and params["discard_after"] and not check_mode:
        if before_discard is not None:
            extra["deadman"] = before_discard()
        store.remove()
        discarded = True
    m = store.manifest
    return dict(extra, **{
        "changed": bool(restorer.restored or restorer.removed),
        "verified": verified,
        "mismatches": mismatches,
        "restored": restorer.restored,
        "removed": restorer.removed,
        "discarded": discarded,
        "exists": not discarded,
        "covered": list(m["covered"]),
        "uncovered": dict(m["uncovered"]),
    })


def do_discard(store, check_mode, before_discard=None):
    """state=discard; ``before_discard`` as for :func:`do_restore`."""
    if not store.check_root(create=False) or not os.path.lexists(store.path):
        return {"changed": False, "discarded": False, "exists": False}
    extra = {}
    if before_discard is not None:
        extra["deadman"] = before_discard()
    if not check_mode:
        store.remove()
    return dict(extra, changed=True, discarded=not check_mode, exists=check_mode)


def do_status(store):
    if not store.check_root(create=False) or not store.exists():
        return {"changed": False, "exists": False, "covered": [], "uncovered": {}, "entries": 0, "bytes": 0,
                "kinds": {}}
    store.load()
    out = summary(store, exists_now=True)
    out["changed"] = False
    out["created"] = store.manifest.get("created")
    return out


# ---------------------------------------------------------------- the dead-man switch's restore
#
# checkpoint_deadman (state=arm) copies this file into ROOT/ID/deadman/ next to a three-line
# program that calls fire_main(); systemd (a transient timer) or a detached ``sleep`` runs it
# as root when the controller did not disarm the switch in time. It must work when sudo,
# sshd and the controller are gone: the standard library, this file, the checkpoint.

DEADMAN_DIR = "deadman"
ARMED_FILE = "armed.json"
RESULT_FILE = "result.json"
LOCK_WAIT = 120
POST_RESTORE_TIMEOUT = 60
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def read_json(path):
    """The JSON object in ``path``, or None when it is missing or unreadable."""
    try:
        with open(path, "r") as fh:
            data = json.load(fh)
    except (IOError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path, data):
    """Write ``data`` as JSON to ``path`` atomically (mode 0600, fsync, rename)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)


def run_post_restore(commands, timeout=POST_RESTORE_TIMEOUT):
    """Run each command with /bin/sh -c (PATH reset, stdin /dev/null), at most ``timeout``
    seconds each; return [{command, rc, output (the last 400 characters), seconds}] (rc None
    when it ran over its time or could not start)."""
    out = []
    env = {"PATH": SAFE_PATH, "LANG": "C"}
    for command in commands or []:
        started = time.time()
        try:
            proc = subprocess.run(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd="/", check=False)
            rc, text = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as exc:
            rc, text = None, (exc.output or b"") + ("\n[killed after %d s]" % timeout).encode("ascii")
        except (IOError, OSError) as exc:
            rc, text = None, str(exc).encode("utf-8", "replace")
        out.append({"command": command, "rc": rc, "output": text.decode("utf-8", "replace")[-400:],
                    "seconds": round(time.time() - started, 3)})
    return out


def fired_restore(checkpoint_dir, token, lock_wait=LOCK_WAIT):
    """The dead-man switch fires: restore the checkpoint in ``checkpoint_dir`` and verify it,
    run the armed ``post_restore`` commands, write ``deadman/result.json``.

    Does nothing (returns (0, None)) when the switch was disarmed, already fired, or armed
    again with another ``token`` since this run was scheduled. Waits at most ``lock_wait``
    seconds for the checkpoint root's lock (a module call in progress), then restores anyway
    (``lock_acquired`` false). The checkpoint is kept: the controller reads the result when
    it disarms. Returns (exit status: 0 verified, 1 not, 3 stale, result dict or None).

    result.json: fired_at, finished (epoch seconds, target clock), seconds, verified,
    mismatches, restored, removed, post_restore, lock_acquired, method, pid, token, error.
    """
    started = time.time()
    checkpoint_dir = os.path.normpath(checkpoint_dir)
    root, cid = os.path.split(checkpoint_dir)
    ddir = os.path.join(checkpoint_dir, DEADMAN_DIR)
    store = Store(root, cid)
    result = {"fired_at": started, "pid": os.getpid(), "token": token, "verified": False, "mismatches": [],
              "restored": [], "removed": [], "post_restore": [], "error": None, "lock_acquired": False}
    try:
        store.check_root(create=False, wait=lock_wait)
        result["lock_acquired"] = store.locked
        armed = read_json(os.path.join(ddir, ARMED_FILE))
        if armed is None or armed.get("token") != token:
            return 3, None
        if armed.get("disarmed_at") or os.path.exists(os.path.join(ddir, RESULT_FILE)):
            return 0, None
        result["method"] = armed.get("method")
        try:
            store.load()
            mounts = read_mounts()
            restorer = Restorer(store, mounts, False)
            restorer.run()
            mismatches = restorer.failures + verify(store, mounts)
            result.update(verified=not mismatches, mismatches=mismatches, restored=restorer.restored,
                          removed=restorer.removed)
        except CheckpointFailed as exc:
            result["error"] = exc.msg
        except Exception as exc:  # the result must be written whatever went wrong
            result["error"] = "%s: %s" % (type(exc).__name__, exc)
        result["post_restore"] = run_post_restore(armed.get("post_restore"))
        result["finished"] = time.time()
        result["seconds"] = round(result["finished"] - started, 3)
        write_json(os.path.join(ddir, RESULT_FILE), result)
        return (0 if result["verified"] else 1), result
    finally:
        store.close()


def fire_main(argv):
    """Entry point of the written program: ``fire.py CHECKPOINT_DIR TOKEN``; prints one line
    (the journal or deadman/fire.log keeps it) and returns the exit status."""
    # a program of its own (systemd or a detached sleep runs it), not a module: stdout is its log
    # pylint: disable=ansible-bad-function
    if len(argv) != 2:
        print("usage: fire.py CHECKPOINT_DIR TOKEN")
        return 2
    try:
        status, result = fired_restore(argv[0], argv[1])
    except Exception as exc:
        print("scapforge dead-man switch %s: FAILED: %s: %s" % (argv[0], type(exc).__name__, exc))
        return 1
    if result is None:
        print("scapforge dead-man switch %s: disarmed, already fired or re-armed: nothing done" % argv[0])
    else:
        print("scapforge dead-man switch %s: restored %d, removed %d, %s%s" % (
            argv[0], len(result["restored"]), len(result["removed"]),
            "verified" if result["verified"] else "NOT verified: %s" % "; ".join(result["mismatches"])[:1000],
            "; error: %s" % result["error"] if result["error"] else ""))
    sys.stdout.flush()
    return status
