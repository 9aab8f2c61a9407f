"""Packing (`data.packing: true`): the documents of a micro-batch laid into as few rows as
first-fit-decreasing finds, instead of one padded row each. A row is as wide as the
batch's longest document (never wider than max_seq_len): attention here is SDPA with a
block-diagonal mask, whose cost grows with the square of the row width whatever the mask
hides (measured on the tiny recipe: rows of 4096 made a step 2.3x slower than padded rows
of ~2.7k), so packing only fills the padding that shorter documents leave, and a step never
costs more slots or wider rows than padding would.

Per packed row:
- `position_ids` restart at 0 for every document. With attention_mask None, Transformers
  reads document boundaries from them (masking_utils.find_packed_sequence_indices) and the
  SDPA/eager mask becomes block-diagonal causal: no token attends across documents, and
  RoPE sees each document at the positions it has alone. Padding continues the last
  document's positions at the end of the row, where causality keeps it out of every real
  token's view. Landmark attention inserts its own positions and blocks and would span
  documents: packing is refused with it (trainer.config).
- `lm_weight` per token: the document's weight, 0 on padding and on each document's first
  token (the last position of the previous document must not learn to predict it).
- MCH: the head's own attention block reads every earlier position of its row (trainer/
  model/mch.py has no document mask), so only the row's *first* document is scored; its
  steps need no offset. The document that opens a row is one with a wrong (label 0) step
  when the row has one (negatives also label their correct earlier steps 1, so such a row
  has both classes), else the one with the most scored steps; the others' steps are dropped.
  A document mask in the head (keys of other documents invisible) would let every
  document be scored; see the report of issue 11.

Pure NumPy (the worker turns the arrays into tensors).
"""

from __future__ import annotations

import numpy as np

from trainer.collate import Documents, fill_topk, pad_steps, topk_width


def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Document indices per row, longest first into the first row with room."""
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for row, free in enumerate(room):
            if lengths[index] <= free:
                rows[row].append(index)
                room[row] -= lengths[index]
                break
        else:
            rows.append([index])
            room.append(capacity - lengths[index])
    return rows


def _opener(row: list[int], documents: Documents) -> list[int]:
    """The row's documents with the one the MCH scores first (see module docstring)."""
    def rank(index: int) -> tuple[bool, int]:
        labels = documents.mch_labels[index]
        return bool((labels == 0).any()), int((labels >= 0).sum())
    first = max(row, key=rank)
    return [first] + [index for index in row if index != first]


def pack(documents: Documents, max_len: int, pad_id: int, pad_multiple: int = 16,
         with_topk: bool = False) -> dict[str, np.ndarray]:
    """Packed arrays of a micro-batch (see module docstring)."""
    lengths = [len(ids) for ids in documents.input_ids]
    capacity = min(max_len, max(lengths))
    rows = [_opener(row, documents) for row in first_fit_decreasing(lengths, capacity)]
    width = -(-max(sum(lengths[i] for i in row) for row in rows) // pad_multiple) * pad_multiple
    shape = (len(rows), width)
    out = {"input_ids": np.full(shape, pad_id, dtype=np.int64),
           "span_ids": np.full(shape, -1, dtype=np.int64),
           "position_ids": np.zeros(shape, dtype=np.int64),
           "lm_weight": np.zeros(shape, dtype=np.float32)}
    if with_topk:
        k = topk_width(documents)
        out.update(topk_ids=np.zeros(shape + (k,), dtype=np.int64),
                   topk_logprobs=np.full(shape + (k,), -np.inf, dtype=np.float32),
                   topk_present=np.zeros(shape, dtype=bool))
    for r, row in enumerate(rows):
        start = 0
        for index in row:
            stop = start + lengths[index]
            out["input_ids"][r, start:stop] = documents.input_ids[index]
            out["span_ids"][r, start:stop] = documents.span_ids[index]
            out["position_ids"][r, start:stop] = np.arange(lengths[index])
            out["lm_weight"][r, start + 1:stop] = documents.lm_weight[index]
            if with_topk:
                fill_topk(out["topk_ids"], out["topk_logprobs"], out["topk_present"], r, start,
                          documents.topk_ids[index], documents.topk_logprobs[index])
            start = stop
        out["position_ids"][r, start:] = np.arange(lengths[row[-1]], lengths[row[-1]] + width - start)
    out.update(pad_steps([documents.mch_positions[row[0]] for row in rows],
                         [documents.mch_labels[row[0]] for row in rows]))
    return out
