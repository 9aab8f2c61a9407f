"""Tokenised preference pairs -> micro-batches of pairs, one stream row per micro-batch (so
Ray Data's re-batching cannot split a batch), and back to per-pair arrays on the worker.

Pair table (one row per pair, trainer.readers.preferences writes it):
    id, source                                   the pair's id and source (negative | repair | safety)
    kind                                         its kind (a negative kind, a safety case's
                                                 kind such as benign_contrast_delete; "" if none)
    prompt_ids, chosen_ids, rejected_ids         tokens: the shared prompt, each completion
    prompt_spans, chosen_spans, rejected_spans   span kind per token (trainer.contract)
    ref_chosen, ref_rejected                     precomputed reference log-probabilities (NaN: none)
    n_tokens                                     prompt + the longer completion

Batch table (one row per micro-batch): the same columns as lists over its pairs, token
columns concatenated with `*_lengths` to cut them again, and `too_long` / `empty`: pairs the
pool dropped (counted on its first batch). Pairs are length-bucketed within a pool: sorted
by n_tokens, cut into runs of `pairs_per_batch`, the runs shuffled (seeded), so a batch pads
to similar lengths.

Pure NumPy/Arrow: no torch (Ray Data workers import this module).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PARTS = ("prompt", "chosen", "rejected")
TOKEN_COLUMNS = tuple(f"{part}_{kind}" for part in PARTS for kind in ("ids", "spans"))
TOKEN_TYPES = {"ids": pa.int32(), "spans": pa.int8()}
PAIR_SCHEMA = pa.schema(
    [pa.field("id", pa.string()), pa.field("source", pa.string()), pa.field("kind", pa.string())]
    + [pa.field(name, pa.list_(TOKEN_TYPES[name.rsplit("_", 1)[1]])) for name in TOKEN_COLUMNS]
    + [pa.field("ref_chosen", pa.float64()), pa.field("ref_rejected", pa.float64()),
       pa.field("n_tokens", pa.int32())])


@dataclass
class Pairs:
    """Pairs as NumPy arrays (a micro-batch on the worker, or a precompute batch)."""

    ids: list[str]
    sources: list[str]
    kinds: list[str]
    prompt_ids: list[np.ndarray]
    chosen_ids: list[np.ndarray]
    rejected_ids: list[np.ndarray]
    prompt_spans: list[np.ndarray]
    chosen_spans: list[np.ndarray]
    rejected_spans: list[np.ndarray]
    ref_chosen: np.ndarray            # float64 [P], NaN where not precomputed
    ref_rejected: np.ndarray
    too_long: int = 0                 # pairs dropped before this batch (see module doc)
    empty: int = 0

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_batch_row(cls, batch: dict[str, np.ndarray]) -> "Pairs":
        """A stream row (`iter_batches(batch_size=1, batch_format="numpy")`)."""
        row = {name: value[0] for name, value in batch.items()}
        columns = {}
        for part in PARTS:
            cuts = np.cumsum(row[f"{part}_lengths"])[:-1]
            for kind in ("ids", "spans"):
                columns[f"{part}_{kind}"] = np.split(np.asarray(row[f"{part}_{kind}"]), cuts)
        return cls([str(x) for x in row["ids"]], [str(x) for x in row["sources"]],
                   [str(x) for x in row["kinds"]], **columns,
                   ref_chosen=np.asarray(row["ref_chosen"], dtype=np.float64),
                   ref_rejected=np.asarray(row["ref_rejected"], dtype=np.float64),
                   too_long=int(row["too_long"]), empty=int(row["empty"]))

    @classmethod
    def from_table(cls, table: pa.Table) -> "Pairs":
        """A pair table (one row per pair)."""
        columns = {name: [np.asarray(x) for x in table.column(name).to_pylist()]
                   for name in TOKEN_COLUMNS}
        return cls(table.column("id").to_pylist(), table.column("source").to_pylist(),
                   table.column("kind").to_pylist(), **columns,
                   ref_chosen=table.column("ref_chosen").to_numpy(zero_copy_only=False),
                   ref_rejected=table.column("ref_rejected").to_numpy(zero_copy_only=False))


def plan_pair_batches(n_tokens: np.ndarray, pairs_per_batch: int, seed: int) -> list[np.ndarray]:
    """Pair indices of each batch: length-sorted runs, shuffled, a short run (fewer than
    `pairs_per_batch` pairs: the pool's remainder) last. Deterministic in (inputs, seed)."""
    order = np.argsort(n_tokens, kind="stable")
    runs = [order[i:i + pairs_per_batch] for i in range(0, len(order), pairs_per_batch)]
    short = runs.pop() if runs and len(runs[-1]) < pairs_per_batch else None
    shuffle = np.random.default_rng([seed, len(n_tokens), int(n_tokens.sum())]).permutation(len(runs))
    return [runs[i] for i in shuffle] + ([short] if short is not None else [])


def _offsets(counts: np.ndarray) -> pa.Array:
    return pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), pa.int64())


