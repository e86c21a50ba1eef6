"""The three agents on one OpenAI-compatible endpoint: Architect, Worker and Reflector.

Each call renders the skill's template for the agent (``plugin_utils.prompts``) with the
sections of ``plugin_utils.context``, sends it through ``plugin_utils.llm.LLMClient``
(structured output with its fallbacks), parses the answer into a typed record
(``plugin_utils.answers``), and records one ``llm_call`` event: the agent, the rule, the
output mode the server took, prompt and completion tokens, seconds, and the size of each
section sent; with a ``transcript.Transcript`` the call's request as sent and its answer go to
``<run_dir>/llm/``. Tokens are added to the run's :class:`TokenLedger`, shared by every host of
the run (Ansible forks) through a file lock.

An answer that cannot be used (junk, empty, too large, truncated, wrong shape, a completion
without content) comes back as ``Reply.error`` with its tokens counted; an endpoint that
fails after its retries (connection, timeout, HTTP error, bodies that are not chat
completions ``llm.BAD_BODY_TRIES`` times in a row: ``LLMError.transport``) raises
``llm.LLMError``, and the Worker phase marks it down for the host's run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import answers, context, deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils.llm import LLMClient, LLMError

try:
    from filelock import FileLock
except ImportError:
    deps.missing("filelock")

_PARSERS = {
    "architect": answers.parse_architect,
    "worker": answers.parse_worker,
    "reflector": answers.parse_reflector,
}


class TokenLedger:
    """Tokens spent by the whole run, in ``<run_dir>/llm_usage.json`` ({"tokens", "calls"}).

    Forks of one playbook run (one per host) add to the same file; ``filelock`` serialises
    them and the file is replaced atomically (temp file + rename), so no count is lost.
    ``limit`` is the run's budget in tokens (0: none).
    """

    def __init__(self, run_dir: str, limit: int = 0) -> None:
        os.makedirs(run_dir, exist_ok=True)
        self.path = os.path.join(run_dir, "llm_usage.json")
        self.limit = int(limit or 0)
        self._lock = FileLock(self.path + ".lock", timeout=60)

    def _read(self) -> dict:
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
            return {"tokens": int(data.get("tokens", 0)), "calls": int(data.get("calls", 0))}
        except FileNotFoundError:
            return {"tokens": 0, "calls": 0}
        except (OSError, ValueError) as exc:
            raise RuntimeError("the run's token ledger %s is unreadable: %s" % (self.path, exc)) from None

    def add(self, tokens: int) -> int:
        """Add one call of ``tokens`` tokens; return the run's total after it."""
        with self._lock:
            data = self._read()
            data["tokens"] += int(tokens)
            data["calls"] += 1
            tmp = self.path + ".tmp.%d" % os.getpid()
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(data, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
            return data["tokens"]

    def total(self) -> int:
        with self._lock:
            return self._read()["tokens"]

    def left(self) -> float:
        """Tokens left in the run's budget (infinity without one)."""
        return float("inf") if not self.limit else self.limit - self.total()


@dataclasses.dataclass
class Reply:
    """One agent answer: ``answer`` (the typed record from ``plugin_utils.answers``) or
    ``error`` (why the answer could not be used), the ``tokens`` it cost, and the output
    ``mode`` the server accepted (json_schema, json_object or text)."""

    answer: t.Any = None
    error: str | None = None
    tokens: int = 0
    mode: str = ""


class Agents:
    """Calls the agents for one host.

    client: an ``LLMClient``; prompts: a ``PromptSet``; events: the run's ``EventLog``;
    ledger: the run's ``TokenLedger``; base: the template variables every prompt gets
    (``skill`` {name, description} and ``host`` {os, virtualization, user, become});
    max_tokens: the most tokens one answer may take (a small model left unbounded repeats
    itself to the end of its context: minutes per call, seen with SmolLM2 on llama.cpp);
    transcript: a ``transcript.Transcript`` that keeps each request and answer (None: none kept).
    """

    def __init__(self, client: LLMClient, prompts, events, ledger: TokenLedger, base: dict,
                 max_tokens: int = 2000, transcript=None) -> None:
        self.client = client
        self.transcript = transcript
        self.max_tokens = max_tokens
        self.prompts = prompts
        self.events = events
        self.ledger = ledger
        self.base = dict(base)

    def ask(self, agent: str, rule: str, attempt: int | None, sections: t.Sequence[context.Section],
            skipped: t.Sequence[str] = (), variables: t.Mapping[str, t.Any] | None = None) -> Reply:
        """Render ``agent``'s template with the base variables, ``variables`` and ``sections``,
        send it, parse the answer. ``rule`` (short id) and ``attempt`` label the events.
        Raises LLMError (``transport``) when the endpoint fails after its retries, prompts.PromptError when
        the template cannot render."""
        data = dict(self.base)
        data.update(variables or {})
        data["sections"] = [s.as_dict() for s in sections]
        messages = self.prompts.render(agent, data)
        for name in skipped:
            self.events.emit("context_section_skipped", rule=rule, attempt=attempt, agent=agent, section=name)
        try:
            completion = self.client.complete(messages, answers.SCHEMAS[agent], agent,
                                              max_tokens=self.max_tokens or None)
        except LLMError as exc:
            self._record(agent, rule, attempt, None, "%s: %s" % (exc.kind, exc))
            self.events.emit("llm_call", rule=rule, attempt=attempt, agent=agent, ok=False, error_kind=exc.kind,
                             msg=str(exc)[:300], sent=context.sizes(sections))
            if not exc.transport:  # the server answered a chat completion with nothing usable: this answer fails
                return Reply(error=str(exc))
            raise
        self._record(agent, rule, attempt, completion, None)
        tokens = int(completion.prompt_tokens or 0) + int(completion.completion_tokens or 0)
        run_total = self.ledger.add(tokens)
        reply = Reply(tokens=tokens, mode=completion.mode)
        try:
            reply.answer = _PARSERS[agent](completion.text)
        except answers.AnswerError as exc:
            reply.error = str(exc)
        self.events.emit(
            "llm_call", rule=rule, attempt=attempt, agent=agent, ok=reply.error is None, mode=completion.mode,
            prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens,
            seconds=round(completion.seconds, 2), http_attempts=completion.http_attempts,
            redactions=getattr(completion, "redactions", 0), run_tokens=run_total,
            sent=context.sizes(sections), prompt_chars=sum(len(m["content"]) for m in messages),
            answer_chars=len(completion.text or ""), error=reply.error,
        )
        return reply

    def _record(self, agent: str, rule: str, attempt: int | None, completion, error: str | None) -> None:
        """Keep the call in the run's transcript (the request as the client sent it)."""
        if self.transcript is None:
            return
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0, "mode": None, "http_attempts": 0}
        if completion is not None:
            usage.update(prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens,
                         seconds=round(completion.seconds, 3), mode=completion.mode,
                         http_attempts=completion.http_attempts)
        self.transcript.record(agent, rule, attempt, getattr(self.client, "last_request", None),
                               completion.text if completion is not None else None, usage, error)
