"""Chunk planning is arithmetic: any run size within the config's bounds plans instantly."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from datagen.pipeline.chunk import Chunk, ChunkPlan, plan_chunks
from datagen.config import MAX_TRAJECTORIES, GenerateConfig


def test_the_plan_is_the_fixed_boundaries():
    plan = ChunkPlan(total=250, size=100)
    assert list(plan) == [Chunk(0, 0, 100), Chunk(1, 100, 200), Chunk(2, 200, 250)]
    assert len(plan) == 3 and plan[-1] == Chunk(2, 200, 250) and list(plan[1:]) == list(plan)[1:]
    with pytest.raises(IndexError):
        plan[3]


def test_the_largest_allowed_run_plans_in_no_time_and_no_memory():
    config = GenerateConfig(num_trajectories=MAX_TRAJECTORIES, chunk_size=1_000_000)
    tracemalloc.start()
    started = time.perf_counter()
    plan = plan_chunks(config)  # was a list: 10^12 tasks in chunks of 1,000 -> MemoryError
    last = plan[len(plan) - 1]
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(plan) == 10_000 and last == Chunk(9_999, 9_999_000_000, 10_000_000_000)
    assert seconds < 0.1 and peak < 100_000
