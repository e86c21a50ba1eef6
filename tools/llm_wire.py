"""The OpenAI chat completions wire, shared by whatever stands in for the model: tools/llm_relay.py
(a person answers), tools/llm_replay.py (a saved transcript answers) and tests/llm_server.py
(a test's script answers).

- ``message_text``, ``tokens``, ``error_body``, ``completion``: the JSON a chat completion
  request holds and the JSON an answer must have for the ``openai`` client;
- ``who_asks``: which agent asks about which rule (the ``response_format`` schema name the
  controller sends, else the prompt's "You are the <Agent>"; the prompt's "Rule: <id> (");
- ``Endpoint``: a stdlib ``ThreadingHTTPServer`` on 127.0.0.1 serving ``POST /v1/chat/completions``
  (and ``GET /v1/models``) with a function ``answer(body) -> (status, json, headers)``.

Stdlib only: the tools run with any Python 3.9+.
"""

from __future__ import annotations

import http.server
import json
import math
import re
import threading
import time
import typing as t

AGENTS = ("architect", "worker", "reflector")
CHAT_PATH = "/v1/chat/completions"
_AGENT_LINE = re.compile(r"You are the (Architect|Worker|Reflector)\b")
_RULE_LINE = re.compile(r"^Rule: (\S+) \(", re.MULTILINE)

Answer = t.Tuple[int, t.Union[dict, str], t.Optional[t.Dict[str, str]]]


def message_text(body: dict) -> str:
    """The request's message contents joined by newlines (text parts of list contents too)."""
    texts = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "\n".join(texts)


def tokens(text: str) -> int:
    """A token count good enough for budgets: four characters a token."""
    return math.ceil(len(text) / 4)


def error_body(status: int, message: str, kind: str = "server_error") -> dict:
    return {"error": {"message": message, "type": kind, "code": status}}


def completion(body: dict, content: str, ident: str) -> dict:
    """The chat completion answering ``body`` with ``content``; ``ident``: its id."""
    prompt_tokens = tokens(message_text(body))
    completion_tokens = tokens(content)
    return {
        "id": ident,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "scripted"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def who_asks(body: dict) -> tuple[str | None, str | None]:
    """(agent, rule) of a request from the controller; None for what it does not say."""
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
    agent = schema if schema in AGENTS else None
    text = message_text(body)
    if agent is None:
        found = _AGENT_LINE.search(text)
        agent = found.group(1).lower() if found else None
    rule = _RULE_LINE.search(text)
    return agent, rule.group(1) if rule else None


class _Handler(http.server.BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: t.Any) -> None:  # pylint: disable=redefined-builtin
        if self.server.log is not None:
            self.server.log("%s %s" % (self.address_string(), format % args))

    def _send(self, status: int, body: t.Union[dict, str], headers: t.Optional[t.Dict[str, str]] = None) -> None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # pylint: disable=invalid-name
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.server.model, "object": "model"}]})
        else:
            self._send(404, error_body(404, "not found", "invalid_request_error"))

    def do_POST(self) -> None:  # pylint: disable=invalid-name
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.split("?", 1)[0] != CHAT_PATH:
            self._send(404, error_body(404, "only POST %s is served" % CHAT_PATH, "invalid_request_error"))
            return
        try:
            body = json.loads(raw.decode("utf-8") or "null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._send(400, error_body(400, "request body is not a JSON object", "invalid_request_error"))
            return
        try:
            status, answer, headers = self.server.answer(body)
        except Exception as exc:  # the endpoint keeps serving; the client sees why
            status, answer, headers = 500, error_body(500, "%s: %s" % (type(exc).__name__, exc)), None
        self._send(status, answer, headers)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    answer: t.Callable[[dict], Answer]
    log: t.Optional[t.Callable[[str], None]]
    model: str


class Endpoint:
    """An OpenAI-compatible endpoint on ``host`` (127.0.0.1) and ``port`` (0: a free one) whose
    answers come from ``answer(request_json) -> (status, json or text, headers)``. ``url``: its
    base URL (``http://127.0.0.1:PORT/v1``) once started; ``log``: called with one line per
    HTTP request (None: quiet)."""

    def __init__(self, answer: t.Callable[[dict], Answer], host: str = "127.0.0.1", port: int = 0,
                 log: t.Optional[t.Callable[[str], None]] = None, model: str = "scapforge-stand-in") -> None:
        self._server = _Server((host, port), _Handler)
        self._server.answer = answer
        self._server.log = log
        self._server.model = model
        self._thread: t.Optional[threading.Thread] = None
        self.url = "http://%s:%d/v1" % (host, self._server.server_address[1])

    def start(self) -> "Endpoint":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C)."""
        try:
            self._server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            self._server.server_close()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> "Endpoint":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
