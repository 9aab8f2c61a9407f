"""Span checks and per-token span labels.

Spans are character ranges produced by `datagen.chat.render_trajectory`. When a Hugging Face
tokenizer is configured, each token gets the id of the span kind its first character falls in
(`SPAN_KIND_ID`: PROMPT=0, REASON=1, ACT=2, OBS=3), read from the tokenizer's offset mapping.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Sequence

import numpy as np

from datagen.types import SPAN_KIND_ID, Span


def check_tiling(text: str, spans: Sequence[Span]) -> str | None:
    """None when the spans cover `text` exactly, in order, without gaps or overlaps;
    otherwise a description of the first problem."""
    position = 0
    for span in spans:
        if span.start != position:
            return f"span {span} starts at {span.start}, expected {position}"
        if span.end <= span.start:
            return f"span {span} is empty or reversed"
        position = span.end
    if position != len(text):
        return f"spans end at {position}, text has {len(text)} characters"
    return None


def token_span_labels(offsets: Sequence[Sequence[int]], spans: Sequence[Span]) -> np.ndarray:
    """Span kind id per token, from `(start, end)` character offsets (int8 array).

    A token is labelled by the span holding its first character; zero-width tokens (special
    tokens some tokenizers add) take the span of the position they sit at."""
    starts = [span.start for span in spans]
    kinds = np.fromiter((SPAN_KIND_ID[span.kind] for span in spans), dtype=np.int8,
                        count=len(spans))
    token_starts = np.fromiter((offset[0] for offset in offsets), dtype=np.int64,
                               count=len(offsets))
    index = np.searchsorted(np.asarray(starts, dtype=np.int64), token_starts, side="right") - 1
    return kinds[np.clip(index, 0, len(spans) - 1)]


def span_at(spans: Sequence[Span], position: int) -> Span:
    """The span that holds character `position`."""
    return spans[max(bisect_right([span.start for span in spans], position) - 1, 0)]


def tokenize_with_spans(tokenizer: Any, texts: list[str],
                        spans: list[list[Span]]) -> tuple[list[list[int]], list[np.ndarray]]:
    """Tokenise a batch of rendered texts and label every token with its span kind."""
    encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    labels = [token_span_labels(offsets, text_spans)
              for offsets, text_spans in zip(encoded["offset_mapping"], spans)]
    return encoded["input_ids"], labels
