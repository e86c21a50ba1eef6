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
    (its I(kind) - V(absent), V(file), V(dir) or V(symlink) - mode, owner uid and gid, every
    extended attribute the module can list - POSIX ACLs (C(system.posix_acl_access),
    C(system.posix_acl_default)), the SELinux context (C(security.selinux)), file capabilities,
    C(user.*), and C(trusted.*) when run as root; for a file its sha256 and a copy of its
    content; for a symlink its target; for a directory every entry below it, recursively).
    The first save of a path wins; saving it again is a no-op.
  - O(state=restore) puts every saved path back, then B(verifies) by reading everything again,
    and returns RV(verified) and RV(mismatches). Files are written to a temporary file in the
    same directory, given owner, mode and extended attributes (set with C(setxattr), removed
    when not saved - no C(setfacl) or C(chcon) needed), then renamed over the path; symlinks
    are recreated;
    paths that were absent are removed (a directory recursively, never crossing a mount point);
    entries created since in a saved directory are removed.
  - O(state=discard) deletes the checkpoint; O(state=status) says whether it exists and what
    it holds, and what its dead-man switch does (RV(deadman)).
  - O(state=arm) arms the checkpoint's B(dead-man switch) (the pattern of community.general's
    C(iptables_state) - a rollback on the target that the controller cancels) - it writes
    into the checkpoint a standalone restore program (C(deadman/fire.py) and an unchanged
    copy of the restore code, standard library only) and schedules it as root in O(timeout)
    seconds - with C(systemd-run --on-active=<timeout>s --unit=scapforge-deadman-<id>) where
    systemd runs, else with a detached C(sh -c 'sleep <timeout>; exec python fire.py ...')
    in a session of its own (O(method)). When it fires it restores and verifies the
    checkpoint as O(state=restore) does, runs O(post_restore), writes C(deadman/result.json)
    and keeps the checkpoint; it needs neither sudo nor sshd nor the controller. A missing
    checkpoint is created empty, so the switch can be armed before the attempt's first
    save; it restores whatever the checkpoint holds when it fires. Arming an armed switch is
    a no-op.
  - O(state=disarm) cancels the switch (stops its timer and service, or kills its process
    group after checking the pid's start time and command line) and says whether it had
    already fired and, if so, the fired restore's result (RV(deadman.result)). O(state=discard),
    and O(state=restore) when it deletes the checkpoint, disarm a switch still armed first.
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
  - scapforge maintainers (@scapforge)
requirements:
  - Python 3.9 or later on the target (standard library only).
options:
  state:
    description:
      - V(save) adds O(paths); V(restore) restores and verifies; V(discard) deletes the
        checkpoint; V(status) reports it without changing anything; V(arm) arms the dead-man
        switch; V(disarm) cancels it (or reports that it fired).
    type: str
    choices: [save, restore, discard, status, arm, disarm]
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
      - With O(state=save) or O(state=arm), fail with RV(error_kind=exists) when the checkpoint
        already exists, so that a new attempt never inherits an old attempt's record by mistake.
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
  timeout:
    description:
      - With O(state=arm), seconds (1 to 604800) until the dead-man switch fires unless
        disarmed. Required for O(state=arm).
    type: int
  method:
    description:
      - With O(state=arm), how the switch is scheduled. V(auto) - a systemd transient timer
        when systemd is the running init system (C(/run/systemd/system) exists,
        C(systemctl is-system-running) says running, degraded or starting, the module runs as
        root), else V(sleep); if C(systemd-run) fails it falls back to V(sleep), saying why
        in RV(deadman.method_why). V(systemd) fails with RV(error_kind=no_systemd) where
        systemd cannot be used. V(sleep) always uses the detached process.
    type: str
    choices: [auto, systemd, sleep]
    default: auto
  post_restore:
    description:
      - With O(state=arm), shell commands (C(/bin/sh -c), a standard PATH, at most 60 seconds
        each) the fired program runs after its restore, verified or not - for example
        C(systemctl reload ssh) after a checkpoint of C(/etc/ssh/sshd_config). Their exit
        status and the end of their output are in the result.
    type: list
    elements: str
    default: []
notes:
  - Saved per path - kind, permission bits (setuid, setgid and sticky included), uid, gid,
    extended attributes (ACLs, SELinux context, file capabilities, C(user.*), C(trusted.*)
    as root; C(security.ima) and C(security.evm) are left to the kernel), file content and
    modification time, symlink target. Not saved - hard-link identity (a restored file is a
    new inode), directory modification times. A checkpoint saved by an older version of
    this module has no extended attributes recorded and does not compare them.
  - Extended attributes are read and written without following links, through
    C(/proc/self/fd) of the parent directory opened without following links. An attribute
    that cannot be read makes the path uncovered; one that cannot be set (an SELinux policy
    refusing a relabel) is a mismatch naming it.
  - The dead-man switch keeps its state in O(root)/O(id)/C(deadman/) - C(armed.json) (how
    and when it was armed, its token), C(result.json) (written when it fires - fired_at,
    finished, seconds, verified, mismatches, restored, removed, post_restore, lock_acquired,
    method, error) and C(fire.log) (output of the V(sleep) method; systemd's goes to the
    journal). It does not survive a reboot of the target (RV(deadman.lost)). The V(sleep)
    method's process leads a session of its own and outlives the SSH connection, but a
    C(logind) configured with C(KillUserProcesses=yes) kills it with the login session - on
    such a systemd host use V(auto) or V(systemd).
  - The checkpoint lives in O(root)/O(id) - C(manifest.json) and C(blobs/<sha256>); every
    file there is readable by its owner only.
  - Operations on one O(root) are serialised with C(flock) on the root directory.
  - "RV(error_kind) values - V(bad_id), V(root_unsafe) (O(root) is a symlink, not a
    directory, or not ours), V(missing) (no such checkpoint), V(exists) (O(fresh) and it
    exists), V(corrupt) (its manifest cannot be read), V(io_error); for the dead-man switch
    V(bad_timeout), V(no_systemd), V(fired) (arm while a fired result was not read by a
    disarm yet), V(arm_failed) (systemd-run failed with O(method=systemd)), V(disarm_failed)
    (the timer or process survived the cancel)."
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - scapforge.remediation.attributes
attributes:
  check_mode:
    details: save, restore and discard change nothing and say what they would do; restore
      returns the differences between the host and the checkpoint in RV(mismatches).
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

