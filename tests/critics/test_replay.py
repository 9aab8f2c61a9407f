"""`critics.inject.replay` skips the calls an environment declares read-only: the state it
reaches is the one stepping every call reaches."""

from __future__ import annotations

import pytest

from critics.inject import replay
from datagen.envs import make_env
from tests.datagen.helpers import BUILTIN_ENVS, oracle_trajectories


def _same(env, first, second) -> bool:
    same = getattr(env, "same_state", None)
    return same(first, second) if callable(same) else first == second


@pytest.mark.parametrize("name", BUILTIN_ENVS)
def test_replay_reaches_the_state_of_stepping_every_call(name):
    env, skipped = make_env(name), 0
    for traj in oracle_trajectories(30, envs=(name,)):
        for upto in range(len(traj.steps) + 1):
            env.reset(traj.task)
            for step in traj.steps[:upto]:
                if step.call is not None:
                    env.step(step.call.as_dict())
            stepped = env.snapshot()
            replay(env, traj, upto)
            assert _same(env, env.snapshot(), stepped), (traj.id, upto)
        skipped += sum(1 for s in traj.steps if s.call and env.read_only(s.call.as_dict()))
    assert skipped > 30  # most calls are lookups, so the replay really skipped some
