"""OSCAL assessment results of a run: ``oscal/assessment-results.json`` (issue 20 item 4).

Built and validated with compliance-trestle's OSCAL models (``trestle.oscal``; pydantic
validates every field as it is built, and the file is written by trestle's own serializer).
One ``result`` per host: one ``observation`` per rule the scans evaluated (its final OpenSCAP
result, the baseline's, and the run's outcome and reason as ``props``; the ARF results as
relevant evidence; the host as subject), a ``finding`` for each rule that still fails (target
the rule, state ``not-satisfied``, its observation related), and the change ledger (what the
run left changed on the host, :func:`host_summary.changes`) as ``tasks`` of the result's local
definitions, which the observations of the rules they fixed name as related tasks.

There is no OSCAL assessment plan behind a SCAP profile: ``import-ap`` points at the run's
``summary.json`` and says so.
"""

from __future__ import annotations

import datetime
import os
import typing as t
import uuid

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_report as HR
from ansible_collections.scapforge.remediation.plugins.plugin_utils import host_summary as HS

try:
    from trestle.oscal import assessment_results as ar
    from trestle.oscal import common
except ImportError:
    deps.missing("compliance-trestle")

FOLDER = "oscal"
FILE_NAME = "assessment-results.json"
#: the namespace of scapforge's own props (OSCAL: a URI naming who defines the names).
NS = "https://github.com/scapforge/remediation/oscal"
#: uuid5 namespace: the same run, host and rule give the same ids.
NAMESPACE = uuid.UUID("3c7e8f5a-2b9d-4a61-8e0f-5d1c2b3a4f60")


def _id(*parts: t.Any) -> str:
    return str(uuid.uuid5(NAMESPACE, " ".join(str(p) for p in parts)))


def _prop(name: str, value: t.Any) -> "common.Property":
    return common.Property(name=name, value=str(value), ns=NS)


def _time(value: str | None) -> datetime.datetime:
    """An aware datetime from an ISO time or a run id (``20261201T225016Z-0523``); now else."""
    for text, fmt in ((value or "", None), ((value or "")[:16], "%Y%m%dT%H%M%SZ")):
        try:
            parsed = datetime.datetime.fromisoformat(text) if fmt is None else datetime.datetime.strptime(text, fmt)
        except ValueError:
            continue
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)
    return datetime.datetime.now(datetime.timezone.utc)


