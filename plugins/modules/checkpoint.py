#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: checkpoint
short_description: Save files before a fix changes them, put them back and prove it
version_added: "0.1.0"
description:
  - Keeps an undo record (a I(checkpoint)) of files and directories on the target, so that a
    remediation attempt that failed, had no effect or left the host unhealthy can be undone
    and the undo proven.
  - O(state=save) adds paths to checkpoint O(id). For each path it records what is there now
    (its I(kind) - V(absent), V(file), V(dir) or V(symlink) - mode, owner uid and gid; for a
    file its sha256 and a copy of its content; for a symlink its target; for a directory every
    entry below it, recursively). The first save of a path wins; saving it again is a no-op.
  - O(state=restore) puts every saved path back, then B(verifies) by reading everything again,
    and returns RV(verified) and RV(mismatches). Files are written to a temporary file in the
    same directory, given owner and mode, then renamed over the path; symlinks are recreated;
    paths that were absent are removed (a directory recursively, never crossing a mount point);
    entries created since in a saved directory are removed.
  - O(state=discard) deletes the checkpoint; O(state=status) says whether it exists and what
    it holds.
  - Symbolic links are never followed when saving or restoring (C(lstat), C(O_NOFOLLOW), and
    every directory on the way opened without following links). A path whose parent
    directory is reached through a symlink (for example C(/lib/...) on a merged-/usr system)
    is saved at its real location, reported in RV(resolved).
  - A path that cannot be saved faithfully is listed in RV(uncovered) with the reason and is
    B(not) claimed as saved - over a size cap, a device, socket or FIFO, a directory
    holding such an entry or a mount point, a path on a virtual filesystem (proc, sysfs, ...).
    It stays uncovered for the life of the checkpoint (a later save would record the state
    after the change, not before).
author:
  - scapforge maintainers
requirements:
  - Python 3.9 or later on the target (standard library only).
options:
  state:
    description:
      - V(save) adds O(paths); V(restore) restores and verifies; V(discard) deletes the
        checkpoint; V(status) reports it without changing anything.
    type: str
    choices: [save, restore, discard, status]
    default: status
  id:
    description:
      - Checkpoint id, letters, digits, C(.), C(_) and C(-) (not only dots), at most 128 characters.
    type: str
    required: true
  root:
    description:
      - Directory holding the checkpoints, created with mode 0700 when missing. It must not be
        a symlink and must belong to the user the module runs as.
    type: path
    default: /var/lib/scapforge/checkpoints
  paths:
    description:
      - Absolute paths to save (O(state=save)). A path need not exist - its absence is
        recorded, with every missing parent directory, so that a restore removes what was
        created there.
    type: list
    elements: str
    default: []
  shallow:
    description:
      - Absolute paths to save like O(paths), except that a directory there is saved without
        its entries - its kind, mode and owner only - and a restore leaves its entries alone.
        For tasks that change only a directory's own mode or owner (C(file) with
        C(state=directory) and no C(recurse)), where saving and policing every entry would be
        wrong (C(/var/log), C(/tmp)). A path in both lists is saved in full.
    type: list
    elements: str
    default: []
  fresh:
    description:
      - With O(state=save), fail with RV(error_kind=exists) when the checkpoint already exists,
        so that a new attempt never inherits an old attempt's record by mistake.
    type: bool
    default: false
  link_targets:
    description:
      - When a path given to O(state=save) is a symlink, also save the file or directory it
        finally points to (modules such as lineinfile and pamd write through the link).
        Links found inside a saved directory are recorded as links only.
    type: bool
    default: true
  discard_after:
    description:
      - With O(state=restore), delete the checkpoint when the restore was verified. An
        unverified checkpoint is always kept.
    type: bool
    default: true
  max_file_bytes:
    description: Largest file (bytes) whose content is saved; a larger one is uncovered.
    type: int
    default: 8388608
  max_total_bytes:
    description: Most content (bytes, distinct contents counted once) one checkpoint may hold.
    type: int
    default: 67108864
  max_entries:
    description: Most paths (directory entries included) one checkpoint may record.
    type: int
    default: 5000
notes:
  - Saved per path - kind, permission bits (setuid, setgid and sticky included), uid, gid, file
    content and modification time, symlink target. Not saved - ACLs, extended attributes,
    SELinux labels, hard-link identity (a restored file is a new inode), directory
    modification times. These are left to later providers.
  - The checkpoint lives in O(root)/O(id) - C(manifest.json) and C(blobs/<sha256>); every
    file there is readable by its owner only.
  - Operations on one O(root) are serialised with C(flock) on the root directory.
  - "RV(error_kind) values - V(bad_id), V(root_unsafe) (O(root) is a symlink, not a
    directory, or not ours), V(missing) (no such checkpoint), V(exists) (O(fresh) and it
    exists), V(corrupt) (its manifest cannot be read), V(io_error)."
