"""Shards -> token batches, as a Ray Data stream (driver side) and a collate function
(worker side).

    read_parquet(OUT/trajectories)                         the data contract, nothing else
      -> prepare_batch      tokenise `text` with offsets when the shard has no input_ids;
                            truncate; MCH step positions; complexity score
                              + MCH negatives of the batch's trajectories, read from the
                            negatives shard of the same chunk (negatives/part-K beside
                            trajectories/part-K), when the MCH is on
      -> bucket_by_length   sort a pool of rows by length and emit them in batch-sized runs
                            (in shuffled order), so a batch pads to similar lengths
    worker: get_dataset_shard("train").iter_torch_batches(collate_fn=trainer.collate.Collate)

Bucketing rather than packing: rows stay separate sequences, so landmark blocks, the MCH's
step positions and right padding (which lets every attention path run without a mask) need no
cross-document bookkeeping. Padding is bounded by the length spread inside a bucket.

This module imports neither torch nor transformers: Ray Data workers import it to run the
stages, and those imports would cost each worker seconds.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from trainer import negatives as negative_rows
from trainer import tokens

log = logging.getLogger(__name__)

TRAJECTORY_COLUMNS = ("id", "text", "spans", "success", "n_steps")
TOKEN_COLUMNS = ("input_ids", "span_ids")
TOPK_COLUMNS = ("teacher_topk_ids", "teacher_topk_logprobs")
NEGATIVE_COLUMNS = ("trajectory_id", "step", "mutated")


@dataclass(frozen=True)
class DataSettings:
    shards: str                         # OUT root (holds trajectories/, maybe negatives/)
    tokenizer: str                      # tokenizer directory (ids of markers, tokenising)
    max_seq_len: int = 2048             # longer trajectories are cut (prefix kept)
    batch_size: int = 4                 # rows per micro-batch per worker
    bucket_pool_batches: int = 8        # rows sorted together = batch_size * this
    use_mch: bool = False               # build MCH labels and negatives
    negatives_per_trajectory: float = 1.0  # keep about this many negatives per trajectory
    read_topk: bool = False             # read stored teacher top-k columns
    check_tokenizer: bool = True        # shard token ids must be in our tokenizer
    seed: int = 0
    complexity_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)


@dataclass(frozen=True)
class ShardLayout:
    """What the shard directory holds, read from one file's schema before any work."""

    trajectory_files: list[str]
    negative_pairs: list[tuple[str, str]]   # (trajectories/part-K, negatives/part-K)
    has_tokens: bool
    has_topk: bool
    tokenizers: frozenset[str] = frozenset()  # the `tokenizer` column's values (first shard)


def inspect_shards(root: str | Path) -> ShardLayout:
    """List shards and check the columns a training run needs (fail early, naming them)."""
    root = Path(root)
    files = sorted(str(p) for p in (root / "trajectories").glob("part-*.parquet"))
    if not files:
        raise FileNotFoundError(f"no trajectory shards under {root / 'trajectories'}")
    names = set(pq.read_schema(files[0]).names)
    missing = [c for c in TRAJECTORY_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"{files[0]} lacks required columns {missing}")
    by_name = {Path(f).name: f for f in files}
    pairs = [(by_name[p.name], str(p)) for p in sorted((root / "negatives").glob("part-*.parquet"))
             if p.name in by_name]
    recorded = frozenset()
    if "tokenizer" in names:
        column = pq.read_table(files[0], columns=["tokenizer"]).column("tokenizer")
        recorded = frozenset(v for v in column.unique().to_pylist() if v)
    return ShardLayout(files, pairs, all(c in names for c in TOKEN_COLUMNS),
                       all(c in names for c in TOPK_COLUMNS), recorded)


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
            f"{layout.trajectory_files[0]}: token ids were made with tokenizer {foreign}, not "
            f"{settings.tokenizer!r} (tokenizer); point `tokenizer` at the teacher's tokenizer, "
            f"or set data.check_tokenizer=false if they are the same")


def _list_array(values: list[Any], value_type: pa.DataType) -> pa.Array:
    return pa.array(values, type=pa.list_(value_type))


