"""LLMClient over real HTTP: the real openai client against tests/llm_server.py.

Backoff: the openai client waits 0.5 s doubling between retries unless the server sends
Retry-After; scripted errors carry ``retry-after-ms: 10`` to keep the suite fast, and one
test keeps the client's own backoff to prove it is there. Nothing here leaves 127.0.0.1:
the endpoint checks on 10.0.0.5 / 8.8.8.8 are pure (no connection is made).
"""

import socket

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from llm_server import Raw, ScriptedLLM

from ansible_collections.scapforge.remediation.plugins.plugin_utils import llm as llm_mod
from ansible_collections.scapforge.remediation.plugins.plugin_utils.answers import SCHEMAS, parse_architect
from ansible_collections.scapforge.remediation.plugins.plugin_utils.llm import (
    LLMClient,
    LLMConfig,
    LLMError,
    check_endpoint,
)

API_KEY = "sk-" + "scapforge-test-" + "k3y0123456789abcdef"
FAST = {"retry-after-ms": "10"}
PLAN = {"verdict": "PLAN", "plan": "set UMASK 077 in /etc/login.defs"}
ARCH = SCHEMAS["architect"]


def _messages(text="rule accounts_umask_etc_login_defs"):
    return [{"role": "system", "content": "You are the Architect."}, {"role": "user", "content": text}]


def _client(server, **overrides):
    fields = {"base_url": server.url, "model": "scripted", "api_key": API_KEY, "timeout": 5.0, "max_retries": 2}
    fields.update(overrides)
    return LLMClient(LLMConfig(**fields))


def _formats(server):
    return [(body.get("response_format") or {}).get("type") for body in server.requests]


def _is(kind):
    return lambda body: (body.get("response_format") or {}).get("type") == kind


@pytest.fixture
def server():
    with ScriptedLLM() as scripted:
        yield scripted


def test_json_schema_accepted_and_answer_read(server):
    server.script("accounts_umask", PLAN)
    with _client(server) as client:
        done = client.complete(_messages(), ARCH, "architect", max_tokens=300)
    assert parse_architect(done.text).verdict == "PLAN"
    assert (done.mode, done.http_attempts, done.finish_reason) == ("json_schema", 1, "stop")
    body = server.requests[0]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "architect", "schema": ARCH, "strict": False},
    }
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("scripted", 0.0, 300)
    assert server.unused_scripts == []


def test_usage_tokens_come_from_the_response(server):
    server.script("x" * 40, "y" * 10)
    with _client(server) as client:
        done = client.complete([{"role": "user", "content": "x" * 40}], ARCH, "architect")
    # the scripted server counts ceil(characters / 4): 40 -> 10, 10 -> 3
    assert (done.prompt_tokens, done.completion_tokens) == (10, 3)
    assert done.seconds > 0


@pytest.mark.parametrize("usage", [None, {"prompt_tokens": "many", "completion_tokens": None}])
def test_missing_or_odd_usage_counts_zero(server, usage):
    body = {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "length"}],
    }
    if usage is not None:
        body["usage"] = usage
    server.script("u", Raw(200, body))
    with _client(server) as client:
        done = client.complete(_messages("u"), ARCH, "architect")
    assert (done.prompt_tokens, done.completion_tokens, done.finish_reason) == (0, 0, "length")


def test_json_schema_refused_with_500_falls_back_to_json_object_and_remembers():
    with ScriptedLLM(refuse_json_schema=True) as server:
        server.script("umask", PLAN, times=2)
        with _client(server, max_retries=4) as client:
            first = client.complete(_messages(), ARCH, "architect")
            second = client.complete(_messages(), ARCH, "architect")
    # the refusal is not retried (max_retries=4 notwithstanding), the second call starts at json_object
    assert _formats(server) == ["json_schema", "json_object", "json_object"]
    assert (first.mode, first.http_attempts) == ("json_object", 2)
    assert (second.mode, second.http_attempts) == ("json_object", 1)
    assert client.mode == "json_object"


