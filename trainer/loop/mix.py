"""What a student round trains on: its repairs plus a replay share of earlier rounds' rows,
written as one trajectory-shaped OUT (`mix/trajectories/part-*.parquet`) that `trainer fit`
reads like any other.

Why a table of its own rather than the round's OUT as it is: the trainer reads repairs only
beside the trajectory rows they were made from, and those are the student's failed rollouts,
which must not be trained on. A repair row has the trajectory contract columns (its wrong
step an ERROR span: context without loss; critique REASON and fix ACT trained; its wrong call
an MCH step labelled 0), so it is read as a trajectory row with the same effect as through
the repairs reader. Rows keep the text and spans only (the trainer tokenises), so rows of
a tokenised student run and of an untokenised teacher run mix in one schema.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trainer.contract import REPAIR_KEY, TRAJECTORY_COLUMNS
from trainer.readers.consistency import ConsistencyMode, kept_ids, kept_only

# The contract columns plus what says where a row came from (and lets `trainer eval --shards`
# check held-out tasks against the mix).
MIX_COLUMNS = (*TRAJECTORY_COLUMNS, "env", "task_id", "task_seed", "task", "teacher", "round")
ROWS_PER_SHARD = 2000


def table_rows(out: Path, table: str, kept: set[str] | None = None) -> pa.Table | None:
    """The MIX_COLUMNS of every shard of `out/table`, or None when there is none; with
    `kept` (rollout ids) only rows of those rollouts (a repair: of its `source_id`)."""
    files = sorted((out / table).glob("part-*.parquet"))
    if not files:
        return None
    key = "id" if table == "trajectories" else REPAIR_KEY
    parts = [pq.read_table(f, columns=list(dict.fromkeys([*MIX_COLUMNS, key]))) for f in files]
    if kept is not None:
        wanted = pa.array(sorted(kept), pa.string())
        parts = [p.filter(pc.is_in(p.column(key), value_set=wanted)) for p in parts]
    parts = [p.select(list(MIX_COLUMNS)) for p in parts]
    return pa.concat_tables([p.cast(parts[0].schema) for p in parts])


def replay_pool(round0_data: Path, round0_tables: tuple[str, ...],
                earlier_rounds: list[Path], consistency: ConsistencyMode = "auto",
                ) -> pa.Table | None:
    """Rows of earlier rounds a round may replay: round 0's trained tables (teacher
    trajectories, and its repairs when round 0 trained on them) and every earlier student
    round's repairs. Round 0's rows are those its training read: with a consistency table
    and `consistency` (round 0's data.consistency) not `all`, of the kept rollouts only."""
    kept = kept_ids(str(round0_data)) if kept_only(str(round0_data), consistency) else None
    tables = [table_rows(round0_data, table, kept) for table in round0_tables]
    tables += [table_rows(data, "repairs") for data in earlier_rounds]
    tables = [t for t in tables if t is not None]
    if not tables:
        return None
    return pa.concat_tables([t.cast(tables[0].schema) for t in tables])


def replay_count(new_rows: int, share: float, available: int) -> int:
    """Replay rows so that they are `share` of the mix: n / (new + n) = share."""
    return min(round(new_rows * share / (1 - share)), available)


def build_mix(out: Path, new: pa.Table, pool: pa.Table | None, share: float,
              seed: int) -> dict[str, Any]:
    """Write `new` + a seeded draw of `pool` (shuffled together) under `out/trajectories`;
    the counts."""
    rng = random.Random(seed)
    n_replay = replay_count(new.num_rows, share, pool.num_rows if pool is not None else 0)
    parts = [new.append_column("mix_origin", pa.array(["new"] * new.num_rows))]
    if n_replay:
        picked = sorted(rng.sample(range(pool.num_rows), n_replay))
        replay = pool.take(picked).cast(new.schema)
        parts.append(replay.append_column("mix_origin", pa.array(["replay"] * n_replay)))
    mixed = pa.concat_tables(parts)
    order = list(range(mixed.num_rows))
    rng.shuffle(order)
    mixed = mixed.take(order)
    directory = out / "trajectories"
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("part-*.parquet"):  # a rerun after a kill writes it anew
        stale.unlink()
    for index, start in enumerate(range(0, mixed.num_rows, ROWS_PER_SHARD)):
        pq.write_table(mixed.slice(start, ROWS_PER_SHARD), directory / f"part-{index:05d}.parquet",
                       compression="zstd")
    return {"new_rows": new.num_rows, "replay_rows": n_replay,
            "replay_pool": pool.num_rows if pool is not None else 0, "rows": mixed.num_rows,
            "replay_share": n_replay / max(mixed.num_rows, 1)}
