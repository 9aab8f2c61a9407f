"""An environment whose episodes take a fixed wall time, so a test can kill a node while its
chunks are in flight: sleeping costs no CPU on the shared 2-core machine, unlike real work."""

from __future__ import annotations

import time

from datagen.envs import register_env
from datagen.types import Task
from tests.datagen.toy_envs import CounterEnv

PACE_S = 0.05  # per episode: a chunk of 20 tasks takes ~1 s


@register_env
class PacedCounterEnv(CounterEnv):
    name = "paced_counter"

    def reset(self, task: Task) -> None:
        time.sleep(PACE_S)
        super().reset(task)
