# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for scapforge.remediation.memory_merge: merge one memory store into another
on the controller (issue 6, item 8). The work is plugin_utils.memory.admin.merge_stores."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils._host.session import ActionSession
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import admin
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.errors import MemoryStoreError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.store import DEFAULT_LOCK_TIMEOUT

ARGUMENT_SPEC = {
    "src": {"type": "path", "required": True},
    "dest": {"type": "path", "required": True},
    "lock_timeout": {"type": "float", "default": DEFAULT_LOCK_TIMEOUT},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        deps.require("filelock", "tinydb", error=AnsibleActionFail)
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            merged = admin.merge_stores(args["src"], args["dest"], check=ActionSession(self, task_vars or {}).check_mode,
                                        lock_timeout=args["lock_timeout"])
        except MemoryStoreError as exc:
            raise AnsibleActionFail("cannot merge memory store %s into %s: %s" % (args["src"], args["dest"], exc))
        result.update(merged)
        return result
