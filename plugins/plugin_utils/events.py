"""Append-only JSONL event log shared by every host of a run.

One line per event: ``{"time": ISO-8601 UTC, "host": str, "event": str, "rule": str|None,
"attempt": int|None, "data": {...}}``. Ansible forks write to the same file at once: each
event is one ``os.write`` of a single line on a descriptor opened with O_APPEND, which
POSIX appends atomically for regular files, so lines never interleave.
"""

from __future__ import annotations

import datetime
import json
import os
import typing as t


def utc_now() -> str:
    """Current UTC time as ISO 8601 with seconds and a ``Z`` suffix."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventLog:
    """Writes events for one host to ``path`` (created with its directory if missing).

    ``listener``: called with each record once it is written (the console's progress lines,
    ``console.ConsoleProgress.event``); it must not raise.
    Raises OSError if the directory cannot be created or the file opened.
    """

    def __init__(self, path: str, host: str, listener: t.Callable[[dict], None] | None = None) -> None:
        self.path = path
        self.host = host
        self.listener = listener
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    def emit(self, event: str, rule: str | None = None, attempt: int | None = None, **data: t.Any) -> dict:
        """Append one event and return it as written."""
        record = {
            "time": utc_now(),
            "host": self.host,
            "event": event,
            "rule": rule,
            "attempt": attempt,
            "data": data,
        }
        line = (json.dumps(record, default=str, sort_keys=False) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        if self.listener is not None:
            self.listener(record)
        return record


def read_events(path: str) -> list[dict]:
    """Read every event of a JSONL log; raises ValueError naming the line of a corrupt one."""
    events = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError("%s line %d is not JSON: %s" % (path, number, exc)) from None
    return events