def training_table(rows: dict[str, list[Any]], with_topk: bool) -> pa.Table:
    """The uniform row format every stage after preparation emits."""
    columns = {
        "input_ids": _list_array(rows["input_ids"], pa.int32()),
        "span_ids": _list_array(rows["span_ids"], pa.int8()),
        "mch_positions": _list_array(rows["mch_positions"], pa.int32()),
        "mch_labels": _list_array(rows["mch_labels"], pa.int8()),
        "lm_weight": pa.array(rows["lm_weight"], pa.float32()),
        "complexity": pa.array(rows["complexity"], pa.float32()),
        "n_tokens": pa.array([len(x) for x in rows["input_ids"]], pa.int32()),
    }
    if with_topk:
        columns["teacher_topk_ids"] = _list_array(rows["teacher_topk_ids"], pa.list_(pa.int32()))
        columns["teacher_topk_logprobs"] = _list_array(rows["teacher_topk_logprobs"],
                                                       pa.list_(pa.float32()))
    return pa.table(columns)


def _token_columns(table: pa.Table, tokenizer: tokens.TextTokenizer) -> tuple[list[np.ndarray], list[np.ndarray]]:
    if "input_ids" in table.column_names and "span_ids" in table.column_names:
        ids = [np.asarray(x, dtype=np.int32) for x in table.column("input_ids").to_pylist()]
        spans = [np.asarray(x, dtype=np.int8) for x in table.column("span_ids").to_pylist()]
        return ids, spans
    encoded, labels = tokens.tokenize_with_spans(tokenizer, table.column("text").to_pylist(),
                                                 table.column("spans").to_pylist())
    return [np.asarray(x, dtype=np.int32) for x in encoded], labels


class _Rows:
    """Column lists of training rows under construction."""

    NAMES = ("input_ids", "span_ids", "mch_positions", "mch_labels", "lm_weight", "complexity",
             "teacher_topk_ids", "teacher_topk_logprobs")

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in self.NAMES}

    def add(self, **values: Any) -> None:
        for name in self.NAMES:
            self.columns[name].append(values.get(name, []))


def prepare_batch(table: pa.Table, settings: DataSettings) -> pa.Table:
    """Trajectory rows -> training rows (tokenising when the shard carries no tokens), plus
    the MCH negatives of these trajectories when the MCH is on."""
    tokenizer = tokens.load_tokenizer(settings.tokenizer)
    call_id = tokens.special_ids(tokenizer)["tool_call_start"]
    ids, spans = _token_columns(table, tokenizer)
    success, n_steps = table.column("success").to_pylist(), table.column("n_steps").to_pylist()
    with_topk = settings.read_topk
    topk_ids = table.column("teacher_topk_ids").to_pylist() if with_topk else None
    topk_lp = table.column("teacher_topk_logprobs").to_pylist() if with_topk else None
    limit, rows = settings.max_seq_len, _Rows()
    for i in range(table.num_rows):
        ends = [e for e in tokens.tool_call_step_ends(ids[i], spans[i], call_id) if e < limit] \
            if settings.use_mch else []
        entropy = tokens.topk_entropy(topk_lp[i][:limit]) if with_topk else 0.0
        rows.add(input_ids=ids[i][:limit], span_ids=spans[i][:limit], mch_positions=ends,
                 mch_labels=[1 if success[i] else -1] * len(ends), lm_weight=1.0,
                 complexity=tokens.complexity(n_steps[i] or 0, spans[i][:limit], entropy,
                                              settings.complexity_weights),
                 teacher_topk_ids=topk_ids[i][:limit] if with_topk else [],
                 teacher_topk_logprobs=topk_lp[i][:limit] if with_topk else [])
    if settings.use_mch and "path" in table.column_names:
        add_negatives(table, settings, tokenizer, call_id, rows)
    return training_table(rows.columns, with_topk)


def _keep_negative(trajectory_id: str, step: int, index: int, fraction: float) -> bool:
    """Deterministic subsampling: the same rows are kept on every epoch and every rerun."""
    if fraction >= 1.0:
        return True
    key = f"{trajectory_id}|{step}|{index}".encode()
    return zlib.crc32(key) % 10_000 < fraction * 10_000


def paired_negatives_file(trajectory_file: str) -> Path:
    """negatives/part-K.parquet beside trajectories/part-K.parquet (same chunk)."""
    path = Path(trajectory_file)
    return path.parent.parent / "negatives" / path.name


