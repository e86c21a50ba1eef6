#!/usr/bin/env python3
"""Play the model: an OpenAI-compatible endpoint on 127.0.0.1 that hands each chat completion
request to a person (or another program) through a folder, and answers with what they write.

    .venv/bin/python tools/llm_relay.py DIR [--port 8800] [--wait 3600]

then run the job with ``scapforge_llm_base_url=http://127.0.0.1:8800/v1``,
``scapforge_llm_model=relay`` and a ``scapforge_llm_timeout`` long enough to read and answer
(e.g. 3600). For each request the relay writes, numbered in arrival order:

- ``DIR/NNNN-<agent>-<rule>.json``: {``seq``, ``agent``, ``rule``, ``request``} (the request as the
  controller sent it, redacted);
- ``DIR/NNNN-<agent>-<rule>.txt``: its messages as plain text, to read;

and waits for ``DIR/NNNN-<agent>-<rule>.answer``: the answer's content as the model would
write it (the JSON object the prompt asks for), taken once the file has not changed for half
a second. The same request sent again (the client's retry after its timeout) waits for the
same answer file. No answer within ``--wait`` seconds: HTTP 504. Stdlib only (tools/llm_wire.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
import typing as t

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llm_wire  # noqa: E402

SETTLE_SECONDS = 0.5


class Relay:
    """The relay's answers: ``answer(body)`` for ``llm_wire.Endpoint``. ``folder``: where requests
    and answers meet; ``wait``: seconds to wait for an answer; ``poll``: seconds between looks;
    ``say``: called with one line per request and answer (None: quiet); ``settle``: seconds an
    answer file must stay unchanged before it is read (an editor may write it in pieces)."""

    def __init__(self, folder: str, wait: float = 3600.0, poll: float = 0.2,
                 say: t.Optional[t.Callable[[str], None]] = None, settle: float = SETTLE_SECONDS) -> None:
        self.folder = folder
        self.settle = settle
        os.makedirs(folder, exist_ok=True)
        self.wait = wait
        self.poll = poll
        self.say = say or (lambda line: None)
        self._lock = threading.Lock()
        self._stems: dict[str, str] = {}  # request digest -> file stem
        self._ids = 0

    def _stem(self, body: dict) -> tuple[str, bool]:
        """The file stem for ``body`` and whether it is new (a retry reuses its stem)."""
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        with self._lock:
            if digest in self._stems:
                return self._stems[digest], False
            agent, rule = llm_wire.who_asks(body)
            seq = 1 + max((int(n[:4]) for n in os.listdir(self.folder) if n[:4].isdigit()), default=0)
            stem = "%04d-%s-%s" % (seq, agent or "unknown", rule or "unknown")
            self._stems[digest] = stem
            return stem, True

    def _write_request(self, stem: str, body: dict) -> None:
        agent, rule = llm_wire.who_asks(body)
        entry = {"seq": int(stem[:4]), "agent": agent, "rule": rule, "request": body}
        with open(os.path.join(self.folder, stem + ".json"), "w", encoding="utf-8") as handle:
            json.dump(entry, handle, indent=1, ensure_ascii=False)
        lines = ["answer in: %s.answer (%s)" % (stem, (body.get("response_format") or {}).get("type", "text")), ""]
        for message in body.get("messages") or []:
            lines += ["=== %s ===" % message.get("role"), llm_wire.message_text({"messages": [message]}), ""]
        with open(os.path.join(self.folder, stem + ".txt"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines))

    def _read_answer(self, path: str) -> t.Optional[str]:
        """The answer once written and settled; None while there is none yet."""
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return None
        if stat.st_size == 0 or time.time() - stat.st_mtime < self.settle:
            return None
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    def answer(self, body: dict) -> llm_wire.Answer:
        stem, new = self._stem(body)
        if new:
            self._write_request(stem, body)
        self.say("%s: request written, waiting for %s.answer" % (stem, stem))
        path = os.path.join(self.folder, stem + ".answer")
        deadline = time.monotonic() + self.wait
        while time.monotonic() < deadline:
            content = self._read_answer(path)
            if content is not None:
                self.say("%s: answered (%d characters)" % (stem, len(content)))
                return 200, llm_wire.completion(body, content, "chatcmpl-relay-" + stem), None
            time.sleep(self.poll)
        self.say("%s: no answer within %g s" % (stem, self.wait))
        return 504, llm_wire.error_body(504, "no answer in %s within %g s" % (path, self.wait)), \
            {"x-should-retry": "false"}


def main(argv: t.Optional[t.Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="where requests are written and answers read")
    parser.add_argument("--port", type=int, default=8800)
    parser.add_argument("--wait", type=float, default=3600.0, help="seconds to wait for each answer")
    args = parser.parse_args(argv)
    relay = Relay(args.folder, wait=args.wait, say=lambda line: print(line, flush=True))
    endpoint = llm_wire.Endpoint(relay.answer, port=args.port, model="relay")
    print("relay on %s, folder %s" % (endpoint.url, os.path.abspath(args.folder)), flush=True)
    endpoint.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
