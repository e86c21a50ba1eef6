"""What the agents are told about a rule: capped sections, target text fenced as data.

Seed 004 (DEF-28): the Worker guessed the scanner's contract from the rule's title while
the authoritative text sat in the datastream; so each prompt carries the rule's XCCDF
title, description and rationale (the description capped at 1,500 characters), its
identifiers, the profile's XCCDF Values, the failing OVAL evidence (what the check looked
for and what it collected on the host), the vendor fix and why it failed, and this rule's
attempts and reflections so far.

Every section has a cap in characters and is built on its own: one that fails to build is
left out and named in ``skipped`` (the caller logs it), never fatal. Text that comes from
the host (OVAL items, probe output) or from the content is wrapped by :func:`fence` into a
``<data>`` element that the prompts call data, never instructions; a ``<data`` or ``</data``
inside it is defused so it cannot close the fence. Secrets are redacted later, from every
message, by the LLM client.
"""

from __future__ import annotations

import dataclasses
import re
import typing as t

import yaml

from ansible_collections.scapforge.remediation.plugins.module_utils import oval_evidence
from ansible_collections.scapforge.remediation.plugins.plugin_utils import ledger

#: characters per section (seed 004: the description at 1,500).
CAPS = {
    "rule": 2400,
    "description": 1500,
    "values": 600,
    "evidence": 6000,
    "criteria": 1500,
    "files": 4500,
    "vendor_fix": 2500,
    "history": 6000,
    "probes": 4000,
    "probe": 1500,         # one probe's output in the history of an earlier attempt
    "history_probes": 2000,  # all of one earlier attempt's probes
    "attempt": 2500,
    "result": 1500,
}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_FENCE_TAG = re.compile(r"<(/?)(data)", re.IGNORECASE)
#: a task's ``tags:`` list (its items at the key's own indentation), dropped from vendor fixes.
_TAGS = re.compile(r"\n(?P<indent>[ ]*)tags:\n(?:(?P=indent)[ ]*- .*\n)+")


