"""Shards -> token batches, as a Ray Data stream (driver side) and a collate function
(worker side).

    read_parquet(OUT/trajectories)                 the data contract, nothing else
      -> kept_trajectories (with the consistency filter's table, data.consistency): only
                               the rollouts it kept (trainer.readers.consistency)
      -> training_batches, per pool of `batch_size * bucket_pool_batches` trajectories:
           trainer.readers     one reader per table: trajectories, repairs (the same
                               chunk's repairs/ shard, through the same contract columns),
                               MCH negatives (the `negative` pairs of the same chunk's
                               preferences/ shard, as the pipeline wrote them), safety
                               documents (the chosen side of the same shard's `safety`
                               pairs, trainer.readers.safety); tokenise
                               when the shard has no input_ids; truncate; MCH step labels
           trainer.batching    compose micro-batches: `batch_size` LM documents + `mch_rows`
                               negatives each, length-bucketed; one stream row per batch
    worker: get_dataset_shard("train").iter_batches(batch_size=1) -> trainer.collate:
            Documents (the curriculum drops some) -> padded, or packed (trainer.packing),
            tensors

Repairs and negative pairs are read beside the trajectories they were made from (shards of one
chunk share their part-K name), so every pool mixes all tables in the proportion the
dataset has, without a second stream whose blocks Ray Data would deliver in its own order.

This module imports neither torch nor transformers: Ray Data workers import it to run the
stages, and those imports would cost each worker seconds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trainer import batching
from trainer.contract import TOKEN_COLUMNS, TOKENIZER_COLUMN, TOPK_COLUMNS, TRAJECTORY_COLUMNS
from trainer.data_checks import check_column_types, check_shard_types
from trainer.documents import DocumentRows, ReadSettings, document_table
from trainer.readers.consistency import (ConsistencyMode, filter_counts, kept_only,
                                         kept_trajectories, log_counts)
from trainer.readers.preferences import negative_documents
from trainer.readers.repairs import repair_documents
from trainer.readers.safety import SAFETY_SOURCE, safety_documents
from trainer.readers.trajectories import trajectory_shaped_documents
from trainer.shard_files import check_footers, full_uri, is_uri, part_files

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataSettings:
    shards: str                         # OUT root (holds trajectories/, maybe preferences/, repairs/)
    tokenizer: str                      # tokenizer directory (ids of markers, tokenising)
    max_seq_len: int = 2048             # longer documents are cut (prefix kept)
    batch_size: int = 4                 # LM documents (trajectories, repairs) per micro-batch
    mch_rows: int = 1                   # MCH negatives added to each micro-batch (MCH on)
    bucket_pool_batches: int = 8        # trajectories composed together = batch_size * this
    use_mch: bool = False               # build MCH labels and negatives
    tables: tuple[str, ...] = ("trajectories",)  # LM tables read
    table_weights: tuple[tuple[str, float], ...] = ()  # LM loss weight per table (default 1)
    read_topk: bool = False             # read stored teacher top-k columns
    check_tokenizer: bool = True        # shard token ids must be in our tokenizer
    seed: int = 0
    complexity_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    consistency: ConsistencyMode = "auto"  # kept rollouts only (trainer.config.DataConfig)

    def weight(self, table: str) -> float:
        return dict(self.table_weights).get(table, 1.0)

    def read_settings(self) -> ReadSettings:
        return ReadSettings(self.tokenizer, self.max_seq_len, self.use_mch, self.read_topk,
                            self.complexity_weights)


@dataclass(frozen=True)
class ShardLayout:
    """What the shard directory holds, read from one file's schema before any work."""

    trajectory_files: list[str]
    negative_pairs: list[tuple[str, str]]   # (trajectories/part-K, preferences/part-K): MCH negatives
    has_tokens: bool
    has_topk: bool
    tokenizers: dict[str, str] = field(default_factory=dict)  # the `tokenizer` column's values
    # (every local shard) -> the first shard recording each
    repair_pairs: list[tuple[str, str]] = field(default_factory=list)  # (.., repairs/part-K)


def _pairs(root: str | Path, table: str, by_name: dict[str, str]) -> list[tuple[str, str]]:
    return [(by_name[_name(f)], f) for f in part_files(root, table) if _name(f) in by_name]


def _name(file: str) -> str:
    return file.rpartition("/")[2]


