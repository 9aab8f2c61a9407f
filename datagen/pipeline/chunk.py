"""One chunk of a run, end to end: tasks -> rollouts -> every configured stage -> shards.

`ChunkProcessor` holds what is expensive to build (environments, the teacher, a tokenizer, the
stages) and is created once per worker; `process` runs the stages on whole batches. It knows
nothing of Ray, so it runs the same inside a Ray actor, in a test, or in a debugger.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import pyarrow as pa

from datagen.config import GenerateConfig
from datagen.envs import import_modules
from datagen.pipeline.consistency import rollout_samples
from datagen.pipeline.shards import ChunkRecord, ShardStore
from datagen.pipeline.storage import is_uri
from datagen.provenance import code_identity, config_user_modules
from datagen.pipeline.stages.base import Stage, StageContext, configured_stages, tables_of
from datagen.tasks import TaskError, TaskSource
from datagen.teachers import EnvPool, Teacher, make_teacher
from datagen.teachers.base import BackendAnsweredNone, answered_none, failed_trajectory
from datagen.types import Task, Trajectory


# Tasks generated ahead of a sequential teacher's rollouts: well under the 512 worlds an
# environment's WorldCache keeps, whatever the mix of environments.
SEQUENTIAL_SLICE = 256


# Episodes of these kinds got nothing, or stopped getting anything, from the teacher's backend
# (an endpoint down or refusing the key or model after its retries, an engine lost under them,
# a rollout that raised), as opposed to what the model or the task did.
NO_ANSWER_KINDS = frozenset({"generation_failed", "engine_lost", "rollout_raised"})


class TeacherAnsweredNone(BackendAnsweredNone):
    """Every episode of a chunk (datagen.teachers.base.MIN_CALLS_JUDGED or more) ended because
    the teacher's backend did not answer."""


def check_teacher_answered(trajectories: list[Trajectory]) -> None:
    """TeacherAnsweredNone when the teacher answered none of a chunk's episodes to the end.
    Before, such a chunk was written as failed rows and marked complete: a run against a
    mistyped endpoint or key wrote 5M `generation_failed` rows, "complete", exit 0, and the
    rerun after the fix found nothing to do."""
    kinds = Counter(traj.error_kind for traj in trajectories)
    unanswered = sum(count for kind, count in kinds.items() if kind in NO_ANSWER_KINDS)
    if answered_none(len(trajectories), unanswered):
        counts = ", ".join(f"{kind} {count:,}" for kind, count in kinds.most_common())
        raise TeacherAnsweredNone(f"every episode failed in the teacher's backend ({counts}): "
                                  f"{(trajectories[0].error or '')[:200]}")


@dataclass(frozen=True)
class Chunk:
    index: int
    start: int
    stop: int


class ChunkPlan(Sequence[Chunk]):
    """Fixed chunk boundaries by arithmetic: chunk i covers tasks [i*size, (i+1)*size) cut at
    `total`. A sequence computed on demand, not a list: planning costs nothing whatever the
    run's size (a list for 10^12 tasks was a MemoryError after 52 s)."""

    def __init__(self, total: int, size: int) -> None:
        if total < 0 or size < 1:
            raise ValueError(f"cannot plan {total} tasks in chunks of {size}")
        self.total, self.size = total, size

    def __len__(self) -> int:
        return -(-self.total // self.size)

    @overload
    def __getitem__(self, index: int) -> Chunk: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Chunk]: ...

    def __getitem__(self, index: int | slice) -> Chunk | Sequence[Chunk]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"chunk {index} is outside the plan of {len(self)} chunks")
        start = index * self.size
        return Chunk(index, start, min(start + self.size, self.total))

    def __iter__(self) -> Iterator[Chunk]:
        return (self[i] for i in range(len(self)))


def plan_chunks(config: GenerateConfig) -> ChunkPlan:
    """The chunks of a run (config.py bounds their number, see MAX_CHUNKS)."""
    return ChunkPlan(config.num_trajectories, config.chunk_size)


def tune_gc() -> None:
    """Collector settings for a process that runs chunks. Millions of short-lived small
    objects: the young-generation passes cost 10-20% of a chunk; freezing the start-up heap
    (modules, environments, caches) and raising the threshold removes most of that. (Pausing
    the collector during a chunk and collecting after it measured no faster: the collection
    walks the same survivors.)"""
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


def task_source(config: GenerateConfig) -> TaskSource:
    return TaskSource(envs=tuple(e.name for e in config.envs),
                      weights=tuple(e.weight for e in config.envs),
                      seed=config.seed, count=config.num_trajectories)


def load_tokenizer(path: str | None) -> Any:
    if path is None:
        return None
    from transformers import AutoTokenizer  # heavy import, only when configured

    return AutoTokenizer.from_pretrained(path)


