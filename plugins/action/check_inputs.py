# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for scapforge.remediation.check_inputs: the run's inputs checked on the
controller (plugin_utils.inputs) before the role copies, installs or creates anything on the host."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.scapforge.remediation.plugins.module_utils.check_inputs_options import ARGUMENT_SPEC
from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps, inputs
from ansible_collections.scapforge.remediation.plugins.plugin_utils.host_setup import LoopError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import error_report, write_host_report


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        deps.require("lxml", error=AnsibleActionFail)
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        named = {option: args[option] for option in ("rules", "skip_rules", "allow_access_impacting")}
        try:
            if not task_vars.get("ansible_check_mode"):  # --check runs no agents (as the loop decides)
                inputs.check_endpoint(args["llm_base_url"], args["llm_model"], args["llm_allow_remote"])
            checked = inputs.check_inputs(args["datastream_src"], args["tailoring_src"], args["profile"], named,
                                          args["waivers"], args["content_dir"])
        except LoopError as exc:
            self._error_report(args, task_vars, exc)
            raise AnsibleActionFail("%s (reason: %s)" % (exc, exc.reason), result={"reason": exc.reason})
        result.update(checked.to_dict(), changed=False)
        return result

    @staticmethod
    def _error_report(args, task_vars, exc: LoopError) -> None:
        """The host's error report, so that summary.json names the reason; never over a report
        the host already has (a finished run's id reused keeps its report)."""
        if not args["run_dir"]:
            return
        host = task_vars.get("inventory_hostname", "localhost")
        if os.path.exists(os.path.join(args["run_dir"], "hosts", "%s.json" % host)):
            return
        write_host_report(args["run_dir"], host, error_report(host, args["run_id"] or "", exc.reason, str(exc)))
