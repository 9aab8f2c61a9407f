"""Documents -> training batches: which documents share a micro-batch.

Each output row of the stream is one whole micro-batch (its documents concatenated, with
their lengths), so no later re-batching - Ray Data's block splits, `streaming_split` across
workers - can separate what was composed together. A batch holds

    `lm_rows` LM documents (trajectories, repairs; the last batch of a pool may hold fewer)
    + `mch_rows` MCH negatives (LM weight 0), when the pool has negatives at all.

Why a separate MCH stream with a fixed number of rows per batch, rather than shuffling
negatives in with the trajectories: shuffling only makes mixed batches likely, and with
batches of 2-4 rows a run of negative-only batches (steps without LM loss, spending the lr
schedule) or positive-only ones (an MCH loss that swings between 0 and ~45) stays common;
measured before this change: 32 positive-only, 34 negative-only and 0 mixed batches of 66.
A fixed composition gives every step LM loss and puts both MCH classes in every batch
whose LM documents have a scored tool call. Attaching a negative to its positive as a
shared-prefix branch would save the prefix's compute, but needs tree attention masks the
landmark and MCH blocks do not have.

Length bucketing inside a pool: LM documents sorted by length are cut into runs of
`lm_rows`, negatives sorted by length are dealt to the runs in the same order (the shortest
negatives join the shortest run), and the runs are shuffled, so a batch pads to similar
lengths. When a pool has fewer negatives than its batches need, negatives are reused (each
at most ceil(need / have) times); when it has more, the readers already kept only as many
as needed.

Pure NumPy/Arrow: no torch, no Ray (the Ray Data stage in trainer.data calls it).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Per-token list columns (concatenated over a batch's documents) and per-document scalars.
TOKEN_COLUMNS = ("input_ids", "span_ids", "teacher_topk_ids", "teacher_topk_logprobs")
DOCUMENT_COLUMNS = ("lm_weight", "complexity")


def batches_needed(lm_documents: int, lm_rows: int) -> int:
    return -(-lm_documents // lm_rows)


def plan_batches(n_tokens: np.ndarray, lm_weight: np.ndarray, lm_rows: int, mch_rows: int,
                 seed: int) -> list[np.ndarray]:
    """Document indices of each batch (see module docstring); every batch has at least one
    LM document. Deterministic in (its inputs, seed)."""
    lm = np.flatnonzero(lm_weight > 0)
    negatives = np.flatnonzero(lm_weight <= 0)
    if len(lm) == 0:
        return []  # negatives alone would make steps without LM loss
    lm = lm[np.argsort(n_tokens[lm], kind="stable")]
    runs = [lm[i:i + lm_rows] for i in range(0, len(lm), lm_rows)]
    if mch_rows and len(negatives):
        negatives = negatives[np.argsort(n_tokens[negatives], kind="stable")]
        need = len(runs) * mch_rows
        # evenly spread over the sorted negatives: a subsample if there are more, repeats
        # (in length order) if there are fewer
        dealt = negatives[np.arange(need) * len(negatives) // need]
        runs = [np.concatenate([run, dealt[i * mch_rows:(i + 1) * mch_rows]])
                for i, run in enumerate(runs)]
    order = np.random.default_rng([seed, len(n_tokens), int(n_tokens.sum())]).permutation(len(runs))
    return [runs[i] for i in order]


def _concatenated(column: pa.ChunkedArray, offsets: np.ndarray) -> pa.Array:
    """Per-batch lists of a per-document list column: flatten one level, re-split."""
    values = pc.list_flatten(column).combine_chunks() if column.num_chunks else column
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def _grouped(values: pa.ChunkedArray, offsets: np.ndarray) -> pa.Array:
    """Per-batch lists of a per-document scalar column."""
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values.combine_chunks())


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def batch_table(documents: pa.Table, plan: list[np.ndarray]) -> pa.Table:
    """One row per planned batch: token columns concatenated over its documents, per-document
    `lengths`, `lm_weight`, `complexity`, `mch_counts`, and `mch_positions` (relative to
    each document's start) / `mch_labels` concatenated."""
    if not plan:
        return _empty_batches(documents.schema)
    taken = documents.take(pa.array(np.concatenate(plan), pa.int64()))
    per_batch = np.array([len(batch) for batch in plan])
    doc_offsets = _offsets(per_batch)
    lengths = taken.column("n_tokens").to_numpy()
    token_offsets = _offsets(np.add.reduceat(lengths, doc_offsets[:-1]))
    mch_counts = pc.list_value_length(taken.column("mch_positions")).to_numpy(
        zero_copy_only=False).astype(np.int32)
    mch_offsets = _offsets(np.add.reduceat(mch_counts, doc_offsets[:-1]))
    columns = {name: _concatenated(taken.column(name), token_offsets)
               for name in TOKEN_COLUMNS if name in taken.column_names}
    columns.update({name: _grouped(taken.column(name), doc_offsets) for name in DOCUMENT_COLUMNS})
    columns["lengths"] = _grouped(taken.column("n_tokens"), doc_offsets)
    columns["mch_counts"] = pa.ListArray.from_arrays(pa.array(doc_offsets, pa.int32()),
                                                     pa.array(mch_counts, pa.int32()))
    columns["mch_positions"] = _concatenated(taken.column("mch_positions"), mch_offsets)
    columns["mch_labels"] = _concatenated(taken.column("mch_labels"), mch_offsets)
    columns["n_tokens"] = pa.array(np.diff(token_offsets), pa.int64())
    return pa.table(columns)


def _empty_batches(schema: pa.Schema) -> pa.Table:
    fields = [pa.field(name, schema.field(name).type) for name in TOKEN_COLUMNS
              if name in schema.names]
    fields += [pa.field(name, pa.list_(schema.field(name).type)) for name in DOCUMENT_COLUMNS]
    fields += [pa.field("lengths", pa.list_(pa.int32())), pa.field("mch_counts", pa.list_(pa.int32())),
               pa.field("mch_positions", pa.list_(pa.int32())),
               pa.field("mch_labels", pa.list_(pa.int8())), pa.field("n_tokens", pa.int64())]
    return pa.schema(fields).empty_table()


def compose(documents: pa.Table, lm_rows: int, mch_rows: int, seed: int) -> pa.Table:
    """Documents of one pool -> its batches (one row each)."""
    plan = plan_batches(documents.column("n_tokens").to_numpy(),
                        documents.column("lm_weight").to_numpy(), lm_rows, mch_rows, seed)
    return batch_table(documents, plan)
