# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The options of the shared memory store (scapforge.remediation.ralph and the role that passes them)."""

    DOCUMENTATION = r"""
options:
  memory_path:
    description:
      - Controller directory of the lesson store (one TinyDB JSON file per table, written atomically
        under a file lock, shared by the forks of a run and by runs that follow).
      - Under AWX / Automation Controller each job runs in a container that is thrown away - give
        a path on a persistent volume mounted into the execution environment, or memory starts
        empty every job.
    type: path
    default: ~/.scapforge/memory
  memory_mode:
    description:
      - One of C(off), C(shadow), C(inject) (checked by the action plugin, since the type is raw).
      - C(off) - no memory; C(shadow) - select lessons and log what would have been shown or decided,
        change nothing; C(inject) - show the selected lessons to the Architect and the Worker and act
        on proven ones (classify a rule from a caution, skip a vendor fix known to fail on hosts
        like this one, try tasks that verified before).
      - An unquoted C(off) in YAML is the boolean false, which means C(off) too.
    type: raw
    default: inject
  memory_retry:
    description: Work rules again that memory would decide at once (tasks that verified are still tried first).
    type: bool
    default: false
"""
