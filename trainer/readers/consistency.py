"""`consistency/` -> which rows the trainer reads: with the consistency filter's table (a run
with `consistency.enabled`, issue 18), only the rollouts it kept and what was made from them.

The filter writes all k rollouts of a task to trajectories/ and its verdict to a side table
(`trajectory_id`, `kept`; datagen/pipeline/stages/consistency.py says why a side table). Like
every other paired table it is written per chunk (`consistency/part-K` beside
`trajectories/part-K`), so the verdicts of a block's rows are one small read of the same
chunk's shard, inside the Ray Data stage, at any scale (no id set on the driver). What is
dropped, per table:

    trajectories   rows whose id the filter did not keep
    repairs        rows whose `source_id` it did not keep (the repair replays that rollout's
                   steps up to its error; `datagen.readers.load_sft(kept_only=True)` drops
                   the same ones)
    preferences    `negative` pairs of rollouts it did not keep (the prompt is the rollout);
                   `repair` pairs of the repairs dropped above (their `trajectory_id` is the
                   repair's id, mapped to its source through the chunk's repairs/ shard);
                   `safety` pairs are all kept: their conversation is a made-up decision in
                   no table, none of the rollout's steps, so its verdict says nothing of them

MCH negatives (SAD) are the negative pairs of the pool's trajectories, so they follow the
trajectories without a filter of their own. The filter is a pure function of the shards, so
the stream's order, and a resumed run's skip by position, are what they are without it.
"""

from __future__ import annotations

import logging
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from trainer.contract import CONSISTENCY_COLUMNS, CONSISTENCY_TABLE, REPAIR_KEY
from trainer.shard_files import exists, full_uri, part_files, sibling

log = logging.getLogger(__name__)

ConsistencyMode = Literal["auto", "kept_only", "all"]


def kept_only(root: str, mode: ConsistencyMode) -> bool:
    """Whether a run on OUT `root` reads kept rows only: `kept_only` needs the table (refused
    without it), `all` reads every rollout, `auto` filters exactly when the table exists."""
    has_table = bool(part_files(root, CONSISTENCY_TABLE))
    if mode == "kept_only" and not has_table:
        raise ValueError(f"data.consistency is 'kept_only' but {root} has no {CONSISTENCY_TABLE}/"
                         f" shards (generate with consistency.enabled, or set data.consistency: "
                         f"all)")
    return has_table and mode != "all"


def kept_in_chunk(shard: str, ids: list[str]) -> set[str]:
    """Which of `ids` (rollouts of the chunk of `shard`, a part-K of any table) were kept."""
    verdicts = sibling(shard, CONSISTENCY_TABLE)
    if not exists(verdicts):
        raise ValueError(f"{verdicts} is missing beside {shard}: a run with the consistency "
                         f"filter writes it with every chunk, so these shards do not belong "
                         f"together (set data.consistency: all to train on every rollout)")
    if not ids:
        return set()
    table = pq.read_table(verdicts, columns=list(CONSISTENCY_COLUMNS),
                          filters=[("trajectory_id", "in", sorted(set(ids))), ("kept", "=", True)])
    return set(table.column("trajectory_id").to_pylist())


