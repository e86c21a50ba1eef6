"""The baseline and final scans' ARF results: kept on the target during the run (one
directory per run, gzip-compressed: a whole profile's ARF is about 14 MB of XML, 1 MB
compressed), then brought to ``<run dir>/arf/<host>-before.xml`` and ``-after.xml``."""

from __future__ import annotations

import os
import typing as t

from ansible.errors import AnsibleError

from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils.executor import TaskListExecutor

ARF_ROOT = "/var/lib/scapforge/arf"
FETCH_ACTION = "ansible.builtin.fetch"
#: which scans keep their ARF, under which name (the last "after" wins).
KEPT = {"baseline": "before", "rescan": "after", "final": "after"}
XCCDF = "http://checklists.nist.gov/xccdf/1.2"


class ArfStore:
    """``record``: the state's ``arf`` dict, filled with {before, after} (paths relative to
    the run dir) and ``error`` when something could not be kept (never fatal)."""

    def __init__(self, ctx, record: dict) -> None:
        self.ctx = ctx
        self.record = record
        self.folder: str | None = None  # the run's ARF directory on the target, once made

    def path(self, label: str) -> str | None:
        """Where a scan keeps its ARF on the target; None for other scans, in check mode, or
        once the directory could not be made."""
        name = KEPT.get(label)
        if name is None or self.ctx.check_mode or self.record.get("error"):
            return None
        if self.folder is None:
            folder = "%s/%s" % (ARF_ROOT, self.ctx.opts.run_id or "adhoc")
            made = self._module("ansible.builtin.file", {"path": folder, "state": "directory", "mode": "0700"})
            if made.get("failed"):
                self.record["error"] = "cannot make %s on the host: %s" % (folder, str(made.get("msg"))[-300:])
                return None
            self.folder = folder
        return "%s/%s.xml.gz" % (self.folder, name)

    def fetch(self) -> None:
        """Bring the kept files to the controller (``ansible.builtin.fetch``, unpacked there),
        then remove the run's ARF directory from the host; event ``arf_fetched``."""
        if self.folder is None:
            return
        executor = TaskListExecutor(self.ctx.session, self.ctx.task_vars, trusted=False)
        local = os.path.join(self.ctx.opts.run_dir, "arf")
        errors = []
        for name in ("before", "after"):
            gz = os.path.join(local, "%s-%s.xml.gz" % (self.ctx.host, name))
            try:
                got = executor.run_loop_action(FETCH_ACTION, {"src": "%s/%s.xml.gz" % (self.folder, name), "dest": gz,
                                                              "flat": True, "fail_on_missing": True},
                                               task_name="Fetch the %s scan's ARF" % name)
            except AnsibleError as exc:
                got = {"failed": True, "msg": str(exc)}
            if got.get("failed"):
                errors.append("%s: %s" % (name, str(got.get("msg"))[-300:]))
                continue
            try:
                HR.gunzip(gz, gz[:-3])
            except OSError as exc:
                errors.append("%s: %s" % (name, exc))
                continue
            self.record[name] = os.path.relpath(gz[:-3], self.ctx.opts.run_dir)
        if errors:
            self.record["error"] = "; ".join(errors)
        self.ctx.emit("arf_fetched", **self.record)
        self._module("ansible.builtin.file", {"path": self.folder, "state": "absent"})  # left: a rerun overwrites it

    def _module(self, name: str, args: dict) -> dict:
        try:
            return self.ctx.session.execute_module(name, args)
        except AnsibleError as exc:
            return {"failed": True, "msg": str(exc)}


def rule_messages(path: str | None, rule_ids: t.Collection[str]) -> dict[str, str]:
    """{full rule id: its rule-result's ``message`` texts, joined} for ``rule_ids`` in the
    ARF file at ``path`` (the last TestResult's; none for a rule without messages). Never
    raises: a missing or unreadable file gives {} (the report then says why in its own words)."""
    if not path or not rule_ids or not os.path.isfile(path):
        return {}
    from lxml import etree
    wanted, out = set(rule_ids), {}
    try:
        for _event, elem in etree.iterparse(path, events=("end",), tag="{%s}rule-result" % XCCDF, huge_tree=True):
            rule = elem.get("idref")
            if rule in wanted:
                texts = [" ".join((m.text or "").split()) for m in elem.iter("{%s}message" % XCCDF)]
                if any(texts):
                    out[rule] = " | ".join(x for x in texts if x)[:300]
            elem.clear()
    except (OSError, etree.LxmlError):
        return out
    return out
