"""The oracle teacher: follows a task's gold solution through the real environment.

Observations are whatever the environment returns; the reasoning before each step refers to the
previous observation and states why the next action follows (see `phrasing`). It is the
embedded default: deterministic, CPU-only, fast, and a reference for what a perfect agent does.
"""

from __future__ import annotations

import random

from datagen.envs import Environment
from datagen.teachers.base import Teacher, describe_exception
from datagen.teachers.phrasing import final_reasoning, step_reasoning
from datagen.types import Observation, Step, Task, ToolCall, Trajectory, stable_seed, trajectory_id


class OracleTeacher(Teacher):
    """Scripted teacher that executes the gold solution."""

    def __init__(self, name: str = "oracle") -> None:
        self.name = name

    def rollout(self, task: Task, env: Environment, round_: int = 0) -> Trajectory:
        rng = random.Random(stable_seed(task.id, self.name, round_))
        env.reset(task)
        steps: list[Step] = []
        previous: tuple[ToolCall, Observation] | None = None
        error = kind = None
        for gold in task.gold:
            step = Step(reasoning=step_reasoning(rng, gold, previous), call=gold.call)
            steps.append(step)
            try:
                step.observation = env.step(gold.call.as_dict())
            except Exception as exc:  # a tool bug: record it on the row, end the episode
                step.error = error = f"tool {gold.call.name} raised {describe_exception(exc)}"
                step.error_kind = kind = "tool_raised"
                break
            previous = (gold.call, step.observation)
        success = False
        if error is None:
            answer = task.answer or "Done."
            steps.append(Step(reasoning=final_reasoning(rng, previous), answer=answer))
            success = env.check(task, answer)
            if not success:
                error, kind = "checker rejected the gold solution", "checker_rejected"
        return Trajectory(id=trajectory_id(task.id, self.name, round_), task=task,
                          tools=env.tools(), steps=steps, success=success,
                          reward=1.0 if success else 0.0, teacher=self.name, round=round_,
                          error=error, error_kind=kind)
