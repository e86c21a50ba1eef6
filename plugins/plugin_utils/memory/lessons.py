"""Evidence-gated lessons: their document shapes, deterministic extraction, idempotent recording.

A lesson says what earlier attempts on hosts like this one proved; it is stored only with a
cue, an action and at least one evidence row (seed 002's admission rule, after the harness2
Library), and it never carries a model's guess as a fact: Reflector lessons are
``candidate`` until an outcome confirms them. Kinds (issue 6):

- ``positive``: a fix that verified (OpenSCAP pass); ``tasks`` holds the task list that did it.
- ``negative``: an approach that failed, with its cause (a task error, a gate refusal, a fix
  OpenSCAP still failed, a fix that cut the login), or a Reflector lesson.
- ``caution``: the environment, not the fix, stops the rule (``environment:<kind>``); ``reason``
  holds the outcome reason to reuse, so the loop can classify such a rule at once. When an
  agent's answer gave the reason (a ``cannot_fix``, or an ESCALATE that named the environment:
  the rule entry's ``declared_by``), the caution is a ``candidate`` scoped to that rule: shown
  to later prompts, and acted on for that rule alone (``selection.decide``) once its evidence
  holds ``selection.RULE_CAUTION_SUPPORT`` work items (one: the next run ends the rule at once).
  A ``cannot_fix`` attempt, or any attempt that ended with an ``environment:<kind>`` reason, is
  no failure of the rule's fix: it gives no negative and no Reflector lesson.

Only evidence about the rule on the host teaches (issue 19 item 1): an attempt that is an
event of the loop (:func:`is_event`: an unusable or non-JSON answer, a transport error, a
budget stop, ``needs_human``, a gate protocol error, a condition of the moment) gives no
lesson of any kind, whatever its message says.

Scope, which failures are rule-specific (the answer decides what merges across rules):

- Rule-specific (``scope.rule`` = the short rule id): everything OpenSCAP judged about the
  rule (a verified fix; a fix that ran cleanly and still fails: ``fix_ineffective``,
  ``no_effect``), a fix that broke the fresh login (``unhealthy``), the content's own fix
  refused or failing with a message we cannot recognise as a task-shape cause (we cannot show
  it recurs elsewhere), and Reflector lessons (written about one rule).
- Not rule-specific (``scope.rule`` null, ``scope.category`` null: the whole skill): a task
  error or gate refusal that matches a known task-shape cause in :data:`PATTERNS` (``set -o
  pipefail`` under dash, an unsupported module argument, a module that does not exist, a
  missing command, file, package or service), any gate refusal of model-written tasks (the
  gate judges the task text, whatever the rule), and environment classifications (a property
  of the host). The same cause on many rules is ONE lesson with one evidence row per rule and
  attempt (case llm-pipefail-under-dash: "recorded once, with evidence, not once per rule");
  seed 000 found 397 of 644 lessons saying the same thing about one broken RPM database.
  A Reflector lesson written after such a failure is folded into that lesson as a
  ``reflection`` evidence row instead of becoming one more per-rule lesson.

Texts are built to be stable across runs (the dedupe key hashes them): error messages go
through ``attempts.normalise`` (numbers, hex and quoted values blanked, as the plateau
detector does), other texts through :func:`stable_text` (timestamps, pids, line numbers and
Ansible temp paths removed), and every stored field is flattened to one line and capped.

Confirmation (exactly):

- ``confirmed`` at once: positive lessons from a ``verified`` outcome, caution lessons from an
  ``environment:<kind>`` outcome, and negative lessons from attempt records (each records
  what the executor or OpenSCAP observed, not an opinion).
- A Reflector lesson is a ``candidate``; it becomes ``confirmed`` when (1) a later attempt of
  the same work item passed (:func:`extract`, same run), or (2) in a later run it was shown
  for the rule it was written for and that rule was then remediated
  (``learning.reinforce``). Both add an ``outcome`` evidence row naming the work item.
  A model repeating itself is never confirmation (seed 000: 406 identical reflections).

Documents (TinyDB rows, see :class:`Lesson` and :class:`Evidence`) follow the memory contract;
this module adds ``rules`` to lessons (per rule seen in the evidence: the last reason, and the
reason, task digest and failing checks of its vendor attempt, derived from evidence rows like
``support``), ``scope.kind``/``scope.ids``, ``evidence`` and ``cause`` (:func:`derive`),
``pattern`` (the :data:`PATTERNS` slug, or null), ``credit`` and ``utility`` (set by the dream
pass), and ``rule``, ``attempt``, ``source``, ``reason``, ``tasks_sha``, ``checks``, ``missing``
to evidence rows.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import re
import typing as t
import unicodedata

from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils import outcomes, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError
from ansible_collections.scapforge.remediation.plugins.plugin_utils._policy import refusals as R

POSITIVE, NEGATIVE, CAUTION = "positive", "negative", "caution"
KINDS = (POSITIVE, NEGATIVE, CAUTION)
CANDIDATE, CONFIRMED, RETIRED = "candidate", "confirmed", "retired"
STATUSES = (CANDIDATE, CONFIRMED, RETIRED)
OUTCOME, ATTEMPT, REFLECTION = "outcome", "attempt", "reflection"
SOURCE_KINDS = (OUTCOME, ATTEMPT, REFLECTION)

#: starting weight of every lesson (seed 000 fix 1; weights only rank).
DEFAULT_WEIGHT = 0.5
#: confidence of a confirmed lesson and of a candidate (seed 004's 1.0 for a verified result,
#: 0.5 otherwise); the dream pass scales it by the category credit (learning.dream).
CONFIDENCE = {CONFIRMED: 1.0, CANDIDATE: 0.5, RETIRED: 0.5}
#: stored caps, in characters.
CUE_CHARS, ACTION_CHARS, DETAIL_CHARS, ERROR_CHARS = 300, 500, 300, 200
#: the fingerprint's keys (DESIGN decision 9): lab lessons never steer production hosts.
FINGERPRINT_KEYS = ("os", "os_version", "virtualization", "content_version", "skill")

#: modules that only read or bookkeep: left out of task summaries and of "followed" matching.
BOOKKEEPING_MODULES = frozenset({
    "ansible.builtin.package_facts", "ansible.builtin.service_facts", "ansible.builtin.set_fact",
    "ansible.builtin.debug", "ansible.builtin.assert", "ansible.builtin.fail", "ansible.builtin.meta",
    "ansible.builtin.stat", "ansible.builtin.find", "ansible.builtin.slurp", "ansible.builtin.setup",
    "ansible.builtin.getent",
})
#: arguments that say WHAT a task changes (the file, the key, the line, the unit, the value):
#: two tasks with the same module and the same values of these are the same change. Other
#: arguments (backup, validate, create, insertafter...) say how, and are not compared.
KEY_ARGS = ("path", "dest", "name", "key", "regexp", "line", "value", "state", "enabled", "src", "cmd",
            "_raw_params", "section", "option", "block", "replace", "content", "mode", "owner", "group")

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_VOLATILE = (
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"\b(pid|process|PID)[ =:]+\d+"), r"\1 <n>"),
    (re.compile(r"\[\d{2,}\]"), "[<n>]"),
    (re.compile(r"\b(line|Line|LINE)\s+\d+"), r"\1 <n>"),
    (re.compile(r"/[\w./-]*ansible-tmp-[\w.-]+(?:/[\w.-]+)*"), "<ansible-tmp>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{12,}\b"), "<hex>"),
)


class LessonError(ScapforgeError, ValueError):
    """A lesson or candidate that breaks the admission rule (seed 002): empty cue or action,
    no evidence row, an unknown kind, status or source kind."""

    kind = "lesson"


# ----------------------------------------------------------------------------- text
def clean_text(text: t.Any, cap: int) -> str:
    """``text`` as one line of at most ``cap`` characters: ANSI escape sequences and every
    control, format (bidi overrides, zero-width), line- and paragraph-separator character
    replaced by a space, whitespace collapsed, an ellipsis where it was cut."""
    raw = str(text if text is not None else "")[: cap * 4 + 64]  # a 10 kB field costs nothing more
    if "\x1b" in raw:
        raw = _ANSI.sub(" ", raw)
    if not raw.isprintable():  # the per-character pass only for text that needs it
        raw = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co") else ch for ch in raw)
    line = " ".join(raw.split())
    if len(line) > cap:
        line = line[: max(0, cap - 1)].rstrip() + "\u2026"
    return line


def stable_text(text: t.Any, cap: int) -> str:
    """:func:`clean_text` with what differs between two runs of the same event removed:
    timestamps, clock times, pids, ``line N``, Ansible temp paths, long hex ids."""
    line = clean_text(text, cap * 2)
    for pattern, repl in _VOLATILE:
        line = pattern.sub(repl, line)
    return clean_text(line, cap)


def _key_text(text: str) -> str:
    return " ".join(str(text).casefold().split())


def now_iso() -> str:
    """The current time, ISO 8601 UTC with microseconds (sorts as text)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ----------------------------------------------------------------------------- fingerprint
