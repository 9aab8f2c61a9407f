"""Held-out evaluation tasks: a task space no training run can produce, checked against the
training shards.

Why the space is disjoint by construction: a generation run draws task `i` with seed
`stable_seed(run_seed, env, i)` and id `{env}-{run_seed}-{i:08d}` (datagen/tasks.py), where
`run_seed` is an int >= 0 (`GenerateConfig.seed`). Held-out task `i` of eval seed `s` has seed
`stable_seed("heldout", s, env, i)` and id `heldout-{s}-{env}-{i:06d}`: the hashed text starts
with `heldout|`, which the decimal text of an int never does, so the two seed sets share
nothing but a 63-bit hash collision, and no training id starts with `heldout-` unless an
environment is itself named "heldout". Environments are assigned round-robin (balanced per-env
metrics for any count). Critics' IRR tasks use a third space (`stable_seed("irr", ...)`).

The check against shards (`--shards OUT`, repeatable) reads `trajectories/` and `repairs/`
(task_id, task_seed, env, task) and applies two rules:
- a held-out task id or seed found in the shards is refused (`LeakError`): by construction it
  cannot happen, so the shards were made from the held-out space and every number would be
  suspect;
- a held-out task whose instruction text equals a training instruction of the same
  environment is dropped and replaced by the next task of the space (counted in the report).
  That is a coincidence of template and drawn names (the world behind it differs); refusing
  would make large training sets unusable for evaluation, keeping it would score a prompt the
  model has seen. Measured: 0 of 300 held-out instructions occur among 3,000 demo tasks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

if TYPE_CHECKING:
    from datagen.types import Task

HELDOUT_TAG = "heldout"
TABLES = ("trajectories", "repairs")  # repairs re-use training tasks; both are read
MAX_DRAWS_PER_TASK = 8  # bounds the search when many candidates collide or fail to generate


class LeakError(ValueError):
    """Held-out tasks were found in the training shards."""


def heldout_task_id(eval_seed: int, env: str, index: int) -> str:
    return f"{HELDOUT_TAG}-{eval_seed}-{env}-{index:06d}"


def heldout_task_seed(eval_seed: int, env: str, index: int) -> int:
    from datagen.types import stable_seed

    return stable_seed(HELDOUT_TAG, eval_seed, env, index)


def shard_files(root: str | Path) -> list[str]:
    """The trajectory and repair shards of an OUT root (or of one table directory), a
    directory or an object-store URI (`s3://bucket/prefix`); shards of unfinished chunks too
    (a leak check reads everything a training run could have read)."""
    from trainer.shard_files import is_uri, join, part_names

    if not is_uri(root) and not Path(root).exists():
        raise FileNotFoundError(f"--shards {root}: no such directory")

    def parts(folder: str) -> list[str]:
        return [join(folder, name) for name in part_names(folder)]

    files = [f for table in TABLES for f in parts(join(root, table))] or parts(str(root))
    if not files:
        raise FileNotFoundError(f"--shards {root}: no trajectories/part-*.parquet under it")
    return files


@dataclass
class Overlap:
    """What of a candidate task list occurs in the training shards."""

    ids: set[str] = field(default_factory=set)
    seeds: set[int] = field(default_factory=set)
    instructions: set[tuple[str, str]] = field(default_factory=set)  # (env, instruction)
    rows: int = 0
    files: int = 0


def _batches(files: Sequence[str]) -> Iterator[Any]:
    from trainer.shard_files import open_parquet

    for path in files:
        handle = open_parquet(path)
        columns = [c for c in ("task_id", "task_seed", "env", "task") if c in handle.schema.names]
        yield from handle.iter_batches(columns=columns, batch_size=65_536)


def find_overlap(tasks: Sequence["Task"], shards: Sequence[str | Path]) -> Overlap:
    """Stream the shards' task columns and keep the values shared with `tasks` (memory is
    bounded by the candidates, not by the shards: 5M training rows cost one pass)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array([t.id for t in tasks], pa.string())
    seeds = pa.array([t.seed for t in tasks], pa.int64())
    instructions = pa.array([t.instruction for t in tasks], pa.string())
    overlap = Overlap()
    files = [f for root in shards for f in shard_files(root)]
    overlap.files = len(files)
    for batch in _batches(files):
        overlap.rows += batch.num_rows
        names = batch.schema.names
        if "task_id" in names:
            column = batch.column("task_id")
            overlap.ids.update(column.filter(pc.is_in(column, value_set=ids)).to_pylist())
        if "task_seed" in names:
            column = batch.column("task_seed").cast(pa.int64())
            overlap.seeds.update(column.filter(pc.is_in(column, value_set=seeds)).to_pylist())
        if "task" in names and "env" in names:
            hits = pc.is_in(batch.column("task"), value_set=instructions)
            matched = batch.filter(hits)
            overlap.instructions.update(zip(matched.column("env").to_pylist(),
                                            matched.column("task").to_pylist()))
    return overlap


