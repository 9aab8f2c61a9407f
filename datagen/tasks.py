"""TaskSource: the deterministic list of tasks a run generates.

Task `i` of a run is fully determined by (run seed, i): its environment is a weighted draw and
its seed a hash of both, so any chunk of the index range can be produced on any worker, in any
order, and a resumed run regenerates exactly the tasks it skipped.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate

from datagen.teachers.base import EnvPool, describe_exception
from datagen.types import Task, stable_seed


@dataclass(frozen=True)
class TaskSource:
    """Tasks `0..count-1` of a run, spread over environments by weight."""

    envs: tuple[str, ...]
    weights: tuple[float, ...]
    seed: int
    count: int

    @cached_property
    def _cumulative(self) -> list[float]:
        return list(accumulate(self.weights))

    def env_of(self, index: int) -> str:
        cumulative = self._cumulative
        draw = random.Random(stable_seed(self.seed, "env", index)).random() * cumulative[-1]
        return self.envs[min(bisect_right(cumulative, draw), len(self.envs) - 1)]

    def task_id(self, env: str, index: int) -> str:
        return f"{env}-{self.seed}-{index:08d}"

    def generate(self, start: int, stop: int, envs: EnvPool) -> list[Task | TaskError]:
        """Tasks `start..stop-1`; a generator that raises yields a TaskError in its place."""
        out: list[Task | TaskError] = []
        for index in range(start, min(stop, self.count)):
            env_name = self.env_of(index)
            task_id = self.task_id(env_name, index)
            task_seed = stable_seed(self.seed, env_name, index)
            try:
                out.append(envs.get(env_name).generate_task(task_seed, task_id))
            except Exception as exc:
                out.append(TaskError(task_id, env_name, task_seed, describe_exception(exc)))
        return out


@dataclass(frozen=True)
class TaskError:
    """A task whose generator raised: becomes a failed row, the run goes on."""

    id: str
    env: str
    seed: int
    error: str

    def as_task(self) -> Task:
        return Task(id=self.id, env=self.env, seed=self.seed, instruction="", gold=[])