def fingerprint(facts: t.Mapping, content_version: str, skill: str) -> dict:
    """The environment a lesson holds for: {os, os_version, virtualization, content_version,
    skill} (DESIGN decision 9), from Ansible facts (``ansible_facts``, keys with or without
    the ``ansible_`` prefix).

    os: ``distribution`` lower-cased ("debian"); os_version: the major version ("12": point
    releases share their lessons, the content version is pinned separately); virtualization:
    ``virtualization_type`` lower-cased when ``virtualization_role`` is ``guest``
    ("systemd-nspawn", "kvm", "docker"), else "none" (bare metal or a hypervisor host);
    content_version: as given (the SSG benchmark version, e.g. "0.1.76"); skill: as given.
    A missing fact reads "unknown".
    """
    def fact(name: str) -> str:
        value = facts.get(name, facts.get("ansible_" + name)) if facts else None
        return str(value).strip() if value not in (None, "", "NA") else ""

    version = fact("distribution_major_version") or fact("distribution_version").split(".", maxsplit=1)[0]
    role, kind = fact("virtualization_role").lower(), fact("virtualization_type").lower()
    return {
        "os": fact("distribution").lower() or "unknown",
        "os_version": version or "unknown",
        "virtualization": (kind or "unknown") if role == "guest" else "none",
        "content_version": str(content_version or "unknown"),
        "skill": str(skill or "unknown"),
    }


def same_fingerprint(one: t.Mapping | None, two: t.Mapping | None) -> bool:
    """True when both fingerprints agree on every key of :data:`FINGERPRINT_KEYS`."""
    return bool(one) and bool(two) and all(one.get(k) == two.get(k) for k in FINGERPRINT_KEYS)


# ----------------------------------------------------------------------------- keys
def dedupe_key(kind: str, scope: t.Mapping, cue: str, action: str, fingerprint: t.Mapping) -> str:
    """sha256 (hex) over kind, scope (skill, category, rule), cue, action and fingerprint;
    cue and action compared case-folded with whitespace collapsed. The same lesson from many
    attempts, rules or hosts gets one key, hence one row with higher support (seed 002)."""
    data = [kind, [scope.get("skill"), scope.get("category"), scope.get("rule")], _key_text(cue),
            _key_text(action), [fingerprint.get(k) for k in FINGERPRINT_KEYS]]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()


def lesson_id(key: str) -> str:
    """``"L"`` + the first 12 hex digits of the dedupe key (stable across stores: merge relies on it)."""
    return "L" + key[:12]


