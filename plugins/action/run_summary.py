# Copyright: scapforge maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for scapforge.remediation.run_summary: merge host reports on the controller
and write the run's reports."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.scapforge.remediation.plugins.module_utils.run_summary_options import ARGUMENT_SPEC
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import utc_now
from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import merge_host_reports, summary_unchanged
from ansible_collections.scapforge.remediation.plugins.plugin_utils.summary import write_summary
from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps, evidence, host_summary, report_ckl
from ansible_collections.scapforge.remediation.plugins.plugin_utils import report_html, report_oscal
from ansible_collections.scapforge.remediation.plugins.plugin_utils import report_junit


def catalog_lookup(datastream_src: str | None):
    """``catalog_of(sha256)`` for the checklists: the controller's datastream_src when its
    digest is the host's, else the catalog the run already parsed (this process or the disk
    cache), else None."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog, CatalogError
    given = {}

    def catalog_of(sha256: str):
        if datastream_src and "src" not in given:
            try:
                given["src"] = Catalog.from_path(datastream_src)
            except CatalogError:
                given["src"] = None
        if given.get("src") is not None and given["src"].sha256 == sha256:
            return given["src"]
        return Catalog.cached(sha256)
    return catalog_of


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        deps.require("compliance-trestle", "junitparser", "lxml", error=AnsibleActionFail)
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        kept = self.kept_reports(args["run_dir"], merge_host_reports(args["run_dir"], args["hosts"]))
        try:
            path, summary = kept[:2] if kept else write_summary(args["run_dir"], args["hosts"])
        except OSError as exc:
            raise AnsibleActionFail("cannot write the run summary in %s: %s" % (args["run_dir"], exc))
        try:
            if kept:
                reports = kept[2]
            else:
                reports = self.write_reports(args["run_dir"], summary, args.get("datastream_src"))
                reports["evidence"] = evidence.write_bundle(args["run_dir"], summary["run_id"], args.get("evidence_key"))
        except OSError as exc:
            raise AnsibleActionFail("cannot write the run's reports in %s: %s" % (args["run_dir"], exc))
        except evidence.EvidenceError as exc:
            raise AnsibleActionFail("cannot sign the run's evidence bundle: %s" % exc)
        lines = self.console_lines(summary, reports)
        display = Display()
        for line in lines:
            display.display(line)
        if reports["checklists_refused"]:
            result["warnings"] = ["no STIG checklist for %s: %s" % (h, why)
                                  for h, why in sorted(reports["checklists_refused"].items())]
        result.update(changed=False, summary_path=path, totals=summary["totals"], regressions=summary["regressions"],
                      hosts=sorted(summary["hosts"]), without_report=summary["without_report"],
                      errors=summary["errors"], reports=reports, report_html=reports["html"], summary_lines=lines)
        return result

    @staticmethod
    def kept_reports(run_dir: str, summary: dict) -> tuple[str, dict, dict] | None:
        """(summary path, summary, reports) of reports left as they are, when no host report
        changed since they were written (a refused start of a finished run: its files stay
        byte-identical, issue 17 item 4); None when they must be written."""
        html = os.path.join(run_dir, report_html.FILE_NAME)
        bundle = os.path.join(run_dir, evidence.bundle_name(summary["run_id"]))
        if not (summary_unchanged(run_dir, summary) and os.path.isfile(html) and os.path.isfile(bundle)):
            return None
        checklists: dict = {}
        for host in summary["hosts"]:
            found = {kind: os.path.join(run_dir, report_ckl.FOLDER, "%s.%s" % (host, kind)) for kind in ("ckl", "cklb")}
            if all(os.path.isfile(p) for p in found.values()):
                checklists[host] = found
        signature = bundle + ".sig"
        reports = {"html": html, "junit": os.path.join(run_dir, report_junit.FILE_NAME),
                   "ledger": os.path.join(run_dir, host_summary.LEDGER),
                   "oscal": os.path.join(run_dir, report_oscal.FOLDER, report_oscal.FILE_NAME),
                   "checklists": checklists, "checklists_refused": {}, "kept": True,
                   "evidence": {"path": bundle, "signature": signature if os.path.isfile(signature) else None,
                                "signed": os.path.isfile(signature), "files": None}}
        return os.path.join(run_dir, "summary.json"), summary, reports

    @staticmethod
    def console_lines(summary: dict, reports: dict) -> list[str]:
        """The end of the play: where report.html is, then three lines per host."""
        lines = ["scapforge run %s: report %s" % (summary["run_id"], reports["html"])]
        bundle = reports.get("evidence")
        if bundle:
            lines.append("scapforge run %s: evidence %s (%s)" % (
                summary["run_id"], bundle["path"], "signed: %s" % bundle["signature"] if bundle["signed"]
                else "unsigned: set scapforge_evidence_key to sign it"))
        for host, report in sorted(summary["hosts"].items()):
            lines.extend(host_summary.console_lines(host, report))
        for host in summary["without_report"]:
            lines.append("%s: no report (unreachable, or failed before the loop)" % host)
        return lines

    @staticmethod
    def write_reports(run_dir: str, summary: dict, datastream_src: str | None = None) -> dict:
        """report.html, junit.xml, ledger.json, oscal/assessment-results.json and
        checklists/<host>.ckl and .cklb of every host in the summary, once per run on the
        controller; returns {html, junit, ledger, oscal, checklists: {host: {ckl, cklb}},
        checklists_refused: {host: why}}."""
        hosts = summary["hosts"]
        checklists, refused = report_ckl.write(run_dir, hosts, catalog_lookup(datastream_src))
        relative = {h: {kind: os.path.relpath(p, run_dir) for kind, p in paths.items()}
                    for h, paths in checklists.items()}
        junit = report_junit.write(run_dir, hosts)
        ledger = host_summary.write_ledger(run_dir, hosts)
        generated = utc_now()
        oscal = report_oscal.write(run_dir, hosts, summary["run_id"], generated)
        outputs = {"summary (JSON)": "summary.json", "JUnit": os.path.relpath(junit, run_dir),
                   "OSCAL assessment results": os.path.relpath(oscal, run_dir),
                   "change ledger (JSON)": os.path.relpath(ledger, run_dir), "events (JSON lines)": "events.jsonl",
                   "evidence bundle": evidence.bundle_name(summary["run_id"])}
        html = report_html.write(run_dir, hosts, summary["run_id"], generated, relative, summary["without_report"],
                                 outputs, refused)
        return {"html": html, "junit": junit, "ledger": ledger, "oscal": oscal, "checklists": checklists,
                "checklists_refused": refused}