def _grouped(column: pa.ChunkedArray | pa.Array, offsets: pa.Array) -> pa.Array:
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return pa.LargeListArray.from_arrays(offsets, values)


def compose_pairs(pairs: pa.Table, pairs_per_batch: int, seed: int, too_long: int = 0,
                  empty: int = 0) -> pa.Table:
    """A pool's pair table -> its micro-batches (one row each; module doc)."""
    plan = plan_pair_batches(pairs.column("n_tokens").to_numpy(), pairs_per_batch, seed)
    if not plan:
        return _empty_batches()
    taken = pairs.take(pa.array(np.concatenate(plan), pa.int64()))
    pair_offsets = _offsets(np.array([len(batch) for batch in plan]))
    columns: dict[str, pa.Array] = {"ids": _grouped(taken.column("id"), pair_offsets),
                                    "sources": _grouped(taken.column("source"), pair_offsets),
                                    "kinds": _grouped(taken.column("kind"), pair_offsets)}
    bounds = pair_offsets.to_numpy()[:-1]
    for part in PARTS:
        lengths = pc.list_value_length(taken.column(f"{part}_ids")).to_numpy(
            zero_copy_only=False).astype(np.int64)
        token_offsets = _offsets(np.add.reduceat(lengths, bounds))
        for kind in ("ids", "spans"):
            flat = pc.list_flatten(taken.column(f"{part}_{kind}"))
            columns[f"{part}_{kind}"] = _grouped(flat, token_offsets)
        columns[f"{part}_lengths"] = _grouped(pa.array(lengths.astype(np.int32)), pair_offsets)
    for name in ("ref_chosen", "ref_rejected"):
        columns[name] = _grouped(taken.column(name), pair_offsets)
    later = np.zeros(len(plan) - 1, np.int64)  # the pool's drops count once, on its first batch
    columns["too_long"] = pa.array(np.r_[too_long, later].astype(np.int64))
    columns["empty"] = pa.array(np.r_[empty, later].astype(np.int64))
    columns["n_tokens"] = pa.array(np.add.reduceat(taken.column("n_tokens").to_numpy()
                                                   .astype(np.int64), bounds))
    return pa.table(columns)


def _empty_batches() -> pa.Table:
    fields = [pa.field("ids", pa.large_list(pa.string())),
              pa.field("sources", pa.large_list(pa.string())),
              pa.field("kinds", pa.large_list(pa.string()))]
    for part in PARTS:
        fields += [pa.field(f"{part}_ids", pa.large_list(pa.int32())),
                   pa.field(f"{part}_spans", pa.large_list(pa.int8())),
                   pa.field(f"{part}_lengths", pa.large_list(pa.int32()))]
    fields += [pa.field("ref_chosen", pa.large_list(pa.float64())),
               pa.field("ref_rejected", pa.large_list(pa.float64())),
               pa.field("too_long", pa.int64()), pa.field("empty", pa.int64()),
               pa.field("n_tokens", pa.int64())]
    return pa.schema(fields).empty_table()
