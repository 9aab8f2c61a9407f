"""One chunk of a run, end to end: tasks -> rollouts -> rows (+tokens) -> shards.

`ChunkProcessor` holds what is expensive to build (environments, the teacher, a tokenizer) and
is created once per worker; `process` runs the stages on whole batches. It knows nothing of
Ray, so it runs the same inside a Ray actor, in a test, or in a debugger.
"""

from __future__ import annotations

import gc
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, overload

import pyarrow as pa

from datagen.config import GenerateConfig
from datagen.envs import import_modules
from datagen.rows import (NEGATIVE_SCHEMA, PREFERENCE_SCHEMA, REPAIR_SCHEMA, n_tool_steps,
                          render, trajectory_table)
from datagen.shards import ChunkRecord, ShardStore
from datagen.spans import tokenize_with_spans
from datagen.tasks import TaskError, TaskSource
from datagen.teachers import EnvPool, Teacher, make_teacher
from datagen.teachers.base import failed_trajectory
from datagen.teachers.trace import teacher_columns
from datagen.types import Span, Task, Trajectory


# Tasks generated ahead of a sequential teacher's rollouts: well under the 512 worlds an
# environment's WorldCache keeps, whatever the mix of environments.
SEQUENTIAL_SLICE = 256


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
        self.config = config
        self.source = task_source(config)
        self.envs = EnvPool()
        self.teacher: Teacher = make_teacher(config.teacher, work_dir=out or config.out)
        # LLM teachers bring their own tokenizer: rows carry the teacher's exact token ids.
        self.tokenizer_name = config.tokenizer or config.teacher.teacher_tokenizer()
        self.tokenizer = (load_tokenizer(config.tokenizer) if config.tokenizer
                          else getattr(self.teacher, "tokenizer", None))
        self.store = ShardStore(out or config.out)
        # The later stages are imported only when enabled: the critics pull in jsonschema and
        # the mutators, a fifth of a second of every worker's start-up.
        self.negatives = None
        if config.negatives.enabled:
            from datagen.negatives import NegativeStage

            self.negatives = NegativeStage(config.negatives, config.seed)
        self.critics = None
        if config.critics.enabled:
            from datagen.critic_stage import CriticStage, make_critic

            critic = make_critic(config.critics, self.teacher, out or config.out)
            self.critics = CriticStage(config.critics, config.seed, critic)

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
        done = iter(self.teacher.rollout_batch(tasks, self.envs))
        return [next(done) if isinstance(item, Task) else self._task_failure(item)
                for item in items]

    def _task_failure(self, item: TaskError) -> Trajectory:
        exc = RuntimeError(f"task generation failed: {item.error}")
        return failed_trajectory(item.as_task(), self.teacher.name, 0, exc,
                                 tools=self.envs.get(item.env).tools())

    def trajectory_table(self, trajectories: list[Trajectory]) -> tuple[pa.Table, list[list[Span]]]:
        rendered = [render(traj) for traj in trajectories]
        if self.config.teacher.backend != "oracle":
            tokens, teacher = teacher_columns(trajectories, rendered, self.tokenizer,
                                              self.tokenizer_name)
            return (trajectory_table(trajectories, rendered, tokens, teacher),
                    [s for _, s in rendered])
        tokens, named = None, None
        if self.tokenizer is not None:
            tokens = tokenize_with_spans(self.tokenizer, [text for text, _ in rendered],
                                         [spans for _, spans in rendered])
            # Recorded like an LLM teacher's, so a trainer with another tokenizer refuses
            # these ids instead of training on garbage (trainer.data.check_shard_tokenizer).
            named = {"tokenizer": [self.tokenizer_name] * len(trajectories)}
        return trajectory_table(trajectories, rendered, tokens, named), [s for _, s in rendered]

    def process(self, chunk: Chunk) -> ChunkRecord:
        """One chunk end to end. `stats["stage_seconds"]` holds the worker's CPU seconds per
        stage (the shard store adds "write"), so a run can say where its time went."""
        started, clock = time.perf_counter(), StageClock()
        trajectories = self.rollout(chunk)
        clock.lap("rollout")
        table, spans = self.trajectory_table(trajectories)
        tables = {"trajectories": table}
        stats = chunk_stats(trajectories, spans)
        clock.lap("rows")
        stats["seconds_rollout"] = time.perf_counter() - started
        if self.negatives is not None:
            batch = self.negatives.run(trajectories, self.envs)
            tables["negatives"] = pa.Table.from_pylist(batch.negatives, schema=NEGATIVE_SCHEMA)
            tables["preferences"] = pa.Table.from_pylist(batch.preferences,
                                                         schema=PREFERENCE_SCHEMA)
            stats["negatives"] = batch.stats()
            clock.lap("negatives")
        if self.critics is not None:  # repairs + repair/safety pairs, appended to preferences
            critiqued = self.critics.run(trajectories, self.envs)
            tables["repairs"] = pa.Table.from_pylist(critiqued.repairs, schema=REPAIR_SCHEMA)
            pairs = pa.Table.from_pylist(critiqued.preferences, schema=PREFERENCE_SCHEMA)
            tables["preferences"] = (pa.concat_tables([tables["preferences"], pairs])
                                     if "preferences" in tables else pairs)
            stats["critics"] = critiqued.stats()
            clock.lap("critics")
        stats["seconds"] = time.perf_counter() - started
        stats["stage_seconds"] = clock.seconds
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


def chunk_stats(trajectories: list[Trajectory], spans: list[list[Span]]) -> dict[str, Any]:
    """Counts the run summary adds up: per env, per span kind, errors."""
    per_env: dict[str, Counter] = defaultdict(Counter)
    for traj in trajectories:
        env = per_env[traj.task.env]
        env["trajectories"] += 1
        env["success"] += int(traj.success)
        env["errors"] += int(traj.error is not None)
        env["tool_calls"] += n_tool_steps(traj)
    # ~25 spans per trajectory: count with C-level helpers, add lengths into a plain dict
    # (Counter's Python-level += per span cost more than the rest of this function).
    flat = [span for traj_spans in spans for span in traj_spans]
    span_count = Counter(map(attrgetter("kind"), flat))
    span_chars = dict.fromkeys(span_count, 0)
    for span in flat:
        span_chars[span.kind] += span.end - span.start
    return {"rows": {"trajectories": len(trajectories)},
            "per_env": {name: dict(counts) for name, counts in sorted(per_env.items())},
            "span_count": dict(span_count), "span_chars": span_chars}
