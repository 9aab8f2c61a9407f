"""The Teacher interface: roll out tasks in environments, in batches.

A teacher takes a batch of tasks and returns one trajectory per task, in order. Batches are the
unit because LLM teachers run many episodes at once (each episode awaits its next generation
while the others run); the scripted oracle simply loops. Whatever goes wrong inside one episode
(a tool that raises, unparsable output) becomes a failed trajectory with `error` set: a teacher
never lets one task abort the batch.
"""

from __future__ import annotations

import traceback
from abc import ABC, abstractmethod

from datagen.envs import Environment, make_env
from datagen.types import Task, Trajectory, trajectory_id


# A batch of at least this many model calls that all failed in the model's backend fails as a
# whole (BackendAnsweredNone) instead of becoming failed rows: that is the backend (an endpoint
# down, a wrong key or model name past the retries), not the calls. Smaller batches keep their
# failed rows (a few calls may fail alone; a batch that always failed would never complete).
MIN_CALLS_JUDGED = 8


def answered_none(calls: int, failed: int) -> bool:
    """Whether a batch of `calls`, `failed` of them in the backend, is judged the backend's
    failure (the rule above)."""
    return calls >= MIN_CALLS_JUDGED and failed == calls


class BackendAnsweredNone(RuntimeError):
    """Every call of a batch failed in the model's backend: the chunk fails (no marker, a rerun
    retries it) instead of being written as failed rows and marked complete."""


class EnvPool:
    """One environment instance per family, created on first use and reused across tasks
    (each rollout calls `reset`). Concurrent teachers ask for `fresh` instances instead."""

    def __init__(self, hold_worlds: int = 0) -> None:
        """`hold_worlds`: tasks generated before their resets (a chunk); environments that
        cache task worlds (`hold_worlds`) keep that many, so no stage rebuilds them."""
        self._envs: dict[str, Environment] = {}
        self.hold_worlds = hold_worlds

    def get(self, name: str) -> Environment:
        env = self._envs.get(name)
        if env is None:
            env = self._envs[name] = self.fresh(name)
        return env

    def held(self, name: str) -> Environment | None:
        """The instance of `name` this pool holds, if any; never creates one (a stage that
        only needs to know about an environment need not build it)."""
        return self._envs.get(name)

    def fresh(self, name: str) -> Environment:
        env = make_env(name)
        hold = getattr(env, "hold_worlds", None)
        if self.hold_worlds and callable(hold):
            hold(self.hold_worlds)
        return env


class Teacher(ABC):
    """Rolls out tasks. `name` is recorded on every trajectory it produces."""

    name: str = "teacher"

    @abstractmethod
    def rollout(self, task: Task, env: Environment, round_: int = 0) -> Trajectory:
        """Roll out one task in `env` (already constructed, not yet reset)."""

    def rollout_batch(self, tasks: list[Task], envs: EnvPool, round_: int = 0) -> list[Trajectory]:
        """Roll out a batch; the default runs episodes one after another."""
        return [self.safe_rollout(task, envs, round_) for task in tasks]

    def safe_rollout(self, task: Task, envs: EnvPool, round_: int = 0) -> Trajectory:
        env = envs.get(task.env)
        try:
            return self.rollout(task, env, round_)
        except Exception as exc:
            return failed_trajectory(task, self.name, round_, exc, tools=env.tools())


def describe_exception(exc: BaseException) -> str:
    """`Type: message (file:line)` of where it was raised: enough to find the bug from a row."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def failed_trajectory(task: Task, teacher: str, round_: int, exc: BaseException,
                      tools: list | None = None, kind: str = "rollout_raised") -> Trajectory:
    """A trajectory that records why the episode could not run at all (`kind`: its
    error_kind; the default says the rollout itself raised)."""
    return Trajectory(id=trajectory_id(task.id, teacher, round_), task=task, tools=tools or [],
                      steps=[], success=False, reward=0.0, teacher=teacher, round=round_,
                      error=describe_exception(exc), error_kind=kind)
