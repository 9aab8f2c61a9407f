"""A chat-completions HTTP server on 127.0.0.1 that misbehaves on purpose (tests only).

It speaks the protocol for real (aiohttp, its own thread and event loop) and, before answering,
plays queued faults: 429 (with or without Retry-After), 500, 503, a hang (the request never
gets an answer), a 200 with a malformed or truncated body, with one of the wrong-shape or
oversized `HOSTILE_BODIES`, or an `endless` one, a 500 that echoes the request's headers, and
`echo-key:STATUS:ENCODING[@OFFSET]`: a response that sends the API key back in one of
`ECHO_ENCODINGS` (an error body with the echo OFFSET characters in, or a 200 with it in the
id, the system fingerprint and the content). `echo_200` makes every 200 answer echo the key, in
those encodings in turn. Answers come from `ScriptedAgent`, a fake teacher that follows each
task's gold solution - not a model, and named so - or from any function given.

A capacity limit turns it into a rate-limited server: requests beyond `capacity` in flight get
429s, which is what the AIMD limiter has to discover.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import socket
import threading
from collections import deque
from typing import Any, Callable
from urllib.parse import quote

import orjson
from aiohttp import web

from datagen.chat import ANSWER_PREFIX, render_call
from datagen.types import Task

Reply = Callable[[dict[str, Any]], "str | dict[str, Any]"]

# How a badly behaved endpoint may send the key back (all of it, or a part: `half`).
ECHO_ENCODINGS: dict[str, Callable[[str], str]] = {
    "raw": lambda key: key,
    "upper": str.upper,
    "lower": str.lower,
    "half": lambda key: key[len(key) // 2:],
    "json-u": lambda key: "".join(f"\\u{ord(c):04x}" for c in key),
    "url": lambda key: "".join(f"%{byte:02X}" for byte in key.encode()),
    "url-quote": lambda key: quote(f"Bearer {key}"),
    "html": lambda key: "".join(f"&#{ord(c)};" for c in key),
    "hex": lambda key: key.encode().hex(),
    "hex-upper": lambda key: key.encode().hex().upper(),
    "b64": lambda key: base64.b64encode(key.encode()).decode(),
    "b64-1": lambda key: base64.b64encode(b"x" + key.encode()).decode(),
    "b64-2": lambda key: base64.b64encode(b"xy" + key.encode()).decode(),
    "b64url-bearer": lambda key: base64.urlsafe_b64encode(f"Bearer {key}".encode()).decode(),
}
_ECHO = "@@ECHO@@"
ENDLESS_STOP = 256 << 20  # an `endless` body ends here, so a client that reads on is caught


def echo_body(reply: str | dict[str, Any], key: str, encoding: str) -> bytes:
    """A 200 body whose id, system fingerprint and content carry the key in `encoding`. The
    content gets it inside a <critique> block when there is one (so a critic's reply stores
    it), else in front. `json-u` escapes the key at the JSON level: the raw bytes hold
    \\u0073..., the parsed content the key itself."""
    message = dict(reply) if isinstance(reply, dict) else {"role": "assistant", "content": reply}
    content = message.get("content") or ""
    message["content"] = (content.replace("<critique>", f"<critique>Echo {_ECHO}. ", 1)
                          if "<critique>" in content else f"Echo {_ECHO}.\n{content}")
    body = completion(message)
    body.update(id=f"chatcmpl-{_ECHO}", system_fingerprint=_ECHO)
    if encoding == "json-u":
        fragment = "".join(f"\\u{ord(c):04x}" for c in key).encode()
    else:
        fragment = orjson.dumps(ECHO_ENCODINGS[encoding](key))[1:-1]
    return orjson.dumps(body).replace(_ECHO.encode(), fragment)


def echo_error(key: str, encoding: str, offset: int) -> str:
    """An error text with the key in `encoding` starting `offset` characters in."""
    lead = "upstream error; request headers follow "
    lead = (lead * (offset // len(lead) + 1))[:offset]
    return f"{lead}{ECHO_ENCODINGS[encoding](key)} (end of echo)"


def completion(reply: str | dict[str, Any], prompt_tokens: int = 100,
               finish_reason: str = "stop") -> dict:
    """A minimal well-formed chat-completions body; `reply` is the content or a message."""
    message = reply if isinstance(reply, dict) else {"role": "assistant", "content": reply}
    completion_tokens = max(len(str(message)) // 4, 1)
    return {"id": "chatcmpl-fake", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def _answer(message: Any = None, usage: Any = None) -> bytes:
    """A final answer with its message or usage replaced (by anything, of any shape)."""
    body = completion("Final answer: 42")
    if message is not None:
        body["choices"][0]["message"] = message
    if usage is not None:
        body["usage"] = usage
    return orjson.dumps(body)


def _calls(tool_calls: Any) -> bytes:
    return _answer({"role": "assistant", "content": None, "tool_calls": tool_calls})


def _content(content: Any) -> bytes:
    return _answer({"role": "assistant", "content": content})


# 200 bodies a client must read as malformed (fault names -> body); none is a valid answer.
HOSTILE_BODIES: dict[str, Callable[[], bytes]] = {
    "choices-str": lambda: orjson.dumps({"choices": "abc"}),
    "message-list": lambda: _answer(["not", "a", "dict"]),
    "content-dict": lambda: _content({"text": "hi"}),
    "tool-calls-str": lambda: _calls("run_sql"),
    "tool-call-int": lambda: _calls([7]),
    "function-str": lambda: _calls([{"id": "c", "type": "function", "function": "run_sql"}]),
    "usage-str": lambda: _answer(usage="lots"),
    "usage-huge": lambda: _answer(usage={"prompt_tokens": 1e300, "completion_tokens": 5}),
    "usage-negative": lambda: _answer(usage={"prompt_tokens": 10, "completion_tokens": -5}),
    "usage-64bit": lambda: _answer(usage={"prompt_tokens": 2 ** 63 - 1}),
    "content-long": lambda: _content("Final answer: " + "A" * 300_000),
    "content-9mb": lambda: _content("Final answer: " + "A" * 9_000_000),
}


class ScriptedAgent:
    """FAKE teacher: replies with the gold solution of the task whose instruction the request
    carries (one tool call per turn, then the final answer). Not a model. `native` answers
    with the API's tool_calls field instead of <tool_call> text."""

    def __init__(self, tasks: list[Task], native: bool = False) -> None:
        self.by_instruction = {task.instruction: task for task in tasks}
        self.native = native

    def __call__(self, body: dict[str, Any]) -> str | dict[str, Any]:
        messages = body["messages"]
        task = self.by_instruction[next(m["content"] for m in messages if m["role"] == "user")]
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if turn >= len(task.gold):
            return f"I have what I need.\n\n{ANSWER_PREFIX}{task.answer or 'Done.'}"
        gold = task.gold[turn]
        if not self.native:
            return f"I need to {gold.purpose}.\n{render_call(gold.call)}"
        return {"role": "assistant", "content": f"I need to {gold.purpose}.",
                "tool_calls": [{"id": f"call_{turn}", "type": "function", "function": {
                    "name": gold.call.name,
                    "arguments": orjson.dumps(gold.call.arguments).decode()}}]}


