"""A scripted OpenAI-compatible chat server over real HTTP, for tests.

Built on pytest-httpserver's HTTPServer (werkzeug, threaded), bound to 127.0.0.1 on a free
port. Tests script what the "model" says; the real openai client (through
plugins/plugin_utils/llm.py) talks to it, and an ansible-playbook subprocess can reach it
at ``.url`` too::

    with ScriptedLLM() as llm:
        llm.script("rule_xyz", {"verdict": "PLAN", "plan": "..."})
        llm.script(lambda body: body.get("response_format") is None, "plain text", times=None)
        llm.script("boom", Raw(429, {"error": {"message": "slow down"}}, {"retry-after-ms": "10"}))
        ... LLMConfig(base_url=llm.url, model="scripted") ...
        assert llm.requests[0]["messages"][0]["content"] == ...

Only ``POST /v1/chat/completions`` is served; anything else gets 404. The JSON of requests and
answers is tools/llm_wire.py's, shared with tools/llm_relay.py and tools/llm_replay.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
import typing as t

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from llm_wire import completion, error_body, message_text  # tools/, on sys.path from tests/conftest.py

Match = t.Union[str, t.Callable[[dict], bool]]


@dataclasses.dataclass(frozen=True)
class Raw:
    """An HTTP reply as is: ``status``, ``body`` (a str, or a dict sent as JSON) and
    extra ``headers`` (e.g. ``{"retry-after-ms": "10"}`` to keep client backoff short)."""

    status: int
    body: t.Union[str, dict] = ""
    headers: t.Optional[t.Dict[str, str]] = None


Reply = t.Union[str, dict, Raw]


@dataclasses.dataclass
class _Script:
    match: Match
    reply: Reply
    times: t.Optional[int]  # None: forever
    delay: float


def _system_is(body: dict, agent: str) -> bool:
    """The request's system prompt is ``agent``'s (``You are the <agent>``)."""
    return str(body["messages"][0]["content"]).startswith("You are the %s" % agent)


class _QuickStopServer(HTTPServer):
    """HTTPServer whose stop() returns in ~0.05 s instead of werkzeug's 0.5 s poll."""

    def thread_target(self) -> None:
        assert self.server is not None
        self.server.serve_forever(poll_interval=0.05)


class ScriptedLLM:
    """The scripted server. ``url``: its base URL (``http://127.0.0.1:PORT/v1``, set by
    ``start()``); ``requests``: every JSON body received, in order.

    ``refuse_json_schema`` / ``refuse_json_object``: answer HTTP 500 to any request whose
    ``response_format`` has that type (as some llama.cpp / vLLM builds do), before scripts
    are consulted. A request that no script matches gets HTTP 500 saying so (with
    ``x-should-retry: false`` so that the openai client fails at once instead of retrying).
    """

    def __init__(self, refuse_json_schema: bool = False, refuse_json_object: bool = False) -> None:
        self.refuse_json_schema = refuse_json_schema
        self.refuse_json_object = refuse_json_object
        self.requests: list[dict] = []
        self._scripts: list[_Script] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: t.Optional[HTTPServer] = None
        self.url = ""

    def script(self, match: Match, reply: Reply, times: t.Optional[int] = 1, delay: float = 0.0) -> "ScriptedLLM":
        """Add a scripted reply.

        ``match``: a substring looked for in the request's message contents
        (``message_text``), or a callable(request_json) -> bool. ``reply``: a str (the
        answer's content), a dict (JSON-dumped as the content) or a ``Raw`` HTTP reply.
        ``times``: how many requests it answers (None: any number). ``delay``: seconds
        to wait before answering (for timeouts). Scripts are tried in the order added;
        the first that matches and has uses left answers. Returns self.
        """
        if times is not None and times < 1:
            raise ValueError("times must be at least 1 (or None for always)")
        with self._lock:
            self._scripts.append(_Script(match, reply, times, delay))
        return self

    def script_agents(self, workers: t.Mapping[t.Optional[str], Reply], plan: str = "p") -> "ScriptedLLM":
        """The usual agents of a lab test: the Architect always plans ``plan``, the Reflector
        always answers without a lesson, and the Worker answers ``workers[rule]`` once for
        the rule its request names (the key None: any rule). Returns self."""
        self.script(lambda b: _system_is(b, "Architect"), {"verdict": "PLAN", "plan": plan}, times=None)
        self.script(lambda b: _system_is(b, "Reflector"), {"diagnosis": "d", "lesson": None}, times=None)
        for rule, reply in workers.items():
            self.script(lambda b, r=rule: _system_is(b, "Worker") and (
                r is None or "Rule: %s (" % r in b["messages"][1]["content"]), reply)
        return self

    def start(self) -> "ScriptedLLM":
        """Listen on 127.0.0.1, on a free port. Returns self."""
        server = _QuickStopServer(host="127.0.0.1", port=0, threaded=True)
        server.expect_request("/v1/chat/completions", method="POST").respond_with_handler(self._handle)
        server.no_handler_status_code = 404
        server.start()
        self._server = server
        self.url = f"http://127.0.0.1:{server.port}/v1"
        return self

    def stop(self) -> None:
        """Stop listening and close the socket (a request in a ``delay`` is cut off)."""
        server, self._server = self._server, None
        if server is None:
            return
        listener = server.server
        server.stop()
        if listener is not None:
            listener.server_close()

    def __enter__(self) -> "ScriptedLLM":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def unused_scripts(self) -> list:
        """The ``match`` of each counted script (``times`` not None) that has uses left,
        for a test to assert that everything it scripted was asked for."""
        with self._lock:
            return [s.match for s in self._scripts if s.times]

    def _pick(self, body: dict) -> t.Optional[_Script]:
        text = message_text(body)
        with self._lock:
            for script in self._scripts:
                if script.times is not None and script.times <= 0:
                    continue
                hit = script.match(body) if callable(script.match) else script.match in text
                if hit:
                    if script.times is not None:
                        script.times -= 1
                    return script
        return None

    def _handle(self, request: Request) -> Response:
        try:
            body = json.loads(request.get_data(as_text=True) or "null")
        except ValueError:
            return self._json(400, error_body(400, "request body is not JSON", "invalid_request_error"))
        if not isinstance(body, dict):
            return self._json(400, error_body(400, "request body is not a JSON object", "invalid_request_error"))
        with self._lock:
            self.requests.append(body)

        kind = (body.get("response_format") or {}).get("type")
        if (kind == "json_schema" and self.refuse_json_schema) or (kind == "json_object" and self.refuse_json_object):
            return self._json(500, error_body(500, f"response_format type {kind} is not supported"))

        script = self._pick(body)
        if script is None:
            return self._json(
                500,
                error_body(
                    500, f"ScriptedLLM: no script matched the request (messages: {message_text(body)[:200]!r})"
                ),
                {"x-should-retry": "false"},
            )
        if script.delay:
            time.sleep(script.delay)
        reply = script.reply
        if isinstance(reply, Raw):
            if isinstance(reply.body, dict):
                return self._json(reply.status, reply.body, reply.headers)
            return Response(reply.body, status=reply.status, headers=reply.headers or {})
        content = reply if isinstance(reply, str) else json.dumps(reply)
        return self._json(200, self._completion(body, content))

    def _completion(self, body: dict, content: str) -> dict:
        return completion(body, content, f"chatcmpl-scripted-{next(self._ids)}")

    @staticmethod
    def _json(status: int, body: dict, headers: t.Optional[dict] = None) -> Response:
        return Response(json.dumps(body), status=status, headers=headers or {}, content_type="application/json")
