"""MCH negatives: a trajectory with one tool call replaced by a mutator's wrong call.

The `negatives` table gives (`trajectory_id`, `step`, `mutated`): `mutated` is the JSON of
the whole wrong call, `{"name": ..., "arguments": ...}`. The negative example is the
trajectory's text up to that step's ACT span, with the span re-rendered around the wrong
call exactly as the chat template renders calls, and cut right after it: what follows in the
original (the observation of the correct call) would be inconsistent with the wrong call.
The MCH learns to score the last token of that ACT span 0; the LM loss never sees it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def render_call(name: str, arguments: Any) -> str:
    """The ACT span text of a tool call, as Qwen2.5's template writes it (json.dumps with
    default separators, non-ASCII kept)."""
    return (f'\n<tool_call>\n{{"name": "{name}", "arguments": '
            f'{json.dumps(arguments, ensure_ascii=False)}}}\n</tool_call><|im_end|>\n')


def parse_call(payload: str | None) -> dict[str, Any] | None:
    """The wrong call from a `mutated` cell; None when it is not a whole call."""
    try:
        call = orjson.loads(payload) if payload else None
    except orjson.JSONDecodeError:
        return None
    if isinstance(call, dict) and isinstance(call.get("name"), str) and "arguments" in call:
        return call
    return None


def negative_example(text: str, spans: list[dict], step: int, mutated: str | None,
                     ) -> tuple[str, list[dict]] | None:
    """Text and spans of the negative for `step`, or None when the trajectory has no tool
    call at that step or `mutated` is not a whole call."""
    call = parse_call(mutated)
    if call is None:
        return None
    for index, span in enumerate(spans):
        if span["kind"] == "ACT" and span["step"] == step:
            segment = text[span["start"]:span["end"]]
            if "<tool_call>" not in segment:
                return None  # a final answer, not a call
            act_text = render_call(call["name"], call["arguments"])
            start = span["start"]
            new_spans = [dict(s) for s in spans[:index]]
            new_spans.append({"kind": "ACT", "start": start, "end": start + len(act_text),
                              "step": step})
            return text[:start] + act_text, new_spans
    return None