@pytest.mark.parametrize("status", [400, 422])
def test_json_schema_refused_with_400_or_422(server, status):
    server.script(_is("json_schema"), Raw(status, {"error": {"message": "unsupported response_format"}}), times=None)
    server.script("umask", PLAN)
    with _client(server) as client:
        assert client.complete(_messages(), ARCH, "architect").mode == "json_object"
    assert _formats(server) == ["json_schema", "json_object"]


def test_server_refusing_both_structured_modes_gets_plain_text():
    with ScriptedLLM(refuse_json_schema=True, refuse_json_object=True) as server:
        server.script("umask", "verdict: PLAN\nplan: set UMASK", times=2)
        with _client(server) as client:
            first = client.complete(_messages(), ARCH, "architect")
            second = client.complete(_messages(), ARCH, "architect")
    assert _formats(server) == ["json_schema", "json_object", None, None]
    assert "response_format" not in server.requests[-1]
    assert (first.mode, second.mode) == ("text", "text")
    assert parse_architect(second.text).plan == "set UMASK"


def test_a_500_after_json_schema_worked_is_retried_not_a_refusal(server):
    server.script("first", PLAN)
    server.script("second", Raw(500, {"error": {"message": "CUDA hiccup"}}, FAST))
    server.script("second", PLAN)
    with _client(server) as client:
        client.complete(_messages("first"), ARCH, "architect")
        done = client.complete(_messages("second"), ARCH, "architect")
    assert (done.mode, done.http_attempts) == ("json_schema", 2)
    assert _formats(server) == ["json_schema"] * 3


def test_rate_limit_twice_then_success_uses_the_client_backoff(server):
    # no Retry-After: the openai client's own exponential backoff (0.5 s, then 1 s, jitter -25 %)
    server.script("umask", Raw(429, {"error": {"message": "rate limited"}}), times=2)
    server.script("umask", PLAN)
    with _client(server, max_retries=4) as client:
        done = client.complete(_messages(), ARCH, "architect")
    assert done.http_attempts == 3
    assert len(server.requests) == 3
    assert done.seconds >= 1.1
    assert done.mode == "json_schema"


def test_503_forever_is_an_http_error_after_max_retries(server):
    server.script("umask", Raw(503, {"error": {"message": "model loading"}}, FAST), times=None)
    with _client(server, max_retries=3) as client:
        with pytest.raises(LLMError) as caught:
            client.complete(_messages(), ARCH, "architect")
    assert (caught.value.kind, caught.value.status) == ("http", 503)
    assert "model loading" in str(caught.value)
    assert len(server.requests) == 4  # the first attempt and 3 retries, all json_schema
    assert set(_formats(server)) == {"json_schema"}


def test_a_client_error_is_not_retried(server):
    server.script("umask", Raw(404, {"error": {"message": "model 'scripted' not found"}}))
    with _client(server) as client:
        with pytest.raises(LLMError) as caught:
            client.complete(_messages(), ARCH, "architect")
    assert (caught.value.kind, caught.value.status) == ("http", 404)
    assert len(server.requests) == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_connection_refused():
    config = LLMConfig(base_url=f"http://127.0.0.1:{_closed_port()}/v1", model="m", api_key=API_KEY, max_retries=0)
    with LLMClient(config) as client:
        with pytest.raises(LLMError) as caught:
            client.complete(_messages(), ARCH, "architect")
    assert caught.value.kind == "connection"
    assert "cannot connect" in str(caught.value)


def test_slow_server_times_out(server):
    server.script("umask", PLAN, delay=1.0)
    with _client(server, timeout=0.3, max_retries=0) as client:
        with pytest.raises(LLMError) as caught:
            client.complete(_messages(), ARCH, "architect")
    assert caught.value.kind == "timeout"
    assert "did not answer within 0.3 s" in str(caught.value)


@pytest.mark.parametrize("status, kind", [(401, "auth"), (403, "auth"), (500, "http")])
def test_the_api_key_never_appears_in_errors(server, status, kind):
    # a server that echoes the key back in its error text
    echo = Raw(status, {"error": {"message": f"Incorrect API key provided: {API_KEY}"}}, {"x-should-retry": "false"})
    server.script("umask", echo, times=None)
    with _client(server, max_retries=0) as client:
        with pytest.raises(LLMError) as caught:
            client.complete(_messages(), ARCH, "architect")
    assert (caught.value.kind, caught.value.status) == (kind, status)
    assert API_KEY not in str(caught.value) and API_KEY not in repr(caught.value.args)
    assert "Incorrect API key provided" in str(caught.value)
    assert server.requests  # the key was sent, as a bearer token


