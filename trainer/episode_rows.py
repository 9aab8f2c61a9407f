"""The held-out episodes of `trainer eval --episodes-out FILE`, as a Parquet table.

One row per episode in the trajectories table's layout (`datagen.rows`: `task`, `messages`,
`text`, `spans`, `success`, `error`, `error_kind`, ...), so an analyst reads what the
checkpoint did with the same Polars code as the generation shards, plus what the task
expected: `expected_answer` (the checker's answer; null where the final state is judged) and
`gold_calls` (the reference solution's calls, a JSON list of `{"name", "arguments"}`).
The failures are then one filter away, and `benchmarks/episode_failures.py FILE...` says where
in each episode the agent left the reference path:

    pl.read_parquet(FILE).filter(pl.col("error_kind") == "wrong_answer")
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from datagen.rows import render_row, trajectory_schema

if TYPE_CHECKING:
    from datagen.types import Trajectory

EXPECTED_FIELDS = (pa.field("expected_answer", pa.string()), pa.field("gold_calls", pa.string()))


def episode_schema() -> pa.Schema:
    schema = trajectory_schema(with_tokens=False)
    for field in EXPECTED_FIELDS:
        schema = schema.append(field)
    return schema


def episode_table(trajectories: list[Trajectory]) -> pa.Table:
    rows = []
    for trajectory in trajectories:
        row, _ = render_row(trajectory)
        row["expected_answer"] = trajectory.task.answer
        row["gold_calls"] = orjson.dumps(
            [step.call.as_dict() for step in trajectory.task.gold]).decode()
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=episode_schema())


def write_episodes(trajectories: list[Trajectory], path: str | Path) -> None:
    """Write the episodes to `path` (zstd Parquet), replacing it whole: a temporary file in
    the same folder is renamed over it, so a reader never sees half a file."""
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    try:
        pq.write_table(episode_table(trajectories), partial, compression="zstd")
        partial.replace(target)
    finally:  # a failed write (disk full) leaves no partial file behind
        partial.unlink(missing_ok=True)
