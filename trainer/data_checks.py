"""Checks of the data contract. Row checks, per batch and vectorised (pyarrow/NumPy, no
per-row Python): a row that breaks the contract becomes a `DataError` naming its shard, row
id, column and what is wrong, instead of a KeyError/TypeError deep in a reader or, worse, a
row that trains PROMPT tokens as REASON. A rerun cannot fix a DataError; the data must
change (or the row be dropped from the OUT). Column types, per table (`CONTRACTS`), from
each shard's footer on the driver before any work (a ValueError: `cannot train`).

This module imports neither torch nor Ray (Ray Data workers import it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trainer.contract import (PREFERENCE_COLUMNS, REPAIR_KEY, SPAN_KINDS, TOKENIZER_COLUMN,
                              TOPK_COLUMNS, TRAJECTORY_COLUMNS)
from trainer.shard_files import is_uri


class DataError(ValueError):
    """A shard row breaks the data contract (see module doc)."""


def row_error(table: pa.Table, row: int, column: str, problem: str,
              path: str | None = None) -> DataError:
    """The DataError of `table`'s row `row`: shard (its `path` column, or `path`), row id."""
    if path is None:
        path = table.column("path")[row].as_py() if "path" in table.column_names else "?"
    row_id = table.column("id")[row].as_py() if "id" in table.column_names else None
    return DataError(f"{path}: row id={row_id!r} (row {row}): column {column!r} {problem}")


def _first(mask: np.ndarray) -> int | None:
    bad = np.flatnonzero(mask)
    return int(bad[0]) if len(bad) else None


def check_not_null(table: pa.Table, columns: tuple[str, ...], path: str | None = None) -> None:
    for name in columns:
        column = table.column(name)
        if column.null_count:
            row = _first(pc.is_null(column).to_numpy(zero_copy_only=False))
            raise row_error(table, row, name, "is null", path)


def _numbers(array: pa.Array) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False)


def check_spans(table: pa.Table, path: str | None = None) -> None:
    """Spans tile the text: at least one, sorted, contiguous, from 0 to len(text), each with
    a known kind (label_tokens finds a token's span by searchsorted over the starts, so any
    other layout labels tokens with the wrong kind, silently)."""
    check_not_null(table, ("text", "spans"), path)
    spans = table.column("spans").combine_chunks()
    counts = _numbers(pc.list_value_length(spans)).astype(np.int64)
    row = _first(counts == 0)
    if row is not None:
        raise row_error(table, row, "spans", "is empty (the spans must tile the text)", path)
    flat = pc.list_flatten(spans)
    parent = _numbers(pc.list_parent_indices(spans)).astype(np.int64)
    kinds = flat.field("kind")
    known = pc.fill_null(pc.is_in(kinds, value_set=pa.array(SPAN_KINDS)), False)
    element = _first(~_numbers(known).astype(bool))
    if element is not None:
        raise row_error(table, parent[element], "spans",
                        f"has a span of unknown kind {kinds[element].as_py()!r} "
                        f"(known: {list(SPAN_KINDS)})", path)
    starts, ends = flat.field("start"), flat.field("end")
    for name, values in (("start", starts), ("end", ends)):
        element = _first(_numbers(pc.is_null(values)).astype(bool))
        if element is not None:
            raise row_error(table, parent[element], "spans", f"has a span with null {name}", path)
    starts, ends = _numbers(starts).astype(np.int64), _numbers(ends).astype(np.int64)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    last = np.cumsum(counts) - 1
    text_chars = _numbers(pc.utf8_length(table.column("text").combine_chunks())).astype(np.int64)
    gap = np.concatenate([starts[1:] != ends[:-1], [False]]) & \
        np.concatenate([parent[1:] == parent[:-1], [False]])
    problems = (
        (starts[first] != 0, "does not start at 0"),
        (ends[last] != text_chars, "does not end at len(text)"),
        (np.bincount(parent[ends < starts], minlength=len(counts)) > 0, "has a span ending "
         "before it starts"),
        (np.bincount(parent[gap], minlength=len(counts)) > 0, "is not sorted and contiguous "
         "(a span starts elsewhere than where the previous one ends)"),
    )
    for mask, problem in problems:
        row = _first(mask)
        if row is not None:
            raise row_error(table, row, "spans", f"{problem} (text has {text_chars[row]} "
                            f"characters)", path)


