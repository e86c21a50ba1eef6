# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for scapforge.remediation.run_summary: merge host reports on the controller."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import write_summary


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec={
            "run_dir": {"type": "path", "required": True},
            "hosts": {"type": "list", "elements": "str", "default": []},
        })
        try:
            path, summary = write_summary(args["run_dir"], args["hosts"])
        except OSError as exc:
            raise AnsibleActionFail("cannot write the run summary in %s: %s" % (args["run_dir"], exc))
        result.update(changed=False, summary_path=path, totals=summary["totals"], regressions=summary["regressions"],
                      hosts=sorted(summary["hosts"]), without_report=summary["without_report"],
                      errors=summary["errors"])
        return result