def inspect_shards(root: str | Path) -> ShardLayout:
    """List shards and check the columns a training run needs (fail early, naming them).
    `root` is OUT: a directory, or an object-store URI (trainer/shard_files.py)."""
    root = str(root) if is_uri(root) else Path(root)
    files = part_files(root, "trajectories")
    if not files:
        raise FileNotFoundError(f"no trajectory shards under {root}/trajectories")
    by_name = {_name(f): f for f in files}
    negatives, repairs = _pairs(root, "preferences", by_name), _pairs(root, "repairs", by_name)
    check_footers(files + [f for _, f in negatives + repairs], root)
    # every local shard (a footer each, ~0.1 ms); of an object store the first only
    schemas = [pq.read_schema(f) for f in (files[:1] if is_uri(root) else files)]
    for file, schema in zip(files, schemas):
        check_column_types(file, schema, "trajectories")
    names = set.intersection(*(set(schema.names) for schema in schemas))
    recorded: dict[str, str] = {}  # tokenizer -> the first shard that records it
    for file, schema in zip(files, schemas):
        if TOKENIZER_COLUMN in schema.names:
            for value in pq.read_table(file, columns=[TOKENIZER_COLUMN]).column(
                    TOKENIZER_COLUMN).unique().to_pylist():
                if value:
                    recorded.setdefault(value, file)
    return ShardLayout(files, negatives, all(c in names for c in TOKEN_COLUMNS),
                       all(c in names for c in TOPK_COLUMNS), recorded, repairs)


def same_tokenizer(recorded: str, ours: str) -> bool:
    """The same name or directory, or directories with byte-identical tokenizer.json."""
    if recorded == ours:
        return True
    theirs, mine = Path(recorded) / "tokenizer.json", Path(ours) / "tokenizer.json"
    if theirs.is_file() and mine.is_file():
        return theirs.read_bytes() == mine.read_bytes()
    return False


def check_shard_tokenizer(layout: ShardLayout, settings: DataSettings) -> None:
    """Token ids from another tokenizer would train on garbage without any error: refuse
    them before work starts (`data.check_tokenizer: false` after checking by hand, e.g. when
    the teacher's tokenizer was recorded by a hub name and ours is a local copy of it)."""
    if not settings.check_tokenizer or not (layout.has_tokens or settings.read_topk):
        return
    foreign = sorted(name for name in layout.tokenizers
                     if not same_tokenizer(name, settings.tokenizer))
    if foreign:
        raise ValueError(
            f"{layout.tokenizers[foreign[0]]}: token ids were made with tokenizer {foreign}, not "
            f"{settings.tokenizer!r} (tokenizer); point `tokenizer` at the teacher's tokenizer, "
            f"or set data.check_tokenizer=false if they are the same")



def training_batches(table: pa.Table, settings: DataSettings) -> pa.Table:
    """A pool of trajectory rows -> its micro-batches (the Ray Data stage; see module doc)."""
    read = settings.read_settings()
    ids = table.column("id").to_pylist()
    documents, scores = DocumentRows(), [0.0] * len(ids)
    if "trajectories" in settings.tables:
        documents, scores = trajectory_shaped_documents(table, read,
                                                        settings.weight("trajectories"))
    paths = ([full_uri(p, settings.shards) for p in table.column("path").to_pylist()]
             if "path" in table.column_names else [])
    if "repairs" in settings.tables and paths:
        documents.extend(repair_documents(dict(zip(ids, paths)), read, settings.weight("repairs")))
    if "safety" in settings.tables and paths:
        documents.extend(safety_documents(dict(zip(ids, paths)), read, settings.weight("safety"),
                                          kept_only(str(settings.shards), settings.consistency)))
    if settings.use_mch and settings.mch_rows and paths:
        wanted = batching.batches_needed(len(documents), settings.batch_size) * settings.mch_rows
        documents.extend(negative_documents(table, read, wanted, dict(zip(ids, scores))))
    return batching.compose(document_table(documents, settings.read_topk), settings.batch_size,
                            settings.mch_rows if settings.use_mch else 0, settings.seed)


def check_read_types(layout: ShardLayout, settings: DataSettings) -> None:
    """The contract's column types (trainer.data_checks.CONTRACTS) in every local shard of
    what the run reads beyond the trajectories' own columns (inspect_shards checks those):
    the repairs (`data.tables`), the preference pairs (MCH negatives, `safety` documents),
    the top-k columns (`loss.teacher: topk`). Before any work: another type was a TypeError
    in a Ray Data worker, minutes in, naming neither shard nor column."""
    reads_pairs = (settings.use_mch and settings.mch_rows > 0) or "safety" in settings.tables
    read = {"trajectories": layout.trajectory_files if settings.read_topk else [],
            "repairs": [f for _, f in layout.repair_pairs] if "repairs" in settings.tables else [],
            "preferences": [f for _, f in layout.negative_pairs] if reads_pairs else []}
    for table, files in read.items():
        check_shard_types(files, table, with_topk=settings.read_topk)