def tasks_sha(tasks: t.Any) -> str | None:
    """The first 16 hex digits of the sha256 of a task list as canonical JSON (None for none)."""
    if not tasks:
        return None
    return hashlib.sha256(json.dumps(tasks, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


def _plain(value: t.Any) -> t.Any:
    """A JSON-plain deep copy (Ansible's tagged strings become str)."""
    return json.loads(json.dumps(value, default=str))


# ----------------------------------------------------------------------------- tasks
def iter_tasks(tasks: t.Any) -> t.Iterator[tuple[str, dict]]:
    """(canonical module FQCN, arguments) for each task of a list, blocks flattened, tasks
    that run in check mode (probes) left out. Modules are resolved as Ansible does
    (``task_gate.split_task`` / ``resolve_module``: ``sysctl`` -> its routed FQCN); a task
    the gate cannot split yields its first non-keyword key and no arguments."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import task_gate

    for ds in tasks or []:
        if not isinstance(ds, dict):
            continue
        if any(isinstance(ds.get(k), list) for k in ("block", "rescue", "always")):
            for k in ("block", "rescue", "always"):
                yield from iter_tasks(ds.get(k) or [])
            continue
        if ds.get("check_mode") is True:
            continue
        try:
            name, args, problem = task_gate.split_task(ds)
        except Exception:  # the gate's parser on text a model wrote: never fatal here
            name, args, problem = None, None, "unparsable"
        if name is None:
            name = next((str(k) for k in ds if k not in ("name", "when", "tags", "register")), "?")
        ref = task_gate.resolve_module(name) if name and name != "action" else None
        yield (ref.fqcn if ref else str(name)), (args if problem is None and isinstance(args, dict) else {})


def _arg_value(value: t.Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(sorted(_arg_value(v) for v in value))
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return " ".join(str(value).split())


def task_signature(tasks: t.Any) -> list[tuple[str, tuple]]:
    """What a task list changes: one (FQCN, ((key arg, value), ...)) per task that is not
    bookkeeping (:data:`BOOKKEEPING_MODULES`), with the :data:`KEY_ARGS` it sets, values
    whitespace-collapsed (lists sorted). Used for summaries and for "followed" (learning)."""
    out = []
    for fqcn, args in iter_tasks(tasks):
        if fqcn in BOOKKEEPING_MODULES:
            continue
        out.append((fqcn, tuple((k, _arg_value(args[k])) for k in KEY_ARGS if args.get(k) is not None)))
    return out


def summarise_tasks(tasks: t.Any, cap: int = 260) -> str:
    """``fqcn(k=v, ...); ...`` for the signature of a task list, each value cut at 60 characters."""
    parts = []
    for fqcn, args in task_signature(tasks):
        shown = ", ".join("%s=%s" % (k, clean_text(v, 60)) for k, v in args)
        parts.append("%s(%s)" % (fqcn, shown))
    return clean_text("; ".join(parts) or "no changing task", cap)


def _shell_without_bash(tasks: t.Any, needle: str) -> bool:
    for fqcn, args in iter_tasks(tasks):
        if fqcn.rsplit(".", 1)[-1] != "shell":
            continue
        text = "%s %s" % (args.get("_raw_params") or "", args.get("cmd") or "")
        if needle in text and "bash" not in str(args.get("executable") or ""):
            return True
    return False


# ----------------------------------------------------------------------------- patterns
@dataclasses.dataclass(frozen=True)
class Pattern:
    """A known task-shape cause: a task error matching ``regex``, or a gate refusal with
    ``code`` (:mod:`.._policy.refusals`), is not about the rule (see the module docstring).
    ``cue``/``action`` are format strings over the match's groups or the refusal's subject
    (cleaned, capped); ``violates(tasks)`` says whether executed tasks repeat the cause
    (learning's "followed"), None when it cannot be told. ``subject``: what each subject
    value must look like for the refusal to be this cause (as the regex would have read it)."""

    slug: str
    regex: re.Pattern | None
    cue: str
    action: str
    violates: t.Callable[[t.Any], bool] | None = None
    code: str | None = None
    subject: re.Pattern = re.compile(r"[\w.]*")

    def texts(self, match: re.Match) -> tuple[str, str]:
        return self.texts_of(match.groups())

    def texts_of(self, values: t.Sequence[str | None]) -> tuple[str, str]:
        groups = [clean_text(g or "", 80) for g in values]
        return self.cue.format(*groups), self.action.format(*groups)


#: Known task-shape causes read from messages. Sources: case llm-pipefail-under-dash (Debian's
#: /bin/sh is dash), case llm-command-warn-arg (the module's own "Unsupported parameters", which
#: the gate words the same), case llm-invented-module (read from the gate's code; the regex
#: reads a message without one), and the messages of ansible.builtin.lineinfile/replace, apt
#: and service for a missing file, package or unit.
PATTERNS: tuple[Pattern, ...] = (
    Pattern("dash_pipefail", re.compile(r"Illegal option -o pipefail"),
            'a shell task runs "set -o pipefail" and fails with "Illegal option -o pipefail"',
            "/bin/sh on this host is dash, which has no pipefail option: give the shell task "
            "args: executable: /bin/bash, or use a module instead of a shell pipeline",
            lambda tasks: _shell_without_bash(tasks, "pipefail")),
    Pattern("unsupported_parameters",
            re.compile(r"Unsupported parameters for \(([\w.]+)\) module: (\w+(?:, \w+)*)"),
            "module {0} refuses the argument(s) {1}",
            "{0} has no argument {1}: remove it and use only the module's documented options"),
    Pattern("unknown_module",
            re.compile(r"no module named '([\w.]+)' in this Ansible installation(?:; did you mean ([\w.]+)\?)?"),
            "a task names module {0}, which does not exist",
            "no such module in this Ansible installation; the module that exists: {1}", code=R.UNKNOWN_MODULE),
    Pattern("command_not_found", re.compile(r"(?:^|[\s:])([\w.+-]+): (?:command )?not found"),
            "a shell or command task calls {0}, which is not installed on this host",
            "install the package that provides {0} first, or reach the goal with a module"),
    Pattern("destination_missing", re.compile(r"Destination \S+ does not exist|Path \S+ does not exist"),
            'lineinfile/replace fails with "Destination ... does not exist"',
            "the file is missing on this host: create it first (lineinfile create: true, or a file/copy task)"),
    Pattern("no_package", re.compile(r"No package matching '?([^'\s]+)'? is available"),
            "installing package {0} fails: no package matching {0} is available",
            "{0} is not in this host's repositories: use the distribution's package name"),
    Pattern("no_service", re.compile(r"Could not find the requested service ([\w@.-]+)"),
            "service {0} does not exist on this host",
            "install the package that provides {0} before managing the service"),
)
#: Known causes only the gate gives: read from its refusal codes, never from its words.
GATE_PATTERNS: tuple[Pattern, ...] = (
    Pattern("not_allowlisted", None, "a model-written task uses module {0}",
            "the gate refuses {0} in model-written tasks: reach the same state with an allowed module",
            code=R.NOT_ALLOWLISTED),
    Pattern("jinja_untrusted", None, "a model-written task contains Jinja ({{{{ }}}} or {{% %}})",
            "the gate refuses templating in model-written tasks: write literal values", code=R.JINJA_UNTRUSTED),
)
#: attempt reasons that say what happened to the loop, not to the rule on the host (issue 19
#: item 1): the endpoint, an agent's word for a person, a budget. Events, never lessons.
EVENT_REASONS = frozenset({"llm_error", "llm_unavailable", "needs_human", "probe_budget", "attempt_budget",
                           "rule_time_budget", "rule_token_budget", "run_token_budget", "meta_plateau",
                           "architect_escalate", "budget", "host_stopped"})
#: gate codes about the answer's form, not about a task that could run: an answer that is not
#: YAML or not a task list, a bug of the gate. Events, never lessons (issue 19 item 1).
PROTOCOL_CODES = frozenset({R.BAD_STRUCTURE, R.PARSE_ERROR, R.GATE_ERROR})
PATTERNS_BY_SLUG = {p.slug: p for p in PATTERNS + GATE_PATTERNS}
PATTERNS_BY_CODE = {p.code: p for p in PATTERNS + GATE_PATTERNS if p.code}
#: what each pattern says is missing on the host (the cause's ``missing``: kind and name).
MISSING_KINDS = {"no_package": "package", "destination_missing": "file", "no_service": "service",
                 "command_not_found": "command"}
_MISSING_PATH = re.compile(r"(?:Destination|Path) (\S+) does not exist")
#: reasons of a failed fix whose cause a negative lesson keeps (issue 19 item 3).
CAUSED_REASONS = frozenset({"fix_ineffective", "no_effect", "fix_failed", "fix_refused", "unhealthy"})
#: evidence rows a lesson document lists (``evidence``); ``support`` counts them all.
EVIDENCE_LISTED = 20

#: caution texts per environment kind (safety.ENVIRONMENT_SIGNATURES, a skill's unfixable_on_running_host);
#: ``{virt}`` is the fingerprint's virtualization.
ENVIRONMENT_TEXTS = {
    "read_only_proc_sys": ("a fix sets kernel parameters (sysctl) on this {virt} host",
                           "it cannot pass here: /proc/sys is read-only, the kernel belongs to the machine "
                           "that runs the container; escalate with environment:read_only_proc_sys, do not retry"),
    "kernel_config": ("a kernel_config_* rule (an option the kernel was built with)",
                      "no fix on a running host can pass it: escalate with environment:kernel_config"),
    "partitioning": ("a partition_for_* rule (a separate file system for a directory)",
                     "no fix on a running host can pass it: escalate with environment:partitioning"),
    "sshd_privsep_dir_missing": ('sshd -t fails with "Missing privilege separation directory"',
                                 "/run/sshd is missing on this host (the environment, not the rule): "
                                 "escalate with environment:sshd_privsep_dir_missing"),
    "read_only_filesystem": ("a fix writes to a read-only file system on this {virt} host",
                             "it cannot pass here: escalate with environment:read_only_filesystem"),
    "no_systemd": ("a fix talks to systemd on this {virt} host, which was not booted with systemd",
                   "it cannot pass here: escalate with environment:no_systemd"),
}


def match_pattern(message: str | None) -> tuple[Pattern, re.Match] | None:
    """The first :data:`PATTERNS` entry whose regex is found in ``message``, with its match."""
    for pattern in PATTERNS:
        found = pattern.regex.search(message or "")
        if found:
            return pattern, found
    return None


def known_cause(message: str | None, refusal: R.Refusal | None = None) -> tuple[Pattern, str, str] | None:
    """(pattern, cue, action) of a known task-shape cause: from a gate refusal's code and
    subject when it has one of :data:`PATTERNS_BY_CODE`, else from the message (the refusal's
    problem) by :func:`match_pattern`; None when neither is known."""
    if refusal is not None:
        pattern = PATTERNS_BY_CODE.get(refusal.code)
        if pattern is not None and all(pattern.subject.fullmatch(v) for v in refusal.subject):
            return (pattern,) + pattern.texts_of(refusal.subject)
        message = refusal.problem
    hit = match_pattern(message)
    return (hit[0],) + hit[0].texts(hit[1]) if hit is not None else None


def failing_checks(evidence: t.Any) -> list[str] | None:
    """What an OVAL evidence of one rule (``oval_evidence.rule_evidence``) says made it fail,
    as sorted lines ``<test id> <test result> <collected object's flag>``: one per culprit test,
    so two hosts on which the same tests fail the same way give the same lines, whatever their
    files' times or sizes. None when there is no evidence to tell (no tests, an error)."""
    if not isinstance(evidence, dict) or evidence.get("error") or not evidence.get("tests"):
        return None
    lines = set()
    for test in evidence["tests"]:
        if isinstance(test, dict) and test.get("id"):
            flag = (test.get("object") or {}).get("flag") if isinstance(test.get("object"), dict) else None
            lines.add("%s %s %s" % (test["id"], test.get("result") or "?", flag or "?"))
    return sorted(lines) or None


def missing_of(message: str | None) -> list[dict]:
    """What an attempt's error says is missing on the host, from the :data:`PATTERNS` of a
    missing package, file, service or command: ``[{"kind", "name"}]`` (one at most)."""
    hit = match_pattern(message)
    if hit is None or hit[0].slug not in MISSING_KINDS:
        return []
    if hit[0].slug == "destination_missing":
        path = _MISSING_PATH.search(hit[1].group(0))
        name = path.group(1) if path else ""
    else:
        name = hit[1].group(1)
    return [{"kind": MISSING_KINDS[hit[0].slug], "name": clean_text(name, 200)}] if name else []


def is_event(record: t.Any) -> bool:
    """True when an attempt record holds no evidence about the rule on the host, only an event
    of the loop (issue 19 item 1: "transport failures, unusable answers, budget stops,
    needs_human answers, gate protocol errors and conditions of the moment are events, never
    lessons"), so neither a negative lesson nor a Reflector lesson comes from it.

    Events: a reason of :data:`EVENT_REASONS`; a condition of the moment
    (``safety.is_transient``); no verdict (nothing was judged); a Worker attempt refused
    without a gate code (an answer that was not JSON, held neither tasks nor probes, a probe
    budget, the Reflector's ban: the loop refused its form, no task was judged) or with only
    :data:`PROTOCOL_CODES`. An ``environment:<kind>`` reason is no event, but it is the
    environment's verdict, never a failure of the fix: the caution says it (``_Extractor.rule``).
    A refusal of the content's own fix stays evidence: the same content renders the same tasks.
    """
    verdict, reason = _get(record, "verdict") or "", _get(record, "reason") or ""
    if not verdict or reason in EVENT_REASONS or safety.is_transient(reason):
        return True
    if verdict != A.REFUSED or _get(record, "source") == A.VENDOR:
        return False
    codes = {str(r.get("code")) for r in _get(record, "gate_refusals") or [] if isinstance(r, dict)}
    return not codes - PROTOCOL_CODES


def first_refusal(record: t.Any) -> R.Refusal | None:
    """The first gate refusal an attempt record carries (``gate_refusals``), None when it has
    none: a refusal that did not come from the gate, or a record older than the codes."""
    found = _get(record, "gate_refusals") or []
    return R.Refusal.from_dict(found[0]) if isinstance(found, list) and found else None


# ----------------------------------------------------------------------------- documents
class _StoredDoc:
    """A dataclass kept as a TinyDB document: keys it does not know (written by a newer
    version) are dropped when read back."""

    def to_doc(self) -> dict:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_doc(cls, doc: t.Mapping):
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in dict(doc).items() if k in names})


@dataclasses.dataclass
class Evidence(_StoredDoc):
    """One evidence row (table ``evidence``), unique over (lesson, source_kind, source_id).

    lesson: the lesson id; source_kind: ``outcome`` (a rule's outcome), ``attempt`` (an
    attempt record) or ``reflection`` (a Reflector answer); source_id:
    ``<run_id>/<host>/<short rule>[/<attempt n>]``; run_id, host; time: ISO UTC when
    recorded; detail: one line (<= 300 characters) for humans; rule: short rule id; attempt:
    attempt number or None; source: ``vendor``/``worker``/None (who wrote the tasks);
    reason: the attempt's or outcome's reason code; tasks_sha: :func:`tasks_sha` of the
    attempt's tasks (None without tasks); checks: :func:`failing_checks` of the OVAL evidence
    after a failed attempt (None without evidence); missing: :func:`missing_of` the attempt's
    error (the packages, files, services or commands it found missing), [] when none.
    """

    lesson: str
    source_kind: str
    source_id: str
    run_id: str = ""
    host: str = ""
    time: str = ""
    detail: str = ""
    rule: str | None = None
    attempt: int | None = None
    source: str | None = None
    reason: str | None = None
    tasks_sha: str | None = None
    checks: list | None = None
    missing: list = dataclasses.field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.lesson, self.source_kind, self.source_id)


