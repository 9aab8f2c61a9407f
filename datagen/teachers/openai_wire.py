"""Chat-completions wire format: reading a response into a Generation, and the native
tool-call message shapes hosted APIs expect.

Kept apart from the HTTP client so it can be tested on recorded bodies alone. Every shape is
checked before it is used: a body that is not what the protocol says raises `MalformedResponse`
(the client retries it and never caches it), never an AttributeError deep in a parser.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from datagen.chat import IM_END, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, parse_assistant
from datagen.teachers.episode import Generation
from datagen.teachers.trace import turn_text

# Usage counts above this are not token counts (a context is at most ~1e7 tokens): a trillion
# per request keeps every sum over turns, episodes and chunks inside int64 (Arrow, orjson).
MAX_USAGE_TOKENS = 2 ** 40
# A turn's text longer than this many characters per requested token cannot come from the
# model: the longest tokens of common vocabularies (runs of spaces, dashes) are far shorter.
MAX_CHARS_PER_TOKEN = 256
# Response bodies: per generated token and candidate (the sampled token plus its top-k),
# OpenAI-style logprobs spell the token, its logprob and its UTF-8 bytes - about 60 bytes for
# an English token, under 200 for a 16-byte one fully JSON-escaped; 256 is an upper bound on
# the average. Small requests get the floor, far above any real chat-completions body.
BYTES_PER_TOKEN_CANDIDATE = 256
MIN_BODY_BYTES = 8 << 20
# A log-probability is <= 0; servers round a near-certain token's to a hair above it. Anything
# larger (7.5), or inf/nan (1e300 is inf in the float32 the trainer reads), makes its KL inf.
MAX_LOGPROB = 1e-4


class MalformedResponse(ValueError):
    """A 200 body that is not a response we can read (retried, never cached)."""


def max_body_bytes(max_tokens: int, logprobs: int, choices: int) -> int:
    """The most bytes a response to `choices` completions of `max_tokens` tokens with top-k
    `logprobs` can take; a body beyond it is malformed (an endless or padded stream)."""
    return max(MIN_BODY_BYTES, BYTES_PER_TOKEN_CANDIDATE * max_tokens * (1 + logprobs) * choices)


def check_turn_size(gen: Generation, max_tokens: int) -> None:
    """Raise if the turn's text is far longer than `max_tokens` tokens could spell."""
    limit = MAX_CHARS_PER_TOKEN * max_tokens
    if len(gen.text) > limit:
        raise MalformedResponse(f"turn text of {len(gen.text)} characters, more than "
                                f"{max_tokens} tokens can produce (limit {limit})")


def _expect(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind):
        raise MalformedResponse(f"{where} is {type(value).__name__}, expected {kind.__name__}")
    return value


def _first_choice(body: Any) -> dict[str, Any]:
    choices = _expect(_expect(body, dict, "the body").get("choices"), list, "choices")
    if not choices:
        raise MalformedResponse("choices is empty")
    return _expect(choices[0], dict, "choices[0]")


def _usage(body: dict[str, Any], name: str, default: int) -> int:
    """`usage[name]` (absent or 0 -> `default`); anything but a sane count is malformed."""
    value = _expect(body.get("usage") or {}, dict, "usage").get(name)
    if value is None:
        return default
    if type(value) is not int or not 0 <= value < MAX_USAGE_TOKENS:
        raise MalformedResponse(f"usage.{name} is {str(value)[:40]}, expected an integer in "
                                f"[0, 2^40)")
    return value or default


def _token_id(token: str, vocab: int) -> int:
    """vLLM's `return_tokens_as_token_ids` spells tokens as `token_id:123`; an id outside the
    vocabulary would decode to nothing (or raise) and break the trainer's embedding lookup."""
    prefix, _, number = _expect(token, str, "a token").partition(":")
    if prefix != "token_id":
        raise MalformedResponse(f"expected 'token_id:N' tokens (vLLM "
                                f"return_tokens_as_token_ids), got {token[:40]!r}")
    token_id = int(number)
    if not 0 <= token_id < vocab:
        raise MalformedResponse(f"token id {str(token_id)[:40]} outside the vocabulary "
                                f"(size {vocab})")
    return token_id


