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

from datagen.rows import render_row, trajectory_schema
from trainer.shard_files import write_parquet

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
    """Write the episodes to `path` (zstd Parquet), whole or not at all."""
    write_parquet(episode_table(trajectories), path)
