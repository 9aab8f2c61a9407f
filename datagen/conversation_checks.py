"""Before a loader hands shards to `datasets`: every message's role and tool calls, and every
row's tools, are what a chat template can render (`datagen.readers`).

`datasets.Json` decodes only when a row is read, and takes a column whose first 5 values are
not JSON for plain strings, so damage would otherwise reach TRL's template (or fail as a row
is read, unnamed). The check costs about what reading those columns costs: they are read
dictionary-encoded (the role, tool-call and tools values of a shard repeat: a pair repeats its
prompt), the distinct values are checked once each, and shards are read on several threads
(Parquet decoding releases the GIL). A 5M-trajectory OUT holds ~70M pairs in the full layout;
checked value by value this took ~20 us a pair, minutes before a streaming dataset's first
row.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from typing import Callable, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datagen.pipeline.shards import OutputUnreadable

ROLES = ("system", "user", "assistant", "tool")  # the roles datagen.chat.to_messages writes
MESSAGE_COLUMNS = {"preferences": ("prompt", "chosen", "rejected"),
                   "trajectories": ("messages",), "repairs": ("messages",)}
MAX_THREADS = 8  # footers and a few small columns a shard: more threads add little


def json_list_problem(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return f"not JSON ({exc}): {value[:60]!r}"
    return None if isinstance(decoded, list) else f"JSON but not a list: {value[:60]!r}"


def _not_a_role(values: pa.Array) -> pa.Array:
    return pc.invert(pc.fill_null(pc.is_in(values, pa.array(ROLES)), False))


def _not_a_json_list(values: pa.Array) -> pa.Array:
    return pa.array([json_list_problem(v) is not None for v in values.to_pylist()], pa.bool_())


def _first_flagged(values: pa.Array, flag: Callable[[pa.Array], pa.Array],
                   null_is_bad: bool) -> int:
    """Position of the first of `values` (plain or dictionary-encoded) that `flag` marks, or
    -1; `flag` sees each distinct value of a dictionary once."""
    if pa.types.is_dictionary(values.type):
        flags = pc.take(flag(values.dictionary), values.indices)
    else:
        flags = flag(values)
    return pc.index(pc.fill_null(flags, null_is_bad), True).as_py()


def conversation_problem(table: pa.Table, columns: Sequence[str]) -> str | None:
    """The first value of `table` (its `id`, `tools` and message `columns`) that a chat
    template cannot render, naming its row id and column, or None: a role outside ROLES, a
    `tool_calls` or `tools` that is not a JSON list."""
    ids = table.column("id")
    for column in columns:
        first_row = 0
        for messages in table.column(column).chunks:
            flat, rows = pc.list_flatten(messages), pc.list_parent_indices(messages)
            roles, calls = flat.field("role"), flat.field("tool_calls")
            if (bad := _first_flagged(roles, _not_a_role, null_is_bad=True)) >= 0:
                return (f"row {ids[first_row + rows[bad].as_py()]}, column {column}.role: "
                        f"{roles[bad].as_py()!r} is not one of {', '.join(ROLES)}")
            if (bad := _first_flagged(calls, _not_a_json_list, null_is_bad=False)) >= 0:
                return (f"row {ids[first_row + rows[bad].as_py()]}, column "
                        f"{column}.tool_calls: {json_list_problem(calls[bad].as_py())}")
            first_row += len(messages)
    first_row = 0
    for tools in table.column("tools").chunks:
        if (bad := _first_flagged(tools, _not_a_json_list, null_is_bad=False)) >= 0:
            return (f"row {ids[first_row + bad]}, column tools: "
                    f"{json_list_problem(tools[bad].as_py())}")
        first_row += len(tools)
    return None


def shard_conversation_problem(file: str, table: str) -> str | None:
    """`conversation_problem` of shard `file` of `table`, reading only the `id`, `tools` and
    each message's `role` and `tool_calls`, dictionary-encoded, a row group at a time (Arrow
    reads nested dictionaries of one row group only)."""
    columns = MESSAGE_COLUMNS[table]
    leaves = [f"{c}.list.element.{leaf}" for c in columns for leaf in ("role", "tool_calls")]
    shard = pq.ParquetFile(file, read_dictionary=["tools", *leaves])
    for group in range(shard.num_row_groups):
        if problem := conversation_problem(shard.read_row_group(group, ["id", "tools", *leaves]),
                                           columns):
            return problem
    return None


def check_conversations(files: Sequence[str], table: str) -> None:
    """`shard_conversation_problem` of every shard, on threads; the first problem in `files`'
    order as `OutputUnreadable` naming the shard."""
    threads = min(MAX_THREADS, os.cpu_count() or 1, len(files))
    pool = ThreadPoolExecutor(threads) if threads > 1 else None  # one shard: no pool
    problems = (pool.map if pool else map)(shard_conversation_problem, files, repeat(table))
    try:
        for file, problem in zip(files, problems):
            if problem:
                raise OutputUnreadable(f"{file}: {problem}")
    finally:  # a problem found: the shards not yet started are not read
        if pool:
            pool.shutdown(cancel_futures=True)