def native_call_text(tool_calls: list[dict[str, Any]]) -> str:
    """API tool calls rebuilt as the template's `<tool_call>` text, so rows look the same
    whichever format the endpoint used. Arguments are kept as sent: a malformed JSON string
    stays malformed and the parser records it."""
    blocks = []
    for call in _expect(tool_calls, list, "tool_calls"):
        call = _expect(call, dict, "a tool call")
        function = _expect(call.get("function") or {}, dict, "a tool call's function")
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments if arguments is not None else {}).decode()
        name = _expect(function.get("name") or "", str, "a tool call's name")
        blocks.append(f'{TOOL_CALL_OPEN}\n{{"name": "{name}", "arguments": {arguments or "{}"}}}'
                      f"\n{TOOL_CALL_CLOSE}")
    return "\n".join(blocks)


def _logprob(value: Any) -> float:
    """A top-k log-probability: a finite number no larger than MAX_LOGPROB."""
    number = float(value)
    if not (math.isfinite(number) and number <= MAX_LOGPROB):
        raise MalformedResponse(f"a top-k logprob is {str(value)[:40]}, expected a finite "
                                f"number <= 0")
    return number


def _checked_tokens(logprobs: dict[str, Any], max_tokens: int | None) -> list[Any]:
    """The generated tokens, refused when more than the request let the model generate
    (before they are decoded: a padded body of a million ids would be decoded first)."""
    tokens = _expect(logprobs.get("tokens") or [], list, "tokens")
    if max_tokens is not None and len(tokens) > max_tokens:
        raise MalformedResponse(f"{len(tokens)} generated tokens, more than the turn's "
                                f"max_tokens {max_tokens}")
    return tokens


def parse_completion(body: dict[str, Any], tokenizer: Any, k: int,
                     max_tokens: int | None = None) -> Generation:
    """A /v1/completions body of a vLLM server asked for token ids -> Generation with the exact
    generated ids and their top-k (vLLM lists k+1 candidates: the sampled token and the top k;
    the sampled one is dropped unless it is in the top k). Raises on a malformed body: one with
    more ids than `max_tokens`, or a top-k logprob that is not a finite number <= 0."""
    choice = _first_choice(body)
    logprobs = _expect(choice.get("logprobs") or {}, dict, "logprobs")
    vocab = len(tokenizer)
    ids = [_token_id(token, vocab) for token in _checked_tokens(logprobs, max_tokens)]
    gen = Generation(text=turn_text(tokenizer, ids), token_ids=ids,
                     finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                     prompt_tokens=_usage(body, "prompt_tokens", 0),
                     completion_tokens=_usage(body, "completion_tokens", len(ids)))
    if k:
        tops = [sorted(_expect(candidates or {}, dict, "top_logprobs[i]").items(),
                       key=lambda item: -item[1])[:k]
                for candidates in _expect(logprobs.get("top_logprobs") or [], list,
                                          "top_logprobs")]
        gen.topk_ids = [[_token_id(token, vocab) for token, _ in top] for top in tops]
        gen.topk_logprobs = [[_logprob(value) for _, value in top] for top in tops]
    return gen


def parse_choice(body: dict[str, Any]) -> Generation:
    """A chat-completions response body -> Generation (raises on a malformed body). Text only:
    token strings in `logprobs` cannot be aligned with ids (use `token_ids` for that)."""
    choice = _first_choice(body)
    message = _expect(choice.get("message"), dict, "choices[0].message")
    content = _expect(message.get("content") or "", str, "message content")
    content = content.removesuffix(IM_END)  # servers that keep special tokens show the turn end
    calls = message.get("tool_calls") or []
    text = content + ("\n" if content and calls else "") + native_call_text(calls)
    return Generation(text=text,
                      finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                      prompt_tokens=_usage(body, "prompt_tokens", 0),
                      completion_tokens=_usage(body, "completion_tokens", 0))


def native_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Template-form messages (raw assistant text, `tool` results) -> the API's native form:
    a valid call becomes `tool_calls` with an id, its result a `tool` message with that id; the
    error shown after a failed turn (no call to answer) goes back as a user message."""
    out: list[dict[str, Any]] = []
    call_id: str | None = None
    for message in messages:
        role = message["role"]
        if role == "assistant":
            parsed = parse_assistant(message["content"])
            call_id = None
            if parsed.error is None and parsed.call is not None:
                call_id = f"call_{len(out)}"
                out.append({"role": "assistant", "content": parsed.reasoning or None,
                            "tool_calls": [{"id": call_id, "type": "function", "function": {
                                "name": parsed.call.name,
                                "arguments": orjson.dumps(parsed.call.arguments).decode()}}]})
                continue
            out.append({"role": "assistant", "content": message["content"]})
        elif role == "tool":
            if call_id is not None:
                out.append({"role": "tool", "tool_call_id": call_id, "content": message["content"]})
            else:
                out.append({"role": "user", "content": message["content"]})
            call_id = None
        else:
            out.append(dict(message))
    return out
