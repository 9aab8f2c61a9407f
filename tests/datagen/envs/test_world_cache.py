"""Task worlds kept for a whole chunk: every stage after the rollout resets the chunk's tasks
again, in the order they were generated, so a cache smaller than a family's share of the chunk
missed on every one of those resets (least recently used first) and rebuilt the world."""

from __future__ import annotations

import pytest

from datagen.envs._toolkit import MAX_HELD_WORLDS, WorldCache
from datagen.teachers import EnvPool

FAMILIES = ("sql", "fs", "enterprise")
CHUNK = 600  # over the default 512 worlds per family


def _builds_on_reset(env, count: int) -> int:
    """Worlds rebuilt when `count` generated tasks are reset in generation order (as the
    negatives and critics stages do after the rollout)."""
    tasks = [env.generate_task(seed, f"t{seed}") for seed in range(count)]
    cache = env._worlds
    build, built = cache._build, []
    cache._build = lambda rng: built.append(1) or build(rng)
    try:
        for task in tasks:
            env.reset(task)
    finally:
        cache._build = build
    return len(built)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_pool_holding_the_chunk_resets_every_task_without_rebuilding(name):
    assert _builds_on_reset(EnvPool(hold_worlds=CHUNK).get(name), CHUNK) == 0


def test_the_default_cache_rebuilds_every_world_of_a_larger_chunk():
    # the case the pool's size fixes: each miss evicts the next world to be asked for
    assert _builds_on_reset(EnvPool().get("sql"), CHUNK) == CHUNK


def test_held_worlds_are_the_ones_generated():
    env = EnvPool(hold_worlds=CHUNK).get("sql")
    tasks = [env.generate_task(seed, f"t{seed}") for seed in range(CHUNK)]
    env.reset(tasks[0])
    held = env._world
    assert held is env._worlds.get(tasks[0].seed)  # the cached object, not a rebuild
    rebuilt = WorldCache(env._worlds._build).get(tasks[0].seed)
    assert rebuilt == held and rebuilt is not held


def test_hold_never_shrinks_and_is_capped():
    cache = WorldCache(lambda rng: rng.random())
    cache.hold(10)
    assert cache._size == 512
    cache.hold(1_000)
    assert cache._size == 1_000
    cache.hold(10 ** 9)
    assert cache._size == MAX_HELD_WORLDS


def test_fresh_environments_of_the_pool_hold_too():
    assert EnvPool(hold_worlds=CHUNK).fresh("fs")._worlds._size == CHUNK
    assert EnvPool().fresh("fs")._worlds._size == 512


def test_the_chunk_processor_holds_a_chunk(tmp_path):
    from datagen.config import GenerateConfig
    from datagen.pipeline.chunk import ChunkProcessor

    config = GenerateConfig(out=str(tmp_path), num_trajectories=1_400, chunk_size=700,
                            progress=False)
    processor = ChunkProcessor(config)
    assert all(processor.envs.get(name)._worlds._size == 700 for name in FAMILIES)