def _result(run_id: str, host: str, report: HR.HostReport, generated: datetime.datetime) -> "ar.Result":
    rules, rows = report.get("rules") or {}, report.get("scan_results") or {}
    item = common.InventoryItem(uuid=_id(run_id, host, "host"), description="the host %s" % host,
                                props=[common.Property(name="fqdn", value=host)])
    tool = ar.SystemComponent(uuid=_id(run_id, "oscap"), type="software", title="OpenSCAP %s" % (
        (report.get("content") or {}).get("oscap_version") or ""), description="the SCAP scanner that judged every rule",
        status=common.Status(state="operational"))
    subject = common.SubjectReference(subject_uuid=item.uuid, type="inventory-item", title=host)
    tasks, task_of = [], {}
    for entry in HS.changes(report):
        task = common.Task(uuid=_id(run_id, host, entry["rule"], "attempt", entry["attempt"]), type="action",
                           title="%s: attempt %s (%s) changed the host" % (entry["rule"], entry["attempt"], entry["source"]),
                           description="Outcome %s. Tasks:\n%s" % (entry["outcome"], entry["tasks"] or "(not recorded)"),
                           props=[_prop("rule", entry["rule"]), _prop("outcome", entry["outcome"])] + [
                               _prop("changed-task", c) for c in entry["changed_tasks"]],
                           subjects=[common.AssessmentSubject(type="inventory-item", include_subjects=[
                               common.SelectSubjectById(subject_uuid=item.uuid, type="inventory-item")])],
                           remarks="\n".join(d.get("diff") or "" for d in entry["diffs"]) or None)
        tasks.append(task)
        task_of.setdefault(entry["rule"], []).append(task.uuid)
    arf = report.get("arf") or {}
    evidence = [common.RelevantEvidence(href=arf[w], description="ARF results of the %s scan" % (
        "baseline" if w == "before" else "final")) for w in ("before", "after") if arf.get(w)]
    observations, findings = [], []
    for short, row in sorted(rows.items()):
        final = HR.final_result(row) or "notselected"
        rule = rules.get(short) or {}
        props = [_prop("rule-id", short), _prop("result", final), _prop("severity", row.get("severity") or "unknown")]
        if row.get("before"):
            props.append(_prop("baseline-result", row["before"]))
        if rule:
            props += [_prop("outcome", rule.get("outcome")), _prop("reason", rule.get("reason")),
                      _prop("attempts", rule.get("attempts") or 0)]
        origin = common.Origin(actors=[common.OriginActor(type="tool", actor_uuid=tool.uuid)],
                               related_tasks=[common.RelatedTask(task_uuid=u) for u in task_of.get(short, ())] or None)
        observation = ar.Observation(
            uuid=_id(run_id, host, short, "observation"), title=short, description=row.get("title") or short,
            props=props, methods=["TEST"], types=["finding" if final == "fail" else "control-objective"],
            origins=[origin], subjects=[subject], relevant_evidence=evidence or None, collected=generated,
            remarks=(rule.get("detail") or None) if rule else None)
        observations.append(observation)
        if final == "fail":
            state_reason = "%s/%s" % (rule.get("outcome"), rule.get("reason")) if rule else "no outcome"
            findings.append(common.Finding(
                uuid=_id(run_id, host, short, "finding"), title="%s fails on %s" % (short, host),
                description="%s: OpenSCAP reports fail in the %s scan; scapforge: %s." % (
                    row.get("title") or short, "final" if row.get("after") else "baseline", state_reason),
                target=common.FindingTarget(type="objective-id", target_id=short,
                                            status=common.ObjectiveStatus(state="not-satisfied", remarks=state_reason)),
                related_observations=[ar.RelatedObservation(observation_uuid=observation.uuid)]))
    profile = report.get("profile") or "?"
    content = report.get("content") or {}
    return ar.Result(
        uuid=_id(run_id, host, "result"), title="%s: %s" % (host, profile.split("_profile_", 1)[-1]),
        description="scapforge run %s on %s: profile %s of SCAP Security Guide %s (datastream sha256 %s)" % (
            run_id, host, profile, content.get("benchmark_version") or "?", content.get("sha256") or "?"),
        start=_time(run_id), end=generated,
        props=[_prop("profile", profile), _prop("check-mode", "true" if report.get("check_mode") else "false")],
        local_definitions=ar.LocalDefinitions1(components=[tool], inventory_items=[item], tasks=tasks or None),
        reviewed_controls=common.ReviewedControls(control_selections=[common.ControlSelection(include_all=common.IncludeAll())]),
        observations=observations or None, findings=findings or None,
        remarks=("Stopped: %s" % report["stopped"]) if report.get("stopped") else None)


def build(hosts: t.Mapping[str, HR.HostReport], run_id: str, generated: str | None = None) -> "ar.AssessmentResults":
    """The assessment results of a run (hosts whose run could not start have no result)."""
    when = _time(generated)
    results = [_result(run_id, host, report, when) for host, report in sorted(hosts.items()) if not report.get("error")]
    metadata = common.Metadata(title="scapforge run %s" % run_id, last_modified=when, version=run_id,
                               oscal_version=ar.OSCAL_VERSION)
    return ar.AssessmentResults(
        uuid=_id(run_id, "assessment-results"), metadata=metadata,
        import_ap=ar.ImportAp(href="../summary.json", remarks="No OSCAL assessment plan: the plan is the SCAP "
                              "profile each result names."),
        results=results or [ar.Result(uuid=_id(run_id, "empty"), title="no host report", description="no host ran",
                                      start=when, reviewed_controls=common.ReviewedControls(
                                          control_selections=[common.ControlSelection(include_all=common.IncludeAll())]))])


def write(run_dir: str, hosts: t.Mapping[str, HR.HostReport], run_id: str, generated: str | None = None) -> str:
    """Write ``<run_dir>/oscal/assessment-results.json`` (trestle's serializer, atomically);
    returns its path. Raises OSError."""
    folder = os.path.join(run_dir, FOLDER)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, FILE_NAME)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(build(hosts, run_id, generated).oscal_serialize_json(pretty=True, wrapped=True))
    os.replace(tmp, path)
    return path