@dataclasses.dataclass
class Section:
    """One part of a prompt: ``name`` (a slug, used in events), ``title`` (shown to the
    model), ``text`` (already capped and fenced)."""

    name: str
    title: str
    text: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def cap(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, with a marker saying how much was cut."""
    text = str(text or "")
    if len(text) <= limit:
        return text
    marker = "\n[... %d characters cut]" % (len(text) - limit)
    return text[: max(0, limit - len(marker))] + marker


def fence(text: str, source: str, name: str) -> str:
    """Wrap host or content text as data: control characters (but newline and tab) removed,
    any ``<data``/``</data`` inside defused, then ``<data source=... name=...>...</data>``.
    ``source`` is ``target`` (read on the host) or ``content`` (the SCAP datastream)."""
    clean = _CONTROL.sub("", str(text or ""))
    clean = _FENCE_TAG.sub(lambda m: "<" + m.group(1) + "_" + m.group(2), clean)
    return '<data source="%s" name="%s">\n%s\n</data>' % (source, name, clean)


def _yaml(value: t.Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=False, allow_unicode=True, width=120).strip()


# ----------------------------------------------------------------------------- parts
def rule_text(catalog, rule_id: str, profile_id: str) -> str:
    """Title, identifiers, description (profile's values filled in, capped at 1,500) and
    rationale of a rule, fenced as content."""
    rule = catalog.rule(rule_id)
    ids = ["%s: %s" % (k.upper(), ", ".join(v)) for k, v in rule.identifiers.items() if v]
    text = "\n".join([
        "Title: %s" % rule.title,
        "Severity: %s" % rule.severity,
        "Identifiers: %s" % ("; ".join(ids) or "none"),
        "Description: %s" % cap(catalog.describe(rule_id, profile_id), CAPS["description"]),
        "Rationale: %s" % cap(rule.rationale, 600),
    ])
    return fence(cap(text, CAPS["rule"]), "content", "rule")


def values_text(catalog, rule_id: str, profile_id: str) -> str | None:
    """``var = value`` for each XCCDF Value the rule uses, under the profile; None if none."""
    lines = ["%s = %s" % item for item in catalog.rule_values(rule_id, profile_id).items()]
    return cap("\n".join(lines), CAPS["values"]) if lines else None


def _criteria_lines(node: dict, depth: int, detailed: set, out: list[str]) -> None:
    pad = "  " * depth
    neg = "NOT " if node.get("negate") else ""
    if "test" in node:
        shown = " (shown below)" if node["test"] in detailed else ""
        out.append("%s- %stest %s: %s%s" % (pad, neg, node["test"], node.get("result"), shown))
    elif "definition" in node:
        out.append("%s- %sextend_definition %s (%s): %s" % (
            pad, neg, node["definition"], node.get("title") or "", node.get("result")))
        if node.get("criteria"):
            _criteria_lines(node["criteria"], depth + 1, detailed, out)
    else:
        out.append("%s- %s%s: %s" % (pad, neg, node.get("operator", "AND"), node.get("result")))
        for child in node.get("nodes") or []:
            _criteria_lines(child, depth + 1, detailed, out)
        if node.get("more"):
            out.append("%s  - [%d more node(s) not shown]" % (pad, node["more"]))


def criteria_text(evidence: dict) -> str | None:
    """The definition's criteria tree, one node a line: operator (AND/OR), NOT, each node's
    result after its NOT; tests detailed below are marked."""
    tree = evidence.get("criteria")
    if not tree:
        return None
    lines: list[str] = []
    _criteria_lines(tree, 0, {t.get("id") for t in evidence.get("tests") or []}, lines)
    return cap("\n".join(lines), CAPS["criteria"])


def found_text(test: dict, files: dict) -> str:
    """What the test's object found on the host, in words: a missing file told apart from a
    file where nothing matched (``files``: oscap_eval's facts of the files the check reads)."""
    obj = test.get("object") or {}
    flag = obj.get("flag")
    items = len(test.get("items") or []) + int(test.get("items_left_out") or 0)
    if flag == "does not exist":
        said = []
        for path in oval_evidence.check_paths({"tests": [test]}):
            facts = files.get(path)
            if not facts:
                continue
            if facts.get("exists") is False:
                said.append("the file %s does not exist" % path)
            elif facts.get("exists"):
                said.append("%s exists (%s, %s bytes) but nothing in it matched the object" % (
                    path, facts.get("type"), facts.get("size")))
        return "; ".join(said) or "no item on the host matched the object (flag: does not exist)"
    if flag == "complete":
        failed = sum(1 for i in test.get("items") or [] if i.get("result") not in (None, "true"))
        return "%d item(s) collected%s" % (items, (", %d shown failed the state" % failed) if failed else "")
    if flag in ("error", "incomplete", "not collected", "not applicable"):
        return "the object was %s%s" % ("collected with an error" if flag == "error" else flag,
                                        (": " + obj["message"]) if obj.get("message") else "")
    return "oscap did not collect the object (the test was not evaluated)" if flag is None else "flag %s" % flag


def _trimmed(tests: list, level: int, files: dict) -> list:
    """Copies of the tests with what they found in words; level 1 keeps one item per test,
    level 2 none (items go before tests: issue 18)."""
    out = []
    for test in tests:
        copy = dict(test)
        copy["found"] = found_text(test, files)
        items = list(test.get("items") or [])
        keep = len(items) if level == 0 else (1 if level == 1 else 0)
        if len(items) > keep:
            copy["items_left_out"] = len(items) - keep + int(test.get("items_left_out") or 0)
        copy["items"] = items[:keep]
        out.append(copy)
    return out


def evidence_text(evidence: dict | None, limit: int | None = None) -> str | None:
    """The failing OVAL evidence of one rule (oscap_eval's ``evidence`` entry), fenced as target
    data: the definition and its result, its criteria tree, then the tests that decide it (object,
    expected state, what was found, collected items, variables traced to the file line they came
    from) as YAML. Within ``limit`` characters, collected items are dropped before tests, and
    tests from the last; what was left out is counted. None when there is none."""
    if not evidence:
        return None
    if evidence.get("error"):
        return fence("OVAL evidence unavailable: %s" % evidence["error"], "target", "oval_evidence")
    limit = limit or CAPS["evidence"]
    files = evidence.get("files") or {}
    head = "OVAL definition %s (%s): result %s" % (evidence.get("definition"), evidence.get("title", ""),
                                                   evidence.get("result"))
    tree = criteria_text(evidence)
    if tree:
        head += "\nCriteria (each node's result is after its NOT; 'not evaluated': oscap skipped it):\n" + tree
    tests = list(evidence.get("tests") or [])
    notes = []
    if evidence.get("tests_left_out"):
        notes.append("(%d more test(s) of the definition left out by the scan's size cap)" % evidence["tests_left_out"])
    if evidence.get("truncated"):
        notes.append("(evidence truncated)")
    text = ""
    for level in (0, 1, 2):
        body = _yaml({"tests": _trimmed(tests, level, files)})
        text = "\n".join([head, body] + notes)
        if len(text) <= limit:
            return fence(text, "target", "oval_evidence")
    shown = _trimmed(tests, 2, files)
    while len(shown) > 1:
        dropped = shown.pop()
        notes.insert(0, "(test %s not shown: no room)" % dropped.get("id"))
        text = "\n".join([head, _yaml({"tests": shown})] + notes)
        if len(text) <= limit:
            break
    return fence(cap(text, limit), "target", "oval_evidence")


def files_text(evidence: dict | None) -> str | None:
    """The files the rule's check reads, as they are on the host now: missing, or type, size,
    mode, owner and (small text files) their content; None when the scan described none."""
    files = (evidence or {}).get("files") or {}
    parts = []
    for path, facts in files.items():
        if facts.get("exists") is False:
            parts.append("%s: does not exist%s" % (path, " (a dangling link)" if facts.get("dangling_link") else ""))
            continue
        if facts.get("exists") is None:
            parts.append("%s: cannot be read: %s" % (path, facts.get("error")))
            continue
        line = "%s: %s, %s bytes, mode %s, %s:%s" % (
            path, facts.get("type"), facts.get("size"), facts.get("mode"), facts.get("owner"), facts.get("group"))
        if facts.get("link"):
            line += ", a link to %s" % facts["link"]
        if "content" in facts:
            if facts.get("content_note"):
                line += " (%s)" % facts["content_note"]
            line += "\n" + (cap(facts["content"], 4000) if facts["content"] else "(empty)")
        elif facts.get("names") is not None:
            line += "\nentries: %s" % (", ".join(facts["names"]) or "(none)")
            if facts.get("names_left_out"):
                line += " and %d more" % facts["names_left_out"]
        elif facts.get("content_omitted"):
            line += " (content not shown: %s)" % facts["content_omitted"]
        parts.append(line)
    if not parts:
        return None
    return fence(cap("\n\n".join(parts), CAPS["files"]), "target", "check_files")


def probes_text(outputs: t.Sequence[str], limit: int, each: int | None = None) -> str:
    """Probe outputs (oldest first) within ``limit`` characters: the newest kept whole (up to
    ``each`` characters, or ``limit``), then each older one in what room is left, cut from its
    end; those with no room left are counted, not shown (case: a 3.7 KB file read first cut a
    later, more telling ``find`` to 120 characters)."""
    kept: list[str] = []
    room = limit
    for number, output in enumerate(reversed(list(outputs))):
        part = cap(output, min(room, each or room))
        if number and len(part) < min(len(output), 120):  # too little left to say anything
            kept.append("[%d earlier probe(s) not shown]" % (len(outputs) - number))
            break
        kept.append(part)
        room -= len(part) + 2
        if room <= 0 and number + 1 < len(outputs):
            kept.append("[%d earlier probe(s) not shown]" % (len(outputs) - number - 1))
            break
    return "\n\n".join(reversed(kept))


def _task_results(attempt, msg_limit: int = 200, telling: bool = False) -> list[str]:
    """``- <task> (<module>) <changed,failed,...|ok>: <message>`` for each task that ran
    (``telling``: only those that changed or failed, then a count of the others)."""
    lines = []
    results = (attempt.report or {}).get("task_results") or []
    if telling:
        quiet = [r for r in results if not (r.get("changed") or r.get("failed"))]
        results = [r for r in results if r.get("changed") or r.get("failed")]
    for res in results:
        flags = [k for k in ("changed", "failed", "skipped", "ignored", "check_mode") if res.get(k)]
        lines.append("- %s (%s) %s%s" % (res.get("name"), res.get("module"), ",".join(flags) or "ok",
                                         (": " + cap(res["msg"], msg_limit)) if res.get("msg") else ""))
        if res.get("journal"):
            lines.append("  the unit's journal, last lines:\n%s" % cap(str(res["journal"]), 800))
        if res.get("stdout"):
            lines.append("  its output:\n%s" % cap(str(res["stdout"]), 400))
    if telling and quiet:
        lines.append("- %d other task(s) changed nothing" % len(quiet))
    return lines


def changes_text(attempt) -> list[str]:
    """``- <kind> <target>: <change>, <kept|undone (verified)|LEFT on the host>`` for each
    change the attempt made (the change ledger's entries), so the next call knows what a
    failed attempt installed or wrote and whether its restore took it back."""
    lines = []
    pulled_in: dict[str, list[str]] = {}
    for entry in ledger.attempt_ledger("", attempt):
        state = str(entry.get("state"))
        said = {"kept": "kept", "undone": "undone" + (" (verified)" if entry.get("verified") else " (NOT verified)"),
                "left": "LEFT on the host (no restore undid it)"}.get(state, state)
        if entry.get("change") == ledger.DEPENDENCY:  # aide brings 18 packages: one line, not 18
            pulled_in.setdefault(said, []).append(str(entry.get("target")))
            continue
        lines.append("- %s %s: %s, %s" % (entry.get("kind"), entry.get("target"), entry.get("change"), said))
    for said, names in pulled_in.items():
        lines.append("- %d package(s) installed with them (%s), %s" % (len(names), cap(", ".join(names), 200), said))
    return lines


def attempt_text(attempt, with_tasks: bool = True) -> str:
    """One attempt: verdict, reason, detail, the Worker's rationale, its probes with what they
    showed (capped), the tasks (YAML) and what each did, the reflection."""
    lines = ["Attempt %d (%s): %s, reason %s" % (attempt.number, attempt.source, attempt.verdict, attempt.reason)]
    if attempt.plan and attempt.source == "worker":
        lines.append("Plan in force: %s" % cap(attempt.plan, 900))
    if attempt.detail:
        lines.append("What happened: %s" % cap(attempt.detail, 500))
    if attempt.rationale:
        lines.append("The Worker's rationale: %s" % cap(attempt.rationale, 300))
    results = list(attempt.probe_results)
    if results:
        lines.append("Probes and what they showed:\n%s" % probes_text(results, CAPS["history_probes"], CAPS["probe"]))
    elif attempt.probes:
        lines.append("Probes asked: %s" % "; ".join(attempt.probes)[:300])
    if with_tasks and attempt.tasks:
        lines.append("Tasks:\n%s" % cap(_yaml(attempt.tasks) if not isinstance(attempt.tasks, str) else attempt.tasks, 900))
    ran = _task_results(attempt)
    if with_tasks and ran:
        lines.append("What each task did:\n%s" % cap("\n".join(ran), 1200))
    changed = changes_text(attempt)
    if changed:
        lines.append("What it changed on the host:\n%s" % cap("\n".join(changed), 500))
    if attempt.rolled_back is not None:
        lines.append("Rolled back: %s" % ("yes, restore verified" if attempt.rolled_back else "NO"))
    if attempt.reflection:
        ref = attempt.reflection
        lines.append("Reflection: %s" % cap(ref.get("diagnosis", ""), 500))
        lesson = ref.get("lesson") or {}
        if lesson:
            lines.append("Lesson: when %s -> %s" % (cap(lesson.get("cue", ""), 400), cap(lesson.get("action", ""), 400)))
    return "\n".join(lines)


def history_text(item, limit: int = CAPS["history"]) -> str | None:
    """This rule's finished attempts so far, oldest first (the one in progress is not history:
    its probes are their own section); when over ``limit`` the oldest are dropped."""
    parts = [attempt_text(a, with_tasks=a.source == "worker") for a in item.attempts if a.verdict]
    if not parts:
        return None
    kept: list[str] = []
    size = 0
    for part in reversed(parts):
        if kept and size + len(part) > limit:
            kept.append("[%d earlier attempt(s) not shown]" % (len(parts) - len(kept)))
            break
        kept.append(cap(part, limit))
        size += len(part)
    return fence("\n\n".join(reversed(kept)), "target", "history")


def vendor_text(catalog, rule_id: str, profile_id: str, item) -> str | None:
    """The content's own Ansible fix and what it did (attempt 1), or a note that there is none."""
    rule = catalog.rule(rule_id)
    if rule.ansible_fix is None:
        return "The SCAP content has no Ansible fix for this rule."
    fix = catalog.render_fix(rule_id, profile_id)
    fix = _TAGS.sub("\n", fix + "\n")  # the NIST/severity tags say nothing here
    vendor = next((a for a in item.attempts if a.source == "vendor"), None)
    if vendor is None:
        return fence(cap(fix, CAPS["vendor_fix"] - 700) + "\nIt has not run.", "content", "vendor_fix")
    what = ["It ran as attempt 1: %s, reason %s. %s" % (vendor.verdict, vendor.reason, vendor.detail)]
    ran = _task_results(vendor, msg_limit=150, telling=True)
    if ran:
        what.append("What each of its tasks did:\n" + "\n".join(ran))
    if vendor.rolled_back is not None:
        what.append("Rolled back: %s" % ("yes, restore verified" if vendor.rolled_back else "NO"))
    changed = changes_text(vendor)
    if changed:
        what.append("What it changed on the host:\n" + "\n".join(changed))
    return fence(cap(fix, CAPS["vendor_fix"] - 1200) + "\n" + cap("\n".join(what), 1200), "content", "vendor_fix")


def reasoning_text(attempt) -> str | None:
    """The Worker's rationale and its probes' results for the attempt, fenced (the probes
    read the host); None when it gave neither."""
    results = list(attempt.probe_results or [])
    if not attempt.rationale and not results:
        return None
    text = "Rationale: %s" % (cap(attempt.rationale, 500) or "(none given)")
    if results:
        text += "\nProbes and what they showed:\n%s" % probes_text(results, CAPS["probes"] - 600, CAPS["probe"])
    return fence(text, "target", "worker_reasoning")


def report_text(attempt) -> str:
    """What ran in an attempt: each task's name, module, changed/failed and message."""
    report = attempt.report or {}
    if attempt.gate:
        return "Refused before anything ran: %s" % cap(attempt.gate, 1200)
    lines = _task_results(attempt, msg_limit=CAPS["result"])
    if report.get("failed_task"):
        lines.append("First failed task: %s: %s" % (report["failed_task"], report.get("error")))
    lines.append("OpenSCAP result after the attempt: %s" % attempt.result)
    return fence(cap("\n".join(lines), CAPS["result"]), "target", "execution")


# ----------------------------------------------------------------------------- sections
def build(parts: t.Sequence[tuple[str, str, t.Callable[[], str | None]]]) -> tuple[list[Section], list[str]]:
    """Build sections from ``(name, title, builder)``; a builder returning None adds
    nothing, one that raises is skipped and named as ``"name: error"`` in the second list."""
    sections: list[Section] = []
    skipped: list[str] = []
    for name, title, builder in parts:
        try:
            text = builder()
        except Exception as exc:  # one bad section must not cost the attempt (seed 004)
            skipped.append("%s: %s: %s" % (name, type(exc).__name__, str(exc)[:200]))
            continue
        if text:
            sections.append(Section(name, title, text))
    return sections, skipped


def lessons_text(block: str | None) -> str | None:
    """The memory's block of selected lessons (``memory.selection.render``: already capped at
    1,800 characters and headed as prior outcomes, not instructions), fenced: its cues and
    actions quote errors read on hosts."""
    return fence(block, "memory", "lessons") if block else None


def _rule_sections(catalog, rule_id: str, profile_id: str, item, evidence: dict | None) -> list:
    """What both agents read first: the rule, its Values, why OpenSCAP fails it, the content's fix."""
    return [
        ("rule", "The rule (XCCDF, from the SCAP content)", lambda: rule_text(catalog, rule_id, profile_id)),
        ("values", "XCCDF Values of the profile for this rule", lambda: values_text(catalog, rule_id, profile_id)),
        ("evidence", "Why OpenSCAP fails the rule now (OVAL evidence from the host)", lambda: evidence_text(evidence)),
        ("files", "The files the rule's check reads, as they are on the host now", lambda: files_text(evidence)),
        ("vendor_fix", "The content's own fix", lambda: vendor_text(catalog, rule_id, profile_id, item)),
    ]


def worker_sections(catalog, rule_id: str, profile_id: str, item, evidence: dict | None,
                    probe_outputs: t.Sequence[str], lessons: str | None = None) -> tuple[list[Section], list[str]]:
    """The Worker's sections: rule text, Values, OVAL evidence, vendor fix, history, lessons
    from earlier runs and hosts (seed 000 fixes 2-5), probes."""
    return build(_rule_sections(catalog, rule_id, profile_id, item, evidence) + [
        ("history", "Attempts on this rule so far", lambda: history_text(item)),
        ("lessons", "What earlier runs on hosts like this one proved", lambda: lessons_text(lessons)),
        ("probes", "Probe results (read on the host for you)",
         lambda: fence(probes_text(probe_outputs, CAPS["probes"]), "target", "probes") if probe_outputs else None),
    ])


def architect_sections(catalog, rule_id: str, profile_id: str, item, evidence: dict | None,
                       lessons: str | None = None) -> tuple[list[Section], list[str]]:
    """The Architect's sections: rule text, Values, OVAL evidence, vendor fix, every attempt
    and reflection (seed 001: the full episodic memory of this rule), lessons from earlier runs."""
    return build(_rule_sections(catalog, rule_id, profile_id, item, evidence) + [
        ("history", "Every attempt and reflection so far", lambda: history_text(item)),
        ("lessons", "What earlier runs on hosts like this one proved", lambda: lessons_text(lessons)),
    ])


def reflector_sections(catalog, rule_id: str, profile_id: str, item, attempt) -> tuple[list[Section], list[str]]:
    """The Reflector's sections: rule text, the failed attempt's tasks and what ran, the OVAL
    evidence after it, and the earlier attempts."""
    earlier = [a for a in item.attempts if a is not attempt]
    return build([
        ("rule", "The rule (XCCDF, from the SCAP content)", lambda: rule_text(catalog, rule_id, profile_id)),
        ("attempt", "The failed attempt's tasks",
         lambda: cap(_yaml(attempt.tasks) if attempt.tasks and not isinstance(attempt.tasks, str) else str(attempt.tasks or "(none)"),
                     CAPS["attempt"])),
        ("reasoning", "Why the Worker wrote them, and what its probes showed", lambda: reasoning_text(attempt)),
        ("result", "What happened when it ran", lambda: report_text(attempt)),
        ("evidence", "OVAL evidence after the attempt", lambda: evidence_text(attempt.evidence)),
        ("files", "The files the rule's check reads, after the attempt", lambda: files_text(attempt.evidence)),
        ("history", "Earlier attempts",
         lambda: history_text(type(item)(rule=item.rule, attempts=earlier)) if earlier else None),
    ])


def sizes(sections: t.Sequence[Section]) -> dict:
    """{section name: characters} for the ``llm_call`` event (what was sent, by size)."""
    return {s.name: len(s.text) for s in sections}
