"""Read the agents' answers (Worker, Architect, Reflector) out of LLM output.

A server with structured output returns a JSON object (``SCHEMAS`` is what goes in its
``response_format``); one without it returns text, so ``extract_object`` accepts, in this
order:

1. the whole text as one JSON object;
2. fenced blocks (```` ```json ````, ```` ```yaml ````/```` ```yml ````, or untagged): one
   block holding a mapping, or several that hold the same mapping; blocks tagged with
   another language (```` ```bash ````) are ignored; an unclosed fence runs to the end;
3. the whole text as one YAML mapping;
4. prose around one JSON object (from the first ``{`` to the last ``}``).

A leading ``<think>...</think>`` block (reasoning models served by llama.cpp, Ollama or
vLLM without a reasoning parser put it in the content) is dropped first.

YAML is read with ``yaml.safe_load`` only (libyaml's CSafeLoader when present); YAML
anchors/aliases are refused (an alias bomb would expand when the answer is walked). Every
failure is an ``AnswerError`` (a ValueError) whose message says what was wrong; nothing
else is raised, whatever the text (fuzzed with Hypothesis in tests/unit/plugins/plugin_utils/test_answers.py).

The typed readers (``parse_worker``, ``parse_architect``, ``parse_reflector``) take the text
or an already-decoded mapping and ignore keys they do not know. The Worker and the Architect
may also answer ``{"cannot_fix": {"reason": "environment" | "content" | "needs_human",
"evidence": "..."}}`` (issue 18): the rule cannot be fixed here, and why (``CannotFix``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing as t

import yaml

from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError

try:
    _YAML_LOADER = yaml.CSafeLoader
except AttributeError:  # PyYAML built without libyaml
    _YAML_LOADER = yaml.SafeLoader

#: Largest answer read, in characters; a longer one is refused unread.
MAX_ANSWER_CHARS = 65536

#: Caps, in characters (lists: items).
MAX_PLAN_CHARS = 2000
MAX_RATIONALE_CHARS = 2000
MAX_DIAGNOSIS_CHARS = 2000
MAX_LESSON_FIELD_CHARS = 500
MAX_PATTERNS = 5
MAX_PATTERN_CHARS = 200

MAX_EVIDENCE_CHARS = 2000

VERDICTS = ("PLAN", "CONTINUE", "PIVOT", "ESCALATE")
#: what a ``cannot_fix`` answer may say stops the rule: the host's environment, the SCAP
#: content (its check or fix is wrong for this host), or a decision only a person can take.
CANNOT_FIX_REASONS = ("environment", "content", "needs_human")

_FENCE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<tag>[^\s`]*)[^\n]*\n(?P<body>.*?)(?:^[ \t]*(?P=fence)[ \t]*$|\Z)",
    re.MULTILINE | re.DOTALL,
)
_STRUCTURED_TAGS = {"", "json", "yaml", "yml"}
_THINK = re.compile(r"\A\s*<think>.*?</think>", re.DOTALL)


class AnswerError(ScapforgeError, ValueError):
    """An LLM answer that cannot be read as the object asked for."""

    kind = "bad_answer"


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _refuse_shared_nodes(value: object) -> None:
    """Raise AnswerError when a container occurs twice in ``value`` (YAML aliases or a
    self-reference): walking such a structure can take exponential time."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (dict, list, tuple, set, frozenset)):
            if id(item) in seen:
                raise AnswerError("YAML anchors and aliases are not accepted in an answer")
            seen.add(id(item))
            stack.extend(item.values() if isinstance(item, dict) else item)