def evidence_key(doc: t.Mapping) -> tuple[str, str, str]:
    """(lesson, source_kind, source_id) of an evidence document."""
    return (doc.get("lesson"), doc.get("source_kind"), doc.get("source_id"))


@dataclasses.dataclass
class Lesson(_StoredDoc):
    """One lesson row (table ``lessons``), as the memory contract gives it.

    id ("L" + 12 hex of dedupe_key); kind (:data:`KINDS`); status (:data:`STATUSES`); scope
    {skill, rule: short id or None, category: slug or None}; cue, action (one line each,
    <= 300 / 500 characters); fingerprint (:func:`fingerprint`); tasks: positive: the task
    list that verified; negative: the tasks that failed, for a rule-specific failure; else
    None; reason: caution: the outcome reason to reuse ("environment:read_only_proc_sys");
    negative: the failing attempt's reason; weight (0..1, starts 0.5); confidence (0..1);
    support (evidence rows); outcomes {remediated, escalated}: work items it was shown for
    that counted (learning); created/updated (ISO UTC); dedupe_key; rules {short rule:
    {reason, vendor, vendor_tasks_sha}} derived from evidence; pattern (:data:`PATTERNS` slug
    or None); credit (the category's signal from the last dream pass, or None); utility
    (from the last dream pass, or None). Derived from the evidence rows too (:func:`derive`):
    ``scope`` gains ``kind`` (``rule``, ``category`` or ``skill``) and ``ids`` (the rule, or the
    rules of the family its evidence came from); ``evidence``, the newest
    :data:`EVIDENCE_LISTED` rows as {kind, run, host, rule, attempt} (``support`` counts them
    all); ``cause``, for a negative lesson, why its newest failure failed: {rule, run, host,
    attempt, reason, checks, missing} (issue 19 item 3), else None; ``preconditions``, for a
    positive lesson, what its tasks need that they do not create (``preconditions.of_tasks``,
    issue 19 item 4), else [].
    """

    id: str
    kind: str
    status: str
    scope: dict
    cue: str
    action: str
    fingerprint: dict
    tasks: list | None = None
    reason: str | None = None
    weight: float = DEFAULT_WEIGHT
    confidence: float = 1.0
    support: int = 0
    outcomes: dict = dataclasses.field(default_factory=lambda: {"remediated": 0, "escalated": 0})
    created: str = ""
    updated: str = ""
    dedupe_key: str = ""
    rules: dict = dataclasses.field(default_factory=dict)
    pattern: str | None = None
    credit: float | None = None
    utility: float | None = None
    evidence: list = dataclasses.field(default_factory=list)
    cause: dict | None = None
    preconditions: list = dataclasses.field(default_factory=list)


