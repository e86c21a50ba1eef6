"""The controller's client for an OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp
server, OpenAI), on the ``openai`` package.

- Where data may go: ``check_endpoint`` allows loopback, private and link-local addresses
  (and ``localhost``); anything else needs ``allow_remote`` (the user's explicit consent).
- What is sent: every message's content goes through ``redact.redact`` first.
- Structured output: ``response_format`` json_schema first; a server that refuses it
  (HTTP 400 or 422, or 500 before any structured answer succeeded: some llama.cpp and
  vLLM builds answer 500) is asked again with json_object, then with plain text. The
  first mode that succeeds is kept for the client's life.
- Retries: the openai client's own (``max_retries``, exponential backoff, Retry-After
  honoured) on 408/409/429/5xx, connection errors and timeouts; a refusal of a
  response_format is not retried (the ``x-should-retry: false`` header the client obeys is
  set on that response by an httpx event hook, the documented way to hook the transport).
- A 200 whose body is not a chat completion (a proxy's error page, a body that is not JSON)
  is sent again, ``BAD_BODY_TRIES`` times in all: the openai client does not retry a 200.
- Errors: one ``LLMError`` with a ``kind`` from ``ERROR_KINDS``; its message never holds
  the API key. ``LLMError.transport``: the endpoint failed, not one answer (every kind but
  an unusable answer from an endpoint that does answer chat completions): the caller marks
  the endpoint down for the run (issue 18 item 7).

Tested against the real openai client over HTTP in tests/unit/test_llm_client.py (server:
tests/llm_server.py). A client is not thread-safe: use one per thread (Ansible forks are
processes, each with its own).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket
import time
import typing as t
import urllib.parse

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError
from ansible_collections.scapforge.remediation.plugins.plugin_utils.redact import redact

try:
    import openai
    from openai.types.chat import ChatCompletion
except ImportError:
    deps.missing("openai")

#: ``LLMError.kind`` values (closed list).
ERROR_KINDS = ("unavailable", "remote_not_allowed", "connection", "timeout", "http", "auth", "bad_response")

#: Structured-output modes, best first.
MODES = ("json_schema", "json_object", "text")

#: HTTP statuses that mean "this response_format is not supported" when answered to a
#: request that carries one (500 only until a structured answer has succeeded).
_REFUSAL_STATUSES = (400, 422)
_REFUSAL_STATUS_UNPROBED = 500

#: HTTP answers in a row whose body is not a chat completion before the call fails as a
#: transport failure (issue 18: an endpoint answering 200 with a non-JSON body was called 22 times).
BAD_BODY_TRIES = 3

DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 4
API_KEY_ENV = ("SCAPFORGE_LLM_API_KEY", "OPENAI_API_KEY")
#: Sent when no key is configured: local servers need none, the client wants one.
NO_API_KEY = "none"

_MAX_SERVER_MESSAGE_CHARS = 500


class LLMError(ScapforgeError):
    """An LLM call that produced no answer.

    ``kind``: one of ``ERROR_KINDS``: ``unavailable`` (no endpoint or model configured, or
    an unusable base_url), ``remote_not_allowed`` (the endpoint is not loopback/private and
    allow_remote is false), ``connection`` (cannot connect or resolve), ``timeout`` (no
    answer within the timeout, after retries), ``http`` (an HTTP error status, in
    ``status``), ``auth`` (HTTP 401/403, in ``status``), ``bad_response`` (an answer that is
    not a chat completion with content). The message is human-readable and never holds
    the API key. ``transport``: the endpoint failed rather than one answer: True for every
    kind but ``bad_response``, and for a ``bad_response`` whose bodies were not chat
    completions ``BAD_BODY_TRIES`` times in a row.
    """

    def __init__(self, kind: str, message: str, status: int | None = None, transport: bool | None = None) -> None:
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown LLMError kind {kind!r}")
        super().__init__(message, kind=kind)
        self.status = status
        self.transport = kind != "bad_response" if transport is None else bool(transport)


@dataclasses.dataclass(frozen=True)
class LLMConfig:
    """Where and how to call the model.

    ``base_url``: the OpenAI-compatible base, normally ending in ``/v1``; ``model``: the
    served model name; ``api_key``: sent as a bearer token; ``timeout``: seconds per HTTP
    attempt; ``max_retries``: retries after the first attempt (backoff 0.5 s doubling, at
    most 8 s, or the server's Retry-After); ``allow_remote``: allow an endpoint that is not
    loopback/private; ``temperature``: sampling temperature (0: the same context gives the
    same answer where the server is deterministic).
    """

    base_url: str | None
    model: str | None
    api_key: str = NO_API_KEY
    timeout: float = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    allow_remote: bool = False
    temperature: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {self.timeout!r}")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be a non-negative integer, got {self.max_retries!r}")

    @property
    def configured(self) -> bool:
        """True when both base_url and model are set."""
        return bool(self.base_url) and bool(self.model)

    @classmethod
    def from_options(
        cls,
        base_url: str | None,
        model: str | None,
        api_key: str | None = None,
        timeout: float | None = None,
        allow_remote: bool = False,
        environ: t.Mapping[str, str] | None = None,
        *,
        max_retries: int | None = None,
    ) -> "LLMConfig":
        """Build a config from plugin options; None or "" means "not given".

        The API key defaults to ``$SCAPFORGE_LLM_API_KEY``, then ``$OPENAI_API_KEY`` (read
        from ``environ``, default ``os.environ``), then ``NO_API_KEY``. Raises ValueError
        for a timeout that is not a positive number or negative max_retries.
        """
        environ = os.environ if environ is None else environ
        if not api_key:
            api_key = next((environ[name] for name in API_KEY_ENV if environ.get(name)), NO_API_KEY)
        return cls(
            base_url=(base_url or "").strip() or None,
            model=(model or "").strip() or None,
            api_key=api_key,
            timeout=float(timeout) if timeout not in (None, "") else DEFAULT_TIMEOUT,
            max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
            allow_remote=bool(allow_remote),
        )


def _is_local(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_private or ip.is_link_local


def check_endpoint(base_url: str, allow_remote: bool) -> None:
    """Refuse an endpoint outside this machine's networks unless ``allow_remote``.

    Allowed without consent: ``localhost``, loopback, private (RFC 1918, unique local
    fc00::/7, ...) and link-local addresses; a host name other than localhost is resolved
    (``socket.getaddrinfo``) and ALL its addresses must be such. Nothing connects here.
    Raises LLMError: ``unavailable`` (not an http(s) URL with a host), ``connection`` (the
    name does not resolve), ``remote_not_allowed`` (a public address).
    """
    try:
        parts = urllib.parse.urlsplit(base_url)
        host = parts.hostname
        port = parts.port
    except ValueError as exc:
        raise LLMError("unavailable", f"LLM base_url is not a valid URL: {exc}") from None
    shown = redact(base_url)[0]
    if parts.scheme not in ("http", "https") or not host:
        raise LLMError("unavailable", f"LLM base_url {shown!r} is not an http(s) URL with a host")
    if allow_remote:
        return
    if host.rstrip(".") == "localhost":
        return
    try:
        addresses = [host.split("%", 1)[0]] if _looks_like_ip(host) else _resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise LLMError("connection", f"cannot resolve the LLM host {host!r}: {exc}") from None
    remote = [a for a in addresses if not _is_local(a)]
    if remote:
        raise LLMError(
            "remote_not_allowed",
            f"the LLM endpoint {shown} is not on a loopback or private network ({', '.join(remote)}): "
            "prompts carry host data; allow it explicitly (allow_remote) to send them there",
        )


def _looks_like_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _resolve(host: str, port: int | None) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({info[4][0].split("%", 1)[0] for info in infos})


@dataclasses.dataclass(frozen=True)
class Completion:
    """One answer: ``text`` (the message content), ``mode`` (one of ``MODES``: how it was
    asked for), token counts from the server's ``usage`` (0 when it sends none),
    ``seconds`` (wall time of the call, fallbacks and retries included), ``http_attempts``
    (HTTP requests sent for it), ``finish_reason`` (``stop``, ``length``, ... or None),
    ``redactions`` (secrets replaced in the messages sent)."""

    text: str
    mode: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    http_attempts: int
    finish_reason: str | None
    redactions: int = 0


def _redact_messages(messages: list[dict]) -> tuple[list[dict], int]:
    """Copies of ``messages`` with every text content redacted, and the count replaced."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise TypeError("messages must be a list of mappings")
    total = 0
    cleaned = []
    for message in messages:
        message = dict(message)
        content = message.get("content")
        if isinstance(content, str):
            message["content"], n = redact(content)
            total += n
        elif isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
            parts = []
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    part = dict(part)
                    part["text"], n = redact(part["text"])
                    total += n
                parts.append(part)
            message["content"] = parts
        cleaned.append(message)
    return cleaned, total


def _response_format(mode: str, schema: dict, schema_name: str) -> dict | None:
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": schema_name, "schema": schema, "strict": False}}
    if mode == "json_object":
        return {"type": "json_object"}
    return None


class LLMClient:
    """Chat completions against one configured endpoint.

    Raises LLMError ``unavailable`` when the config is not configured, and whatever
    ``check_endpoint`` raises, at construction. ``close()`` (or ``with``) releases the
    HTTP connections.
    """

    def __init__(self, config: LLMConfig) -> None:
        if not config.configured:
            raise LLMError("unavailable", "no LLM endpoint configured (base_url and model are both needed)")
        check_endpoint(config.base_url, config.allow_remote)
        self.config = config
        self.mode = MODES[0]
        self._mode_proven = False
        self._http_attempts = 0
        self._probing = False
        #: the last chat completion request sent, as sent (messages redacted), for the run's transcript
        self.last_request: dict | None = None
        http_client = openai.DefaultHttpxClient(
            event_hooks={"request": [self._on_request], "response": [self._on_response]},
        )
        self._client = openai.OpenAI(
            base_url=config.base_url,
            api_key=config.api_key,
            timeout=config.timeout,
            max_retries=config.max_retries,
            http_client=http_client,
        )

    def close(self) -> None:
        """Close the HTTP connections; the client cannot be used afterwards."""
        self._client.close()

    def __enter__(self) -> "LLMClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _on_request(self, request: t.Any) -> None:
        self._http_attempts += 1

    def _on_response(self, response: t.Any) -> None:
        # A 500 to a request probing a response_format is a refusal, not a transient
        # failure: tell the openai client not to retry it (it obeys x-should-retry).
        if self._probing and response.status_code == _REFUSAL_STATUS_UNPROBED:
            response.headers["x-should-retry"] = "false"

    def complete(
        self,
        messages: list[dict],
        schema: dict,
        schema_name: str,
        max_tokens: int | None = None,
    ) -> Completion:
        """Ask for one answer to ``messages`` (OpenAI chat format; contents are redacted).

        ``schema``/``schema_name``: the JSON schema the answer should follow (see
        answers.SCHEMAS), used while the server takes json_schema; ``max_tokens``: cap on
        the answer's tokens (None: the server's default). Returns a Completion; the text is
        not parsed here (answers.extract_object does it). Raises LLMError (see its kinds).
        """
        sent, redactions = _redact_messages(messages)
        started = time.monotonic()
        self._http_attempts = 0
        refused: openai.APIStatusError | None = None
        for mode in MODES[MODES.index(self.mode) :]:
            request: dict[str, t.Any] = {
                "model": self.config.model,
                "messages": sent,
                "temperature": self.config.temperature,
            }
            response_format = _response_format(mode, schema, schema_name)
            if response_format is not None:
                request["response_format"] = response_format
            if max_tokens is not None:
                request["max_tokens"] = max_tokens
            self._probing = response_format is not None and not self._mode_proven
            self.last_request = request
            try:
                response = self._send(request)
            except openai.APIStatusError as exc:
                if response_format is not None and (
                    exc.status_code in _REFUSAL_STATUSES
                    or (exc.status_code == _REFUSAL_STATUS_UNPROBED and self._probing)
                ):
                    refused = exc
                    continue
                raise self._error(exc, started) from None
            except openai.APIError as exc:
                raise self._error(exc, started) from None
            finally:
                self._probing = False
            completion = self._completion(response, mode, started, redactions)
            self.mode, self._mode_proven = mode, True
            return completion
        if refused is None:  # the loop above returns or records why the server refused
            raise AssertionError("no output mode was tried")
        raise self._error(refused, started) from None

    def _send(self, request: dict) -> ChatCompletion:
        """The chat completion for ``request``, sent again while the endpoint answers with a
        body that is not one (not JSON, or not a chat completion), ``BAD_BODY_TRIES`` times in
        all; then LLMError ``bad_response`` with ``transport`` set. openai errors pass through."""
        why = ""
        for _try in range(BAD_BODY_TRIES):
            try:
                response = self._client.chat.completions.create(**request)
            except ValueError as exc:  # a JSON content type with a body that is not JSON
                why = f"a body that is not JSON: {_scrub(str(exc), self.config.api_key)[:200]}"
                continue
            if isinstance(response, ChatCompletion):
                return response
            why = f"something that is not a chat completion: {_scrub(str(response), self.config.api_key)[:200]!r}"
        where = redact(self.config.base_url or "")[0]
        raise LLMError("bad_response", f"the LLM endpoint {where} answered {BAD_BODY_TRIES} times in a row with {why}",
                       transport=True)

    def _completion(self, response: object, mode: str, started: float, redactions: int) -> Completion:
        """The Completion for a parsed response; LLMError ``bad_response`` when it has no
        usable content (the openai client does not validate what a server sends)."""
        key = self.config.api_key
        if not isinstance(response, ChatCompletion):
            shown = _scrub(str(response), key)[:200]
            raise LLMError("bad_response", f"the LLM endpoint did not answer with a chat completion: {shown!r}")
        try:
            choice = response.choices[0]
            message = choice.message
            content = getattr(message, "content", None)
            finish_reason = choice.finish_reason
        except (AttributeError, IndexError, KeyError, TypeError):
            raise LLMError("bad_response", "the LLM endpoint answered with no choices") from None
        if not isinstance(content, str) or not content.strip():
            refusal = getattr(message, "refusal", None)
            why = f"refusal: {refusal}" if refusal else f"finish_reason={finish_reason}"
            raise LLMError("bad_response", f"the LLM endpoint answered with no content ({_scrub(why, key)[:300]})")
        usage = getattr(response, "usage", None)
        return Completion(
            text=content,
            mode=mode,
            prompt_tokens=_count(getattr(usage, "prompt_tokens", 0)),
            completion_tokens=_count(getattr(usage, "completion_tokens", 0)),
            seconds=time.monotonic() - started,
            http_attempts=self._http_attempts,
            finish_reason=finish_reason if isinstance(finish_reason, str) else None,
            redactions=redactions,
        )

    def _error(self, exc: openai.APIError, started: float) -> LLMError:
        """The LLMError for an openai error, its message scrubbed of the API key."""
        where = redact(self.config.base_url or "")[0]
        spent = f"{self._http_attempts} attempt(s), {time.monotonic() - started:.1f} s"
        key = self.config.api_key
        if isinstance(exc, openai.APITimeoutError):
            return LLMError(
                "timeout", f"the LLM endpoint {where} did not answer within {self.config.timeout:g} s ({spent})"
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f": {_scrub(str(cause), key)}" if cause else ""
            return LLMError("connection", f"cannot connect to the LLM endpoint {where}{detail} ({spent})")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            said = _scrub(_server_message(exc), key)
            if status in (401, 403):
                return LLMError("auth", f"the LLM endpoint {where} refused the API key (HTTP {status}): {said}", status)
            return LLMError("http", f"the LLM endpoint {where} answered HTTP {status}: {said} ({spent})", status)
        return LLMError("bad_response", f"the LLM endpoint {where} sent an unusable answer: {_scrub(str(exc), key)}")


def _count(value: object) -> int:
    """A token count as the server sent it; 0 when absent or not a count."""
    try:
        return max(0, int(value or 0))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own error text (OpenAI ``{"error": {"message": ...}}`` or the body)."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message)
    try:
        text = exc.response.text
    except Exception:  # a streamed or closed body: the status says enough
        text = ""
    return text or exc.message


def _scrub(text: str, api_key: str | None) -> str:
    """``text`` without the API key or any other secret, cut to a readable length."""
    if api_key and api_key != NO_API_KEY and len(api_key) >= 4:
        text = text.replace(api_key, "[REDACTED:api_key]")
    text = redact(text)[0]
    if len(text) > _MAX_SERVER_MESSAGE_CHARS:
        text = text[:_MAX_SERVER_MESSAGE_CHARS] + "..."
    return text