attributes:
  check_mode:
    support: full
    details: save, restore and discard change nothing and say what they would do; restore
      returns the differences between the host and the checkpoint in RV(mismatches).
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Save what a fix may touch (a file, a file that does not exist yet, a directory)
  scapforge.remediation.checkpoint:
    state: save
    id: run42-accounts_umask_etc_login_defs-1
    paths:
      - /etc/login.defs
      - /etc/profile.d/umask.sh
      - /etc/audit/rules.d
  become: true

- name: Undo the attempt and prove it
  scapforge.remediation.checkpoint:
    state: restore
    id: run42-accounts_umask_etc_login_defs-1
  become: true
  register: undo

- name: Stop if the host is not as it was
  ansible.builtin.assert:
    that: undo.verified
    fail_msg: "{{ undo.mismatches }}"

- name: The attempt worked; drop its checkpoint
  scapforge.remediation.checkpoint:
    state: discard
    id: run42-accounts_umask_etc_login_defs-1
  become: true
"""

RETURN = r"""
id:
  description: The checkpoint id.
  returned: always
  type: str
checkpoint_dir:
  description: Directory of the checkpoint on the target.
  returned: always
  type: str
  sample: /var/lib/scapforge/checkpoints/run42-x-1
exists:
  description: Whether the checkpoint exists after the call (before it, in check mode).
  returned: always
  type: bool
saved:
  description: Paths of O(paths) saved by this call (in check mode, that would be saved).
  returned: state=save
  type: list
  elements: str
already:
  description: Paths of O(paths) saved by an earlier call (first save wins).
  returned: state=save
  type: list
  elements: str
within:
  description: Paths of O(paths) covered by a saved (or absent) parent directory, with that directory.
  returned: state=save
  type: dict
resolved:
  description: Paths of O(paths) reached through a symlinked parent, with the real path saved instead.
  returned: state=save
  type: dict
  sample: {"/lib/systemd/system/x.service": "/usr/lib/systemd/system/x.service"}
link_targets:
  description: Saved symlinks whose final target was saved too, with that target.
  returned: state=save
  type: dict
uncovered:
  description:
    - Paths not saved, with why. For save, those of this call's O(paths) (an earlier uncovered
      path stays uncovered); for status and restore, all of the checkpoint's.
  returned: state=save, restore or status
  type: dict
  sample: {"/var/log/big.log": "file of 9437184 bytes is over the 8388608-byte cap"}
covered:
  description: Every path the checkpoint covers (saved, resolved and link targets), in save order.
  returned: state=save, restore or status
  type: list
  elements: str
entries:
  description: Number of paths recorded (directory entries and absent parents included).
  returned: state=save or status
  type: int
bytes:
  description: Bytes of saved content (distinct contents counted once).
  returned: state=save or status
  type: int
kinds:
  description: The kind recorded for each covered path.
  returned: state=save or status
  type: dict
  sample: {"/etc/login.defs": "file", "/etc/profile.d/x.sh": "absent"}
shallow:
  description: Covered directories saved without their entries (O(shallow)).
  returned: state=save or status
  type: list
  elements: str
verified:
  description:
    - True when, after the restore, every saved path matched the checkpoint (kind, mode, uid,
      gid, sha256, symlink target, directory entries). In check mode, whether the host
      already matches it.
  returned: state=restore
  type: bool
mismatches:
  description: One line per difference left after the restore, "path - what differs".
  returned: state=restore
  type: list
  elements: str
  sample: ["/etc/login.defs: restore failed: [Errno 1] Operation not permitted",
           "/etc/login.defs: sha256 1f0e... != saved 9ab2..."]
restored:
  description: Paths written back or whose owner or mode was put back.
  returned: state=restore
  type: list
  elements: str
removed:
  description: Paths removed (absent at save time, or new entries of a saved directory).
  returned: state=restore
  type: list
  elements: str
discarded:
  description: Whether the checkpoint was deleted by this call.
  returned: state=restore or discard
  type: bool
elapsed:
  description: Seconds the module worked (target clock).
  returned: always
  type: float
error_kind:
  description: Why the call failed, see the notes.
  returned: failure
  type: str