def _check_tables(layout: ShardLayout, settings: DataSettings) -> None:
    if "repairs" in settings.tables and not layout.repair_pairs:
        raise ValueError(f"data.tables names 'repairs' but {settings.shards} has no repairs/ "
                         f"shards beside its trajectory shards (generate with critics.enabled)")
    if "safety" in settings.tables and not _has_safety_pairs(layout):
        raise ValueError(f"data.tables names 'safety' but {settings.shards} has no preferences/ "
                         f"shards with safety pairs beside its trajectory shards (generate with "
                         f"critics.enabled and critics.safety_rate > 0)")
    if settings.read_topk and not layout.has_topk:
        raise ValueError(f"teacher 'topk' needs {TOPK_COLUMNS} in the shards; "
                         f"{layout.trajectory_files[0]} has none")


def _has_safety_pairs(layout: ShardLayout) -> bool:
    return any(pq.read_table(f, columns=["source"], filters=[("source", "=", SAFETY_SOURCE)])
               .num_rows for _, f in layout.negative_pairs)


def build_dataset(settings: DataSettings) -> tuple[Any, dict[str, Any]]:
    """The training stream (one row per micro-batch) and a description of it (for logs):
    Ray Data, lazily executed."""
    import ray

    layout = inspect_shards(settings.shards)
    check_read_types(layout, settings)
    check_shard_tokenizer(layout, settings)
    _check_tables(layout, settings)
    columns = list(TRAJECTORY_COLUMNS) + (list(TOKEN_COLUMNS) if layout.has_tokens else []) + \
        (list(TOPK_COLUMNS) if settings.read_topk else [])
    with_negatives = settings.use_mch and bool(layout.negative_pairs) and settings.mch_rows > 0
    if settings.use_mch and not layout.negative_pairs:
        log.warning("MCH is on but %s has no preferences shards paired with the trajectory "
                    "shards: the MCH sees no negatives but repairs' wrong calls", settings.shards)
    filtered = consistency_counts(settings)
    # `path`: the paired shards are found from it, and a DataError names the shard by it
    dataset = ray.data.read_parquet(layout.trajectory_files, include_paths=True)
    dataset = dataset.select_columns(columns + ["path"])
    dataset = dataset.randomize_block_order(seed=settings.seed)
    if filtered is not None:  # before the pools, so they are cut from kept rows only
        dataset = dataset.map_batches(kept_trajectories, fn_kwargs={"root": str(settings.shards)},
                                      batch_format="pyarrow", batch_size=None)
    dataset = dataset.map_batches(training_batches, fn_kwargs={"settings": settings},
                                  batch_format="pyarrow",
                                  batch_size=settings.batch_size * settings.bucket_pool_batches)
    info = {"trajectory_shards": len(layout.trajectory_files), "batch_size": settings.batch_size,
            "tokenised_in_shards": layout.has_tokens, "teacher_topk": settings.read_topk,
            "negative_shards": len(layout.negative_pairs) if with_negatives else 0,
            "repair_shards": len(layout.repair_pairs) if "repairs" in settings.tables else 0,
            "safety_shards": len(layout.negative_pairs) if "safety" in settings.tables else 0,
            "tables": list(settings.tables),
            "consistency": "all rows" if filtered is None else filtered}
    return dataset, info


def consistency_counts(settings: DataSettings) -> dict[str, dict[str, int]] | None:
    """None when every rollout is read; else the consistency filter's rows read and dropped
    per LM table (logged), refusing a filter that keeps nothing."""
    if not kept_only(str(settings.shards), settings.consistency):
        return None
    counts = filter_counts(str(settings.shards),
                           tuple(t for t in ("trajectories", "repairs") if t in settings.tables))
    log_counts(str(settings.shards), counts)
    if not sum(figures["read"] for figures in counts.values()):
        raise ValueError(f"the consistency filter of {settings.shards} kept none of the rows "
                         f"of {list(counts)} ({counts}); nothing to train on")
    return counts


def lm_complexities(dataset: Any) -> np.ndarray:
    """Complexity scores of every LM document of the stream (one pass; the curriculum's
    quantiles). MCH negatives carry their source's score and are left out."""
    scores = []
    for batch in dataset.select_columns(["complexity", "lm_weight"]).iter_batches(
            batch_format="pyarrow"):
        weights = pc.list_flatten(batch.column("lm_weight")).to_numpy(zero_copy_only=False)
        values = pc.list_flatten(batch.column("complexity")).to_numpy(zero_copy_only=False)
        scores.append(values[weights > 0])
    return np.concatenate(scores) if scores else np.zeros(0)