def confidence_for(status: str, credit: float | None = None) -> float:
    """Base confidence by status (:data:`CONFIDENCE`), scaled by ``(1 + credit) / 2`` when
    the dream pass gave the lesson's category a credit in [-1, 1] (seed 004: confidence
    reflects whether wins came from followed advice)."""
    base = CONFIDENCE.get(status, 0.5)
    if credit is None:
        return base
    return round(base * (1.0 + max(-1.0, min(1.0, float(credit)))) / 2.0, 4)


@dataclasses.dataclass
class Candidate:
    """A lesson proposed by :func:`extract`, with its evidence. Validated on creation: kind,
    status, a non-empty cue and action, at least one evidence row (seed 002). Raises
    LessonError otherwise."""

    kind: str
    status: str
    scope: dict
    cue: str
    action: str
    fingerprint: dict
    evidence: list = dataclasses.field(default_factory=list)
    tasks: list | None = None
    reason: str | None = None
    pattern: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise LessonError("unknown lesson kind %r" % (self.kind,))
        if self.status not in (CANDIDATE, CONFIRMED):
            raise LessonError("a new lesson is a candidate or confirmed, not %r" % (self.status,))
        self.cue = clean_text(self.cue, CUE_CHARS)
        self.action = clean_text(self.action, ACTION_CHARS)
        if not self.cue or not self.action:
            raise LessonError("a lesson needs a cue and an action (seed 002)")
        if not self.evidence:
            raise LessonError("a lesson needs at least one evidence row (seed 002)")
        for ev in self.evidence:
            if ev.source_kind not in SOURCE_KINDS or not ev.source_id:
                raise LessonError("evidence needs a source kind of %s and a source id" % (SOURCE_KINDS,))
            ev.lesson = self.id

    @property
    def dedupe_key(self) -> str:
        return dedupe_key(self.kind, self.scope, self.cue, self.action, self.fingerprint)

    @property
    def id(self) -> str:
        return lesson_id(self.dedupe_key)

    def to_lesson(self, now: str) -> Lesson:
        return Lesson(id=self.id, kind=self.kind, status=self.status, scope=dict(self.scope), cue=self.cue,
                      action=self.action, fingerprint=dict(self.fingerprint), tasks=_plain(self.tasks),
                      reason=self.reason, confidence=confidence_for(self.status), created=now, updated=now,
                      dedupe_key=self.dedupe_key, pattern=self.pattern)


# ----------------------------------------------------------------------------- extraction
def _get(record: t.Any, name: str, default: t.Any = None) -> t.Any:
    if isinstance(record, dict):
        return record.get(name, default)
    return getattr(record, name, default)


def _attempts_by_short(attempts: t.Mapping | None) -> dict:
    out: dict = {}
    for rule, records in (attempts or {}).items():
        out[safety.short_rule_id(rule)] = list(records or [])
    return out


def _what(short: str, source: str | None, tasks: t.Any) -> str:
    """What was tried, in a cue: the content's fix (pinned by the fingerprint's content
    version) or the Worker's tasks by their changes."""
    if source == A.VENDOR:
        return "the content's own fix for rule %s" % short
    if tasks:
        return "for rule %s the tasks %s" % (short, summarise_tasks(tasks, 200))
    return "the Worker's tasks for rule %s" % short


