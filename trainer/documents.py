"""Tables of the data contract -> training documents, one reader per table.

A *document* is one sequence the model reads: a trajectory, a repair, or an MCH negative.
Every reader emits the same row format (`document_table`), so the batch composer
(`trainer.batching`) and the collate function never ask where a row came from:

    input_ids, span_ids      tokens and their span kind (0 PROMPT 1 REASON 2 ACT 3 OBS 4 ERROR)
    mch_positions/labels     token index of each scored tool-call step, label 1 correct,
                             0 wrong, -1 not scored (steps of failed trajectories)
    lm_weight                weight of the document's tokens in the LM loss (0: MCH only)
    complexity               curriculum score
    teacher_topk_*           stored teacher top-k per token (empty lists where none)

Readers:
- `trajectory_documents`: `trajectories/` rows; tool-call steps of successful ones label 1.
- `repair_documents`: `repairs/` rows, read through the same contract columns; the wrong
  call is span kind ERROR (context, never loss) and, when it is a tool call, an MCH step
  labelled 0; the critique (REASON) and the fix (ACT) are trained, the fix labelled 1.
- `negative_documents`: `negatives/` rows of the same chunk, each the source trajectory cut
  after the wrong call (see trainer.negatives); LM weight 0; the wrong call labelled 0 and
  the source's correct calls before it labelled 1 (the same positions as in the source, so
  every negative holds both classes: a packed row scored by its first document keeps both).

This module imports neither torch nor transformers (Ray Data workers import it).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trainer import negatives as negative_rows
from trainer import tokens

TRAJECTORY_COLUMNS = ("id", "text", "spans", "success", "n_steps")
TOKEN_COLUMNS = ("input_ids", "span_ids")
TOPK_COLUMNS = ("teacher_topk_ids", "teacher_topk_logprobs")
NEGATIVE_COLUMNS = ("trajectory_id", "step", "mutated")
REPAIR_KEY = "source_id"          # repairs/ rows name the trajectory they were made from
TRAINED_SPANS = (tokens.SPAN_KIND_ID["REASON"], tokens.SPAN_KIND_ID["ACT"])


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


def _token_columns(table: pa.Table, tokenizer: tokens.TextTokenizer,
                   ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Stored token ids when the shard has them (exact teacher tokens), else tokenised here."""
    if "input_ids" in table.column_names and "span_ids" in table.column_names:
        ids = [np.asarray(x, dtype=np.int32) for x in table.column("input_ids").to_pylist()]
        spans = [np.asarray(x, dtype=np.int8) for x in table.column("span_ids").to_pylist()]
        return ids, spans
    encoded, labels = tokens.tokenize_with_spans(tokenizer, table.column("text").to_pylist(),
                                                 table.column("spans").to_pylist())
    return [np.asarray(x, dtype=np.int32) for x in encoded], labels


def _trained_tokens(span_ids: np.ndarray) -> int:
    return int(np.isin(span_ids, TRAINED_SPANS).sum())


def _steps(ids: np.ndarray, spans: np.ndarray, call_id: int, success: bool, limit: int,
           ) -> tuple[list[int], list[int]]:
    """MCH positions and labels of a trajectory-shaped document: its tool calls (1 when the
    document is a success, else -1 = not scored) and its ERROR calls (0), inside `limit`."""
    scored = [(end, 1 if success else -1)
              for end in tokens.tool_call_step_ends(ids, spans, call_id)]
    scored += [(end, 0) for end in tokens.tool_call_step_ends(ids, spans, call_id,
                                                              kind=tokens.ERROR)]
    scored = sorted(step for step in scored if step[0] < limit)
    return [end for end, _ in scored], [label for _, label in scored]


def trajectory_shaped_documents(table: pa.Table, settings: ReadSettings, lm_weight: float,
                                ) -> tuple[DocumentRows, list[float]]:
    """Documents of a table with the trajectory contract columns (trajectories, repairs),
    and the complexity of every input row (also of rows not emitted). A row whose kept
    prefix holds no REASON/ACT token is not emitted: it would be a step without LM loss."""
    tokenizer = tokens.load_tokenizer(settings.tokenizer)
    call_id = tokens.special_ids(tokenizer)["tool_call_start"]
    ids, spans = _token_columns(table, tokenizer)
    success, n_steps = table.column("success").to_pylist(), table.column("n_steps").to_pylist()
    with_topk = settings.read_topk and "teacher_topk_ids" in table.column_names
    topk_ids = table.column("teacher_topk_ids").to_pylist() if with_topk else None
    topk_lp = table.column("teacher_topk_logprobs").to_pylist() if with_topk else None
    limit, rows, scores = settings.max_seq_len, DocumentRows(), []
    for i in range(table.num_rows):
        row_ids, row_spans = ids[i][:limit], spans[i][:limit]
        entropy = tokens.topk_entropy(topk_lp[i][:limit]) if with_topk else 0.0
        score = tokens.complexity(n_steps[i] or 0, row_spans, entropy, settings.complexity_weights)
        scores.append(score)
        if not _trained_tokens(row_spans):
            continue
        positions, labels = _steps(ids[i], spans[i], call_id, bool(success[i]), limit) \
            if settings.use_mch else ([], [])
        rows.add(input_ids=row_ids, span_ids=row_spans, mch_positions=positions,
                 mch_labels=labels, lm_weight=lm_weight, complexity=score,
                 teacher_topk_ids=topk_ids[i][:limit] if with_topk else [],
                 teacher_topk_logprobs=topk_lp[i][:limit] if with_topk else [])
    return rows, scores