def check_token_lists(table: pa.Table, vocab_size: int, path: str | None = None) -> None:
    """Stored tokens: `span_ids` as long as `input_ids` per row (else labels of the batch's
    later rows shift), span ids known, token ids inside the vocabulary."""
    check_token_lengths(table, with_topk=False, path=path)
    check_token_values(table, vocab_size, path)


def _row_lengths(table: pa.Table, name: str) -> np.ndarray:
    return _numbers(pc.list_value_length(table.column(name))).astype(np.int64)


def check_token_lengths(table: pa.Table, with_topk: bool, path: str | None = None) -> None:
    """Per row, `span_ids` (and, `with_topk`, the top-k columns: one list per token, or none
    stored) as long as `input_ids`: a longer or shorter list shifts the labels or teacher
    targets of every later document of its micro-batch (they are cut at the summed lengths).
    Lengths only (the offsets, no values), so it runs on the whole rows, before the
    max_seq_len cut that the value checks see."""
    names = ("input_ids", "span_ids") + (TOPK_COLUMNS if with_topk else ())
    check_not_null(table, names, path)
    lengths = _row_lengths(table, "input_ids")
    row = _first(lengths != _row_lengths(table, "span_ids"))
    if row is not None:
        raise row_error(table, row, "span_ids", f"has {_row_lengths(table, 'span_ids')[row]} "
                        f"values for {lengths[row]} input_ids", path)
    for name in TOPK_COLUMNS if with_topk else ():
        counts = _row_lengths(table, name)
        row = _first((counts != lengths) & (counts != 0))
        if row is not None:
            raise row_error(table, row, name, f"has {counts[row]} per-token lists for "
                            f"{lengths[row]} input_ids (one per token, or none)", path)


def check_token_values(table: pa.Table, vocab_size: int, path: str | None = None) -> None:
    """Token ids inside the vocabulary, span ids known (lengths: check_token_lengths)."""
    ids, spans = table.column("input_ids"), table.column("span_ids")
    lengths = _numbers(pc.list_value_length(ids))
    for name, column, high in (("input_ids", ids, vocab_size), ("span_ids", spans, len(SPAN_KINDS))):
        values = _numbers(pc.list_flatten(column)).astype(np.int64)
        element = _first((values < 0) | (values >= high))
        if element is not None:
            row = int(np.searchsorted(np.cumsum(lengths), element, side="right"))
            raise row_error(table, row, name, f"holds {values[element]}, outside [0, {high})", path)


# What datagen records, kept equal to it by a test (tests/trainer/test_topk_checks.py), not
# imported: those modules pull asyncio and pydantic into every Ray Data worker. At most
# sampling.logprobs (<= 20, the OpenAI API's maximum) candidates per token, and
# log-probabilities <= openai_wire.MAX_LOGPROB (a server rounds a near-certain token's to a
# hair above 0), compared in float32 as the column stores them. -inf is a zero probability
# (the loss's padding value); nan, +inf or a positive value would make the KL nan or wrong.
TOPK_MAX = 20
TOPK_MAX_LOGPROB = np.float32(1e-4)


def _token_error(table: pa.Table, token: int, column: str, problem: str,
                 path: str | None) -> DataError:
    """The DataError of the `token`-th per-token list of `column` (all rows flattened)."""
    rows = _numbers(pc.list_parent_indices(table.column(column).combine_chunks()))
    row = int(rows[token])
    position = token - int(np.searchsorted(rows, row))
    return row_error(table, row, column, f"token {position}: {problem}", path)