def failed_step(record: t.Any) -> str:
    """What failed, from structured fields only (issue 19 item 1: lesson text is never a mangled
    message, which the evidence row keeps): the module of the first task that failed and the
    path or name it was given; the reason code otherwise."""
    report = _get(record, "report") or {}
    failed = next((r for r in report.get("task_results") or [] if isinstance(r, dict) and r.get("failed")
                   and not r.get("ignored")), None)
    if failed is None or not failed.get("module"):
        return str(_get(record, "reason") or "a task failed")
    target = ""
    for ds in _get(record, "tasks") or []:
        if isinstance(ds, dict) and ds.get("name") == failed.get("name"):
            for _fqcn, args in iter_tasks([ds]):
                target = str(args.get("path") or args.get("dest") or args.get("name") or "")
            break
    return "module %s%s" % (failed["module"], " on %s" % clean_text(target, 120) if target else "")


class _Extractor:
    def __init__(self, fingerprint: t.Mapping, skill: str, run_id: str, host: str) -> None:
        self.fp = dict(fingerprint)
        self.skill = skill
        self.run_id = run_id
        self.host = host
        self.out: list[Candidate] = []

    def scope(self, rule: str | None = None, category: str | None = None) -> dict:
        return {"skill": self.skill, "rule": rule, "category": category}

    def ev(self, kind: str, rule: str, number: int | None, detail: str, source: str | None = None,
           reason: str | None = None, tasks: t.Any = None, record: t.Any = None, message: str | None = None) -> Evidence:
        """One evidence row; with the attempt ``record`` it failed in, its cause too (the
        failing checks after it, what ``message`` says is missing)."""
        sid = "%s/%s/%s" % (self.run_id, self.host, rule) + ("/%d" % number if number is not None else "")
        return Evidence(lesson="", source_kind=kind, source_id=sid, run_id=self.run_id, host=self.host,
                        detail=clean_text(detail, DETAIL_CHARS), rule=rule, attempt=number, source=source,
                        reason=reason, tasks_sha=tasks_sha(tasks),
                        checks=failing_checks(_get(record, "evidence")) if record is not None else None,
                        missing=missing_of(message) if message else [])

    def add(self, **kwargs: t.Any) -> Candidate | None:
        try:
            cand = Candidate(fingerprint=self.fp, **kwargs)
        except LessonError:  # e.g. a Reflector cue that was only control characters
            return None
        self.out.append(cand)
        return cand

    # -- per rule ---------------------------------------------------------------------------
    def rule(self, short: str, entry: t.Mapping, records: list) -> None:
        category = entry.get("category") or None
        reason = entry.get("reason") or ""
        if not records:  # no attempt records: the report's attempt_log (no tasks) stands in
            records = [dict(e, number=e.get("attempt")) for e in entry.get("attempt_log") or []]
        if reason == "verified":
            self.positive(short, category, records, entry)
        elif reason.startswith(outcomes.ENVIRONMENT_PREFIX) and not safety.is_transient(reason):
            self.caution(short, reason, records, entry, CANDIDATE if entry.get("declared_by") else CONFIRMED)
        generic_hit: dict[int, Candidate] = {}
        judged = [r for r in records if not is_event(r)
                  and not str(_get(r, "reason") or "").startswith(outcomes.ENVIRONMENT_PREFIX)]
        for record in judged:
            number = _get(record, "number")
            cand = self.negative(short, category, record)
            if cand is not None and cand.pattern is not None:
                generic_hit[number] = cand
        for record in judged:
            self.reflection(short, category, record, records, reason, generic_hit)

    def positive(self, short: str, category: str | None, records: list, entry: t.Mapping) -> None:
        passed = [r for r in records if _get(r, "verdict") == A.PASSED]
        record = passed[-1] if passed else None
        number = _get(record, "number") if record is not None else None
        source = _get(record, "source") if record is not None else None
        tasks = _get(record, "tasks") if record is not None else None
        label = "the content's own fix" if source == A.VENDOR else "the Worker's tasks"
        if tasks:
            action = "%s verified (OpenSCAP pass): %s" % (label, summarise_tasks(tasks))
        else:
            action = "%s verified (OpenSCAP pass)" % label if record is not None else "a fix verified (OpenSCAP pass)"
        detail = "remediated/verified by %s attempt %s" % (source or "?", number)
        self.add(kind=POSITIVE, status=CONFIRMED, scope=self.scope(short, category),
                 cue="rule %s fails on a host like this one" % short, action=action, tasks=_plain(tasks) or None,
                 reason="verified",
                 evidence=[self.ev(OUTCOME, short, None, detail, source, "verified", tasks)])

    def caution(self, short: str, reason: str, records: list, entry: t.Mapping, status: str) -> None:
        kind = reason[len(outcomes.ENVIRONMENT_PREFIX):]
        cue, action = ENVIRONMENT_TEXTS.get(kind, (
            "a fix on this {virt} host fails with environment:%s" % kind,
            "the environment, not the fix, stops it: escalate with environment:%s, do not retry" % kind))
        virt = self.fp.get("virtualization") or "unknown"
        cue = cue.format(virt=virt if virt != "none" else "non-virtualised")
        last = next((r for r in reversed(records) if _get(r, "reason") == reason), None)
        detail = "%s: %s" % (reason, entry.get("detail") or (_get(last, "detail") if last is not None else ""))
        # an agent's word stays with its rule, so its support counts that rule's work items alone
        # (selection.RULE_CAUTION_SUPPORT); an observation is one lesson for every rule it names
        scope = self.scope(short, entry.get("category") or None) if status == CANDIDATE else self.scope()
        self.add(kind=CAUTION, status=status, scope=scope, cue=cue, action=action, reason=reason,
                 evidence=[self.ev(OUTCOME, short, None, detail, _get(last, "source") if last is not None else None,
                                   reason, _get(last, "tasks") if last is not None else None)])

    def negative(self, short: str, category: str | None, record: t.Any) -> Candidate | None:
        verdict, reason = _get(record, "verdict") or "", _get(record, "reason") or ""
        number, source = _get(record, "number"), _get(record, "source")
        tasks = _get(record, "tasks") or None
        report = _get(record, "report") or {}
        what = _what(short, source, tasks)
        if verdict in (A.INEFFECTIVE, A.NO_EFFECT) and reason in ("fix_ineffective", "no_effect"):
            said = ("changed the host but OpenSCAP still reports fail: the check wants something else"
                    if reason == "fix_ineffective" else
                    "changed nothing and OpenSCAP still reports fail (a regexp or backrefs that matched nothing, "
                    "or a state already set): change the approach")
            return self.add(kind=NEGATIVE, status=CONFIRMED, scope=self.scope(short, category),
                            cue=what, action="%s (%s)" % (said, reason), tasks=_plain(tasks),
                            reason=reason, evidence=[self.ev(ATTEMPT, short, number, "%s attempt %s: %s: %s" % (
                                source, number, reason, _get(record, "detail") or ""), source, reason, tasks, record)])
        if verdict == A.UNHEALTHY:
            return self.add(kind=NEGATIVE, status=CONFIRMED, scope=self.scope(short, category),
                            cue=what,
                            action="after it a fresh login with become failed (%s): do not apply it as is" % reason,
                            tasks=_plain(tasks), reason=reason,
                            evidence=[self.ev(ATTEMPT, short, number, "%s attempt %s: %s: %s" % (
                                source, number, reason, _get(record, "detail") or ""), source, reason, tasks, record)])
        if verdict == A.REFUSED:
            refusal = first_refusal(record)
            message = refusal.problem if refusal is not None else (
                _get(record, "gate") or report.get("refused") or _get(record, "detail") or "")
            return self.task_failure(short, category, record, message, "refused before it ran",
                                     generic=source != A.VENDOR, refusal=refusal)
        if verdict == A.FAILED and reason == "fix_failed":
            message = report.get("error") or _get(record, "detail") or ""
            return self.task_failure(short, category, record, message, "a task failed", generic=False)
        return None  # passed, reboot_required, verify_error, scanner_crash, environment (caution), cannot_fix, unjudged

    def task_failure(self, short: str, category: str | None, record: t.Any, message: str, how: str,
                     generic: bool, refusal: R.Refusal | None = None) -> Candidate | None:
        number, source, reason = _get(record, "number"), _get(record, "source"), _get(record, "reason")
        tasks = _get(record, "tasks") or None
        ev = self.ev(ATTEMPT, short, number, "%s attempt %s: %s: %s" % (source, number, reason, message),
                     source, reason, tasks, record, message)
        hit = known_cause(message, refusal)
        if hit is not None:  # a known task-shape cause: one lesson for the whole skill
            pattern, cue, action = hit
            return self.add(kind=NEGATIVE, status=CONFIRMED, scope=self.scope(), cue=cue, action=action,
                            reason=reason, pattern=pattern.slug, evidence=[ev])
        # the gate's refusal is in our own words; a task's message is the module's: never lesson text
        step = (A.normalise(message)[:ERROR_CHARS] or "no message") if refusal is not None else failed_step(record)
        if generic:  # a gate refusal of model-written tasks: about the task text, whatever the rule
            return self.add(kind=NEGATIVE, status=CONFIRMED, scope=self.scope(),
                            cue="the gate refuses model-written tasks: %s" % step,
                            action="nothing ran (fix_refused): write the tasks without it", reason=reason,
                            evidence=[ev])
        return self.add(kind=NEGATIVE, status=CONFIRMED, scope=self.scope(short, category),
                        cue="%s: %s: %s" % (_what(short, source, tasks), how, step),
                        action="it was rolled back (%s): do not repeat it as is" % reason, tasks=_plain(tasks),
                        reason=reason, evidence=[ev])

    def reflection(self, short: str, category: str | None, record: t.Any, records: list, reason: str,
                   generic_hit: dict) -> None:
        reflection = _get(record, "reflection") or {}
        lesson = reflection.get("lesson") if isinstance(reflection, dict) else None
        if not isinstance(lesson, dict):
            return
        number = _get(record, "number")
        diagnosis = reflection.get("diagnosis") or ""
        said = "Reflector after attempt %s: %s -> %s (%s)" % (number, lesson.get("cue"), lesson.get("action"),
                                                              diagnosis)
        ev = self.ev(REFLECTION, short, number, said, _get(record, "source"), _get(record, "reason"))
        folded = generic_hit.get(number)
        if folded is not None:  # the failure is a known task-shape cause: evidence, not one more lesson
            self.add(kind=folded.kind, status=folded.status, scope=folded.scope, cue=folded.cue, action=folded.action,
                     reason=folded.reason, pattern=folded.pattern, evidence=[ev])
            return
        confirmed = reason == "verified" and any(
            _get(r, "verdict") == A.PASSED and (_get(r, "number") or 0) > (number or 0) for r in records)
        evidence = [ev]
        if confirmed:
            evidence.append(self.ev(OUTCOME, short, None, "remediated by a later attempt of the same work item",
                                    None, "verified"))
        self.add(kind=NEGATIVE, status=CONFIRMED if confirmed else CANDIDATE, scope=self.scope(short, category),
                 cue=stable_text(lesson.get("cue"), CUE_CHARS), action=stable_text(lesson.get("action"), ACTION_CHARS),
                 reason=_get(record, "reason") or None, evidence=evidence)