def _load_json(text: str) -> object:
    """JSON value of ``text``; AnswerError when it is not JSON."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise AnswerError(f"not JSON: {exc}") from None


def _load_yaml(text: str) -> object:
    """YAML value of ``text`` (safe loader, aliases refused); AnswerError when it is not YAML."""
    try:
        value = yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
    except yaml.MarkedYAMLError as exc:
        where = (
            f" at line {exc.problem_mark.line + 1}, column {exc.problem_mark.column + 1}" if exc.problem_mark else ""
        )
        raise AnswerError(f"not YAML: {exc.problem or exc.context}{where}") from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError, OverflowError) as exc:
        raise AnswerError(f"not YAML: {type(exc).__name__}: {str(exc)[:200]}") from None
    _refuse_shared_nodes(value)
    return value


def _load_block(tag: str, body: str) -> object:
    if tag == "json":
        return _load_json(body)
    try:
        return _load_json(body)
    except AnswerError:
        return _load_yaml(body)


def extract_object(text: str) -> dict:
    """The one mapping an answer holds (see the module docstring for what is accepted).

    ``text``: the model's answer, at most ``MAX_ANSWER_CHARS`` characters. Returns a dict
    (keys as the answer wrote them). Raises AnswerError: empty answer, answer too large,
    no mapping found, top level not a mapping, fenced blocks that disagree, a block that
    does not parse (the message names the parser's complaint).
    """
    if not isinstance(text, str):
        raise AnswerError(f"answer is {_kind(text)}, not text")
    if len(text) > MAX_ANSWER_CHARS:
        raise AnswerError(f"answer too large ({len(text)} characters > {MAX_ANSWER_CHARS})")
    body = _THINK.sub("", text, count=1)
    stripped = body.strip()  # for JSON and tests only: stripping can change what YAML means
    if not stripped:
        raise AnswerError("empty answer")

    if stripped[0] in "{[":
        try:
            value = _load_json(stripped)
        except AnswerError:
            pass
        else:
            if isinstance(value, dict):
                return value
            raise AnswerError(f"top level is {_kind(value)}, not a mapping")

    blocks = [m for m in _FENCE.finditer(body) if m.group("tag").lower() in _STRUCTURED_TAGS]
    if blocks:
        found: list[dict] = []
        for match in blocks:
            value = _load_block(match.group("tag").lower(), match.group("body"))
            if isinstance(value, dict):
                found.append(value)
            elif len(blocks) == 1:
                raise AnswerError(f"the fenced block holds {_kind(value)}, not a mapping")
        if not found:
            raise AnswerError(f"none of the {len(blocks)} fenced blocks holds a mapping")
        if any(other != found[0] for other in found[1:]):
            raise AnswerError(f"{len(found)} fenced blocks hold different mappings; answer with one")
        return found[0]

    try:
        value = _load_yaml(body)
    except AnswerError as exc:
        value, yaml_problem = None, str(exc)
    else:
        yaml_problem = None
        if isinstance(value, dict):
            return value

    first, last = stripped.find("{"), stripped.rfind("}")
    if 0 <= first < last:
        try:
            embedded = _load_json(stripped[first : last + 1])
        except AnswerError:
            embedded = None
        if isinstance(embedded, dict):
            return embedded

    if yaml_problem:
        raise AnswerError(f"no object in the answer ({yaml_problem})")
    if isinstance(value, list):
        raise AnswerError("top level is a list, not a mapping")
    raise AnswerError("no object in the answer")


def _as_object(answer: str | dict) -> dict:
    if isinstance(answer, dict):
        return answer
    return extract_object(answer)


def _text(obj: dict, key: str, cap: int, required: bool = False) -> str:
    """``obj[key]`` as a stripped string capped at ``cap`` characters ("" when absent).

    Numbers and booleans are written as text; a list of scalars is joined with newlines
    (models often write a plan as steps). Raises AnswerError for other shapes, or for an
    empty value when ``required``.
    """
    value = obj.get(key)
    if value is None:
        value = ""
    elif isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        value = "\n".join(str(v) for v in value)
    elif isinstance(value, (int, float)):
        value = str(value)
    elif not isinstance(value, str):
        raise AnswerError(f"'{key}' is {_kind(value)}, not text")
    value = value.strip()
    if required and not value:
        raise AnswerError(f"'{key}' is missing or empty")
    return value[:cap]


def _mappings(obj: dict, key: str) -> list[dict] | None:
    """``obj[key]`` as a non-empty list of mappings, None when absent or empty."""
    value = obj.get(key)
    if value is None or value == [] or value == "":
        return None
    if not isinstance(value, list):
        raise AnswerError(f"'{key}' is {_kind(value)}, not a list of mappings")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise AnswerError(f"'{key}[{index}]' is {_kind(item)}, not a mapping")
    return value


@dataclasses.dataclass(frozen=True)
class CannotFix:
    """An agent's word that the rule cannot be fixed here: ``reason`` (one of
    ``CANNOT_FIX_REASONS``) and ``evidence`` (what it saw, non-empty, at most
    ``MAX_EVIDENCE_CHARS`` characters)."""

    reason: str
    evidence: str


def parse_cannot_fix(obj: dict) -> CannotFix | None:
    """``obj["cannot_fix"]`` as a CannotFix; None when absent, null or empty. The reason is
    matched case-insensitively (``needs-human`` and ``needs human`` read as ``needs_human``).
    Raises AnswerError for another shape, an unknown reason or empty evidence."""
    raw = obj.get("cannot_fix")
    if raw is None or raw == {} or raw == "":
        return None
    if not isinstance(raw, dict):
        raise AnswerError(f"'cannot_fix' is {_kind(raw)}, not a mapping with reason and evidence")
    reason = raw.get("reason")
    said = re.sub(r"[\s-]+", "_", reason.strip().lower()) if isinstance(reason, str) else None
    if said not in CANNOT_FIX_REASONS:
        shown = reason if isinstance(reason, str) else _kind(reason)
        raise AnswerError(f"cannot_fix reason {str(shown)[:40]!r} is not one of {', '.join(CANNOT_FIX_REASONS)}")
    return CannotFix(reason=said, evidence=_text(raw, "evidence", MAX_EVIDENCE_CHARS, required=True))


@dataclasses.dataclass(frozen=True)
class WorkerAnswer:
    """The Worker's answer: tasks to run, or read-only probes to run first.

    Exactly one of ``tasks`` (a list of task mappings), ``tasks_text`` (YAML task text
    kept verbatim: the caller loads it with Ansible's DataLoader so that YAML errors name
    a line and column), ``probes`` (a list of probe mappings) and ``cannot_fix`` (a
    CannotFix) is set. ``rationale`` is the Worker's reason, at most
    ``MAX_RATIONALE_CHARS`` characters ("" when absent).
    """

    tasks: list[dict] | None
    probes: list[dict] | None
    rationale: str
    tasks_text: str | None = None
    cannot_fix: CannotFix | None = None

    @property
    def is_probe_request(self) -> bool:
        """True when the answer asks for probes instead of proposing tasks."""
        return self.probes is not None


def parse_worker(answer: str | dict) -> WorkerAnswer:
    """Read a Worker answer (text or mapping) into a WorkerAnswer.

    An answer that carries ``tasks`` (non-empty list of mappings, or non-blank YAML text)
    is acted on and its ``probes`` and ``cannot_fix`` are ignored; else one with
    ``cannot_fix`` ends the rule (its probes are not run); one with only ``probes`` is a
    probe request. Raises AnswerError when none is given, or when one has another shape.
    """
    obj = _as_object(answer)
    rationale = _text(obj, "rationale", MAX_RATIONALE_CHARS)
    tasks = obj.get("tasks")
    if isinstance(tasks, str):
        if tasks.strip():
            return WorkerAnswer(tasks=None, probes=None, rationale=rationale, tasks_text=tasks)
        tasks = None
    elif tasks is not None:
        tasks = _mappings(obj, "tasks")
    if tasks:
        return WorkerAnswer(tasks=tasks, probes=None, rationale=rationale)
    declined = parse_cannot_fix(obj)
    if declined is not None:
        return WorkerAnswer(tasks=None, probes=None, rationale=rationale, cannot_fix=declined)
    probes = _mappings(obj, "probes")
    if probes:
        return WorkerAnswer(tasks=None, probes=probes, rationale=rationale)
    raise AnswerError("the answer carries none of 'tasks', 'probes' and 'cannot_fix'")


@dataclasses.dataclass(frozen=True)
class ArchitectAnswer:
    """The Architect's answer: ``verdict`` (one of ``VERDICTS``, upper case: PLAN for the
    first plan before any attempt, then CONTINUE / PIVOT / ESCALATE, seed 001) and ``plan``
    (non-empty for PLAN and PIVOT, at most ``MAX_PLAN_CHARS`` characters; may be "" or a
    reason otherwise). ``cannot_fix``: the answer said the rule cannot be fixed here (its
    verdict is then ESCALATE, whatever the answer's own verdict said)."""

    verdict: str
    plan: str
    cannot_fix: CannotFix | None = None


def parse_architect(answer: str | dict) -> ArchitectAnswer:
    """Read an Architect answer (text or mapping); the verdict is matched case-insensitively.

    An answer with ``cannot_fix`` is an ESCALATE (its verdict and plan may be absent).
    Raises AnswerError for a missing or unknown verdict, or a PLAN/PIVOT without a plan.
    """
    obj = _as_object(answer)
    declined = parse_cannot_fix(obj)
    if declined is not None:
        return ArchitectAnswer(verdict="ESCALATE", plan=declined.evidence[:MAX_PLAN_CHARS], cannot_fix=declined)
    verdict = obj.get("verdict")
    if not isinstance(verdict, str) or verdict.strip().upper() not in VERDICTS:
        shown = verdict if isinstance(verdict, str) else _kind(verdict)
        raise AnswerError(f"verdict {str(shown)[:40]!r} is not one of {', '.join(VERDICTS)}")
    verdict = verdict.strip().upper()
    plan = _text(obj, "plan", MAX_PLAN_CHARS, required=verdict in ("PLAN", "PIVOT"))
    return ArchitectAnswer(verdict=verdict, plan=plan)


@dataclasses.dataclass(frozen=True)
class Lesson:
    """A lesson as the Reflector proposes it: when ``cue`` is seen, do ``action``
    (non-empty strings, at most ``MAX_LESSON_FIELD_CHARS`` characters each). It becomes a
    stored lesson only with evidence (seed 002)."""

    cue: str
    action: str


@dataclasses.dataclass(frozen=True)
class ReflectorAnswer:
    """The Reflector's answer: ``diagnosis`` (non-empty, at most ``MAX_DIAGNOSIS_CHARS``
    characters), an optional ``lesson``, and ``banned``/``preferred`` patterns (at most
    ``MAX_PATTERNS`` each, each at most ``MAX_PATTERN_CHARS`` characters)."""

    diagnosis: str
    lesson: Lesson | None
    banned: list[str]
    preferred: list[str]


def _patterns(obj: dict, key: str) -> list[str]:
    """``obj[key]`` as at most MAX_PATTERNS non-blank strings. A pattern longer than
    MAX_PATTERN_CHARS is dropped, not cut: a cut pattern would match something else."""
    value = obj.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise AnswerError(f"'{key}' is {_kind(value)}, not a list of strings")
    kept = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise AnswerError(f"'{key}[{index}]' is {_kind(item)}, not a string")
        item = item.strip()
        if item and len(item) <= MAX_PATTERN_CHARS:
            kept.append(item)
    return kept[:MAX_PATTERNS]


def parse_reflector(answer: str | dict) -> ReflectorAnswer:
    """Read a Reflector answer (text or mapping).

    ``lesson`` is None when absent, null, or with both cue and action empty. Raises
    AnswerError for an empty diagnosis, a lesson with only one of cue/action, or fields
    of the wrong shape.
    """
    obj = _as_object(answer)
    diagnosis = _text(obj, "diagnosis", MAX_DIAGNOSIS_CHARS, required=True)
    raw = obj.get("lesson")
    lesson = None
    if raw is not None:
        if not isinstance(raw, dict):
            raise AnswerError(f"'lesson' is {_kind(raw)}, not a mapping with cue and action")
        cue = _text(raw, "cue", MAX_LESSON_FIELD_CHARS)
        action = _text(raw, "action", MAX_LESSON_FIELD_CHARS)
        if cue and action:
            lesson = Lesson(cue=cue, action=action)
        elif cue or action:
            raise AnswerError("a lesson needs both a cue and an action")
    return ReflectorAnswer(
        diagnosis=diagnosis,
        lesson=lesson,
        banned=_patterns(obj, "banned"),
        preferred=_patterns(obj, "preferred"),
    )


_TASK_LIST = {"type": "array", "items": {"type": "object"}}
_CANNOT_FIX = {
    "type": "object",
    "description": "only when the rule cannot be fixed on this host: why, and what shows it",
    "properties": {
        "reason": {"type": "string", "enum": list(CANNOT_FIX_REASONS)},
        "evidence": {"type": "string", "maxLength": MAX_EVIDENCE_CHARS},
    },
    "required": ["reason", "evidence"],
}

#: JSON schemas for ``response_format`` (sent with ``strict: false``: the task and probe
#: mappings are free-form, which strict mode does not allow).
SCHEMAS: dict[str, dict[str, t.Any]] = {
    "worker": {
        "type": "object",
        "properties": {
            "rationale": {"type": "string", "maxLength": MAX_RATIONALE_CHARS},
            "tasks": {**_TASK_LIST, "description": "Ansible tasks to run; omit to ask for probes"},
            "probes": {**_TASK_LIST, "description": "read-only probes to run before writing tasks"},
            "cannot_fix": _CANNOT_FIX,
        },
        # one of the three shapes the prompt offers; cannot_fix stands alone (a relay trial:
        # a schema that required more than the prompt's shape made the model add to it)
        "anyOf": [{"required": ["tasks"]}, {"required": ["probes"]}, {"required": ["cannot_fix"]}],
    },
    "architect": {
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": list(VERDICTS)},
            "plan": {"type": "string", "maxLength": MAX_PLAN_CHARS},
            "cannot_fix": _CANNOT_FIX,
        },
        "anyOf": [{"required": ["verdict", "plan"]}, {"required": ["cannot_fix"]}],
    },
    "reflector": {
        "type": "object",
        "properties": {
            "diagnosis": {"type": "string", "maxLength": MAX_DIAGNOSIS_CHARS},
            "lesson": {
                "type": ["object", "null"],
                "properties": {
                    "cue": {"type": "string", "maxLength": MAX_LESSON_FIELD_CHARS},
                    "action": {"type": "string", "maxLength": MAX_LESSON_FIELD_CHARS},
                },
                "required": ["cue", "action"],
            },
            "banned": {
                "type": "array",
                "items": {"type": "string", "maxLength": MAX_PATTERN_CHARS},
                "maxItems": MAX_PATTERNS,
            },
            "preferred": {
                "type": "array",
                "items": {"type": "string", "maxLength": MAX_PATTERN_CHARS},
                "maxItems": MAX_PATTERNS,
            },
        },
        "required": ["diagnosis"],
    },
}
