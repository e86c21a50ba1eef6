# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for scapforge.remediation.run_summary: merge host reports on the controller."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import utc_now
from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import write_summary
from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps, report_ckl, report_html, report_junit


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        deps.require("junitparser", "lxml", error=AnsibleActionFail)
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec={
            "run_dir": {"type": "path", "required": True},
            "hosts": {"type": "list", "elements": "str", "default": []},
        })
        try:
            path, summary = write_summary(args["run_dir"], args["hosts"])
        except OSError as exc:
            raise AnsibleActionFail("cannot write the run summary in %s: %s" % (args["run_dir"], exc))
        try:
            reports = self.write_reports(args["run_dir"], summary)
        except OSError as exc:
            raise AnsibleActionFail("cannot write the run's reports in %s: %s" % (args["run_dir"], exc))
        result.update(changed=False, summary_path=path, totals=summary["totals"], regressions=summary["regressions"],
                      hosts=sorted(summary["hosts"]), without_report=summary["without_report"],
                      errors=summary["errors"], reports=reports)
        return result

    @staticmethod
    def write_reports(run_dir: str, summary: dict) -> dict:
        """report.html, junit.xml and checklists/<host>.ckl of every host in the summary,
        once per run on the controller; returns {html, junit, checklists: {host: path}}."""
        hosts = summary["hosts"]
        checklists = report_ckl.write(run_dir, hosts)
        relative = {h: "checklists/%s.ckl" % h for h in checklists}
        html = report_html.write(run_dir, hosts, summary["run_id"], utc_now(), relative, summary["without_report"])
        return {"html": html, "junit": report_junit.write(run_dir, hosts), "checklists": checklists}