def extract(host_report: t.Mapping, attempts: t.Mapping | None, fingerprint: t.Mapping, skill: str,
            run_id: str | None = None, host: str | None = None) -> list[Candidate]:
    """Deterministic lesson candidates from one host's report (no LLM, no I/O).

    host_report: ``loop.RemediationLoop._report()`` (rules keyed by short id, each with
    outcome, reason, category, detail, attempt_log); attempts: {rule id (full or short): [attempt
    records: ``Attempt.__dict__``-like dicts with number, source, tasks, gate, gate_refusals
    (optional: the gate's codes), report, verdict, reason, detail, reflection]} (the report's attempt_log has no tasks; without
    records the attempt_log stands in, and positive lessons carry no tasks); fingerprint:
    :func:`fingerprint` of the host; skill: the skill name; run_id/host: default to the
    report's. A check-mode report gives nothing (nothing happened).

    Produces, per rule: a positive lesson for ``verified``; a caution for
    ``environment:<kind>``; a negative per failed, refused, ineffective, no-effect or
    unhealthy attempt; a Reflector candidate per reflection with a lesson. Nothing for
    skipped rules, ``reboot_required`` (the fix is right and must run again on a fresh host:
    a lesson that skipped it would lose the rule), ``verify_error``/``scanner_crash`` (the
    scanner, not the fix: case scanner-crash), ``regressed`` (another fix undid it) or a rule
    ``from_memory`` (a lesson ended it with no attempt: it proves nothing new). Extracting the same report twice gives the same candidates and evidence keys.
    """
    if host_report.get("check_mode"):
        return []
    run_id = run_id if run_id is not None else str(host_report.get("run_id") or "")
    host = host if host is not None else str(host_report.get("host") or "")
    ex = _Extractor(fingerprint, skill, run_id, host)
    by_short = _attempts_by_short(attempts)
    for short, entry in sorted((host_report.get("rules") or {}).items()):
        short = safety.short_rule_id(short)
        if entry.get("outcome") == outcomes.SKIPPED:  # not attempted on purpose: nothing was observed
            continue
        if entry.get("from_memory"):  # ended by a lesson with no attempt: no new evidence, only reinforcement
            continue
        ex.rule(short, entry, by_short.get(short, []))
    return ex.out