- name: Before a change that can lock the controller out, arm the dead-man switch
  scapforge.remediation.checkpoint:
    state: arm
    id: run42-sshd_disable_root_login-1
    timeout: 120
    post_restore:
      - systemctl reload ssh
  become: true
  register: armed   # armed.deadman.method, .unit or .pid, .fires_at

- name: A fresh connection works; cancel the switch
  scapforge.remediation.checkpoint:
    state: disarm
    id: run42-sshd_disable_root_login-1
  become: true
  register: cancel  # cancel.deadman.cancelled, or .fired and .result.verified

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
           "/etc/login.defs: sha256 1f0e... != saved 9ab2...",
           "/etc/shadow: ACL user::rw-,group::r--,other::--- != saved user::rw-,user:1000:r--,group::r--,mask::r--,other::---"]
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
xattrs:
  description: Names of the extended attributes recorded for each covered path that has any.
  returned: state=save or status
  type: dict
  sample: {"/etc/shadow": ["security.selinux", "system.posix_acl_access"]}
deadman:
  description:
    - The dead-man switch. Keys - C(was_armed) (it was ever armed), C(armed) (its timer or
      process is waiting), C(firing) (its program runs now), C(fired) (it restored; see
      C(result)), C(lost) (armed, never disarmed, never fired, and nothing scheduled any
      more - a reboot), C(disarmed), C(disarmed_at), C(cancelled) (a disarm stopped it
      before it fired), C(method) (V(systemd) or V(sleep)), C(method_why), C(unit) (systemd
      unit name without suffix), C(pid) (the sleeper's pid), C(armed_at), C(fires_at) (epoch
      seconds, target clock), C(fires_in) (seconds from now), C(timeout), C(post_restore),
      C(program), C(result) (the fired restore's result.json, else null). For state=arm also
      C(already) (it was armed before this call) and C(rearmed_lost).
  returned: state=arm, disarm or status; state=discard or restore when they deleted the checkpoint
  type: dict
  contains:
    armed:
      description: Its timer or process is waiting.
      type: bool
    fired:
      description: It restored the checkpoint by itself; see RV(deadman.result).
      type: bool
    lost:
      description: Armed, never disarmed, never fired, and nothing scheduled any more (a reboot).
      type: bool
    method:
      description: V(systemd) or V(sleep).
      type: str
    method_why:
      description: Why that method (no systemd as PID 1, for example).
      type: str
    result:
      description: The fired restore's result.json, else null.
      type: dict
  sample: {"armed": true, "method": "systemd", "unit": "scapforge-deadman-run42-x-1", "pid": null,
           "fires_at": 1764505000.2, "fires_in": 119.9, "fired": false, "result": null}
error_kind:
  description: Why the call failed, see the notes.
  returned: failure
  type: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.scapforge.remediation.plugins.module_utils import checkpoint_deadman as deadman
from ansible_collections.scapforge.remediation.plugins.module_utils import checkpoint_store as core

STATES = ["save", "restore", "discard", "status", "arm", "disarm"]


def run_state(store, params, check_mode):
    """The result dict of one call (without id, checkpoint_dir and elapsed); raises
    CheckpointFailed (DeadmanFailed), IOError/OSError."""
    state = params["state"]
    if state == "save":
        return core.do_save(store, params, core.read_mounts(), check_mode)
    if state == "restore":
        return core.do_restore(store, params, core.read_mounts(), check_mode,
                               before_discard=lambda: deadman.cancel_before_discard(store, check_mode))
    if state == "discard":
        return core.do_discard(store, check_mode,
                               before_discard=lambda: deadman.cancel_before_discard(store, check_mode))
    if state == "arm":
        return deadman.arm(store, params, check_mode)
    if state == "disarm":
        return deadman.disarm(store, check_mode)
    result = core.do_status(store)
    result["deadman"] = deadman.status(store) if result["exists"] else deadman.describe(None, None, None)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="status", choices=STATES),
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
            timeout=dict(type="int"),
            method=dict(type="str", default="auto", choices=list(deadman.METHODS)),
            post_restore=dict(type="list", elements="str", default=[]),
        ),
        required_if=[("state", "arm", ("timeout",))],
        supports_check_mode=True,
    )
    params = module.params
    started = time.time()
    cid = params["id"]
    # not "path": AnsibleModule would add that path's owner/mode/state to the result
    base = {"id": cid, "checkpoint_dir": os.path.join(params["root"], cid)}
    if not core.ID_RE.match(cid) or not cid.strip("."):
        module.fail_json(msg="checkpoint id %r: use 1 to 128 of A-Z a-z 0-9 . _ - (not only dots)" % cid,
                         error_kind="bad_id", **base)
    store = core.Store(os.path.normpath(params["root"]), cid)
    try:
        result = run_state(store, params, module.check_mode)
    except core.CheckpointFailed as exc:
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
