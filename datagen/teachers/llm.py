"""`LLMTeacher`: the Teacher interface over a turn backend that lives in this process.

The chunk worker calls `rollout_batch` synchronously; this runs the batch's episodes as
coroutines on a fresh event loop (`asyncio.run`), so the backend (an HTTP client, the HF
micro-batcher) sees them all at once. Backend state that outlives a batch - loaded weights,
the AIMD limit, the request cache, reusable environments - is kept on the teacher.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Coroutine, TypeVar

from datagen.envs import Environment
from datagen.teachers.base import EnvPool, Teacher
from datagen.teachers.config import TeacherConfig
from datagen.teachers.episode import EnvLeases, EpisodeRunner, TurnBackend
from datagen.types import Task, Trajectory

T = TypeVar("T")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` to completion from synchronous code, on a fresh event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # the usual case: a chunk worker, a script
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as pool:  # called from async code (a notebook): own loop
        return pool.submit(asyncio.run, coroutine).result()


class LLMTeacher(Teacher):
    """Rolls out tasks with an LLM behind `backend`, many episodes at a time."""

    def __init__(self, config: TeacherConfig, backend: TurnBackend) -> None:
        self.name = config.name or config.backend
        self.config = config
        self.backend = backend
        self._pool = EnvPool()
        self.runner = EpisodeRunner(backend, config, self.name, EnvLeases(self._pool.fresh))

    @property
    def tokenizer(self) -> Any:
        """The tokenizer the teacher's token ids are in (None for text-only backends)."""
        return self.backend.tokenizer

    def rollout_batch(self, tasks: list[Task], envs: EnvPool | None = None,
                      round_: int = 0) -> list[Trajectory]:
        """All tasks as concurrent episodes; one trajectory per task, in order. Each episode
        leases its own environment instance (`envs` is not shared across episodes)."""
        if not tasks:
            return []
        return run_sync(self.runner.run_batch(tasks, round_))

    def rollout(self, task: Task, env: Environment, round_: int = 0) -> Trajectory:
        return self.rollout_batch([task], None, round_)[0]