def add_negatives(table: pa.Table, settings: DataSettings, tokenizer: tokens.TextTokenizer,
                  call_id: int,
                  rows: _Rows) -> None:
    """MCH negatives for the trajectories of `table`, read from the negatives shard of the
    same chunk: LM weight 0, one label-0 step at the wrong call."""
    sources = {row["id"]: row for row in table.select(["id", "text", "spans", "path"]).to_pylist()}
    examples: list[tuple[str, list[dict]]] = []
    for path in sorted({row["path"] for row in sources.values()}):
        negatives_file = paired_negatives_file(path)
        if not negatives_file.exists():
            continue
        wanted = [key for key, row in sources.items() if row["path"] == path]
        negatives = pq.read_table(negatives_file, columns=list(NEGATIVE_COLUMNS),
                                  filters=[("trajectory_id", "in", wanted)]).to_pylist()
        fraction = settings.negatives_per_trajectory * len(wanted) / max(len(negatives), 1)
        for index, neg in enumerate(negatives):
            if _keep_negative(neg["trajectory_id"], neg["step"], index, fraction):
                source = sources[neg["trajectory_id"]]
                example = negative_rows.negative_example(source["text"], source["spans"],
                                                         neg["step"], neg["mutated"])
                if example is not None:
                    examples.append(example)
    if not examples:
        return
    ids, labels = tokens.tokenize_with_spans(tokenizer, [e[0] for e in examples],
                                             [e[1] for e in examples])
    for row_ids, row_spans in zip(ids, labels):
        ends = tokens.tool_call_step_ends(np.asarray(row_ids), row_spans, call_id)
        if ends and ends[-1] < settings.max_seq_len:  # else the wrong call would be cut off
            rows.add(input_ids=np.asarray(row_ids, dtype=np.int32), span_ids=row_spans,
                     mch_positions=[ends[-1]], mch_labels=[0], lm_weight=0.0,
                     complexity=0.0)  # complexity 0: the curriculum never drops negatives


def bucket_by_length(table: pa.Table, batch_size: int, seed: int) -> pa.Table:
    """Sort a pool of rows by length, cut it into batch-sized runs, shuffle the runs."""
    order = np.argsort(table.column("n_tokens").to_numpy(), kind="stable")
    runs = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng = np.random.default_rng(seed + table.num_rows)
    rng.shuffle(runs)
    return table.take(pa.array(np.concatenate(runs) if runs else order))


def build_dataset(settings: DataSettings) -> tuple[Any, dict[str, Any]]:
    """The training stream and a description of it (for logs): Ray Data, lazily executed."""
    import ray

    layout = inspect_shards(settings.shards)
    check_shard_tokenizer(layout, settings)
    if settings.read_topk and not layout.has_topk:
        raise ValueError(f"teacher 'topk' needs {TOPK_COLUMNS} in the shards; "
                         f"{layout.trajectory_files[0]} has none")
    columns = list(TRAJECTORY_COLUMNS) + (list(TOKEN_COLUMNS) if layout.has_tokens else []) + \
        (list(TOPK_COLUMNS) if settings.read_topk else [])
    with_negatives = settings.use_mch and bool(layout.negative_pairs)
    if settings.use_mch and not with_negatives:
        log.warning("MCH is on but %s has no negatives shards paired with the trajectory "
                    "shards: MCH training is skipped (no label-0 steps)", settings.shards)
    dataset = ray.data.read_parquet(layout.trajectory_files, include_paths=with_negatives)
    dataset = dataset.select_columns(columns + (["path"] if with_negatives else []))
    dataset = dataset.randomize_block_order(seed=settings.seed)
    dataset = dataset.map_batches(prepare_batch, fn_kwargs={"settings": settings},
                                  batch_format="pyarrow", batch_size=64)
    pool = settings.batch_size * settings.bucket_pool_batches
    dataset = dataset.map_batches(bucket_by_length, batch_size=pool, batch_format="pyarrow",
                                  fn_kwargs={"batch_size": settings.batch_size,
                                             "seed": settings.seed})
    info = {"trajectory_shards": len(layout.trajectory_files),
            "tokenised_in_shards": layout.has_tokens, "teacher_topk": settings.read_topk,
            "negative_shards": len(layout.negative_pairs) if with_negatives else 0}
    return dataset, info
