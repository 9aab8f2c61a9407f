"""Small builders shared by the datagen tests."""

from __future__ import annotations

from datagen.chat import render_trajectory
from datagen.config import GenerateConfig
from datagen.chunk import task_source
from datagen.teachers import EnvPool, OracleTeacher
from datagen.types import Trajectory

BUILTIN_ENVS = ("sql", "fs", "enterprise")


def oracle_trajectories(count: int, envs=BUILTIN_ENVS, seed: int = 0) -> list[Trajectory]:
    config = GenerateConfig(num_trajectories=count, seed=seed,
                            envs=[{"name": name} for name in envs])
    pool = EnvPool()
    tasks = task_source(config).generate(0, count, pool)
    return OracleTeacher().rollout_batch(tasks, pool)


def oracle_texts(count: int) -> list[str]:
    return [render_trajectory(traj)[0] for traj in oracle_trajectories(count)]
