"""Consistency filter, the parts that know no stage: K samples per task, outcome keys, votes
(issue 18; the stage is stages/consistency.py, the scorer registry datagen/scorers.py).

Sampling. Sample 0 of a task is the ordinary rollout (same id as a run without the filter);
sample j >= 1 is rolled out as a copy of the task whose id is `<task id>~j`, so that it is an
independent episode everywhere an episode is keyed by its id (the oracle's phrasing seed, an
LLM backend's request-cache key, the HF batch row it samples in), then given back its task and
the id `trajectory_id(task, teacher, round, j)`. Environments rebuild worlds from the task's
seed, never its id, so the copy acts on the same world.

Outcome key: what a checker would compare, without the checker. A rollout that ended without
a final answer (an error, max_turns) has no outcome (None) and casts no vote. Otherwise its
calls are replayed in a fresh reset of the environment and the state before and after is
hashed (`Environment.snapshot`). A rollout that changed the world is judged by its end state,
`state:<hash>` (what the checkers of state tasks compare; the closing answer of such a task is
a remark, "Done." or "Moved 3 files", and differs between samples that did the same). One that
changed nothing is judged by its answer, `answer:<normalised answer>|state:<hash>` (what a
question's checker reads, and that nothing was broken). Neither the task type nor the gold
answer is looked at. The normalised answer is casefolded, whitespace collapsed, surrounding
quotes and punctuation stripped.

Votes: `votes` = rollouts of the task with the same outcome, `agreement` = votes / rollouts of
the task (those without an outcome count in the denominator), `in_majority` = the outcome is
the task's unique plurality. A tie for the most votes has no majority (deterministic, and
nothing arbitrary is kept): K=2 that disagree, or K=3 that all disagree, keep none; K=1 is its
own majority.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Sequence

import orjson

from datagen.envs import Environment
from datagen.teachers.base import EnvPool, Teacher
from datagen.types import Task, Trajectory, trajectory_id

SAMPLE_SEPARATOR = "~"


def sample_task(task: Task, sample: int) -> Task:
    """The task as rolled out for `sample` (sample 0 is the task itself)."""
    return task if sample == 0 else replace(task, id=f"{task.id}{SAMPLE_SEPARATOR}{sample}")


def rollout_samples(teacher: Teacher, tasks: list[Task], envs: EnvPool, round_: int,
                    k: int) -> list[list[Trajectory]]:
    """`k` trajectories per task (all in one teacher batch), grouped by task, in task order."""
    copies = [sample_task(task, j) for task in tasks for j in range(k)]
    done = teacher.rollout_batch(copies, envs, round_)
    groups: list[list[Trajectory]] = []
    for i, task in enumerate(tasks):
        group = done[i * k:(i + 1) * k]
        for j, traj in enumerate(group):
            if j:  # back to the real task, under the sample's own id
                traj.task = task
                traj.id = trajectory_id(task.id, traj.teacher, round_, j)
        groups.append(group)
    return groups


_SPACES = re.compile(r"\s+")
_EDGE = " \t\n.,;:!?\"'`()[]"


def normalise_answer(answer: str) -> str:
    return _SPACES.sub(" ", answer.casefold()).strip(_EDGE)


def _digest(env: Environment) -> str:
    snapshot = env.snapshot()
    raw = snapshot if isinstance(snapshot, bytes) else orjson.dumps(
        snapshot, default=repr, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.blake2b(raw, digest_size=6).hexdigest()


def replayed_states(env: Environment, traj: Trajectory) -> tuple[str, str]:
    """Hashes of the environment's state before and after replaying the trajectory's
    executed calls (a fresh `reset` of its task first)."""
    env.reset(traj.task)
    before = _digest(env)
    for step in traj.steps:
        if step.call is not None and step.error is None:
            env.step(step.call.as_dict())
    return before, _digest(env)


def outcome_key(env: Environment, traj: Trajectory) -> str | None:
    """The rollout's canonical outcome (see the module docstring); None = no final answer.
    An environment that raises on replay propagates (the stage records it per row)."""
    final = traj.steps[-1] if traj.steps else None
    if final is None or final.answer is None or final.error is not None:
        return None
    before, after = replayed_states(env, traj)
    if after != before:  # it changed the world: judged by the end state, the answer is a remark
        return f"state:{after}"
    return f"answer:{normalise_answer(final.answer)[:200]}|state:{after}"


@dataclass(frozen=True, slots=True)
class Vote:
    """One rollout's standing in its task's vote."""

    outcome: str | None
    votes: int
    agreement: float
    in_majority: bool


def vote(outcomes: Sequence[str | None]) -> list[Vote]:
    """The vote of each of one task's rollouts, in order (rules in the module docstring)."""
    tally = Counter(outcome for outcome in outcomes if outcome is not None)
    ranked = tally.most_common(2)
    winner = ranked[0][0] if ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]) \
        else None
    total = len(outcomes)
    return [Vote(outcome, tally[outcome] if outcome is not None else 0,
                 (tally[outcome] / total) if outcome is not None else 0.0,
                 outcome is not None and outcome == winner)
            for outcome in outcomes]
