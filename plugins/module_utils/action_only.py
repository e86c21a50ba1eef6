# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The main() of a module whose work is done by its action plugin on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.basic import AnsibleModule


def fail_without_action(argument_spec, name):
    """Only reached when the action plugin is missing: validates the options as the action
    would, then fails with a message that says so."""
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    module.fail_json(msg="%s runs as an action plugin on the controller; its action plugin was not found" % name)
