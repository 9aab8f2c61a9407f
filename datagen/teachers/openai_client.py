"""The `openai` teacher: any OpenAI-compatible chat-completions endpoint, asynchronously.

Many episodes share one aiohttp session; `AIMDLimiter` bounds the requests in flight and adapts
to 429s. A request is retried on 429, 5xx, 408/409, timeouts, connection errors and malformed
bodies, with exponential backoff and full jitter (honouring Retry-After); after `max_retries`
the turn fails and the episode records why. A body is malformed when any part of it has the
wrong shape, a usage count is not a sane integer, it is larger than the request could produce
(`max_body_bytes`: reading stops there, so an endless body costs bounded memory) or the turn's
text is (`check_turn_size`); like a 5xx it may be a glitch of one response, so it is retried.
Other 4xx are final, and so is a redirect: it is not followed (the prompt would go wherever it
points), the error asks for the final URL in base_url. So is an error of our own request
(aiohttp refusing to build it): every retry would fail the same way. A 200 body is parsed in a
worker thread, so its secret search (linear, but a few seconds per MB of a body that echoes
the key throughout) does not hold up the other episodes' requests.
Only fully parsed bodies go to the request cache (`cache.py`), so a resumed run replays them
for free. Usage gives token counts and cost.

The API key is read once from the environment variable the config names. It is sent in the
Authorization header and nowhere else, and nothing the endpoint sends back is kept with it: a
server may echo request headers into an error body or a 200's id or content, raw or encoded
(`redact.py`). Error texts are redacted before they are cut, recorded or logged; a 200 body that
carries the key has every string in it redacted before it is stored in a row or cached. The
password of a `user:password@` endpoint URL is treated the same way, in each form it is
written or sent (`url_secrets`).

Tool formats: `template` (default) keeps the model's turn as text with `<tool_call>` blocks -
exactly what a Qwen-template server (vLLM, SGLang) generated; `native` uses the API's tools /
tool_calls fields (hosted APIs) and rebuilds the same text form for the row.

`token_ids` (vLLM servers) switches to tokens in, tokens out: the episode's exact token trace
goes to /v1/completions as the prompt, and the exact generated ids and their top-k come back
(`return_tokens_as_token_ids`). Chat completions would re-render and re-tokenise earlier turns,
so the teacher's later distributions would be conditioned on ids other than the row's.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import orjson

from datagen.chat import IM_END
from datagen.teachers.aimd import AIMDLimiter
from datagen.teachers.cache import RequestCache, fingerprint
from datagen.teachers.config import OpenAIConfig, SamplingConfig, TeacherConfig
from datagen.teachers.episode import Generation, TurnBackend, TurnRequest
from datagen.teachers.llm import LLMTeacher
from datagen.teachers.openai_wire import (
    MalformedResponse, check_turn_size, max_body_bytes, native_messages, parse_choice,
    parse_completion)
from datagen.teachers.redact import Redactor

log = logging.getLogger(__name__)

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}
# what reading a 200 body may raise besides MalformedResponse (undecodable JSON, a value of the
# right shape but the wrong type deep in logprobs, a token id that is not a number, a body
# nested ~1000 deep - orjson reads 1024 levels - that carries the key: `redact_json` recurses)
MALFORMED = (ValueError, TypeError, RecursionError)


@dataclass
class _Attempt:
    """What one request came to: the answer (the cacheable body and the turn), or why not."""

    answer: tuple[bytes, Generation] | None = None
    failure: str = ""
    retryable: bool = True
    retry_after: str | None = None


def backoff_seconds(attempt: int, base: float, cap: float, retry_after: str | None) -> float:
    """Full-jitter exponential backoff; a numeric Retry-After is a lower bound (within cap)."""
    delay = random.uniform(0, min(cap, base * 2 ** attempt))
    if retry_after:
        try:
            delay = max(delay, min(cap, float(retry_after)))
        except ValueError:
            pass  # an HTTP-date Retry-After: the jittered backoff is good enough
    return delay


def url_secrets(url: str) -> list[str]:
    """The secrets of a `user:password@` URL: its password as written (percent-escaped) and as
    sent - decoded, alone and as the `user:password` that Basic auth base64-encodes. An echo of
    the Authorization header holds only the decoded forms (a `%24` in the URL is a `$` there)."""
    parts = urlsplit(url)
    if parts.password is None:
        return []
    password = unquote(parts.password)
    credentials = f"{unquote(parts.username or '')}:{password}"
    return [parts.password, password, credentials, *_latin1_basic(credentials)]


def _latin1_basic(credentials: str) -> list[str]:
    """The Basic auth header aiohttp sends for a non-ASCII password: base64 of the Latin-1
    bytes, which the redactor (it encodes secrets as UTF-8) would not find otherwise."""
    try:
        latin1 = credentials.encode("latin-1")
    except UnicodeEncodeError:
        return []
    return [base64.b64encode(latin1).decode()] if latin1 != credentials.encode() else []


def _public_url(url: str) -> str:
    """`url` without user:password (it goes into every row's metadata)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class OpenAIBackend(TurnBackend):
    """Chat completions over HTTP with AIMD concurrency, retries, cache and accounting."""

    def __init__(self, config: OpenAIConfig, sampling: SamplingConfig,
                 cache_dir: str | Path | None = None) -> None:
        self.config, self.sampling = config, sampling
        endpoint = "/completions" if config.token_ids else "/chat/completions"
        self.url = config.base_url.rstrip("/") + endpoint
        self._api_key = self._read_key(config.api_key_env)
        self.redactor = Redactor([self._api_key, *url_secrets(config.base_url)])
        self.redacted_responses = 0  # responses (or cached bodies) that carried a secret
        self._counting = threading.Lock()  # bodies are parsed in worker threads
        self.limiter = AIMDLimiter(config.initial_concurrency, config.min_concurrency,
                                   config.max_concurrency)
        directory = config.cache_dir or cache_dir
        self.cache = (RequestCache(Path(directory) / "openai_requests.sqlite")
                      if config.cache and directory else None)
        if config.token_ids:
            from transformers import AutoTokenizer

            self.tokenizer_name = config.tokenizer
            self.tokenizer = AutoTokenizer.from_pretrained(config.tokenizer)
        choices = config.extra_body.get("n")
        self.max_body_bytes = max_body_bytes(
            sampling.max_tokens_per_turn, sampling.logprobs,
            choices if isinstance(choices, int) and choices > 1 else 1)
        self._session: Any = None
        self.requests_sent = 0

    @staticmethod
    def _read_key(variable: str | None) -> str | None:
        if variable is None:
            return None
        key = os.environ.get(variable)
        if not key:
            raise ValueError(f"teacher.openai.api_key_env names ${variable}, which is not set")
        return key

    def redact(self, text: str) -> str:
        """`text` with the API key removed in any encoding (redact before cutting)."""
        return self.redactor.redact(text)

    def describe(self) -> dict[str, Any]:
        return {"backend": "openai", "model": self.config.model,
                "endpoint": self.redact(_public_url(self.config.base_url)),
                "tool_format": self.config.tool_format,
                "logprobs_mode": "server" if self.sampling.logprobs else None}

    async def start(self) -> None:
        import aiohttp

        self.limiter.bind_loop()
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        connector = aiohttp.TCPConnector(limit=self.config.max_concurrency)
        self._session = aiohttp.ClientSession(headers=headers, connector=connector,
                                              timeout=aiohttp.ClientTimeout(
                                                  total=self.config.timeout_s))

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def request_body(self, request: TurnRequest) -> dict[str, Any]:
        """The JSON body of a turn request (also the cache key's content)."""
        config, sampling = self.config, self.sampling
        body: dict[str, Any] = {"model": config.model, "max_tokens": request.max_tokens,
                                "temperature": sampling.temperature, "top_p": sampling.top_p}
        if config.token_ids:  # vLLM extensions: exact ids in and out, special tokens kept
            body.update(prompt=request.prompt_ids, return_tokens_as_token_ids=True,
                        skip_special_tokens=False, include_stop_str_in_output=True,
                        stop_token_ids=[self.tokenizer.convert_tokens_to_ids(IM_END)])
            if sampling.logprobs:
                body["logprobs"] = sampling.logprobs
        elif config.tool_format == "native":
            body["messages"] = native_messages(request.messages)
            if request.tools:  # APIs reject an empty list (a completion without tools)
                body["tools"] = request.tools
        else:  # the template renders the tools; the server must not parse calls itself
            body["messages"] = request.messages
            if request.tools:
                body.update(tools=request.tools, tool_choice="none")
        if sampling.stop:
            body["stop"] = sampling.stop
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.logit_bias:
            body["logit_bias"] = {str(token): bias for token, bias in sampling.logit_bias.items()}
        if sampling.logprobs and not config.token_ids:
            body["logprobs"] = True
            body["top_logprobs"] = sampling.logprobs
        body.update(config.extra_body)
        return body

    async def generate(self, request: TurnRequest) -> Generation:
        body = self.request_body(request)
        key = fingerprint(body, request.key) if self.cache is not None else ""
        cached = self._cached(key, request.max_tokens) if self.cache is not None else None
        if cached is not None:
            return cached
        started = time.perf_counter()
        raw, gen, retries = await self._post_with_retries(orjson.dumps(body), request.max_tokens)
        gen.retries, gen.seconds = retries, time.perf_counter() - started
        # token ids that spelled a secret were dropped (`_redact_decoded`): the body holding
        # them is not cached, since decoding it would give the secret back
        spelled_secret = self.config.token_ids and gen.token_ids is None
        if gen.error is None and self.cache is not None and not spelled_secret:
            self.cache.put(key, raw)
        return gen

    def _cached(self, key: str, max_tokens: int) -> Generation | None:
        """The cached answer, parsed like a live one (a cache written before redaction existed
        may hold the key). A body that does not parse - written by a version that checked less
        - is a miss: the request is sent again and its answer replaces the entry."""
        raw = self.cache.get(key)
        if raw is None:
            return None
        try:
            gen = self._parse(raw, max_tokens)[1]
        except MALFORMED as exc:
            log.warning("cached response ignored, sending the request again: %s",
                        self._malformed(exc))
            return None
        gen.cached = True
        return gen

    def _scrub(self, raw: bytes, response: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        """A 200 body that carries a secret anywhere (id, content, tool calls) -> every string
        in it redacted, and the redacted bytes are what the cache stores. Bodies without one
        (nearly all) are returned as they are, after one search of the raw text."""
        if not self.redactor.spans(raw.decode("utf-8", "replace")):
            return raw, response
        self._count_redaction()
        response = self.redactor.redact_json(response)
        return orjson.dumps(response), response

    def _count_redaction(self) -> None:
        with self._counting:
            self.redacted_responses += 1
            first = self.redacted_responses == 1
        if first:
            log.warning("the endpoint %s sent back the API key (or a part or an encoding of it); "
                        "it is stored as [redacted]", self.describe()["endpoint"])

    def _parse(self, raw: bytes, max_tokens: int) -> tuple[bytes, Generation]:
        """A 200 body -> (the bytes the cache may store, redacted; the turn). Raises
        MalformedResponse (or another of MALFORMED) on a body that is not a full answer.
        The turn's size is checked before the body is searched for secrets, so an oversized
        turn costs no search (its error names sizes only; other parse errors are redacted
        where they are recorded, `_malformed`); a body that carries one is read again from
        its redacted strings."""
        response = orjson.loads(raw)
        gen = self._read(response, max_tokens)
        raw, scrubbed = self._scrub(raw, response)
        if scrubbed is not response:
            gen = self._read(scrubbed, max_tokens)
        if self.config.token_ids:
            self._redact_decoded(gen)
        gen.cost_usd = (gen.prompt_tokens * self.config.usd_per_million_input_tokens
                        + gen.completion_tokens * self.config.usd_per_million_output_tokens) / 1e6
        return raw, gen

    def _read(self, response: Any, max_tokens: int) -> Generation:
        """The turn in a decoded body, refused when longer than `max_tokens` could make."""
        gen = (parse_completion(response, self.tokenizer, self.sampling.logprobs, max_tokens)
               if self.config.token_ids else parse_choice(response))
        check_turn_size(gen, max_tokens)
        return gen

    def _malformed(self, exc: Exception) -> str:
        detail = str(exc) if isinstance(exc, MalformedResponse) else f"{type(exc).__name__}: {exc}"
        return f"malformed response: {self.redactor.excerpt(detail, 200)}"

    def _redact_decoded(self, gen: Generation) -> None:
        """Token ids decoded to a secret (the body held only ids, so `_scrub` could not see it):
        the text is redacted and the ids dropped, so the episode re-tokenises the redacted text
        (counted in `retokenised_turns`) instead of storing ids that spell the key."""
        text = self.redact(gen.text)
        if text != gen.text:
            self._count_redaction()
            gen.text, gen.token_ids, gen.topk_ids, gen.topk_logprobs = text, None, None, None

    async def _post_with_retries(self, payload: bytes, max_tokens: int,
                                 ) -> tuple[bytes, Generation, int]:
        """POST until a readable 200 or a final failure: (raw body to cache, turn, retries)."""
        failure = "no attempt made"
        for attempt in range(self.config.max_retries + 1):
            async with self.limiter.slot() as slot:
                tried = await self._attempt(payload, max_tokens, slot)
            if tried.answer is not None:
                return *tried.answer, attempt
            failure = tried.failure
            if not tried.retryable:
                return b"", Generation(error=failure), attempt
            if attempt < self.config.max_retries:
                delay = backoff_seconds(attempt, self.config.backoff_base_s,
                                        self.config.backoff_max_s, tried.retry_after)
                log.info("retry %d/%d in %.2fs after %s", attempt + 1, self.config.max_retries,
                         delay, failure[:120])  # every failure text is redacted where it is made
                await asyncio.sleep(delay)
        return b"", Generation(error=f"gave up after {self.config.max_retries + 1} attempts: "
                                     f"{failure}"), self.config.max_retries

    async def _attempt(self, payload: bytes, max_tokens: int, slot: Any) -> _Attempt:
        """One request and what came of it."""
        try:
            status, raw, retry_after, location = await self._post(payload)
        except MalformedResponse as exc:  # a body past max_body_bytes
            return _Attempt(failure=self._malformed(exc))
        except Exception as exc:  # timeouts, resets, refused connections - or our own request
            return _Attempt(failure=self._describe_transport_error(exc),
                            retryable=not _is_local_error(exc))
        if status == 200:
            try:  # off the event loop: a large body's secret search must not stall the others
                answer = await asyncio.to_thread(self._parse, raw, max_tokens)
            except MALFORMED as exc:
                return _Attempt(failure=self._malformed(exc))
            slot.succeeded = True
            return _Attempt(answer=answer)
        slot.throttled = status == 429
        failure = f"HTTP {status}: {self.redactor.excerpt(raw, 200)}"
        if 300 <= status < 400:  # the body (the prompt) would go to wherever it points
            failure = (f"HTTP {status}: redirects are not followed; set base_url to the final "
                       f"URL (Location: {self.redactor.excerpt(location or '', 200)})")
        # 400, 401, 404, a redirect...: retrying will not help
        return _Attempt(failure=failure, retryable=status in RETRYABLE_STATUS,
                        retry_after=retry_after)

    async def _post(self, payload: bytes) -> tuple[int, bytes, str | None, str | None]:
        """(status, body, Retry-After, Location) of one POST; a redirect is not followed: it
        would send the prompt to another host (aiohttp drops only the key)."""
        self.requests_sent += 1
        async with self._session.post(self.url, data=payload, allow_redirects=False) as response:
            return (response.status, await self._read_capped(response),
                    response.headers.get("Retry-After"), response.headers.get("Location"))

    async def _read_capped(self, response: Any) -> bytes:
        """The body, read no further than `max_body_bytes` (an endless body would fill memory)."""
        limit = self.max_body_bytes
        if (response.content_length or 0) > limit:
            raise MalformedResponse(f"response body over {limit} bytes "
                                    f"(Content-Length {response.content_length})")
        body = bytearray()
        async for chunk in response.content.iter_any():
            body += chunk
            if len(body) > limit:
                raise MalformedResponse(f"response body over {limit} bytes")
        return bytes(body)

    def _describe_transport_error(self, exc: Exception) -> str:
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            return f"timeout after {self.config.timeout_s}s"
        kind = "request not sent" if _is_local_error(exc) else "connection error"
        return f"{kind}: {type(exc).__name__}: {self.redactor.excerpt(str(exc), 160)}"


def _is_local_error(exc: Exception) -> bool:
    """An error of building or sending our own request (aiohttp's ValueError for a header it
    refuses, a TypeError of a bad argument), not of the network or the response: every retry
    would fail the same way. aiohttp's own errors (ClientError) are transport failures, except
    an invalid URL."""
    import aiohttp

    if isinstance(exc, aiohttp.InvalidURL):
        return True
    return isinstance(exc, (ValueError, TypeError)) and not isinstance(exc, aiohttp.ClientError)


def make_openai_teacher(config: TeacherConfig, work_dir: str | None = None) -> LLMTeacher:
    cache_dir = Path(work_dir) / "_cache" if work_dir else None
    return LLMTeacher(config, OpenAIBackend(config.openai, config.sampling, cache_dir))
