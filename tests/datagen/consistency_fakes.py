"""FAKES for the consistency filter's tests, importable by Ray workers through `env_modules`:
a teacher backend that plays the oracle with wrong samples, and a confidence scorer standing
in for a trained MCH. Neither is a model."""

from __future__ import annotations

import dataclasses

from datagen.scorers import register_scorer
from datagen.teachers.oracle import OracleTeacher
from datagen.teachers.registry import register_backend
from datagen.types import Trajectory, trajectory_id

MADE_UP_ANSWER = "42424242"


def with_answer(traj: Trajectory, answer: str) -> Trajectory:
    steps = [*traj.steps[:-1], dataclasses.replace(traj.steps[-1], answer=answer)]
    return dataclasses.replace(traj, steps=steps)


class WrongOnSampleOneOracleFake(OracleTeacher):
    """FAKE teacher: the oracle, except that sample 1 of every task answers a made-up figure
    and sample 2 of tasks with an even seed ends without an answer."""

    def __init__(self, name: str = "wrong_sample_fake") -> None:
        super().__init__(name)

    def rollout(self, task, env, round_=0):
        traj = super().rollout(task, env, round_)
        if task.id.endswith("~1"):
            traj = with_answer(traj, MADE_UP_ANSWER)
            traj.success = env.check(task, MADE_UP_ANSWER)
        elif task.id.endswith("~2") and task.seed % 2 == 0:
            traj.steps, traj.success = traj.steps[:-1], False
        return traj


def confidence_by_sample_fake(options):
    """FAKE scorer: `options["high"]` for sample 0 of a task, 0.1 for the other samples."""
    return lambda trajs: [options["high"] if t.id == trajectory_id(t.task.id, t.teacher, t.round)
                          else 0.1 for t in trajs]


register_backend("wrong_sample_fake", lambda config, work_dir: WrongOnSampleOneOracleFake(
    config.name or "wrong_sample_fake"), None, "FAKE: the oracle with wrong samples (tests)")
register_scorer("confidence_fake", confidence_by_sample_fake)
