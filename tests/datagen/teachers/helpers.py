"""Builders and the alignment check shared by the LLM-teacher tests."""

from __future__ import annotations

from typing import Any

from datagen.pipeline.chunk import task_source
from datagen.config import GenerateConfig
from datagen.rows import render
from datagen.spans import check_tiling, span_at
from datagen.teachers import EnvPool
from datagen.teachers.trace import decode
from datagen.types import SPAN_KIND_ID, Span, Task, Trajectory

GENERATED_KINDS = {SPAN_KIND_ID["REASON"], SPAN_KIND_ID["ACT"]}


def make_tasks(count: int, envs: tuple[str, ...] = ("sql",), seed: int = 0) -> list[Task]:
    config = GenerateConfig(num_trajectories=count, seed=seed, envs=[{"name": e} for e in envs])
    return task_source(config).generate(0, count, EnvPool())


def check_row_alignment(tokenizer: Any, text: str, spans: list[Span], ids: list[int],
                        span_ids: list[int], topk_ids: list[list[int]],
                        topk_logprobs: list[list[float]], k: int) -> int:
    """Assert the token columns of one row agree with its text and spans; return the number
    of generated tokens (those with a top-k)."""
    assert check_tiling(text, spans) is None
    assert decode(tokenizer, ids) == text, "input_ids must decode to the row's text exactly"
    assert len(span_ids) == len(ids) == len(topk_ids) == len(topk_logprobs)
    generated = 0
    for i, token_id in enumerate(ids):
        start = len(decode(tokenizer, ids[:i]))
        if start < len(text):
            assert SPAN_KIND_ID[span_at(spans, start).kind] == span_ids[i], (i, start)
        if topk_ids[i]:
            generated += 1
            assert span_ids[i] in GENERATED_KINDS, "only generated tokens carry a top-k"
            assert len(topk_ids[i]) == len(topk_logprobs[i]) == k
            assert all(a >= b for a, b in zip(topk_logprobs[i], topk_logprobs[i][1:]))
            assert all(value <= 1e-6 for value in topk_logprobs[i])
        else:
            assert topk_logprobs[i] == []
    return generated


def check_trajectory_alignment(tokenizer: Any, traj: Trajectory, k: int) -> int:
    text, spans = render(traj)
    trace = traj.tokens
    assert trace is not None
    return check_row_alignment(tokenizer, text, spans, trace.ids, trace.span_ids,
                               *trace.topk_lists(), k)


# Biases that make a random model end turns early and emit tool-call markers, so episodes go
# several turns and hit every kind of parse failure (ids of the tiny tokenizer's special tokens).
def chatty_bias(tokenizer: Any) -> dict[int, float]:
    ids = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<tool_call>", "</tool_call>"])
    return {ids[0]: 5.0, ids[1]: 4.0, ids[2]: 4.0}


class TenTokenIdsTokenizerFake:
    """Stands in for a tokenizer in wire-format tests: ten ids, `token_id:N` strings map to
    id 2, and id i decodes to the letter chr(65 + i)."""

    def convert_tokens_to_ids(self, token):
        return 2

    def decode(self, ids, **_):
        return "".join(chr(65 + i) for i in ids)

    def __len__(self):
        return 10
