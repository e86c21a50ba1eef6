#!/usr/bin/python
# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This file documents the action plugin plugins/action/memory_merge.py.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: memory_merge
short_description: Merge one remediation memory store into another
version_added: 0.1.0
description:
  - Runs on the controller. Adds to the memory store O(dest) what the store O(src) learned
    (lessons, their evidence rows and usage rows), so that lessons proved by one controller or
    one fleet are selectable by the next run that uses O(dest).
  - The union is by key, so nothing is duplicated and merging the same source twice adds
    nothing the second time - lessons by their dedupe key (a lesson has the same id in every
    store), evidence by lesson, source kind and source id, usage rows by their key. For a
    lesson both stores hold the stronger status wins (candidate < confirmed < retired); its
    support, weight, outcomes and confidence are recomputed from the merged rows.
  - O(src) is only read, without a lock. O(dest) is written inside its own transaction (the
    store's file lock, so a run writing O(dest) at the same time loses nothing); it is created
    (mode 0700) when missing and migrated first when at an older schema.
  - A table file that is not valid JSON fails the task with a message naming the table; in
    O(dest) the file has been moved aside to C(<file>.corrupt-<UTC time>), in O(src) it is
    left in place.
author:
  - scapforge maintainers (@scapforge)
options:
  src:
    description: The memory store directory to read (it must exist).
    type: path
    required: true
  dest:
    description: The memory store directory to merge into (a different store).
    type: path
    required: true
  lock_timeout:
    description: Seconds to wait for the lock of O(dest) before failing.
    type: float
    default: 120
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - scapforge.remediation.attributes
attributes:
  check_mode:
    details: The merge runs on an in-memory copy of O(dest); the counts say what would be added.
notes:
  - The same merge from a shell - C(.venv/bin/python tools/lessons.py merge SRC DEST).
seealso:
  - plugin: scapforge.remediation.lessons
    plugin_type: lookup
"""

EXAMPLES = r"""
- name: Fold the lab controller's lessons into the shared store
  scapforge.remediation.memory_merge:
    src: /srv/scapforge/lab-memory
    dest: "{{ scapforge_memory_path | default('~/.scapforge/memory') }}"
  run_once: true

- name: What a merge would add, writing nothing
  scapforge.remediation.memory_merge:
    src: /srv/scapforge/lab-memory
    dest: /var/lib/awx/scapforge-memory
  check_mode: true
  register: preview
"""

RETURN = r"""
changed:
  description: Whether O(dest) gained or changed anything (in check mode, whether it would).
  returned: always
  type: bool
lessons_added:
  description: Lessons of O(src) that O(dest) did not hold.
  returned: always
  type: int
lessons_in_both:
  description: Lessons both stores hold (merged into one).
  returned: always
  type: int
lessons_changed:
  description: Lessons of O(dest) whose fields changed (status, support, weight, outcomes, confidence).
  returned: always
  type: int
evidence_added:
  description: Evidence rows added to O(dest).
  returned: always
  type: int
usage_added:
  description: Usage rows added to O(dest).
  returned: always
  type: int
usage_stamped:
  description: Usage rows of O(dest) without an outcome that took the outcome O(src) recorded.
  returned: always
  type: int
dest_lessons:
  description: Lessons in O(dest) after the merge.
  returned: always
  type: int
dest_evidence:
  description: Evidence rows in O(dest) after the merge.
  returned: always
  type: int
dest_usage:
  description: Usage rows in O(dest) after the merge.
  returned: always
  type: int
src:
  description: Absolute path of O(src).
  returned: always
  type: str
dest:
  description: Absolute path of O(dest).
  returned: always
  type: str
check_mode:
  description: Whether the merge ran in check mode (nothing written).
  returned: always
  type: bool
"""
