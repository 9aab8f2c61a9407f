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
TASK_COLUMNS = ("task_id", "task_seed", "env", "task")  # what the two rules compare


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
    from trainer.shard_files import is_uri, join, part_names, refuse_location, shown

    refuse_location(root)  # never probed: gs:// retries for minutes
    if not is_uri(root) and not Path(root).exists():
        raise FileNotFoundError(f"--shards {shown(root)}: no such directory")

    def parts(folder: str) -> list[str]:
        return [join(folder, name) for name in part_names(folder)]

    files = [f for table in TABLES for f in parts(join(root, table))] or parts(str(root))
    if not files:
        raise FileNotFoundError(f"--shards {shown(root)}: no trajectories/part-*.parquet "
                                "under it")
    return files


@dataclass
class Overlap:
    """What of a candidate task list occurs in the training shards."""

    ids: set[str] = field(default_factory=set)
    seeds: set[int] = field(default_factory=set)
    instructions: set[tuple[str, str]] = field(default_factory=set)  # (env, instruction)
    rows: int = 0
    files: int = 0
    files_missing_columns: int = 0  # shards lacking a column a rule needs: not fully checked
    missing_example: str = ""


class ShardError(ValueError):
    """A training shard the leak check cannot read; the message names --shards and the file."""


def _batches(root: str | Path, path: str, overlap: Overlap) -> Iterator[Any]:
    """The task columns of one shard, typed as the rules compare them (ShardError when it
    cannot be read or a column holds something else); a shard lacking one is counted."""
    import pyarrow as pa

    from trainer.shard_files import open_parquet, shown

    inside = path.removeprefix(str(root).rstrip("/") + "/")
    where = f"--shards {shown(root)}: {shown(inside)}"
    try:
        handle = open_parquet(path)
        columns = [c for c in TASK_COLUMNS if c in handle.schema_arrow.names]
        if missing := [c for c in TASK_COLUMNS if c not in columns]:
            overlap.files_missing_columns += 1
            overlap.missing_example = overlap.missing_example or \
                f"{shown(path)} has no {', '.join(missing)}"
        for batch in handle.iter_batches(columns=columns, batch_size=65_536):
            yield _typed(batch, where)
    except ShardError:
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:  # truncated, not Parquet, a name
        # that is not UTF-8 (UnicodeEncodeError), a store that went away
        first = shown((str(exc).splitlines() or [""])[0][:200])
        raise ShardError(f"{where}: cannot be read ({type(exc).__name__}: {first})") from None


def _typed(batch: Any, where: str) -> Any:
    """`batch` with text columns as string and task_seed as int64 (large_string, string_view
    and dictionary columns, as polars or pandas write them, compare like datagen's own)."""
    import pyarrow as pa

    arrays = []
    for name, column in zip(batch.schema.names, batch.columns):
        seed = name == "task_seed"
        kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
        text = pa.types.is_string(kind) or pa.types.is_large_string(kind) \
            or pa.types.is_string_view(kind)
        if not (pa.types.is_null(kind) or (pa.types.is_integer(kind) if seed else text)):
            raise ShardError(f"{where}: column {name} is {column.type}, not "
                             f"{'an integer' if seed else 'text'}; the leak check cannot "
                             "compare it")
        # safe=False: a uint64 seed past int64 wraps negative, and no held-out seed is
        arrays.append(column.cast(pa.int64() if seed else pa.string(), safe=not seed))
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def find_overlap(tasks: Sequence["Task"], shards: Sequence[str | Path]) -> Overlap:
    """Stream the shards' task columns and keep the values shared with `tasks` (memory is
    bounded by the candidates, not by the shards: 5M training rows cost one pass)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array([t.id for t in tasks], pa.string())
    seeds = pa.array([t.seed for t in tasks], pa.int64())
    instructions = pa.array([t.instruction for t in tasks], pa.string())
    overlap = Overlap()
    files = [(root, f) for root in shards for f in shard_files(root)]
    overlap.files = len(files)
    batches = (batch for root, path in files for batch in _batches(root, path, overlap))
    for batch in batches:
        overlap.rows += batch.num_rows
        names = batch.schema.names
        if "task_id" in names:
            column = batch.column("task_id")
            overlap.ids.update(column.filter(pc.is_in(column, value_set=ids)).to_pylist())
        if "task_seed" in names:
            column = batch.column("task_seed")
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
    files_missing_columns: int = 0
    missing_example: str = ""

    def describe(self) -> dict[str, Any]:
        ids = [t.id for t in self.tasks]
        per_env: dict[str, int] = {}
        for task in self.tasks:
            per_env[task.env] = per_env.get(task.env, 0) + 1
        leak_check: dict[str, Any] = {
            "shards": list(self.shards), "training_rows": self.training_rows,
            "dropped_same_instruction": self.dropped_same_instruction,
            "refused_ids_or_seeds": 0, "files_missing_columns": self.files_missing_columns}
        if not self.shards:
            leak_check["note"] = ("no --shards given: ids and seeds are disjoint by "
                                  "construction; instruction texts were not checked")
        elif self.files_missing_columns:  # a table of another kind (preferences/), by hand
            leak_check["note"] = (
                f"{self.files_missing_columns} training shard(s) lack columns the check "
                f"reads ({', '.join(TASK_COLUMNS)}; e.g. {self.missing_example}): their "
                "task ids, seeds or instruction texts were not checked")
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
            result.files_missing_columns = overlap.files_missing_columns
            result.missing_example = overlap.missing_example
            kept = [t for t in candidates if (t.env, t.instruction) not in overlap.instructions]
            result.dropped_same_instruction += len(candidates) - len(kept)
            candidates = kept
        result.tasks.extend(candidates[:count - len(result.tasks)])
    if len(result.tasks) < count:
        raise ValueError(f"only {len(result.tasks)} of {count} held-out tasks after {limit} "
                         f"draws ({result.dropped_same_instruction} dropped as seen in "
                         f"training, {result.failed_to_generate} failed to generate)")
    return result