def _by_chunk(paths: list[str], ids: list[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for path, row_id in zip(paths, ids):
        grouped.setdefault(path, []).append(row_id)
    return grouped


def _kept_ids(paths: list[str], ids: list[str]) -> set[str]:
    kept: set[str] = set()
    for shard, chunk_ids in _by_chunk(paths, ids).items():
        kept |= kept_in_chunk(shard, chunk_ids)
    return kept


def _repair_sources(paths: list[str], repair_ids: list[str]) -> dict[str, str]:
    """Repair id -> its source rollout, from the repairs/ shard of each chunk."""
    sources: dict[str, str] = {}
    for shard, chunk_ids in _by_chunk(paths, repair_ids).items():
        repairs = sibling(shard, "repairs")
        if chunk_ids and exists(repairs):
            table = pq.read_table(repairs, columns=["id", REPAIR_KEY],
                                  filters=[("id", "in", sorted(set(chunk_ids)))])
            sources.update(zip(table.column("id").to_pylist(),
                               table.column(REPAIR_KEY).to_pylist()))
    return sources


def _paths(table: pa.Table, root: str) -> list[str]:
    return [full_uri(path, root) for path in table.column("path").to_pylist()]


def kept_trajectories(table: pa.Table, root: str) -> pa.Table:
    """Ray Data stage: the rows of a block of trajectories/ (with `path`) that were kept."""
    ids = table.column("id").to_pylist()
    kept = _kept_ids(_paths(table, root), ids)
    return table.filter(pa.array([row_id in kept for row_id in ids], pa.bool_()))


def pair_mask(table: pa.Table, root: str) -> list[bool]:
    """Per preference row (with `path`): whether it belongs to a kept rollout (module doc)."""
    paths, owners = _paths(table, root), table.column("trajectory_id").to_pylist()
    sources = table.column("source").to_pylist()
    repairs = [i for i, source in enumerate(sources) if source == "repair"]
    repaired = _repair_sources([paths[i] for i in repairs], [owners[i] for i in repairs])
    # a repair pair stands for its repair's source rollout; a pair whose repair is not in the
    # chunk's repairs/ has none and is dropped with the discarded ones
    rollouts = [repaired.get(owner, "") if source == "repair" else owner
                for owner, source in zip(owners, sources)]
    checked = [i for i, source in enumerate(sources) if source != "safety"]
    kept = _kept_ids([paths[i] for i in checked], [rollouts[i] for i in checked])
    return [source == "safety" or rollout in kept for rollout, source in zip(rollouts, sources)]


def kept_pairs(table: pa.Table, root: str) -> pa.Table:
    """Ray Data stage: the rows of a block of preferences/ (with `path`) of kept rollouts."""
    return table.filter(pa.array(pair_mask(table, root), pa.bool_()))


def kept_ids(root: str) -> set[str]:
    """Every kept rollout of OUT `root`, in memory: for readers that hold their rows in
    memory anyway (the loop's replay pool); the streams filter chunk by chunk instead."""
    kept: set[str] = set()
    for shard in part_files(root, CONSISTENCY_TABLE):
        table = pq.read_table(shard, columns=list(CONSISTENCY_COLUMNS), filters=[("kept", "=", True)])
        kept.update(table.column("trajectory_id").to_pylist())
    return kept


def _shard_mask(name: str, shard: str, root: str) -> tuple[list[bool], list[str]]:
    """Per row of one shard of `name`: kept or not, and its preference source ("" else)."""
    if name == "preferences":
        rows = pq.read_table(shard, columns=["trajectory_id", "source"])
        rows = rows.append_column("path", pa.array([shard] * rows.num_rows, pa.string()))
        return pair_mask(rows, root), rows.column("source").to_pylist()
    key = "id" if name == "trajectories" else REPAIR_KEY
    ids = pq.read_table(shard, columns=[key]).column(key).to_pylist()
    kept = kept_in_chunk(shard, ids)
    return [row_id in kept for row_id in ids], [""] * len(ids)


def filter_counts(root: str, tables: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Rows read and dropped per table (of `tables`: trajectories, repairs, preferences; the
    preferences also per source) for the run's log and info: one pass over the key columns,
    chunk by chunk."""
    counts: dict[str, dict[str, int]] = {}
    for name in tables:
        figures = {"read": 0, "dropped": 0}
        for shard in part_files(root, name):
            mask, sources = _shard_mask(name, shard, root)
            for kept, source in zip(mask, sources):
                outcome = "read" if kept else "dropped"
                figures[outcome] += 1
                if source:
                    figures[f"{source}_{outcome}"] = figures.get(f"{source}_{outcome}", 0) + 1
        counts[name] = figures
    return counts


def log_counts(root: str, counts: dict[str, dict[str, int]]) -> None:
    for name, figures in counts.items():
        log.info("consistency filter on %s: %s reads %d rows, drops %d (rows of rollouts the "
                 "filter did not keep)%s", root, name, figures["read"], figures["dropped"],
                 "" if name != "preferences" else f"; per source {figures}")


__all__ = ["ConsistencyMode", "kept_only", "kept_ids", "kept_trajectories", "kept_pairs", "pair_mask",
           "filter_counts", "log_counts"]
