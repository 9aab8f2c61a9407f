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
import orjson
import pyarrow as pa

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
        # Shared across episodes: every task of an environment has the same system turn.
        self._cache = encode_cache
        self.im_end_id = tokenizer.convert_tokens_to_ids(IM_END)

    @property
    def ids(self) -> list[int]:
        return self.trace.ids

    def encode(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is None:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(text) > 1000 and len(self._cache) < 256:  # long, repeated segments only
                self._cache[text] = ids
        return ids

    def add_template(self, text: str, kind: str) -> None:
        """Text the template adds (not generated): span kind `kind`, no top-k."""
        ids = self.encode(text)
        trace = self.trace
        trace.ids.extend(ids)
        trace.span_ids.extend([SPAN_KIND_ID[kind]] * len(ids))
        trace.topk_counts.extend([0] * len(ids))

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
            for token_ids, token_logprobs in zip(topk_ids, topk_logprobs):
                count = min(len(token_ids), len(token_logprobs))
                trace.topk_counts.append(count)
                trace.topk_ids.extend(token_ids[:count])
                trace.topk_logprobs.extend(token_logprobs[:count])
        else:
            trace.topk_counts.extend([0] * len(ids))
        closed = bool(ids) and ids[-1] == self.im_end_id
        self.add_template("\n" if closed else IM_END + "\n", "ACT")


def turn_text(tokenizer: Any, ids: list[int]) -> str:
    """The raw text of a generated turn: decode(ids) without the closing <|im_end|>."""
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
    return decode(tokenizer, ids[:-1] if ids and ids[-1] == im_end_id else ids)


def _nested_list(counts: np.ndarray, values: np.ndarray, row_lengths: list[int],
                 value_type: pa.DataType) -> pa.ListArray:
    """list<list<value>> from per-token entry counts, flat values and tokens per row."""
    inner = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=inner[1:])
    outer = np.zeros(len(row_lengths) + 1, dtype=np.int32)
    np.cumsum(row_lengths, out=outer[1:])
    tokens = pa.ListArray.from_arrays(pa.array(inner), pa.array(values, type=value_type))
    return pa.ListArray.from_arrays(pa.array(outer), tokens)


def teacher_columns(trajectories: list[Trajectory], rendered: list[tuple[str, list[Span]]],
                    tokenizer: Any, tokenizer_name: str | None,
                    ) -> tuple[tuple[list[list[int]], list[np.ndarray]] | None, dict[str, Any]]:
    """The token columns (input_ids, span_ids) and the LLM-teacher columns of a batch.

    Rows with a trace take it as is; the others (episodes that never reached the model, task
    failures) are tokenised from their rendered text, with an empty top-k for every token.
    Without any tokenizer only `teacher_meta` is returned. The top-k columns are assembled
    from the traces' flat arrays straight into Arrow (no per-token Python lists)."""
    meta = [orjson.dumps(traj.meta).decode() for traj in trajectories]
    if tokenizer is None and all(traj.tokens is None for traj in trajectories):
        return None, {"teacher_meta": meta}
    missing = [i for i, traj in enumerate(trajectories) if traj.tokens is None]
    fallback: dict[int, tuple[list[int], np.ndarray]] = {}
    if missing and tokenizer is not None:
        ids, labels = tokenize_with_spans(tokenizer, [rendered[i][0] for i in missing],
                                          [rendered[i][1] for i in missing])
        fallback = dict(zip(missing, zip(ids, labels)))
    input_ids, span_ids, names = [], [], []
    counts, topk_ids, topk_logprobs = [], [], []
    for i, traj in enumerate(trajectories):
        trace = traj.tokens
        if trace is None:
            ids, labels = fallback.get(i, ([], np.zeros(0, dtype=np.int8)))
            input_ids.append(list(ids))
            span_ids.append(labels)
            counts.append(np.zeros(len(ids), dtype=np.int32))
            names.append(tokenizer_name)
            continue
        input_ids.append(trace.ids)
        span_ids.append(np.asarray(trace.span_ids, dtype=np.int8))
        counts.append(np.frombuffer(trace.topk_counts, dtype=np.int32))
        topk_ids.append(np.frombuffer(trace.topk_ids, dtype=np.int32))
        topk_logprobs.append(np.frombuffer(trace.topk_logprobs, dtype=np.float32))
        names.append(trace.tokenizer)
    lengths = [len(ids) for ids in input_ids]
    all_counts = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int32)

    def flat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    return (input_ids, span_ids), {
        "teacher_topk_ids": _nested_list(all_counts, flat(topk_ids, np.int32), lengths,
                                         pa.int32()),
        "teacher_topk_logprobs": _nested_list(all_counts, flat(topk_logprobs, np.float32),
                                              lengths, pa.float32()),
        "tokenizer": names, "teacher_meta": meta}
