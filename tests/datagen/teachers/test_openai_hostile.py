"""The `openai` teacher against endpoints that misbehave in ways a review found: a password
with percent-escapes echoed back as Basic auth, a redirect to another URL, a request aiohttp
refuses to send, token-id answers longer than asked or with impossible logprobs, and bodies
whose secret search used to be quadratic or to stall the event loop."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest
from aiohttp import web

from datagen.teachers.config import OpenAIConfig, SamplingConfig, TeacherConfig
from datagen.teachers.episode import TurnRequest
from datagen.teachers.openai_client import OpenAIBackend, url_secrets
from datagen.teachers.openai_wire import MalformedResponse, parse_completion
from datagen.teachers.redact import Redactor
from tests.datagen.teachers.fault_server import FaultServer, completion
from tests.datagen.teachers.helpers import TenTokenIdsTokenizerFake
from tests.datagen.teachers.leaks import leaks

KEY = "sk-hostile-7Qf3ZpL9xW2mKv8RtY4nB6cJ0hD5gS1a"
KEY_ENV = "DATAGEN_HOSTILE_TEST_KEY"
PASSWORD_IN_URL = "Xy7%24kP%402%21qZ%239mW%26"
PASSWORD = "Xy7$kP@2!qZ#9mW&"  # what the URL's escapes spell, and what Basic auth sends


class EchoAuthServer(FaultServer):
    """Answers 401 with the Authorization header it got, as a reflecting proxy does."""

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        return web.Response(status=401, text=f"unauthorized: {request.headers['Authorization']}")


class RedirectServer(FaultServer):
    """Redirects chat completions (307) to /v1/completions, which would answer."""

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        if request.path.endswith("/chat/completions"):
            raise web.HTTPTemporaryRedirect("/v1/completions")
        return web.json_response(completion("Final answer: 1"))


def _generate(config: OpenAIConfig, max_tokens: int = 16, sampling: SamplingConfig | None = None,
              url: str | None = None):
    """One turn through a started backend (its URL replaced by `url` after start)."""
    backend = OpenAIBackend(config, sampling or SamplingConfig(logprobs=0))

    async def run():
        await backend.start()
        backend.url = url or backend.url
        try:
            return await backend.generate(TurnRequest([{"role": "user", "content": "hi"}], None,
                                                      [], max_tokens, "k"))
        finally:
            await backend.stop()
    return asyncio.run(run())


def _config(server: FaultServer, **fields) -> OpenAIConfig:
    return OpenAIConfig(**{"base_url": server.base_url, "model": "m", "cache": False,
                           "max_retries": 0, "timeout_s": 10.0, **fields})


# aiohttp sends a non-ASCII password as Latin-1 bytes, which no UTF-8 form of it spells
@pytest.mark.parametrize("in_url, password, encoding", [
    (PASSWORD_IN_URL, PASSWORD, "utf-8"),
    ("%C3%A4%C3%B6%C3%BC%C3%9F%C3%84%C3%96%C3%9C%C3%A9%C3%A8%C3%A0",
     "\u00e4\u00f6\u00fc\u00df\u00c4\u00d6\u00dc\u00e9\u00e8\u00e0", "latin-1")])
def test_a_percent_escaped_password_echoed_as_basic_auth_is_redacted(in_url, password, encoding):
    server = EchoAuthServer(lambda body: "").start()
    try:
        url = server.base_url.replace("http://", f"http://alice:{in_url}@")
        gen = _generate(_config(server, base_url=url))
    finally:
        server.stop()
    basic = base64.b64encode(f"alice:{password}".encode(encoding)).decode()
    assert gen.error.startswith("HTTP 401: unauthorized: Basic [redacted]"), gen.error
    assert not [basic[i:i + 8] for i in range(len(basic) - 7) if basic[i:i + 8] in gen.error]
    assert leaks(password, gen.error) == [] and leaks(f"alice:{password}", gen.error) == []


def test_every_form_of_a_url_password_is_redacted():
    redactor = Redactor(url_secrets(f"http://alice:{PASSWORD_IN_URL}@host:8000/v1"))
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    for text in (PASSWORD, PASSWORD_IN_URL, PASSWORD_IN_URL.lower(), f"Basic {basic}",
                 base64.b64encode(PASSWORD.encode()).decode(), f"alice:{PASSWORD}"):
        redacted = redactor.redact(f"echo <{text}> end")
        assert leaks(PASSWORD, redacted) == [], (text, redacted)
        assert PASSWORD_IN_URL[:10] not in redacted and redacted.endswith("> end")
    assert url_secrets("http://host:8000/v1") == []


def test_a_redirect_is_not_followed_nor_retried():
    server = RedirectServer(lambda body: "").start()
    try:
        gen = _generate(_config(server, max_retries=3, backoff_base_s=0.01))
    finally:
        server.stop()
    assert gen.error is not None and gen.error.startswith("HTTP 307: redirects are not followed")
    assert "base_url" in gen.error and "/v1/completions" in gen.error
    assert len(server.bodies) == 1 and gen.retries == 0, "neither followed nor retried"


def test_a_url_password_and_an_api_key_are_refused_together():
    url = f"http://alice:{PASSWORD_IN_URL}@127.0.0.1:1/v1"
    with pytest.raises(ValueError, match="base_url carries user:password@ and "
                                         "openai.api_key_env"):
        OpenAIConfig(base_url=url, model="m", api_key_env=KEY_ENV)
    with pytest.raises(ValueError, match=r"openai\n.*base_url carries"):
        TeacherConfig(backend="openai", openai={"base_url": url, "model": "m",
                                                "api_key_env": KEY_ENV})
    assert OpenAIConfig(base_url=url, model="m").api_key_env is None  # each alone is fine


def test_a_request_aiohttp_refuses_to_send_fails_at_once(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    server = FaultServer(lambda body: "Final answer: 1").start()
    try:  # the key as a header and credentials in the URL: aiohttp raises ValueError
        url = server.base_url.replace("http://", "http://alice:pw@") + "/chat/completions"
        started = time.perf_counter()
        gen = _generate(_config(server, api_key_env=KEY_ENV, max_retries=3, backoff_base_s=1.0),
                        url=url)
    finally:
        server.stop()
    assert gen.error.startswith("request not sent: ValueError: Cannot combine"), gen.error
    assert "malformed" not in gen.error and gen.retries == 0 and server.bodies == []
    assert time.perf_counter() - started < 5.0, "no backoff: the request was not retried"


def _ids_body(n: int, logprob: object = -0.5) -> dict:
    return {"choices": [{"text": "", "finish_reason": "stop", "logprobs": {
        "tokens": ["token_id:3"] * n,
        "top_logprobs": [{"token_id:3": logprob, "token_id:4": -2.0}] * n}}]}


def test_token_ids_past_max_tokens_are_refused():
    gen = parse_completion(_ids_body(16), TenTokenIdsTokenizerFake(), 2, max_tokens=16)
    assert len(gen.token_ids) == 16
    with pytest.raises(MalformedResponse, match="320 generated tokens, more than the turn's "
                                                "max_tokens 16"):
        parse_completion(_ids_body(320), TenTokenIdsTokenizerFake(), 2, max_tokens=16)


@pytest.mark.parametrize("logprob", [1e300, 7.5, 0.01, float("inf"), float("nan"),
                                     float("-inf")])
def test_impossible_top_k_logprobs_are_refused(logprob):
    with pytest.raises(MalformedResponse, match="a top-k logprob is"):
        parse_completion(_ids_body(2, logprob), TenTokenIdsTokenizerFake(), 2)


def test_logprobs_rounded_a_hair_above_zero_are_kept():
    gen = parse_completion(_ids_body(2, 5e-5), TenTokenIdsTokenizerFake(), 2)
    assert gen.topk_logprobs == [[5e-5, -2.0]] * 2


def test_token_ids_past_max_tokens_fail_the_turn(tiny_tokenizer_dir):
    def reply(body):
        return {**_ids_body(20 * 16), "usage": {"prompt_tokens": 3, "completion_tokens": 320}}
    server = FaultServer(reply).start()
    try:
        gen = _generate(_config(server, token_ids=True, tokenizer=str(tiny_tokenizer_dir)),
                        sampling=SamplingConfig(logprobs=2, max_tokens_per_turn=16))
    finally:
        server.stop()
    assert gen.error.endswith("malformed response: 320 generated tokens, more than the "
                              "turn's max_tokens 16") and gen.token_ids is None


@pytest.mark.timeout(20)
def test_an_oversized_turn_is_refused_before_its_secret_search(monkeypatch):
    # 100K backslashes cost the old escape scan ~100 s; the turn is over 16 tokens' 4,096
    # characters and is refused by size alone, naming no part of the body
    monkeypatch.setenv(KEY_ENV, KEY)
    server = FaultServer(lambda body: "\\" * 100_000 + KEY).start()
    try:
        gen = _generate(_config(server, api_key_env=KEY_ENV), max_tokens=16)
    finally:
        server.stop()
    assert gen.error.endswith(f"malformed response: turn text of {100_000 + len(KEY)} "
                              f"characters, more than 16 tokens can produce (limit 4096)")
    assert leaks(KEY, gen.error) == []


class _EchoIdServer(FaultServer):
    """Answers with the key repeated in the `id` (a large body, small turn) - or, for the
    other episode, a normal answer after `latency_s`."""

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body["messages"][0]["content"] == "echo":
            return web.json_response({**completion("ok"), "id": KEY * 8_000})
        await asyncio.sleep(0.2)
        return web.json_response(completion("Final answer: 1"))


def test_a_large_echoing_body_does_not_stall_the_other_episodes(monkeypatch):
    # the key 8,000 times (350 KB): its secret search took the event loop ~2 s before (every
    # other episode waited); now it runs in a worker thread
    monkeypatch.setenv(KEY_ENV, KEY)
    server = _EchoIdServer(lambda body: "").start()
    backend = OpenAIBackend(_config(server, api_key_env=KEY_ENV), SamplingConfig(logprobs=0))
    stalls: list[float] = []

    async def heartbeat():
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            stalls.append(now - last)
            last = now

    async def run():
        await backend.start()
        beat = asyncio.create_task(heartbeat())
        try:
            return await asyncio.gather(*(backend.generate(TurnRequest(
                [{"role": "user", "content": content}], None, [], 16, content))
                for content in ("echo", "fine")))
        finally:
            beat.cancel()
            await backend.stop()
    try:
        echoed, fine = asyncio.run(run())
    finally:
        server.stop()
    assert echoed.error is None and echoed.text == "ok" and backend.redacted_responses == 1
    assert fine.error is None and fine.text == "Final answer: 1"
    # 2.25 s before on a quiet host, 0.03-0.07 s now: 1 s leaves room for a loaded CI host
    assert max(stalls) < 1.0, f"the event loop stood still for {max(stalls):.2f} s"
