#!/usr/bin/env python3
"""Serve a saved transcript back: an OpenAI-compatible endpoint on 127.0.0.1 that answers each
request with the recorded answer of the same agent and rule, in the order they were recorded,
so that a recorded session (a run's ``llm/`` folder, plugins/plugin_utils/transcript.py) becomes
a regression test.

    .venv/bin/python tools/llm_replay.py RUN_DIR/llm [--port 8801]

then run the job with ``scapforge_llm_base_url=http://127.0.0.1:8801/v1`` and
``scapforge_llm_model=replay``. Who asks is read from the request (``llm_wire.who_asks``: the
response_format schema name or "You are the <Agent>", and "Rule: <id> ("); calls recorded
without an answer (the endpoint failed) are left out. A request with no recorded answer left
for its agent and rule gets HTTP 404 (not retried) naming them. On exit (Ctrl-C) it prints what
it served: per call the recorded seq, and whether the prompt was the recorded one word for word
(a prompt that changed since the recording is served all the same: the answer is what is tested).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import typing as t

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), ".collections"))

import llm_wire  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils import transcript  # noqa: E402


class Replay:
    """Answers from the calls of a transcript folder: ``answer(body)`` for ``llm_wire.Endpoint``.

    ``served``: one record per request ({``agent``, ``rule``, ``seq`` (None: nothing left to
    serve), ``same_prompt``}); ``left()``: the recorded answers not asked for, by (agent, rule).
    Raises OSError/ValueError when the folder cannot be read.
    """

    def __init__(self, folder: str) -> None:
        self._queues: dict[tuple, collections.deque] = collections.defaultdict(collections.deque)
        for call in transcript.load(folder):
            if isinstance(call.get("answer"), str):
                self._queues[(call.get("agent"), call.get("rule"))].append(call)
        self.served: list[dict] = []
        self._lock = threading.Lock()

    def left(self) -> dict:
        with self._lock:
            return {"%s/%s" % key: [c.get("seq") for c in queue] for key, queue in self._queues.items() if queue}

    def answer(self, body: dict) -> llm_wire.Answer:
        agent, rule = llm_wire.who_asks(body)
        with self._lock:
            queue = self._queues.get((agent, rule))
            call = queue.popleft() if queue else None
            record = {"agent": agent, "rule": rule, "seq": call.get("seq") if call else None,
                      "same_prompt": bool(call) and _messages(call.get("request")) == _messages(body)}
            self.served.append(record)
        if call is None:
            # 404, not 500: the controller takes a 500 to its first structured request for a
            # refusal of the response_format and would ask twice more
            return 404, llm_wire.error_body(404, "llm_replay: no recorded answer left for %s/%s" % (agent, rule),
                                            "not_found_error"), {"x-should-retry": "false"}
        return 200, llm_wire.completion(body, call["answer"], "chatcmpl-replay-%s" % call.get("seq")), None


def _messages(request: t.Optional[dict]) -> list:
    return [(m.get("role"), m.get("content")) for m in (request or {}).get("messages") or [] if isinstance(m, dict)]


def main(argv: t.Optional[t.Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a run's llm/ folder")
    parser.add_argument("--port", type=int, default=8801)
    args = parser.parse_args(argv)
    replay = Replay(args.folder)
    endpoint = llm_wire.Endpoint(replay.answer, port=args.port, model="replay",
                                 log=lambda line: print(line, flush=True))
    print("replay of %s on %s" % (os.path.abspath(args.folder), endpoint.url), flush=True)
    endpoint.serve_forever()
    print(json.dumps({"served": replay.served, "left": replay.left()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