# ----------------------------------------------------------------------------- recording
def derive(lesson: t.MutableMapping, evidence_rows: t.Iterable[t.Mapping]) -> None:
    """Set the fields a lesson derives from its evidence rows, in place: ``support`` (their
    number); ``rules`` ({short rule: {reason: the latest reason, vendor: the latest vendor
    attempt's reason or None, vendor_tasks_sha, vendor_checks: that attempt's failing checks}});
    ``scope.kind``/``scope.ids``; ``evidence``; ``cause``; ``preconditions`` (see :class:`Lesson`)."""
    rows = sorted(evidence_rows, key=lambda r: (r.get("time") or "", r.get("source_id") or "", r.get("source_kind")))
    rules: dict = {}
    for row in rows:
        rule = row.get("rule")
        if not rule:
            continue
        entry = rules.setdefault(rule, {"reason": None, "vendor": None, "vendor_tasks_sha": None, "vendor_checks": None})
        if row.get("reason") and row.get("source_kind") != REFLECTION:
            entry["reason"] = row["reason"]
        if row.get("source") == A.VENDOR and row.get("source_kind") != REFLECTION:
            entry["vendor"] = row.get("reason")
            entry["vendor_tasks_sha"] = row.get("tasks_sha")
        if row.get("source") == A.VENDOR and row.get("source_kind") == ATTEMPT:
            entry["vendor_checks"] = row.get("checks")
    lesson["support"] = len(rows)
    lesson["rules"] = rules
    scope = dict(lesson.get("scope") or {})
    scope["kind"] = "rule" if scope.get("rule") else "category" if scope.get("category") else "skill"
    scope["ids"] = [scope["rule"]] if scope.get("rule") else sorted(rules)
    lesson["scope"] = scope
    lesson["evidence"] = [{"kind": r.get("source_kind"), "run": r.get("run_id"), "host": r.get("host"),
                           "rule": r.get("rule"), "attempt": r.get("attempt")} for r in rows[-EVIDENCE_LISTED:]]
    failures = [r for r in rows if r.get("source_kind") == ATTEMPT and r.get("reason") in CAUSED_REASONS]
    last = failures[-1] if failures and lesson.get("kind") == NEGATIVE else None
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import preconditions

    lesson["preconditions"] = preconditions.of_tasks(lesson.get("tasks")) if lesson.get("kind") == POSITIVE else []
    lesson["cause"] = None if last is None else {
        "rule": last.get("rule"), "run": last.get("run_id"), "host": last.get("host"), "attempt": last.get("attempt"),
        "reason": last.get("reason"), "checks": last.get("checks"), "missing": list(last.get("missing") or [])}


def record(lessons_table, evidence_table, candidates: t.Iterable[Candidate], now: str | None = None) -> dict:
    """Store candidates: upsert each lesson by dedupe key, add its evidence rows that are new
    (unique over (lesson, source_kind, source_id): recording twice adds nothing, seed 002),
    recompute ``support`` and ``rules`` from the evidence.

    lessons_table/evidence_table: ``tinydb.table.Table``; now: ISO UTC time for new rows
    (default: now). A candidate lesson is upgraded to confirmed by a confirmed candidate; a
    retired lesson stays retired (its evidence is still added). ``updated`` changes only when
    evidence was added. Writes in at most three batches (TinyDB rewrites the file per write).
    Returns {"created": [ids], "supported": [ids of existing lessons that gained evidence]}.
    Raises LessonError for a candidate without cue, action or evidence.
    """
    now = now or now_iso()
    candidates = list(candidates)
    for cand in candidates:
        if not isinstance(cand, Candidate):
            raise LessonError("record takes Candidate objects, got %s" % type(cand).__name__)
        if not cand.cue or not cand.action or not cand.evidence:
            raise LessonError("a lesson needs a cue, an action and evidence (seed 002)")
    existing = {doc.get("dedupe_key"): doc for doc in lessons_table.all()}
    seen_keys = {evidence_key(doc) for doc in evidence_table.all()}
    new_lessons: dict[str, dict] = {}
    changed: dict[int, dict] = {}
    new_evidence: list[dict] = []
    created: list[str] = []
    supported: list[str] = []
    for cand in candidates:
        key = cand.dedupe_key
        doc = existing.get(key)
        target = new_lessons.get(key)
        if doc is None and target is None:
            target = new_lessons[key] = cand.to_lesson(now).to_doc()
            created.append(target["id"])
        elif doc is not None:
            target = changed.get(doc.doc_id)
            if target is None:
                target = changed[doc.doc_id] = dict(doc)
        if cand.status == CONFIRMED and target["status"] == CANDIDATE:
            target["status"] = CONFIRMED
            target["confidence"] = confidence_for(CONFIRMED, target.get("credit"))
        if not target.get("tasks") and cand.tasks:
            target["tasks"] = _plain(cand.tasks)
        for ev in cand.evidence:
            ev.lesson = target["id"]
            if ev.key in seen_keys:
                continue
            seen_keys.add(ev.key)
            row = ev.to_doc()
            row["time"] = row["time"] or now
            new_evidence.append(row)
            target["updated"] = now
            if doc is not None and target["id"] not in supported:
                supported.append(target["id"])
    if new_evidence:
        evidence_table.insert_multiple(new_evidence)
    rows_by_lesson: dict[str, list] = {}
    if new_lessons or changed:
        wanted = {d["id"] for d in new_lessons.values()} | {d["id"] for d in changed.values()}
        for row in evidence_table.all():
            if row.get("lesson") in wanted:
                rows_by_lesson.setdefault(row["lesson"], []).append(row)
    for doc in list(new_lessons.values()) + list(changed.values()):
        derive(doc, rows_by_lesson.get(doc["id"], []))
    if new_lessons:
        lessons_table.insert_multiple(list(new_lessons.values()))
    originals = {doc.doc_id: doc for doc in existing.values()}
    update_lessons(lessons_table, {doc_id: doc for doc_id, doc in changed.items() if doc != dict(originals[doc_id])})
    return {"created": created, "supported": supported}


def update_lessons(lessons_table, changes: t.Mapping[int, t.Mapping]) -> None:
    """Write ``{doc_id: new lesson document}`` in ONE table write (TinyDB rewrites the whole
    file per write). The update callable gets the stored dict without its doc id, so the
    lesson's own ``id`` field, unique in the table, finds its new fields."""
    if not changes:
        return
    by_id = {doc["id"]: doc for doc in changes.values()}

    def apply(document: t.MutableMapping) -> None:
        document.update(by_id[document["id"]])

    lessons_table.update(apply, doc_ids=list(changes))
