"""Error injection: replace one tool call of a successful trajectory with a hard negative and
execute it in the real environment.

The observation of the wrong call is whatever the environment really says (a validation error
for a type error or an unknown key, a wrong result or a changed state for a logical error), so
the critique and the repair that follow react to real feedback, not to a made-up message.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Sequence

from datagen.envs import Environment
from datagen.types import Observation, ToolCall, Trajectory
from mutators import ALL_KINDS, Negative, Rejected, mutate_report


@dataclass(slots=True)
class Injection:
    """A wrong call placed at `step` of `traj`: the negative it came from, the wrong call, and
    the observation the environment returned for it. The environment is left in the state
    right after the wrong call (the repair continues from there)."""

    traj: Trajectory
    step: int
    negative: Negative
    wrong_call: ToolCall
    observation: Observation

    @property
    def kind(self) -> str:
        return self.negative.kind


def call_steps(traj: Trajectory) -> list[int]:
    """Indices of the steps that made a tool call."""
    return [i for i, step in enumerate(traj.steps) if step.call is not None]


def replay(env: Environment, traj: Trajectory, upto: int) -> None:
    """Reset `env` to the task and re-execute the calls of steps [0, upto)."""
    env.reset(traj.task)
    for step in traj.steps[:upto]:
        if step.call is not None:
            env.step(step.call.as_dict())


def _tool(traj: Trajectory, name: str) -> dict[str, Any]:
    return next(t for t in traj.tools if t["function"]["name"] == name)


def inject_error(traj: Trajectory, env: Environment, seed: int,
                 kinds: Sequence[str] = ALL_KINDS) -> Injection | Rejected:
    """Inject one hard negative into `traj` (a seeded step and kind); Rejected when the
    trajectory has no tool call, or no step admits a negative of the wanted kinds."""
    rng = random.Random(seed)
    candidates = call_steps(traj)
    rng.shuffle(candidates)
    reasons: list[str] = []
    for index in candidates:
        replay(env, traj, index)
        call = traj.steps[index].call
        report = mutate_report(call.as_dict(), _tool(traj, call.name), seed=rng.randrange(2**31),
                               env=env, other_tools=traj.tools, kinds=tuple(kinds))
        if not report.negatives:
            reasons.append(f"step {index}: " + "; ".join(sorted(report.impossible)))
            continue
        negative = rng.choice(report.negatives)
        wrong = ToolCall(str(negative.call.get("name", "")),
                         dict(negative.call.get("arguments") or {}))
        observation = env.step(wrong.as_dict())
        return Injection(traj, index, negative, wrong, observation)
    if not reasons:
        return Rejected("no_tool_call", "the trajectory makes no tool call")
    return Rejected("no_injectable_step", "no injectable step (" + ", ".join(reasons[:3]) + ")")

