"""Row checks of the data contract, per batch and vectorised (pyarrow/NumPy, no per-row
Python): a row that breaks the contract becomes a `DataError` naming its shard, row id,
column and what is wrong, instead of a KeyError/TypeError deep in a reader or, worse, a row
that trains PROMPT tokens as REASON. A rerun cannot fix a DataError; the data must change
(or the row be dropped from the OUT).

This module imports neither torch nor Ray (Ray Data workers import it).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trainer.contract import SPAN_KINDS


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
    check_not_null(table, ("input_ids", "span_ids"), path)
    ids, spans = table.column("input_ids"), table.column("span_ids")
    lengths = _numbers(pc.list_value_length(ids))
    row = _first(lengths != _numbers(pc.list_value_length(spans)))
    if row is not None:
        raise row_error(table, row, "span_ids", f"has {len(spans[row])} values for "
                        f"{lengths[row]} input_ids", path)
    for name, column, high in (("input_ids", ids, vocab_size), ("span_ids", spans, len(SPAN_KINDS))):
        values = _numbers(pc.list_flatten(column)).astype(np.int64)
        element = _first((values < 0) | (values >= high))
        if element is not None:
            row = int(np.searchsorted(np.cumsum(lengths), element, side="right"))
            raise row_error(table, row, name, f"holds {values[element]}, outside [0, {high})", path)