def check_topk_values(table: pa.Table, vocab_size: int, path: str | None = None) -> None:
    """Stored teacher top-k, per token: as many ids as log-probabilities, at most TOPK_MAX
    (one token of 100,000 entries padded every token of its batch to that width: 3.3 GB),
    ids inside the vocabulary (else the loss's gather fails), log-probabilities -inf or
    finite and <= TOPK_MAX_LOGPROB. Row lengths: check_token_lengths (before the cut)."""
    check_not_null(table, TOPK_COLUMNS, path)  # rows tokenised here skip check_token_lengths
    ids = pc.list_flatten(table.column("teacher_topk_ids").combine_chunks())
    logprobs = pc.list_flatten(table.column("teacher_topk_logprobs").combine_chunks())
    for name, tokens in (("teacher_topk_ids", ids), ("teacher_topk_logprobs", logprobs)):
        if tokens.null_count:
            token = _first(_numbers(pc.is_null(tokens)).astype(bool))
            raise _token_error(table, token, name, "has a null top-k list", path)
    widths = _numbers(pc.list_value_length(ids)).astype(np.int64)
    lp_widths = _numbers(pc.list_value_length(logprobs)).astype(np.int64)
    token = _first(widths != lp_widths)
    if token is not None:
        raise _token_error(table, token, "teacher_topk_logprobs", f"has {lp_widths[token]} "
                           f"log-probabilities for {widths[token]} top-k ids", path)
    token = _first(widths > TOPK_MAX)
    if token is not None:
        raise _token_error(table, token, "teacher_topk_ids", f"has {widths[token]} "
                           f"entries, more than {TOPK_MAX} (datagen records at most "
                           f"{TOPK_MAX}: teacher sampling.logprobs)", path)
    _check_topk_entries(table, ids, logprobs, vocab_size, path)


def _check_topk_entries(table: pa.Table, ids: pa.Array, logprobs: pa.Array, vocab_size: int,
                        path: str | None) -> None:
    id_values, lp_values = pc.list_flatten(ids), pc.list_flatten(logprobs)
    token_of = _numbers(pc.list_parent_indices(ids)).astype(np.int64)
    for name, values in (("teacher_topk_ids", id_values), ("teacher_topk_logprobs", lp_values)):
        if values.null_count:
            element = _first(_numbers(pc.is_null(values)).astype(bool))
            raise _token_error(table, token_of[element], name, "holds a null", path)
    numbers = _numbers(id_values).astype(np.int64)
    element = _first((numbers < 0) | (numbers >= vocab_size))
    if element is not None:
        raise _token_error(table, token_of[element], "teacher_topk_ids", f"holds "
                           f"{numbers[element]}, outside [0, {vocab_size})", path)
    numbers = _numbers(lp_values).astype(np.float32)
    element = _first(np.isnan(numbers) | (numbers > TOPK_MAX_LOGPROB))
    if element is not None:
        raise _token_error(table, token_of[element], "teacher_topk_logprobs", f"holds "
                           f"{numbers[element]}, not a log-probability (-inf or finite, <= "
                           f"{float(TOPK_MAX_LOGPROB):g})", path)


# -- column types per table, from a shard's footer (before any work) -------------------------

@dataclass(frozen=True)
class ColumnType:
    """A contract column's type: its name in messages, and the test of an Arrow type."""

    name: str
    accepts: Callable[[pa.DataType], bool]


def _is_text(type_: pa.DataType) -> bool:
    return pa.types.is_string(type_) or pa.types.is_large_string(type_)


def list_of(item: ColumnType) -> ColumnType:
    return ColumnType(f"list<{item.name}>", lambda type_: (
        pa.types.is_list(type_) or pa.types.is_large_list(type_))
        and item.accepts(type_.value_type))


