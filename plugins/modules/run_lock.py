#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: run_lock
short_description: One remediation run per host at a time (the host's run lock)
version_added: "0.1.0"
description:
  - The lock the C(scapforge.remediation.ralph) action takes on its target for the whole run,
    so that two runs on one host never undo each other's fixes. It is a small JSON file
    (default C(/var/lib/scapforge/run.lock)) naming its holder - the run id, the controller's
    host name and process id (and that process's start time), a random token and when it
    was taken (by the target's clock).
  - The file lives on persistent storage, so it outlives a reboot the run makes and a
    controller that crashed - the next run finds it and decides, on the controller, whether
    its holder is gone (see the action).
  - Every state reads and writes the file under an exclusive C(flock) of a sibling
    C(<path>.guard) held only while this module runs; the file is replaced atomically
    (temporary file, C(fsync), rename), so two runs that start at the same instant never
    both hold it.
  - O(state=locked) takes the lock for O(holder) when nobody holds it, when O(holder) already
    holds it (same token) or when O(take_over) is the token of the current holder (the
    controller judged it stale); otherwise it changes nothing and returns the holder with
    RV(acquired=false).
  - O(state=unlocked) removes the lock if O(token) holds it (never another run's);
    O(state=status) only reads it.
author:
  - scapforge maintainers (@scapforge)
options:
  state:
    description: V(locked) takes the lock, V(unlocked) releases it, V(status) reads it.
    type: str
    choices: [locked, unlocked, status]
    default: status
  path:
    description: The lock file on the target.
    type: path
    default: /var/lib/scapforge/run.lock
  holder:
    description:
      - Who takes the lock (O(state=locked)) - C(run_id), C(controller), C(pid), C(pid_start),
        C(token), C(started); C(token) is required. Stored as given, with C(acquired_at)
        (the target's clock, seconds since the epoch) added.
    type: dict
    default: {}
  take_over:
    description: With O(state=locked), the token of a holder the caller judged stale; it is replaced.
    type: str
  token:
    description: With O(state=unlocked), the token the lock was taken with.
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - scapforge.remediation.attributes
attributes:
  check_mode:
    details: O(state=locked) and O(state=unlocked) report what they would do and write nothing.
seealso:
  - module: scapforge.remediation.ralph
"""

EXAMPLES = r"""
- name: Who holds the host's run lock
  scapforge.remediation.run_lock:
    state: status
  become: true
  register: lock

- name: Release a lock this run holds
  scapforge.remediation.run_lock:
    state: unlocked
    token: "{{ lock.holder.token }}"
  become: true
"""

RETURN = r"""
acquired:
  description: The lock is now held by O(holder) (O(state=locked)).
  returned: always
  type: bool
released:
  description: The lock held by O(token) was removed (O(state=unlocked)).
  returned: always
  type: bool
holder:
  description:
    - The lock's holder after the call (the given one when RV(acquired)), or null when nobody
      holds it; C(age) is how many seconds ago it was taken (the target's clock). A file that
      cannot be read is returned as C(unreadable) with the reason and its age.
  returned: always
  type: dict
previous:
  description: The holder replaced by O(take_over), or null.
  returned: always
  type: dict
path:
  description: The lock file.
  returned: always
  type: str
"""

import fcntl
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule


def read_holder(path):
    """The lock's holder (dict with ``age``), or None when the file is absent."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"unreadable": str(exc), "age": None}
    try:
        holder = json.loads(text)
        if not isinstance(holder, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        return {"unreadable": "%s: %r" % (exc, text[:120]), "age": round(time.time() - mtime, 1)}
    since = holder.get("acquired_at") if isinstance(holder.get("acquired_at"), (int, float)) else mtime
    holder["age"] = round(time.time() - since, 1)
    return holder


def write_holder(path, holder):
    """Replace the lock file atomically with ``holder``."""
    data = dict(holder)
    data.pop("age", None)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(data, sort_keys=True).encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def lock(path, holder, take_over, check_mode):
    """(result fields) of O(state=locked), under the guard."""
    current = read_holder(path)
    token = holder.get("token")
    mine = current is not None and current.get("token") == token
    replace = current is not None and take_over is not None and current.get("token") == take_over
    if current is not None and not mine and not replace:
        return {"changed": False, "acquired": False, "holder": current, "previous": None}
    if mine:
        return {"changed": False, "acquired": True, "holder": current, "previous": None}
    new = dict(holder, acquired_at=round(time.time(), 3))
    if not check_mode:
        write_holder(path, new)
    return {"changed": True, "acquired": True, "holder": dict(new, age=0.0), "previous": current if replace else None}


def unlock(path, token, check_mode):
    current = read_holder(path)
    if current is None or token is None or current.get("token") != token:
        return {"changed": False, "released": False, "holder": current}
    if not check_mode:
        os.unlink(path)
    return {"changed": True, "released": True, "holder": None}


def act(path, state, params, check_mode):
    if state == "locked":
        return lock(path, params["holder"], params["take_over"], check_mode)
    if state == "unlocked":
        return unlock(path, params["token"], check_mode)
    return {"holder": read_holder(path)}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="status", choices=["locked", "unlocked", "status"]),
            path=dict(type="path", default="/var/lib/scapforge/run.lock"),
            holder=dict(type="dict", default={}),
            take_over=dict(type="str", no_log=True),
            token=dict(type="str", no_log=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path, state = params["path"], params["state"]
    if state == "locked" and not params["holder"].get("token"):
        module.fail_json(msg="holder.token is required with state=locked", path=path)
    result = {"changed": False, "acquired": False, "released": False, "holder": None, "previous": None, "path": path}
    try:
        if module.check_mode:  # reads only: the file is always replaced whole, never seen half written
            result.update(act(path, state, params, True))
        else:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            guard = os.open(path + ".guard", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(guard, fcntl.LOCK_EX)  # held for milliseconds; freed when this process ends
                result.update(act(path, state, params, False))
            finally:
                os.close(guard)
    except OSError as exc:
        module.fail_json(msg="run lock %s: %s" % (path, exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
