"""An MCH negative built on the fly: a trajectory with one tool call replaced by a wrong one.

Evaluation (trainer.step_eval) makes typed negatives of held-out gold calls with the
mutators, so no pipeline text exists for them; training never comes here (its negatives are
the `negative` pairs the pipeline wrote, trainer.readers.preferences). The negative is the
trajectory's text up to that step's ACT span, with the span written around the wrong call
as the contract writes calls (`trainer.contract.call_act_text`, tested against datagen's
renderer), and cut right after it: what follows in the original (the observation of the
correct call) would be inconsistent with the wrong call.
"""

from __future__ import annotations

from typing import Any

import orjson

from trainer.contract import TOOL_CALL_OPEN, call_act_text


def parse_call(payload: str | None) -> dict[str, Any] | None:
    """The wrong call from a JSON payload; None when it is not a whole call."""
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
            if TOOL_CALL_OPEN not in text[span["start"]:span["end"]]:
                return None  # a final answer, not a call
            act_text = call_act_text(call["name"], call["arguments"])
            start = span["start"]
            new_spans = [dict(s) for s in spans[:index]]
            new_spans.append({"kind": "ACT", "start": start, "end": start + len(act_text),
                              "step": step})
            return text[:start] + act_text, new_spans
    return None
