"""The uniform training document, and access to the shards paired with a trajectory shard.

A *document* is one sequence the SAD feed reads: a trajectory, a repair, or an MCH
negative. Every reader (trainer.readers: one module per table) emits the same row format
(`document_table`), so the batch composer (`trainer.batching`) and the collate function
never ask where a row came from:

    input_ids, span_ids      tokens and their span kind (trainer.contract)
    mch_positions/labels     token index of each scored tool-call step, label 1 correct,
                             0 wrong, -1 not scored (steps of failed trajectories)
    lm_weight                weight of the document's tokens in the LM loss (0: MCH only)
    complexity               curriculum score
    teacher_topk_*           stored teacher top-k per token (empty lists where none)

Shards of one chunk share their part-K name across tables, so the repairs and preference
pairs made from a pool of trajectories are read from the paired files (`paired_rows`).

This module imports neither torch nor transformers (Ray Data workers import it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trainer.shard_files import exists, sibling


@dataclass(frozen=True)
class ReadSettings:
    """What the readers need to know (a slice of trainer.data.DataSettings)."""

    tokenizer: str
    max_seq_len: int
    use_mch: bool
    read_topk: bool
    complexity_weights: tuple[float, float, float]


class DocumentRows:
    """Column lists of documents under construction."""

    NAMES = ("input_ids", "span_ids", "mch_positions", "mch_labels", "lm_weight", "complexity",
             "teacher_topk_ids", "teacher_topk_logprobs")

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in self.NAMES}

    def __len__(self) -> int:
        return len(self.columns["input_ids"])

    def add(self, **values: Any) -> None:
        for name in self.NAMES:
            self.columns[name].append(values.get(name, []))

    def extend(self, other: "DocumentRows") -> None:
        for name in self.NAMES:
            self.columns[name].extend(other.columns[name])


def _list_array(values: list[Any], value_type: pa.DataType) -> pa.Array:
    return pa.array(values, type=pa.list_(value_type))


def document_table(rows: DocumentRows, with_topk: bool) -> pa.Table:
    """The uniform document format every reader emits."""
    columns = rows.columns
    table = {
        "input_ids": _list_array(columns["input_ids"], pa.int32()),
        "span_ids": _list_array(columns["span_ids"], pa.int8()),
        "mch_positions": _list_array(columns["mch_positions"], pa.int32()),
        "mch_labels": _list_array(columns["mch_labels"], pa.int8()),
        "lm_weight": pa.array(columns["lm_weight"], pa.float32()),
        "complexity": pa.array(columns["complexity"], pa.float32()),
        "n_tokens": pa.array([len(x) for x in columns["input_ids"]], pa.int32()),
    }
    if with_topk:
        # a document without stored top-k (a repair, a negative) gets one empty list per token
        topk_ids = [ids if len(ids) else [[]] * len(tok) for ids, tok in
                    zip(columns["teacher_topk_ids"], columns["input_ids"])]
        topk_lp = [lp if len(lp) else [[]] * len(tok) for lp, tok in
                   zip(columns["teacher_topk_logprobs"], columns["input_ids"])]
        table["teacher_topk_ids"] = _list_array(topk_ids, pa.list_(pa.int32()))
        table["teacher_topk_logprobs"] = _list_array(topk_lp, pa.list_(pa.float32()))
    return pa.table(table)


def paired_file(trajectory_file: str, table_name: str) -> Path | str:
    """OUT/<table>/part-K.parquet beside OUT/trajectories/part-K.parquet (same chunk); a URI
    when OUT is an object store."""
    return sibling(trajectory_file, table_name)


def paired_rows(sources: dict[str, str], table_name: str, key: str, columns: list[str],
                extra_filters: list[tuple] | None = None) -> pa.Table | None:
    """Rows of the paired shards of `table_name` whose `key` is one of the source ids
    (`sources`: trajectory id -> its shard path) and that pass `extra_filters`, in the
    requested columns every paired shard has and `path` (the paired shard); None when no
    paired shard exists."""
    tables = []
    for path in sorted(set(sources.values())):
        paired = paired_file(path, table_name)
        if exists(paired):
            wanted = [tid for tid, source in sources.items() if source == path]
            present = set(pq.read_schema(paired).names)
            rows = pq.read_table(paired, columns=[c for c in columns if c in present],
                                 filters=[(key, "in", wanted)] + (extra_filters or []))
            # the shard of every row, so a row breaking the contract is named (DataError)
            tables.append(rows.append_column("path", pa.repeat(pa.scalar(str(paired)), rows.num_rows)))
    if not tables:
        return None
    common = [c for c in columns + ["path"] if all(c in t.column_names for t in tables)]
    return pa.concat_tables([t.select(common) for t in tables])


