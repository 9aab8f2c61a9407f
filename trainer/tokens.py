"""Token-level labels from the data contract: span kinds per token, MCH step positions,
complexity scores. Pure functions over NumPy/Arrow, used by the Ray Data stages in
`trainer.data` and by generation (prompts are labelled the same way as training rows).

Span kind ids, markers and the trained kinds come from the contract (trainer.contract).
"""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from trainer.contract import ACT, ERROR, IM_END, SPAN_KIND_ID, TOOL_CALL_OPEN, TRAINED_SPANS

MAX_CONFIG_BYTES = 16 << 20  # tokenizer_config.json: a few KB, ~100 KB with a chat template

__all__ = ["ACT", "ERROR", "IM_END", "SPAN_KIND_ID", "TOOL_CALL_OPEN", "TextTokenizer",
           "load_tokenizer", "text_bound", "special_ids", "label_tokens", "tokenize_with_spans", "act_runs",
           "tool_call_step_ends", "topk_entropy", "complexity"]


class TextTokenizer:
    """A Hugging Face tokenizer directory read with the `tokenizers` library alone.

    The Ray Data stages only need ids, offsets and a few special ids; the `tokenizers`
    backend gives exactly what `AutoTokenizer` gives (it is the same backend) and imports in
    milliseconds, where `transformers` costs each Ray worker seconds to import."""

    def __init__(self, directory: str | Path) -> None:
        from tokenizers import Tokenizer

        from datagen.bounded_read import irregular_kind, read_bounded  # a FIFO: one OSError

        self.directory = Path(directory)
        tokenizer_file = self.directory / "tokenizer.json"
        if kind := irregular_kind(tokenizer_file):  # from_file waited on a FIFO forever
            raise OSError(f"{tokenizer_file} is not a regular file ({kind})")
        self.backend = Tokenizer.from_file(str(tokenizer_file))
        config_file = self.directory / "tokenizer_config.json"
        config = json.loads(read_bounded(config_file, MAX_CONFIG_BYTES)) \
            if config_file.exists() else {}
        if not isinstance(config, dict):
            raise ValueError(f"{config_file}: a JSON object was expected, not "
                             f"{type(config).__name__}")
        pad = config.get("pad_token") or "<|endoftext|>"
        pad = pad["content"] if isinstance(pad, dict) else pad
        self.pad_id = self.backend.token_to_id(pad) or 0

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def encode(self, texts: list[str]) -> tuple[list[list[int]], list[list[tuple[int, int]]]]:
        """Ids and character offsets; no special tokens added (the template has them)."""
        encodings = self.backend.encode_batch(texts, add_special_tokens=False)
        return [e.ids for e in encodings], [e.offsets for e in encodings]

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def save(self, directory: str | Path) -> None:
        """Copy the tokenizer files next to a checkpoint (so from_pretrained finds them)."""
        for path in self.directory.iterdir():
            if path.is_file() and not path.name.endswith((".safetensors", ".pt", ".bin")):
                shutil.copy2(path, Path(directory) / path.name)


@lru_cache(maxsize=8)
def longest_token_chars(tokenizer: TextTokenizer) -> int:
    """An upper bound of the characters one token covers: its longest vocabulary string (a
    byte-level token's string has one character per byte, at least its text's characters)."""
    return max(map(len, tokenizer.backend.get_vocab(with_added_tokens=True)))


def text_bound(tokenizer: TextTokenizer, max_tokens: int, margin: int = 64) -> int:
    """Characters that hold more than `max_tokens + margin` tokens: a text longer than this
    has more than `max_tokens` tokens, and cut to it keeps its first `max_tokens` tokens and
    their offsets (the `margin` tokens before the cut absorb a merge the cut changes)."""
    return (max_tokens + margin + 1) * longest_token_chars(tokenizer)


@lru_cache(maxsize=4)
def load_tokenizer(path: str) -> TextTokenizer:
    """The tokenizer of a directory, cached per process (Ray reuses worker processes)."""
    return TextTokenizer(path)