"""

import binascii
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import time

from ansible.module_utils.basic import AnsibleModule

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


def kind_of(st):
    """'absent', 'file', 'dir', 'symlink', or the name of a special kind."""
    if st is None:
        return "absent"
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "special file"


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

    # -- root and lock
    def check_root(self, create):
        """Make sure root is a directory of ours (0700), creating it when ``create``; lock it.

        Returns False when it does not exist and create is False.
        """
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
        fcntl.flock(self._root_fd, fcntl.LOCK_EX)
        return True

    def close(self):
        if self._root_fd is not None:
            os.close(self._root_fd)
            self._root_fd = None

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


def do_save(module, store, params, mounts):
    exists = store.check_root(create=not module.check_mode)
    if exists and store.exists():
        if params["fresh"]:
            raise CheckpointFailed("exists", "checkpoint %s already exists under %s (left by an earlier attempt?); "
                                   "restore or discard it first" % (store.id, store.root))
        store.load()
    else:
        store.new()
    saver = Saver(store, params, mounts, module.check_mode)
    seen = set()
    for requested, shallow in [(p, False) for p in params["paths"]] + [(p, True) for p in params["shallow"]]:
        if requested not in seen:  # a path asked for in full and shallow is saved in full
            seen.add(requested)
            saver.add(requested, shallow)
    if saver.changed and not module.check_mode:
        store.save_manifest()
    if not module.check_mode and store.exists():
        prune_blobs(store)
    out = summary(store, exists_now=store.exists() or (module.check_mode and saver.changed))
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
        "shallow": [p for p in covered if m["records"].get(p, {}).get("shallow")],
    }


# ---------------------------------------------------------------- compare, restore, verify

def differences(store, path, rec, mounts):
    """What differs between the host and the record of ``path``: (list of str, current kind).

    For a directory, entries not in the checkpoint are listed as "unexpected entry NAME".
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
        if st is not None and os.readlink(name, dir_fd=pfd) == rec["target"]:
            if (st.st_uid, st.st_gid) != (rec["uid"], rec["gid"]):
                os.chown(name, rec["uid"], rec["gid"], dir_fd=pfd, follow_symlinks=False)
                self.restored.append(path)
            return
        tmp = temp_name(name)
        os.symlink(rec["target"], tmp, dir_fd=pfd)
        try:
            os.chown(tmp, rec["uid"], rec["gid"], dir_fd=pfd, follow_symlinks=False)
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
        changed = False
        if (st.st_uid, st.st_gid) != (rec["uid"], rec["gid"]):
            os.fchown(fd, rec["uid"], rec["gid"])
            changed = True
        if changed or stat.S_IMODE(st.st_mode) != rec["mode"]:
            os.fchmod(fd, rec["mode"])
            changed = True
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


def do_restore(module, store, params, mounts):
    store.check_root(create=False)
    store.load()
    restorer = Restorer(store, mounts, module.check_mode)
    restorer.run()
    # after a real restore: what still differs, each failure first with its cause
    mismatches = restorer.failures + verify(store, mounts)
    verified = not mismatches
    discarded = False
    if verified and params["discard_after"] and not module.check_mode:
        store.remove()
        discarded = True
    m = store.manifest
    return {
        "changed": bool(restorer.restored or restorer.removed),
        "verified": verified,
        "mismatches": mismatches,
        "restored": restorer.restored,
        "removed": restorer.removed,
        "discarded": discarded,
        "exists": not discarded,
        "covered": list(m["covered"]),
        "uncovered": dict(m["uncovered"]),
    }


def do_discard(module, store):
    if not store.check_root(create=False) or not os.path.lexists(store.path):
        return {"changed": False, "discarded": False, "exists": False}
    if not module.check_mode:
        store.remove()
    return {"changed": True, "discarded": not module.check_mode, "exists": module.check_mode}


def do_status(store):
    if not store.check_root(create=False) or not store.exists():
        return {"changed": False, "exists": False, "covered": [], "uncovered": {}, "entries": 0, "bytes": 0,
                "kinds": {}}
    store.load()
    out = summary(store, exists_now=True)
    out["changed"] = False
    out["created"] = store.manifest.get("created")
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="status", choices=["save", "restore", "discard", "status"]),
            id=dict(type="str", required=True),
            root=dict(type="path", default="/var/lib/scapforge/checkpoints"),
            paths=dict(type="list", elements="str", default=[]),
            shallow=dict(type="list", elements="str", default=[]),
            fresh=dict(type="bool", default=False),
            link_targets=dict(type="bool", default=True),
            discard_after=dict(type="bool", default=True),
            max_file_bytes=dict(type="int", default=8 * 1024 * 1024),
            max_total_bytes=dict(type="int", default=64 * 1024 * 1024),
            max_entries=dict(type="int", default=5000),
        ),
        supports_check_mode=True,
    )
    params = module.params
    started = time.time()
    cid = params["id"]
    # not "path": AnsibleModule would add that path's owner/mode/state to the result
    base = {"id": cid, "checkpoint_dir": os.path.join(params["root"], cid)}
    if not ID_RE.match(cid) or not cid.strip("."):
        module.fail_json(msg="checkpoint id %r: use 1 to 128 of A-Z a-z 0-9 . _ - (not only dots)" % cid,
                         error_kind="bad_id", **base)
    store = Store(os.path.normpath(params["root"]), cid)
    try:
        if params["state"] == "save":
            result = do_save(module, store, params, read_mounts())
        elif params["state"] == "restore":
            result = do_restore(module, store, params, read_mounts())
        elif params["state"] == "discard":
            result = do_discard(module, store)
        else:
            result = do_status(store)
    except CheckpointFailed as exc:
        module.fail_json(msg=exc.msg, error_kind=exc.error_kind, elapsed=round(time.time() - started, 3), **base)
    except (IOError, OSError) as exc:
        module.fail_json(msg="checkpoint %s: %s" % (cid, exc), error_kind="io_error",
                         elapsed=round(time.time() - started, 3), **base)
    finally:
        store.close()
    result.update(base)
    result["elapsed"] = round(time.time() - started, 3)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
