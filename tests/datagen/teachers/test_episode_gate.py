"""`max_concurrent_episodes` holds per episode runner, across batches that run at once: a vLLM
engine actor serves every chunk worker of a run through one runner, so the limit is per engine
(as the config documents), and a later batch takes the slots the earlier one frees. Real
episode loop and environments (and a real engine actor on Ray); the backend is a fake text
backend that answers after a short wait."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from datagen.envs import make_env
from datagen.teachers.config import TeacherConfig
from datagen.teachers.episode import EnvLeases, EpisodeRunner
from tests.datagen.teachers.engine_fakes import (FakeCountingBackend, FakeCountingEngineTeacher,
                                                 fake_engine_config)
from tests.datagen.teachers.helpers import make_tasks


def _answered(trajectory) -> bool:
    """The episode ran to its final answer (the checker rejects the fake one)."""
    return trajectory.error.startswith("wrong_answer")


def _runner(limit: int) -> tuple[EpisodeRunner, FakeCountingBackend]:
    backend = FakeCountingBackend(pace_s=0.01)
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


def test_an_engine_actor_holds_the_limit_across_its_clients_batches(ray_head):
    """Two chunk workers' teachers find the same named engine actor and send their batches at
    once: the episodes in flight in the engine never exceed `max_concurrent_episodes`."""
    import ray

    base = fake_engine_config("fake-counting")
    config = base.model_copy(update={"episode": base.episode.model_copy(
        update={"max_concurrent_episodes": 3})})
    clients = [FakeCountingEngineTeacher(config), FakeCountingEngineTeacher(config)]
    (engine,) = clients[0].engines()
    try:
        assert clients[1].engines() == [engine]  # found by name, not a second engine
        batches = [make_tasks(6, seed=1), make_tasks(6, seed=2)]
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda pair: pair[0].rollout_batch(pair[1]),
                                    zip(clients, batches)))
        for tasks, trajectories in zip(batches, results):
            assert [t.task.id for t in trajectories] == [t.id for t in tasks]
            assert all(map(_answered, trajectories))
        assert ray.get(engine.most_in_flight.remote()) == 3  # not 3 per client
    finally:
        ray.kill(engine)