class ChunkProcessor:
    """Generates and writes chunks for one run configuration."""

    def __init__(self, config: GenerateConfig, out: str | None = None) -> None:
        import_modules(config.env_modules)
        self.user_modules = config_user_modules(config.env_modules,
                                                [env.name for env in config.envs])
        self.config = config
        self.source = task_source(config)
        # every stage resets the chunk's tasks: their worlds are kept for it (issue 16: with
        # chunks over ~1,500 tasks the default 512 per family missed on every reset)
        self.envs = EnvPool(hold_worlds=config.chunk_size)
        # the LLM clients' response cache is local files (OUT/_cache): none under an
        # object-store OUT, where stages get "" for their local work directory
        work_dir = None if is_uri(out or config.out) else out or config.out
        self.teacher: Teacher = make_teacher(config.teacher, work_dir=work_dir)
        # LLM teachers bring their own tokenizer: rows carry the teacher's exact token ids.
        tokenizer = (load_tokenizer(config.tokenizer) if config.tokenizer
                     else getattr(self.teacher, "tokenizer", None))
        context = StageContext(work_dir or "", self.teacher, tokenizer,
                               config.tokenizer or config.teacher.teacher_tokenizer())
        stage_classes = configured_stages(config)
        self.tables = tables_of(stage_classes)
        self.stages: list[Stage] = [stage.build(config, context) for stage in stage_classes]
        self.store = ShardStore(out or config.out, self.tables)

    def rollout(self, chunk: Chunk) -> list[Trajectory]:
        """Trajectories of the chunk's tasks, in order. A teacher that batches episodes (LLM
        backends) gets the whole chunk at once; one that runs them one after another gets
        slices, so that `reset` finds the world `generate_task` just built still in the
        environment's world cache instead of building it a second time."""
        step = (SEQUENTIAL_SLICE if type(self.teacher).rollout_batch is Teacher.rollout_batch
                else chunk.stop - chunk.start)
        out: list[Trajectory] = []
        for start in range(chunk.start, chunk.stop, max(step, 1)):
            out += self._rollout_slice(start, min(start + step, chunk.stop))
        return out

    def _rollout_slice(self, start: int, stop: int) -> list[Trajectory]:
        items = self.source.generate(start, stop, self.envs)
        tasks = [item for item in items if isinstance(item, Task)]
        if self.config.consistency.enabled:  # k rollouts per task, consecutive (issue 18)
            groups = iter(rollout_samples(self.teacher, tasks, self.envs, self.config.round,
                                          self.config.consistency.k))
            return [traj for item in items for traj in
                    (next(groups) if isinstance(item, Task) else [self._task_failure(item)])]
        done = iter(self.teacher.rollout_batch(tasks, self.envs, self.config.round))
        return [next(done) if isinstance(item, Task) else self._task_failure(item)
                for item in items]

    def _task_failure(self, item: TaskError) -> Trajectory:
        exc = RuntimeError(f"task generation failed: {item.error}")
        return failed_trajectory(item.as_task(), self.teacher.name, self.config.round, exc,
                                 tools=self.envs.get(item.env).tools(),
                                 kind="task_generation_failed")

    def run_stages(self, trajectories: list[Trajectory],
                   clock: StageClock | None = None) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        """Every stage over the batch: one table per declared table name (a table several
        stages declare gets their rows in stage order) and each stage's counts."""
        parts: dict[str, list[pa.Table]] = {name: [] for name in self.tables}
        stats: dict[str, Any] = {}
        for stage in self.stages:
            output = stage.run(trajectories, self.envs)
            if set(output.tables) != {table.name for table in stage.tables}:
                raise RuntimeError(f"stage {stage.name!r} returned tables "
                                   f"{sorted(output.tables)}, it declares "
                                   f"{sorted(t.name for t in stage.tables)}")
            for name, table in output.tables.items():
                parts[name].append(table)
            stats[stage.name] = output.stats
            if clock is not None:
                clock.lap(stage.name)
        tables = {name: tables[0] if len(tables) == 1 else pa.concat_tables(tables)
                  for name, tables in parts.items()}
        return tables, stats

    def process(self, chunk: Chunk) -> ChunkRecord:
        """One chunk end to end. `stats["stage_seconds"]` holds the worker's CPU seconds per
        stage (the shard store adds "write"), so a run can say where its time went;
        `stats["code"]` which code wrote the chunk (datagen/provenance.py)."""
        started, clock = time.perf_counter(), StageClock()
        trajectories = self.rollout(chunk)
        check_teacher_answered(trajectories)
        clock.lap("rollout")
        seconds_rollout = time.perf_counter() - started
        tables, stage_stats = self.run_stages(trajectories, clock)
        stats = {"stages": stage_stats, "seconds_rollout": seconds_rollout,
                 "seconds": time.perf_counter() - started, "stage_seconds": clock.seconds,
                 "code": dict(code_identity(self.user_modules))}
        return self.store.write_chunk(chunk.index, tables, stats)


class StageClock:
    """CPU seconds of this process per named stage, measured lap by lap."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.process_time()

    def lap(self, stage: str) -> None:
        now = time.process_time()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._last
        self._last = now
