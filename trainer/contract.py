"""What the trainer agrees on with the shards: span kinds and their ids, the chat markers,
the columns it reads from each table, how a tool call is written, and how a rendered
conversation splits into spans.

This is the trainer's only copy of the contract; the generation side (datagen) writes it,
and tests/trainer/test_contract.py asserts that every name and rule here equals datagen's
(training itself never imports datagen). Pure Python: the model package, the Ray Data
stages and the recipes all import it.
"""

from __future__ import annotations

import json
from typing import Any

# Span kinds, in id order (the `span_ids` column stores these ids per token). ERROR is a
# repair's wrong call: kept in the text as context, embedded in code mode, never trained.
SPAN_KINDS = ("PROMPT", "REASON", "ACT", "OBS", "ERROR")
SPAN_KIND_ID = {kind: index for index, kind in enumerate(SPAN_KINDS)}
PROMPT, REASON, ACT, OBS, ERROR = (SPAN_KIND_ID[kind] for kind in SPAN_KINDS)
TRAINED_SPANS = (REASON, ACT)      # the only kinds any loss reads
PAD_SPAN = -1                      # span id of padding in collated tensors

# Chat markers of the Qwen2.5 template.
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN = "<tool_response>"
ANSWER_PREFIX = "Final answer: "

# Tables under OUT/ and the columns the trainer reads from them.
TABLES = ("trajectories", "negatives", "repairs", "preferences")
TRAJECTORY_COLUMNS = ("id", "text", "spans", "success", "n_steps")
TOKEN_COLUMNS = ("input_ids", "span_ids")            # present when a tokenizer was set
TOPK_COLUMNS = ("teacher_topk_ids", "teacher_topk_logprobs")  # LLM teachers with logprobs
TOKENIZER_COLUMN = "tokenizer"                       # names the tokenizer of the ids
REPAIR_KEY = "source_id"                             # repairs/ rows name their trajectory
PREFERENCE_COLUMNS = ("id", "trajectory_id", "step", "source", "kind", "prompt_text",
                      "chosen_text", "rejected_text")
PREFERENCE_SOURCES = ("negative", "repair", "safety")
# The consistency filter's side table (a run with `consistency.enabled`): one row per rollout,
# `kept` = the filter's verdict; joined to trajectories on trajectory_id = id.
CONSISTENCY_TABLE = "consistency"
CONSISTENCY_COLUMNS = ("trajectory_id", "kept")

# A chunk's shards are <table>/part-K.parquet; the chunk is complete once its marker
# _chunks/chunk-K.json exists (written last). A shard without one is a killed chunk's leftover.
CHUNK_MARKERS = "_chunks"


def marker_of(shard_name: str) -> str:
    """`part-000007.parquet` -> `chunk-000007.json`: the marker (under CHUNK_MARKERS) that makes
    that shard part of the dataset."""
    return shard_name.replace("part-", "chunk-", 1).replace(".parquet", ".json")


def call_act_text(name: str, arguments: Any) -> str:
    """The ACT span of a tool-call turn as the template writes it: the call block and the
    turn's end. Arguments are JSON with the template's `tojson` settings (", " and ": "
    separators, non-ASCII kept); the name goes in unescaped, as Qwen2.5's template does."""
    return (f'\n{TOOL_CALL_OPEN}\n{{"name": "{name}", "arguments": '
            f'{json.dumps(arguments, ensure_ascii=False)}}}\n{TOOL_CALL_CLOSE}{IM_END}\n')


def _span(kind: str, start: int, end: int, step: int) -> dict[str, Any]:
    return {"kind": kind, "start": start, "end": end, "step": step}


def _act_offset(body: str) -> int:
    """Where ACT starts in an assistant turn's text (without `<|im_end|>`): at the
    whitespace before `<tool_call>`, else before the last `Final answer:`, else at the end
    (a reply without an action: all REASON, only `<|im_end|>` is ACT)."""
    at = body.find(TOOL_CALL_OPEN)
    if at < 0:
        at = body.lower().rfind(ANSWER_PREFIX.strip().lower())
    return len(body) if at < 0 else len(body[:at].rstrip())


def _assistant_spans(text: str, start: int, end: int, step: int) -> list[dict[str, Any]]:
    """Spans of one assistant turn text[start:end] (header included; `end` is past its
    `<|im_end|>\\n`, or the end of the text for a turn still open)."""
    header_end = start + len(f"{IM_START}assistant")
    # The header takes its newline unless the turn opens straight into a call: then the
    # newline belongs to the call's ACT span (datagen renders an empty reasoning that way).
    if text.startswith("\n", header_end) and not text.startswith(f"\n{TOOL_CALL_OPEN}", header_end):
        header_end += 1
    spans = [_span("PROMPT", start, header_end, step)]
    closed = text.rfind(IM_END, header_end, end)
    body_end = closed if closed >= 0 else end
    act_start = header_end + _act_offset(text[header_end:body_end])
    if act_start > header_end:
        spans.append(_span("REASON", header_end, act_start, step))
    if end > act_start:
        spans.append(_span("ACT", act_start, end, step))
    return spans


def chat_spans(text: str) -> list[dict[str, Any]]:
    """PROMPT / REASON / ACT / OBS spans of a rendered conversation (the template above),
    tiling `text`; `step` counts assistant turns (-1 before the first). Preference pairs
    store text without spans: this labels their prompts and completions the way datagen
    labelled the trajectories they came from (equal on every oracle trajectory; a repair's
    wrong call comes out ACT, not ERROR, which embeds it the same way). An LLM turn that
    opens straight with `<tool_call>` gets its header newline as PROMPT where datagen may
    have written ACT: no loss reads it and the code mode starts at `<tool_call>` either way.
    """
    spans: list[dict[str, Any]] = []
    step = -1
    starts = [i for i in _find_all(text, IM_START)] or [0]
    if starts[0] > 0:
        spans.append(_span("PROMPT", 0, starts[0], step))
    bounds = starts + [len(text)]
    for start, end in zip(bounds[:-1], bounds[1:]):
        if start == end:
            continue
        if text.startswith(f"{IM_START}assistant", start):
            step += 1
            spans.extend(_assistant_spans(text, start, end, step))
        elif text.startswith(f"{IM_START}user\n{TOOL_RESPONSE_OPEN}", start):
            spans.append(_span("OBS", start, end, step))
        else:
            spans.append(_span("PROMPT", start, end, step))
    return _merged(spans)


def _find_all(text: str, marker: str) -> list[int]:
    found, at = [], text.find(marker)
    while at >= 0:
        found.append(at)
        at = text.find(marker, at + len(marker))
    return found


def _merged(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent spans of the same kind and step as one (datagen's writer merges them)."""
    out: list[dict[str, Any]] = []
    for span in spans:
        last = out[-1] if out else None
        if last is not None and last["kind"] == span["kind"] and last["step"] == span["step"] \
                and last["end"] == span["start"]:
            last["end"] = span["end"]
        else:
            out.append(dict(span))
    return out