def test_the_api_key_is_not_in_connection_or_timeout_errors(server):
    server.script("umask", PLAN, delay=1.0)
    errors = []
    for config in (
        LLMConfig(base_url=f"http://127.0.0.1:{_closed_port()}/v1", model="m", api_key=API_KEY, max_retries=0),
        LLMConfig(base_url=server.url, model="m", api_key=API_KEY, max_retries=0, timeout=0.2),
    ):
        with LLMClient(config) as client, pytest.raises(LLMError) as caught:
            client.complete(_messages(), ARCH, "architect")
        errors.append(caught.value)
    assert [e.kind for e in errors] == ["connection", "timeout"]
    assert not any(API_KEY in str(e) for e in errors)


def test_secrets_in_messages_are_redacted_before_sending(server):
    key = (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
        .decode()
    )
    shadow = "root:$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG.:19700:0:99999:7:::"
    evidence = f"probe output:\n{key}\n/etc/shadow:\n{shadow}\n"
    server.script("probe output", PLAN)
    messages = [{"role": "user", "content": evidence}, {"role": "user", "content": [{"type": "text", "text": shadow}]}]
    with _client(server) as client:
        done = client.complete(messages, ARCH, "architect")
    assert done.redactions == 3
    sent = server.requests[0]["messages"]
    assert sent[0]["content"] == (
        "probe output:\n[REDACTED:private_key]\n\n/etc/shadow:\n" "root:[REDACTED:password_hash]:19700:0:99999:7:::\n"
    )
    assert sent[1]["content"] == [{"type": "text", "text": "root:[REDACTED:password_hash]:19700:0:99999:7:::"}]
    assert messages[0]["content"] == evidence  # the caller's messages are not modified


JUNK_BODIES = [Raw(200, "<html>proxy error</html>", {"content-type": "text/html"}),
               Raw(200, "{broken", {"content-type": "application/json"})]


