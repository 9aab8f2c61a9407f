"""Chat-completions wire format: reading a response into a Generation, and the native
tool-call message shapes hosted APIs expect.

Kept apart from the HTTP client so it can be tested on recorded bodies alone.
"""

from __future__ import annotations

from typing import Any

import orjson

from datagen.chat import IM_END, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, parse_assistant
from datagen.teachers.episode import Generation
from datagen.teachers.trace import turn_text


def _token_id(token: str) -> int:
    """vLLM's `return_tokens_as_token_ids` spells tokens as `token_id:123`."""
    prefix, _, number = token.partition(":")
    if prefix != "token_id":
        raise ValueError(f"expected 'token_id:N' tokens (vLLM return_tokens_as_token_ids), "
                         f"got {token[:40]!r}")
    return int(number)


def native_call_text(tool_calls: list[dict[str, Any]]) -> str:
    """API tool calls rebuilt as the template's `<tool_call>` text, so rows look the same
    whichever format the endpoint used. Arguments are kept as sent: a malformed JSON string
    stays malformed and the parser records it."""
    blocks = []
    for call in tool_calls:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments if arguments is not None else {}).decode()
        name = str(function.get("name", ""))
        blocks.append(f'{TOOL_CALL_OPEN}\n{{"name": "{name}", "arguments": {arguments or "{}"}}}'
                      f"\n{TOOL_CALL_CLOSE}")
    return "\n".join(blocks)


def parse_completion(body: dict[str, Any], tokenizer: Any, k: int) -> Generation:
    """A /v1/completions body of a vLLM server asked for token ids -> Generation with the exact
    generated ids and their top-k (vLLM lists k+1 candidates: the sampled token and the top k;
    the sampled one is dropped unless it is in the top k). Raises on a malformed body."""
    choice = body["choices"][0]
    logprobs = choice.get("logprobs") or {}
    ids = [_token_id(token) for token in logprobs.get("tokens") or []]
    usage = body.get("usage") or {}
    gen = Generation(text=turn_text(tokenizer, ids), token_ids=ids,
                     finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                     prompt_tokens=int(usage.get("prompt_tokens") or 0),
                     completion_tokens=int(usage.get("completion_tokens") or len(ids)))
    if k:
        tops = [sorted((candidates or {}).items(), key=lambda item: -item[1])[:k]
                for candidates in logprobs.get("top_logprobs") or []]
        gen.topk_ids = [[_token_id(token) for token, _ in top] for top in tops]
        gen.topk_logprobs = [[float(value) for _, value in top] for top in tops]
    return gen


def parse_choice(body: dict[str, Any]) -> Generation:
    """A chat-completions response body -> Generation (raises on a malformed body). Text only:
    token strings in `logprobs` cannot be aligned with ids (use `token_ids` for that)."""
    choice = body["choices"][0]
    message = choice["message"]
    content = message.get("content") or ""
    if not isinstance(content, str):
        raise TypeError(f"message content is {type(content).__name__}, expected text")
    content = content.removesuffix(IM_END)  # servers that keep special tokens show the turn end
    calls = message.get("tool_calls") or []
    text = content + ("\n" if content and calls else "") + native_call_text(calls)
    usage = body.get("usage") or {}
    return Generation(text=text,
                      finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                      prompt_tokens=int(usage.get("prompt_tokens") or 0),
                      completion_tokens=int(usage.get("completion_tokens") or 0))


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
