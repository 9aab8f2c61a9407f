"""`max_concurrent_episodes` holds per episode runner, across batches that run at once: a vLLM
engine actor serves every chunk worker of a run through one runner, so the limit is per engine
(as the config documents), and a later batch takes the slots the earlier one frees. Real
episode loop and environments; the backend is a text backend that answers at once."""

from __future__ import annotations

import asyncio

from datagen.envs import make_env
from datagen.teachers.config import TeacherConfig
from datagen.teachers.episode import EnvLeases, EpisodeRunner, Generation, TurnBackend
from tests.datagen.teachers.helpers import make_tasks


class CountingTextBackend(TurnBackend):
    """Ends every episode with a final answer after a short wait; records which episodes'
    turns started, in order, and the most turns ever in flight at once."""

    def __init__(self) -> None:
        self.live = self.most_live = 0
        self.started: list[str] = []

    async def generate(self, request):
        self.live += 1
        self.most_live = max(self.most_live, self.live)
        self.started.append(request.key.rsplit(":", 1)[0])
        try:
            await asyncio.sleep(0.01)
            return Generation(text="Final answer: done", seconds=0.01)
        finally:
            self.live -= 1


def _answered(trajectory) -> bool:
    """The episode ran to its final answer (the checker rejects the fake one)."""
    return trajectory.error.startswith("wrong_answer")


def _runner(limit: int) -> tuple[EpisodeRunner, CountingTextBackend]:
    backend = CountingTextBackend()
    config = TeacherConfig(backend="oracle", episode={"max_turns": 2,
                                                      "max_concurrent_episodes": limit})
    return EpisodeRunner(backend, config, "counting", EnvLeases(make_env)), backend


def test_batches_running_at_once_share_the_runners_limit():
    runner, backend = _runner(limit=3)
    first, second = make_tasks(6, seed=1), make_tasks(6, seed=2)

    async def both():
        return await asyncio.gather(runner.run_batch(first), runner.run_batch(second))

    got_first, got_second = asyncio.run(both())

    assert [t.task.id for t in got_first] == [t.id for t in first]
    assert [t.task.id for t in got_second] == [t.id for t in second]
    assert all(_answered(t) for t in got_first + got_second)
    assert backend.most_live == 3  # not 3 per batch
    # the slots the first batch frees go to its own queued episodes first, then the second's
    first_ids = {t.id for t in got_first}
    assert {*backend.started[:6]} == first_ids and not first_ids & {*backend.started[6:]}


def test_one_runner_across_event_loops():
    """A teacher that runs each batch with `asyncio.run` (a new loop each time) reuses its
    runner: the limit still holds, and a semaphore of a closed loop is never waited on."""
    runner, backend = _runner(limit=2)
    for seed in range(3):
        trajectories = asyncio.run(runner.run_batch(make_tasks(5, seed=seed)))
        assert len(trajectories) == 5 and all(map(_answered, trajectories))
    assert backend.most_live == 2