class FaultServer:
    """Loopback chat-completions server with a queue of faults and an optional capacity."""

    def __init__(self, reply: Reply, capacity: int | None = None, latency_s: float = 0.0,
                 echo_200: list[str] | None = None):
        self.reply, self.capacity, self.latency_s = reply, capacity, latency_s
        self._echo_200 = itertools.cycle(echo_200) if echo_200 else None
        self.faults: deque[str] = deque()
        self.bodies: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.authorizations: list[str | None] = []  # Authorization headers received
        self.in_flight = 0
        self.peak_in_flight = 0
        self.endless_bytes_sent = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def queue(self, *faults: str) -> None:
        """Faults for the next requests, in order: 429, 429-retry-after, 500, 503, hang,
        malformed, truncated, no-choices, echo-headers, 400, echo-key:STATUS:ENCODING[@N],
        endless and the names of HOSTILE_BODIES."""
        self.faults.extend(faults)

    def start(self) -> FaultServer:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/completions", self._handle)  # `reply` returns whole bodies
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            response = await self._respond(request)
        finally:
            self.in_flight -= 1
        self.statuses.append(response.status)
        return response

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        self.authorizations.append(request.headers.get("Authorization"))
        if self.capacity is not None and self.in_flight > self.capacity:
            return web.json_response({"error": {"message": "rate limited"}}, status=429)
        fault = self.faults.popleft() if self.faults else None
        if fault is not None:
            return await self._fault(fault, request)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if self._echo_200 is not None:
            return self._echo(request, body, 200, next(self._echo_200), 0)
        answer = self.reply(body)
        return web.json_response(answer if isinstance(answer, dict) and "choices" in answer
                                 else completion(answer))

    def _echo(self, request: web.Request, body: dict[str, Any], status: int, encoding: str,
              offset: int) -> web.Response:
        key = (request.headers.get("Authorization") or "").removeprefix("Bearer ")
        if status == 200:
            return web.Response(body=echo_body(self.reply(body), key, encoding),
                                content_type="application/json")
        return web.Response(status=status, text=echo_error(key, encoding, offset))

    async def _endless(self, request: web.Request) -> web.StreamResponse:
        """A 200 whose content never ends (chunked, no length) - until ENDLESS_STOP bytes or
        until the client hangs up."""
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"choices": [{"message": {"content": "')
        chunk = b"x" * (1 << 20)
        try:
            while self.endless_bytes_sent < ENDLESS_STOP:
                await response.write(chunk)
                self.endless_bytes_sent += len(chunk)
        except ConnectionError:
            pass  # the client stopped reading
        return response

    async def _fault(self, fault: str, request: web.Request) -> web.StreamResponse:
        if fault.startswith("echo-key:"):  # echo-key:STATUS:ENCODING[@OFFSET]
            _, status, encoding = fault.split(":")
            encoding, _, offset = encoding.partition("@")
            return self._echo(request, await request.json(), int(status), encoding,
                              int(offset or 0))
        if fault in HOSTILE_BODIES:
            return web.Response(body=HOSTILE_BODIES[fault](), content_type="application/json")
        if fault == "endless":
            return await self._endless(request)
        if fault == "hang":
            await asyncio.sleep(3600)  # the client's timeout must fire first
        if fault == "429":
            return web.json_response({"error": {"message": "slow down"}}, status=429)
        if fault == "429-retry-after":
            return web.json_response({"error": {"message": "slow down"}}, status=429,
                                     headers={"Retry-After": "0.05"})
        if fault in ("500", "503", "400"):
            return web.json_response({"error": {"message": f"fault {fault}"}}, status=int(fault))
        if fault == "malformed":
            return web.Response(body=b"{this is not json", content_type="application/json")
        if fault == "truncated":
            return web.Response(body=orjson.dumps(completion("cut"))[:40],
                                content_type="application/json")
        if fault == "no-choices":
            return web.json_response({"id": "x", "choices": []})
        if fault == "echo-headers":  # a badly behaved proxy that reflects the request
            headers = dict(request.headers)
            return web.Response(status=500, text=f"upstream error; request: {headers}")
        raise ValueError(f"unknown fault {fault!r}")