@pytest.mark.parametrize(
    "reply",
    [
        Raw(200, {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": []}),
        Raw(200, {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": "nope"}),
        "",
    ],
    ids=["no-choices", "choices-not-a-list", "empty-content"],
)
def test_unusable_answers_are_bad_response(server, reply):
    server.script("umask", reply)
    with _client(server) as client:
        with pytest.raises(LLMError) as caught:
            client.complete(_messages(), ARCH, "architect")
    assert (caught.value.kind, caught.value.transport) == ("bad_response", False)  # one answer, not the endpoint
    assert len(server.requests) == 1


@pytest.mark.parametrize("reply", JUNK_BODIES, ids=["html", "broken-json"])
def test_a_body_that_is_not_a_chat_completion_three_times_is_a_transport_failure(server, reply):
    server.script("umask", reply, times=None)
    with _client(server) as client:
        with pytest.raises(LLMError) as caught:
            client.complete(_messages(), ARCH, "architect")
    assert (caught.value.kind, caught.value.transport) == ("bad_response", True)
    assert len(server.requests) == llm_mod.BAD_BODY_TRIES == 3
    assert "3 times in a row" in str(caught.value) and API_KEY not in str(caught.value)


def test_junk_bodies_then_an_answer_is_that_answer(server):
    server.script("umask", JUNK_BODIES[0], times=2)
    server.script("umask", PLAN)
    with _client(server) as client:
        done = client.complete(_messages(), ARCH, "architect")
    assert parse_architect(done.text).verdict == "PLAN" and done.http_attempts == 3


def test_every_kind_but_an_unusable_answer_is_a_transport_failure():
    assert [kind for kind in llm_mod.ERROR_KINDS if LLMError(kind, "m").transport] == [
        "unavailable", "remote_not_allowed", "connection", "timeout", "http", "auth"]
    assert LLMError("bad_response", "m", transport=True).transport is True


def test_unconfigured_client_is_unavailable():
    with pytest.raises(LLMError) as caught:
        LLMClient(LLMConfig(base_url=None, model="m"))
    assert caught.value.kind == "unavailable"
    assert not LLMConfig.from_options("", "m", None, None, False, environ={}).configured


def test_from_options_key_precedence_and_defaults():
    env = {"SCAPFORGE_LLM_API_KEY": "k-scapforge", "OPENAI_API_KEY": "k-openai"}
    assert (
        LLMConfig.from_options("http://127.0.0.1:8000/v1", "m", "k-given", None, False, environ=env).api_key
        == "k-given"
    )
    assert (
        LLMConfig.from_options("http://127.0.0.1:8000/v1", "m", None, None, False, environ=env).api_key == "k-scapforge"
    )
    assert (
        LLMConfig.from_options("u", "m", "", None, False, environ={"OPENAI_API_KEY": "k-openai"}).api_key == "k-openai"
    )
    config = LLMConfig.from_options("http://127.0.0.1:8000/v1", "qwen", None, None, False, environ={})
    assert (config.api_key, config.timeout, config.max_retries, config.allow_remote) == ("none", 120.0, 4, False)
    assert config.configured and config.temperature == 0.0
    assert LLMConfig.from_options("u", "m", None, "30", True, environ={}).timeout == 30.0
    with pytest.raises(ValueError):
        LLMConfig.from_options("u", "m", None, 0, False, environ={})


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5/v1",
        "http://localhost:11434/v1",
        "http://127.0.0.1:8000/v1",
        "http://[::1]:8000/v1",
        "http://192.168.1.20/v1",
        "https://172.16.0.1/v1",
        "http://169.254.10.1/v1",
        "http://[fd00::5]/v1",
    ],
)
def test_local_and_private_endpoints_are_allowed(url):
    check_endpoint(url, allow_remote=False)


@pytest.mark.parametrize(
    "url", ["http://8.8.8.8/v1", "https://[2001:4860:4860::8888]/v1", "http://[::ffff:8.8.8.8]/v1"]
)
def test_public_endpoints_need_allow_remote(url):
    with pytest.raises(LLMError) as caught:
        check_endpoint(url, allow_remote=False)
    assert caught.value.kind == "remote_not_allowed"
    assert "allow_remote" in str(caught.value)
    check_endpoint(url, allow_remote=True)
    with pytest.raises(LLMError) as caught:
        LLMClient(LLMConfig(base_url=url, model="m"))
    assert caught.value.kind == "remote_not_allowed"


def test_a_host_name_must_resolve_only_to_private_addresses(monkeypatch):
    answers = {
        "llm.lab.internal": ["10.87.0.9", "fd00::9"],
        "llm.mixed.example": ["10.87.0.9", "93.184.216.34"],
    }

    def fake_getaddrinfo(host, port, *args, **kwargs):
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port or 0))
            for a in answers[host]
        ]

    monkeypatch.setattr(llm_mod.socket, "getaddrinfo", fake_getaddrinfo)
    check_endpoint("http://llm.lab.internal:8000/v1", allow_remote=False)
    with pytest.raises(LLMError) as caught:
        check_endpoint("http://llm.mixed.example/v1", allow_remote=False)
    assert caught.value.kind == "remote_not_allowed" and "93.184.216.34" in str(caught.value)
    with pytest.raises(LLMError) as caught:
        check_endpoint("http://nowhere.invalid/v1", allow_remote=False)
    assert caught.value.kind == "connection"


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/v1", "127.0.0.1:8000", "http:///v1", "http://127.0.0.1:99999/v1"])
def test_unusable_base_url_is_unavailable(url):
    with pytest.raises(LLMError) as caught:
        check_endpoint(url, allow_remote=True)
    assert caught.value.kind == "unavailable"


def test_credentials_in_base_url_are_not_shown():
    with pytest.raises(LLMError) as caught:
        check_endpoint("http://user:hunter22@8.8.8.8/v1", allow_remote=False)
    assert "hunter22" not in str(caught.value)


def test_llm_error_kinds_are_closed():
    pytest.raises(ValueError, LLMError, "oops", "x")
