"""Exact token sequences of LLM episodes, and the token columns of their rows.

A distillation trainer needs the teacher's tokens, not a re-tokenisation of its text: BPE can
spell the same text in several ways, and the teacher's top-k logprobs belong to the ids it
actually produced. `TraceBuilder` therefore assembles the sequence as the model sees it:
template segments (system turn, user turn, assistant headers, tool responses) tokenised on
their own - they are delimited by special tokens, so this equals tokenising the whole text - and
each generated turn appended as the ids the model emitted. Every token gets a span kind, and
generated tokens get the teacher's top-k.

Inside a generated turn the REASON/ACT boundary is a character offset in the decoded text (where
`<tool_call>` or `Final answer:` starts); a token is ACT when its first character is at or after
it, the same rule `datagen.spans` applies to re-tokenised text.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datagen.chat import IM_END
from datagen.spans import tokenize_with_spans
from datagen.types import SPAN_KIND_ID, Span, TokenTrace, Trajectory

REASON, ACT = SPAN_KIND_ID["REASON"], SPAN_KIND_ID["ACT"]


def decode(tokenizer: Any, ids: list[int]) -> str:
    """Text of `ids` with special tokens kept and no clean-up, so decode(encode(s)) == s."""
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def first_token_at(tokenizer: Any, ids: list[int], offset: int) -> int:
    """Index of the first token whose first character is at or after char `offset` of
    decode(ids) (len(ids) if none). Binary search over prefix decodes: O(log n) decodes."""
    low, high = 0, len(ids)
    while low < high:
        middle = (low + high) // 2
        if len(decode(tokenizer, ids[:middle])) >= offset:
            high = middle
        else:
            low = middle + 1
    return low


class TraceBuilder:
    """Builds one episode's TokenTrace; its `ids` are the prompt for the next turn."""

    def __init__(self, tokenizer: Any, tokenizer_name: str, encode_cache: dict[str, list[int]]):
        self.tokenizer = tokenizer
        self.trace = TokenTrace(tokenizer=tokenizer_name)
        self._cache = encode_cache  # shared across episodes: every task of an env has the same system turn
        self.im_end_id = tokenizer.convert_tokens_to_ids(IM_END)

    @property
    def ids(self) -> list[int]:
        return self.trace.ids

    def _encode(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is None:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(text) > 1000 and len(self._cache) < 256:  # long, repeated segments only
                self._cache[text] = ids
        return ids

    def add_template(self, text: str, kind: str) -> None:
        """Text the template adds (not generated): span kind `kind`, no top-k."""
        ids = self._encode(text)
        trace = self.trace
        trace.ids.extend(ids)
        trace.span_ids.extend([SPAN_KIND_ID[kind]] * len(ids))
        trace.topk_ids.extend([] for _ in ids)
        trace.topk_logprobs.extend([] for _ in ids)

    def add_generated(self, ids: list[int], topk_ids: list[list[int]] | None,
                      topk_logprobs: list[list[float]] | None, act_at: int) -> None:
        """A generated turn: its ids as produced, REASON before char `act_at` of its text
        (`datagen.chat.turn_act_offset`), ACT from there, then the template's turn end
        (`\\n` after a generated <|im_end|>, else `<|im_end|>\\n`)."""
        act_token = first_token_at(self.tokenizer, ids, act_at)
        trace = self.trace
        trace.ids.extend(ids)
        trace.span_ids.extend(REASON if i < act_token else ACT for i in range(len(ids)))
        if topk_ids is not None and topk_logprobs is not None and len(topk_ids) == len(ids):
            trace.topk_ids.extend(topk_ids)
            trace.topk_logprobs.extend(topk_logprobs)
        else:
            trace.topk_ids.extend([] for _ in ids)
            trace.topk_logprobs.extend([] for _ in ids)
        closed = bool(ids) and ids[-1] == self.im_end_id
        self.add_template("\n" if closed else IM_END + "\n", "ACT")


def turn_text(tokenizer: Any, ids: list[int]) -> str:
    """The raw text of a generated turn: decode(ids) without the closing <|im_end|>."""
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
    return decode(tokenizer, ids[:-1] if ids and ids[-1] == im_end_id else ids)


def token_columns(trajectories: list[Trajectory], rendered: list[tuple[str, list[Span]]],
                  tokenizer: Any, tokenizer_name: str | None) -> dict[str, list]:
    """input_ids, span_ids, teacher_topk_ids, teacher_topk_logprobs and tokenizer columns.

    Rows with a trace take it as is; the others (episodes that never reached the model, task
    failures) are tokenised from their rendered text, with empty top-k for every token."""
    missing = [i for i, traj in enumerate(trajectories) if traj.tokens is None]
    fallback: dict[int, tuple[list[int], np.ndarray]] = {}
    if missing and tokenizer is not None:
        ids, labels = tokenize_with_spans(tokenizer, [rendered[i][0] for i in missing],
                                          [rendered[i][1] for i in missing])
        fallback = {i: pair for i, pair in zip(missing, zip(ids, labels))}
    columns: dict[str, list] = {name: [] for name in (
        "input_ids", "span_ids", "teacher_topk_ids", "teacher_topk_logprobs", "tokenizer")}
    for i, traj in enumerate(trajectories):
        trace = traj.tokens
        if trace is not None:
            columns["input_ids"].append(trace.ids)
            columns["span_ids"].append(trace.span_ids)
            columns["teacher_topk_ids"].append(trace.topk_ids)
            columns["teacher_topk_logprobs"].append(trace.topk_logprobs)
            columns["tokenizer"].append(trace.tokenizer)
            continue
        ids, labels = fallback.get(i, ([], np.zeros(0, dtype=np.int8)))
        columns["input_ids"].append(list(ids))
        columns["span_ids"].append(labels.tolist())
        columns["teacher_topk_ids"].append([[] for _ in ids])
        columns["teacher_topk_logprobs"].append([[] for _ in ids])
        columns["tokenizer"].append(tokenizer_name)
    return columns