@dataclass
class HeldoutTasks:
    """The evaluation's tasks and how they were chosen (goes into the report)."""

    tasks: list["Task"]
    eval_seed: int
    envs: tuple[str, ...]
    dropped_same_instruction: int = 0
    failed_to_generate: int = 0
    shards: tuple[str, ...] = ()
    training_rows: int = 0

    def describe(self) -> dict[str, Any]:
        ids = [t.id for t in self.tasks]
        per_env: dict[str, int] = {}
        for task in self.tasks:
            per_env[task.env] = per_env.get(task.env, 0) + 1
        leak_check: dict[str, Any] = {
            "shards": list(self.shards), "training_rows": self.training_rows,
            "dropped_same_instruction": self.dropped_same_instruction,
            "refused_ids_or_seeds": 0}
        if not self.shards:
            leak_check["note"] = ("no --shards given: ids and seeds are disjoint by "
                                  "construction; instruction texts were not checked")
        return {"space": HELDOUT_TAG, "eval_seed": self.eval_seed, "count": len(ids),
                "per_env": per_env, "first_id": ids[0] if ids else None,
                "last_id": ids[-1] if ids else None,
                "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16],
                "failed_to_generate": self.failed_to_generate, "leak_check": leak_check}


def draw_tasks(envs: Sequence[str], start: int, stop: int, eval_seed: int
               ) -> tuple[list["Task"], int]:
    """Held-out tasks `start..stop-1` (environments round-robin) and how many generators
    raised (those indices are skipped)."""
    from datagen.teachers import EnvPool

    pool, tasks, failed = EnvPool(), [], 0
    for index in range(start, stop):
        env = envs[index % len(envs)]
        try:
            tasks.append(pool.get(env).generate_task(heldout_task_seed(eval_seed, env, index),
                                                     heldout_task_id(eval_seed, env, index)))
        except Exception:  # noqa: BLE001 - a broken generator costs its task, counted
            failed += 1
    return tasks, failed


def refuse_leaks(overlap: Overlap, shards: Sequence[str | Path]) -> None:
    if overlap.ids or overlap.seeds:
        examples = sorted(map(str, overlap.ids))[:3] + sorted(map(str, overlap.seeds))[:3]
        raise LeakError(
            f"{len(overlap.ids)} held-out task ids and {len(overlap.seeds)} task seeds occur in "
            f"the training shards {', '.join(map(str, shards))} (e.g. {', '.join(examples)}): "
            f"those shards were generated from the held-out space; evaluate on another "
            f"--eval-seed or regenerate the training data")


def heldout_tasks(envs: Sequence[str], count: int, eval_seed: int = 0,
                  shards: Sequence[str | Path] = ()) -> HeldoutTasks:
    """The first `count` tasks of the held-out space whose instruction no training shard
    has (see the module docstring); `LeakError` when an id or a seed is in the shards."""
    from datagen.envs import resolve_env

    envs = tuple(envs)
    if not envs or count < 1:
        raise ValueError("held-out tasks need at least one environment and count >= 1")
    for env in envs:
        resolve_env(env)  # an unknown name fails here, naming the known ones
    result = HeldoutTasks([], eval_seed, envs, shards=tuple(map(str, shards)))
    start, limit = 0, count * MAX_DRAWS_PER_TASK
    while len(result.tasks) < count and start < limit:
        stop = min(limit, start + (count - len(result.tasks)) + max(4, count // 8))
        candidates, failed = draw_tasks(envs, start, stop, eval_seed)
        result.failed_to_generate += failed
        start = stop
        if shards:
            overlap = find_overlap(candidates, shards)
            refuse_leaks(overlap, shards)
            result.training_rows = overlap.rows
            kept = [t for t in candidates if (t.env, t.instruction) not in overlap.instructions]
            result.dropped_same_instruction += len(candidates) - len(kept)
            candidates = kept
        result.tasks.extend(candidates[:count - len(result.tasks)])
    if len(result.tasks) < count:
        raise ValueError(f"only {len(result.tasks)} of {count} held-out tasks after {limit} "
                         f"draws ({result.dropped_same_instruction} dropped as seen in "
                         f"training, {result.failed_to_generate} failed to generate)")
    return result
