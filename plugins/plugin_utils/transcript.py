"""What the model saw and said: every LLM call of a run, one JSON file each, under
``<run_dir>/llm/``.

A file is named ``<seq>-<agent>-<rule>.json`` (``seq``: the call's place in the run, 4 digits,
shared by every host of the run through a file lock: forks are processes) and holds:

- ``agent`` (architect, worker, reflector), ``rule`` (short id), ``host``, ``attempt``, ``seq``;
- ``request``: the chat completion request as sent (its messages redacted by ``llm.py``;
  the output mode the server took, the model, the temperature and max_tokens);
- ``answer``: the answer's text as the model wrote it (None when the call failed);
- ``usage``: ``prompt_tokens``, ``completion_tokens``, ``seconds``, ``mode``, ``http_attempts``;
- ``error``: why the call failed (``<kind>: <message>``), or None.

tools/llm_replay.py serves such a folder back; tools/llm_relay.py lets a person answer live.
"""

from __future__ import annotations

import json
import os
import re
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps

try:
    from filelock import FileLock
except ImportError:
    deps.missing("filelock")

FOLDER = "llm"
_NAME = re.compile(r"^(\d{4,})-")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class Transcript:
    """Writes the calls of one host into ``<run_dir>/llm/``."""

    def __init__(self, run_dir: str, host: str) -> None:
        self.folder = os.path.join(run_dir, FOLDER)
        os.makedirs(self.folder, exist_ok=True)
        self.host = host
        self._lock = FileLock(os.path.join(self.folder, ".seq.lock"), timeout=60)

    def _next_seq(self) -> int:
        numbers = [int(m.group(1)) for m in map(_NAME.match, os.listdir(self.folder)) if m]
        return max(numbers, default=0) + 1

    def record(self, agent: str, rule: str, attempt: int | None, request: t.Mapping | None,
               answer: str | None, usage: t.Mapping[str, t.Any], error: str | None = None) -> str:
        """Write one call; returns the file's path. Raises OSError."""
        with self._lock:
            seq = self._next_seq()
            name = "%04d-%s-%s.json" % (seq, _UNSAFE.sub("_", agent), _UNSAFE.sub("_", rule or "run"))
            path = os.path.join(self.folder, name)
            entry = {"seq": seq, "host": self.host, "agent": agent, "rule": rule, "attempt": attempt,
                     "request": dict(request or {}), "answer": answer, "usage": dict(usage), "error": error}
            tmp = path + ".tmp.%d" % os.getpid()
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(entry, handle, indent=1, ensure_ascii=False)
            os.replace(tmp, path)
        return path


def load(folder: str) -> list[dict]:
    """The calls of a transcript folder, in the order they were made. Raises OSError, ValueError."""
    names = sorted((int(m.group(1)), name) for name in os.listdir(folder)
                   if name.endswith(".json") and (m := _NAME.match(name)))
    calls = []
    for _number, name in names:
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            calls.append(json.load(handle))
    return calls