def tokenizer_problem(path: str | Path) -> str | None:
    """Why `path` cannot be the run's tokenizer, or None: checked on the driver before Ray
    starts, so a wrong directory is one line, not a worker traceback minutes later."""
    directory = Path(path)
    if not directory.is_dir():
        return f"tokenizer {path} is not a directory"
    if not (directory / "tokenizer.json").exists():  # a FIFO there is refused by the load
        return f"tokenizer {path} has no tokenizer.json (build one: scripts/build_tokenizer.py)"
    try:
        special_ids(load_tokenizer(str(directory)))
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix
        return f"tokenizer {path} cannot be used: {type(exc).__name__}: {str(exc)[:200]}"
    return None


def special_ids(tokenizer: TextTokenizer) -> dict[str, int]:
    """Ids of the markers the model's mode switch and the MCH rely on."""
    ids = {name: tokenizer.token_id(token) for name, token in
           (("tool_call_start", TOOL_CALL_OPEN), ("im_end", IM_END))}
    missing = [name for name, value in ids.items() if value is None]
    if missing:
        raise ValueError(f"tokenizer lacks {missing}: build it with scripts/build_tokenizer.py")
    ids["pad"] = tokenizer.pad_id
    return ids


def label_tokens(offsets: Sequence[Sequence[int]], spans: Sequence[dict]) -> np.ndarray:
    """Span kind per token (int8): the span holding the token's first character. Same rule
    as the generation side, so labels computed here equal stored `span_ids`."""
    if not spans:
        return np.zeros(len(offsets), dtype=np.int8)
    starts = np.fromiter((span["start"] for span in spans), dtype=np.int64, count=len(spans))
    kinds = np.fromiter((SPAN_KIND_ID[span["kind"]] for span in spans), dtype=np.int8,
                        count=len(spans))
    token_starts = np.fromiter((offset[0] for offset in offsets), dtype=np.int64,
                               count=len(offsets))
    index = np.searchsorted(starts, token_starts, side="right") - 1
    return kinds[np.clip(index, 0, len(spans) - 1)]


def tokenize_with_spans(tokenizer: TextTokenizer, texts: list[str], spans: list[list[dict]],
                        ) -> tuple[list[list[int]], list[np.ndarray]]:
    """Tokenise texts and label every token with its span kind."""
    ids, offsets = tokenizer.encode(texts)
    return ids, [label_tokens(o, row_spans) for o, row_spans in zip(offsets, spans)]


def act_runs(span_ids: np.ndarray, kind: int = ACT) -> list[tuple[int, int]]:
    """(start, end) token ranges, end exclusive, of contiguous runs of span `kind` (ACT)."""
    is_kind = np.concatenate([[False], np.asarray(span_ids) == kind, [False]])
    edges = np.flatnonzero(is_kind[1:] != is_kind[:-1])
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def tool_call_step_ends(input_ids: np.ndarray, span_ids: np.ndarray,
                        tool_call_start_id: int, kind: int = ACT) -> list[int]:
    """Index of the last token of every ACT run (or run of `kind`, e.g. a repair's ERROR
    call) that holds a tool call: where the MCH scores a step. Final-answer runs have no
    `<tool_call>` and are not scored."""
    ids = np.asarray(input_ids)
    return [end - 1 for start, end in act_runs(span_ids, kind)
            if (ids[start:end] == tool_call_start_id).any()]


def topk_entropy(topk_logprobs: Sequence[Sequence[float]]) -> float:
    """Mean entropy (nats) of the stored teacher top-k distributions, tail ignored; 0 when
    none are stored. A -inf log-probability (a zero probability) adds nothing: computed as
    exp(lp) * lp it was 0 * -inf = nan, and the row's complexity and the curriculum's
    quantiles with it."""
    entropies = []
    for lp in topk_logprobs:
        lp = np.asarray(lp, dtype=np.float64)
        lp = lp[np.isfinite(lp)]
        if len(lp):
            entropies.append(-float(np.sum(np.exp(lp) * lp)))
    return float(np.mean(entropies)) if entropies else 0.0


def complexity(n_steps: int, span_ids: np.ndarray, entropy: float = 0.0,
               weights: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> float:
    """Heuristic difficulty of a trajectory for the curriculum: tool-call steps, assistant
    tokens (per 1000) and teacher entropy, weighted."""
    span_ids = np.asarray(span_ids)
    assistant_tokens = int(np.isin(span_ids, TRAINED_SPANS).sum())
    return weights[0] * n_steps + weights[1] * assistant_tokens / 1000.0 + weights[2] * entropy
