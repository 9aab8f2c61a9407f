"""Error injection: replace one tool call of a successful trajectory with a hard negative and
execute it in the real environment.

The observation of the wrong call is whatever the environment really says (a validation error
for a type error or an unknown key, a wrong result or a changed state for a logical error), so
the critique and the repair that follow react to real feedback, not to a made-up message.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from datagen.envs import Environment
from datagen.types import Observation, ToolCall, Trajectory
from mutators import ALL_KINDS, MutationReport, Negative, Rejected, mutate_report
from mutators.outcome import is_read_only

# the mutation report already made at a step (same state, same call), or None
KnownReports = Callable[[int], "MutationReport | None"]


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
    """Reset `env` to the task and re-execute the calls of steps [0, upto) (but those the
    environment declares read-only: they leave the state as it is)."""
    env.reset(traj.task)
    for step in traj.steps[:upto]:
        if step.call is not None:
            call = step.call.as_dict()
            if not is_read_only(env, call):
                env.step(call)


def _tool(traj: Trajectory, name: str) -> dict[str, Any]:
    return next(t for t in traj.tools if t["function"]["name"] == name)


def inject_error(traj: Trajectory, env: Environment, seed: int,
                 kinds: Sequence[str] = ALL_KINDS,
                 known: KnownReports | None = None) -> Injection | Rejected:
    """Inject one hard negative into `traj` (a seeded step and kind); Rejected when the
    trajectory has no tool call, or no step admits a negative of the wanted kinds.

    known: step index -> the report `mutate_report` already gave for that step's call in the
        state the trajectory had there, with the environment (the negatives stage's); the
        kinds it covers are taken from it instead of being searched again."""
    rng = random.Random(seed)
    candidates = call_steps(traj)
    rng.shuffle(candidates)
    reasons: list[str] = []
    for index in candidates:
        replay(env, traj, index)
        report = step_report(traj, index, env, rng.randrange(2**31), tuple(kinds),
                             known(index) if known is not None else None)
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



def step_report(traj: Trajectory, index: int, env: Environment, seed: int,
                kinds: tuple[str, ...], known: MutationReport | None) -> MutationReport:
    """The negatives of `kinds` for the call at step `index` (`env` in the state before it):
    those `known` covers (made or found impossible) from it, the others searched with `seed`,
    in `kinds` order either way."""
    covered = set() if known is None else {n.kind for n in known.negatives} | set(known.impossible)
    missing = tuple(kind for kind in kinds if kind not in covered)
    call = traj.steps[index].call
    fresh = mutate_report(call.as_dict(), _tool(traj, call.name), seed=seed, env=env,
                          other_tools=traj.tools, kinds=missing) if missing else MutationReport()
    if known is None:
        return fresh
    merged = MutationReport()
    for kind in kinds:
        source = fresh if kind in missing else known
        negative = source.get(kind)
        if negative is not None:
            merged.negatives.append(negative)
        elif kind in source.impossible:
            merged.impossible[kind] = source.impossible[kind]
    return merged