def struct_with(**fields: ColumnType) -> ColumnType:
    """A struct with at least `fields` (others are free: a span's `step`)."""
    def accepts(type_: pa.DataType) -> bool:
        return pa.types.is_struct(type_) and all(
            type_.get_field_index(name) >= 0 and field.accepts(type_.field(name).type)
            for name, field in fields.items())
    return ColumnType("struct<" + ", ".join(f"{n}: {f.name}" for n, f in fields.items()) + ">",
                      accepts)


TEXT = ColumnType("string", _is_text)
INTEGER = ColumnType("integer", pa.types.is_integer)
BOOLEAN = ColumnType("bool", pa.types.is_boolean)
FLOAT = ColumnType("float", pa.types.is_floating)

# The type of every column a reader reads, checked where the column is present (DOCUMENT:
# the trajectory-shaped tables, trajectories and repairs). Another type failed deep in a Ray
# Data worker (a TypeError, "Schema at index 1 was different") or, worse, trained on wrong
# values: `success` as text trains every failure as a success (bool("false") is True).
DOCUMENT_TYPES = {"id": TEXT, "text": TEXT, "success": BOOLEAN, "n_steps": INTEGER,
                  "spans": list_of(struct_with(kind=TEXT, start=INTEGER, end=INTEGER)),
                  "input_ids": list_of(INTEGER), "span_ids": list_of(INTEGER)}
TOPK_TYPES = {"teacher_topk_ids": list_of(list_of(INTEGER)),  # read with loss.teacher: topk
              "teacher_topk_logprobs": list_of(list_of(FLOAT))}
# Both layouts: a compact pair stores its prompt as a reference into its conversation (the
# first prompt_chars characters of its text, prompt_messages of its messages).
PREFERENCE_TYPES = {"id": TEXT, "trajectory_id": TEXT, "step": INTEGER, "source": TEXT,
                    "kind": TEXT, "prompt_text": TEXT, "chosen_text": TEXT,
                    "rejected_text": TEXT, "prompt_chars": INTEGER, "prompt_messages": INTEGER}


@dataclass(frozen=True)
class TableContract:
    required: tuple[str, ...]          # columns every shard of the table has
    types: dict[str, ColumnType]       # the type of each column read, where present


CONTRACTS = {
    "trajectories": TableContract(TRAJECTORY_COLUMNS, {**DOCUMENT_TYPES, TOKENIZER_COLUMN: TEXT}),
    "repairs": TableContract(TRAJECTORY_COLUMNS + (REPAIR_KEY,),
                             {**DOCUMENT_TYPES, REPAIR_KEY: TEXT}),
    "preferences": TableContract(PREFERENCE_COLUMNS, PREFERENCE_TYPES),
}


def check_column_types(file: str, schema: pa.Schema, table: str = "trajectories",
                       with_topk: bool = False) -> None:
    """A ValueError naming `file` and the required columns it lacks, or each column of
    another type than `table`'s contract (`CONTRACTS`; the top-k columns too `with_topk`),
    with its type and the contract's."""
    contract = CONTRACTS[table]
    missing = [c for c in contract.required if c not in schema.names]
    if missing:
        raise ValueError(f"{file} lacks required columns {missing}")
    types = {**contract.types, **(TOPK_TYPES if with_topk else {})}
    wrong = [f"{name} is {schema.field(name).type}, not {expected.name}"
             for name, expected in types.items()
             if name in schema.names and not expected.accepts(schema.field(name).type)]
    if wrong:
        raise ValueError(f"{file}: columns of another type than the data contract's: "
                         + "; ".join(wrong))


def check_shard_types(files: list[str], table: str, with_topk: bool = False) -> None:
    """`check_column_types` of every shard of a local OUT (a footer each, ~0.1 ms); of an
    object store the first only (a request per shard; the rest are left to the read)."""
    for file in files[:1] if files and is_uri(files[0]) else files:
        check_column_types(file, pq.read_schema(file), table, with_topk)
