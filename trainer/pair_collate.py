"""Pairs (trainer.pair_batches) -> the tensors of one preference forward: 2P rows, the P
chosen rows (prompt + chosen) then the P rejected rows (prompt + rejected), right-padded,
as TRL's preference collator lays them out, so one forward scores both completions:

    input_ids, span_ids   [2P, W]   pad id / span id -1 after each row's tokens
    completion_mask       [2P, W]   the completion tokens (the only ones any loss reads)
    mch_positions/labels  [2P, S]   the completion's tool-call step: 1 in a chosen row, 0 in
                                    a rejected one (-1 = none: a refusal has no call)
    pair_weight           [P]       the pair's loss weight: source weight x kind weight
    pair_norm             [P]       its share of the normaliser: the source weight
                                    (trainer.pair_weights: kind weights scale absolutely)
    source_index          [P]       index of the pair's source in the configured sources
    kind_index            [P]       index of the kind weight pattern that decides the pair's
                                    weight (-1: none matches; per-pattern metrics)
    ref_chosen/rejected   [P]       precomputed reference log-probs (NaN: none)
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from trainer.collate import pad_steps
from trainer.pair_batches import Pairs
from trainer.pair_weights import KindWeights, kind_weight, matching_pattern
from trainer.tokens import tool_call_step_ends


def _rows(pairs: Pairs) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
    ids = [np.concatenate([p, c]) for p, c in zip(pairs.prompt_ids, pairs.chosen_ids)] + \
        [np.concatenate([p, r]) for p, r in zip(pairs.prompt_ids, pairs.rejected_ids)]
    spans = [np.concatenate([p, c]) for p, c in zip(pairs.prompt_spans, pairs.chosen_spans)] + \
        [np.concatenate([p, r]) for p, r in zip(pairs.prompt_spans, pairs.rejected_spans)]
    prompt_lengths = [len(p) for p in pairs.prompt_ids] * 2
    return ids, spans, prompt_lengths


def pair_tensors(pairs: Pairs, pad_id: int, tool_call_start_id: int, sources: tuple[str, ...],
                 weights: dict[str, float], pad_multiple: int = 16,
                 kind_weights: KindWeights = ()) -> dict[str, torch.Tensor]:
    """The module doc's tensors for `pairs`."""
    ids, spans, prompt_lengths = _rows(pairs)
    width = -(-max(len(row) for row in ids) // pad_multiple) * pad_multiple
    input_ids = np.full((len(ids), width), pad_id, dtype=np.int64)
    span_ids = np.full((len(ids), width), -1, dtype=np.int64)
    completion = np.zeros((len(ids), width), dtype=bool)
    positions, labels = [], []
    for row, (row_ids, row_spans, start) in enumerate(zip(ids, spans, prompt_lengths)):
        input_ids[row, :len(row_ids)] = row_ids
        span_ids[row, :len(row_spans)] = row_spans
        completion[row, start:len(row_ids)] = True
        ends = [end for end in tool_call_step_ends(row_ids, row_spans, tool_call_start_id)
                if end >= start]
        positions.append(np.asarray(ends, dtype=np.int64))
        labels.append(np.full(len(ends), 1 if row < len(pairs) else 0, dtype=np.int64))
    out = {"input_ids": input_ids, "span_ids": span_ids, "completion_mask": completion,
           **pad_steps(positions, labels),
           **_weights(pairs, weights, kind_weights),
           "source_index": np.array([sources.index(s) for s in pairs.sources], np.int64),
           "ref_chosen": pairs.ref_chosen.astype(np.float64),
           "ref_rejected": pairs.ref_rejected.astype(np.float64)}
    return {name: torch.from_numpy(value) for name, value in out.items()}


def _weights(pairs: Pairs, weights: dict[str, float], kind_weights: KindWeights,
             ) -> dict[str, np.ndarray]:
    norm = np.array([weights.get(source, 1.0) for source in pairs.sources], np.float32)
    kind = np.array([kind_weight(k, kind_weights) for k in pairs.kinds], np.float32)
    index = np.array([matching_pattern(k, kind_weights) for k in pairs.kinds], np.int64)
    return {"pair_weight": norm * kind, "pair_norm": norm, "kind_index": index}


def batch_hash(pairs: Pairs) -> int:
    """A fingerprint of which pairs a micro-batch holds (metrics.jsonl `batch`), so a resumed
    run can be checked for micro-batches trained twice."""
    return zlib.crc32("|".join(sorted(pairs.ids)).encode())
