# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The options of what protects the host (scapforge.remediation.ralph and the role that passes them)."""

    DOCUMENTATION = r"""
options:
  allow_access_impacting:
    description: Access-impacting rules the user allows to run; C(all) allows every one.
    type: list
    elements: str
    default: []
  health_check:
    description: After every applied fix, log in afresh and escalate; stop the host if that fails.
    type: bool
    default: true
  health_commands:
    description:
      - Shell commands (run as root on the host) that must exit 0 after every attempt, on top of the
        built-in checks (a fresh login with become, C(sshd -t), C(visudo -c), the package database,
        systemd units that were active before the run and failed since, login shells, owner and mode
        of the account and sudoers files). A check that already failed before the run is reported,
        not held against an attempt.
    type: list
    elements: str
    default: []
  deadman_seconds:
    description:
      - Before an attempt first changes something the controller's access depends on (sshd, PAM,
        sudoers, accounts, network, firewall), a timer on the host restores its checkpoint by itself
        after this many seconds unless the controller, logged in afresh, confirms the host healthy
        and cancels it. 0 turns the switch off.
    type: int
    default: 600
  allow_reboot:
    description:
      - A vendor fix whose XCCDF metadata says C(reboot) and whose rule still fails once it ran
        cleanly ends C(deferred) with reason C(reboot_required) (it is not rolled back).
      - With V(true), after the Worker phase and before the final scan, the host is rebooted once
        (C(ansible.builtin.reboot), up to 600 seconds to come back) and exactly those rules are
        verified again in one OpenSCAP call, C(remediated)/C(verified_after_reboot) when they pass,
        C(escalated)/C(fix_ineffective_after_reboot) when they still fail. A host that does not
        come back is stopped. Never in check mode.
      - With V(false) they stay deferred, and the host report's C(reboot_required) lists them.
    type: bool
    default: false
  checkpoint_provider:
    description:
      - How an attempt is saved and undone. C(files) (default) saves on the host every file its tasks
        can touch, with owner, mode, ACLs, extended attributes and SELinux context, and verifies the
        restore byte for byte; its dead-man switch protects access-touching attempts. C(command) runs
        your snapshot / restore / verify commands on the host (LVM, a cloud API); C(lab) resets a
        lab host's overlay (undoing every earlier fix too).
    type: str
    choices: [files, command, lab]
    default: files
  checkpoint_options:
    description:
      - Options of the provider. C(files) - C(root) (default C(/var/lib/scapforge/checkpoints)),
        C(max_file_bytes), C(max_total_bytes), C(max_entries). C(command) - C(snapshot), C(restore),
        C(verify) (required; C({id}) and C({host}) are replaced), C(discard), C(timeout), C(become).
        C(lab) - C(restore_command), C(snapshot_command), C(cwd), C(timeout).
    type: dict
    default: {}
  allow_controller:
    description:
      - Work on a host that is the controller itself (a C(local) connection, or the same machine id).
        Refused by default with reason C(controller), before anything runs.
    type: bool
    default: false
"""