def paired_file(trajectory_file: str, table_name: str) -> Path:
    """OUT/<table>/part-K.parquet beside OUT/trajectories/part-K.parquet (same chunk)."""
    path = Path(trajectory_file)
    return path.parent.parent / table_name / path.name


def _paired_rows(sources: dict[str, str], table_name: str, key: str,
                 columns: list[str]) -> pa.Table | None:
    """Rows of the paired shards of `table_name` whose `key` is one of the source ids
    (`sources`: trajectory id -> its shard path), in the requested columns every paired
    shard has; None when no paired shard exists."""
    tables = []
    for path in sorted(set(sources.values())):
        paired = paired_file(path, table_name)
        if paired.exists():
            wanted = [tid for tid, source in sources.items() if source == path]
            present = set(pq.read_schema(paired).names)
            tables.append(pq.read_table(paired, columns=[c for c in columns if c in present],
                                        filters=[(key, "in", wanted)]))
    if not tables:
        return None
    common = [c for c in columns if all(c in t.column_names for t in tables)]
    return pa.concat_tables([t.select(common) for t in tables])


def repair_documents(sources: dict[str, str], settings: ReadSettings, lm_weight: float,
                     ) -> DocumentRows:
    """Repairs made from the given trajectories (id -> shard path), read from repairs/ of
    the same chunk through the trajectory contract columns (and stored tokens / top-k when
    the repairs carry them)."""
    columns = list(TRAJECTORY_COLUMNS) + list(TOKEN_COLUMNS) + \
        (list(TOPK_COLUMNS) if settings.read_topk else [])
    table = _paired_rows(sources, "repairs", REPAIR_KEY, columns)
    if table is None or table.num_rows == 0:
        return DocumentRows()
    return trajectory_shaped_documents(table, settings, lm_weight)[0]


def _keep_order(trajectory_id: str, step: int, index: int) -> int:
    """A fixed pseudo-random rank: the same negatives are chosen every epoch and rerun."""
    return zlib.crc32(f"{trajectory_id}|{step}|{index}".encode())


def negative_documents(table: pa.Table, settings: ReadSettings, wanted: int,
                       complexity: dict[str, float]) -> DocumentRows:
    """Up to `wanted` MCH negatives of the trajectories in `table` (which has `path`), read
    from negatives/ of the same chunk and chosen by a fixed rank; each carries its source
    trajectory's complexity, so the curriculum admits it together with its source."""
    if wanted <= 0:
        return DocumentRows()
    sources = {row["id"]: row for row in
               table.select(["id", "text", "spans", "success", "path"]).to_pylist()}
    found = _paired_rows({tid: row["path"] for tid, row in sources.items()}, "negatives",
                         "trajectory_id", list(NEGATIVE_COLUMNS))
    if found is None:
        return DocumentRows()
    candidates = sorted(enumerate(found.to_pylist()),
                        key=lambda item: _keep_order(item[1]["trajectory_id"], item[1]["step"],
                                                     item[0]))
    rows = DocumentRows()
    # Candidates are tokenised in rounds: a wrong call beyond max_seq_len is no example.
    position = 0
    while len(rows) < wanted and position < len(candidates):
        batch = candidates[position:position + wanted - len(rows)]
        position += len(batch)
        examples, owners = [], []
        for _, neg in batch:
            source = sources[neg["trajectory_id"]]
            example = negative_rows.negative_example(source["text"], source["spans"],
                                                     neg["step"], neg["mutated"])
            if example is not None:
                examples.append(example)
                owners.append((complexity.get(neg["trajectory_id"], 0.0), bool(source["success"])))
        rows.extend(_tokenised_negatives(examples, owners, settings))
    return rows


def _tokenised_negatives(examples: list[tuple[str, list[dict]]], owners: list[tuple[float, bool]],
                         settings: ReadSettings) -> DocumentRows:
    """Negative documents of (text, spans) examples; `owners`: the source's (complexity,
    success) per example."""
    rows = DocumentRows()
    if not examples:
        return rows
    tokenizer = tokens.load_tokenizer(settings.tokenizer)
    call_id = tokens.special_ids(tokenizer)["tool_call_start"]
    ids, labels = tokens.tokenize_with_spans(tokenizer, [e[0] for e in examples],
                                             [e[1] for e in examples])
    for row_ids, row_spans, (score, success) in zip(ids, labels, owners):
        ends = tokens.tool_call_step_ends(np.asarray(row_ids), row_spans, call_id)
        if ends and ends[-1] < settings.max_seq_len:  # else the wrong call would be cut off
            rows.add(input_ids=np.asarray(row_ids, dtype=np.int32), span_ids=row_spans,
                     mch_positions=ends, mch_labels=[1 if success else -1] * (len(ends) - 1) + [0],
                     lm_weight=0.0, complexity=score)
    return rows
