"""Where a chunk's CPU time goes: the default demo pipeline in one process, no Ray.

    .venv/bin/python benchmarks/profile_pipeline.py --n 4000            # stage shares + top functions
    .venv/bin/python benchmarks/profile_pipeline.py --n 4000 --no-profile   # stage seconds only
    .venv/bin/python benchmarks/profile_pipeline.py --n 3000 --bytes     # + bytes per trajectory per table
    .venv/bin/python benchmarks/profile_pipeline.py --n 3000 --bytes --no-profile --layout compact

Runs `ChunkProcessor.process` over chunks of `configs/demo.yaml`'s pipeline (trajectories,
negatives with the execution check, critics: repairs + safety, preferences, Parquet) as a chunk
worker does, after one warm-up chunk, and prints each stage's CPU seconds (`StageClock`, the
same figures `datagen generate` records per chunk) and, under cProfile, the functions with the
most own and cumulative time. cProfile adds ~1.5-2x to Python-heavy code, evenly enough that the
shares hold; `--no-profile` gives the unprofiled rate. `--bytes` adds the Parquet bytes per
trajectory of every table and their projection to 5M trajectories.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

PROJECTED_TRAJECTORIES = 5_000_000
DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def build(out: str, n: int, chunk_size: int, overrides: dict):
    from datagen.config import load_config
    from datagen.pipeline.chunk import ChunkProcessor

    config = load_config(DEMO, {"out": out, "num_trajectories": 2 * n + 500,
                                "chunk_size": chunk_size, "progress": False, **overrides})
    return ChunkProcessor(config)


def run_chunks(processor, n: int, chunk_size: int) -> tuple[dict[str, float], float, dict]:
    """Chunks covering tasks [0, n): CPU seconds per stage, wall seconds, bytes per table, and
    the process's CPU seconds over the whole loop (the stages plus what falls between their
    clocks: freeing a chunk's tables, the collector after a chunk)."""
    from datagen.pipeline.chunk import ChunkPlan

    seconds: dict[str, float] = defaultdict(float)
    size: dict[str, int] = defaultdict(int)
    rows: dict[str, int] = defaultdict(int)
    started, cpu_started = time.perf_counter(), time.process_time()
    for chunk in ChunkPlan(n, chunk_size):
        record = processor.process(chunk)
        for stage, value in record.stats["stage_seconds"].items():
            seconds[stage] += value
        for table, shard in record.shards.items():
            size[table] += shard.bytes
            rows[table] += shard.rows
    sizes = {"bytes": size, "rows": rows, "process_cpu": time.process_time() - cpu_started}
    return dict(seconds), time.perf_counter() - started, sizes


def print_stages(seconds: dict[str, float], n: int, wall: float, process_cpu: float) -> None:
    total = sum(seconds.values())
    print(f"\n{n:,} trajectories, one process: {n / wall:,.0f} traj/s wall, "
          f"{n / total:,.0f} per CPU-second ({n / process_cpu:,.0f} per process CPU-second, "
          "outside the stages' clocks included)")
    for stage, value in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"  {stage:<14}{value * 1e6 / n:>9.0f} us/traj  {value / total:>6.1%}")


def print_bytes(sizes: dict, n: int) -> None:
    total = sum(sizes["bytes"].values())
    print(f"\nParquet bytes per trajectory (zstd), projected to {PROJECTED_TRAJECTORIES:,}:")
    for table, value in sorted(sizes["bytes"].items(), key=lambda item: -item[1]):
        print(f"  {table:<14}{value / n:>9,.0f} B/traj  {sizes['rows'][table] / n:>6.2f} rows/traj"
              f"  {value / n * PROJECTED_TRAJECTORIES / 1e9:>7.1f} GB")
    print(f"  {'total':<14}{total / n:>9,.0f} B/traj  {'':>15}"
          f"  {total / n * PROJECTED_TRAJECTORIES / 1e9:>7.1f} GB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4000, help="trajectories measured")
    parser.add_argument("--chunk-size", type=int, default=500, help="as configs/demo.yaml")
    parser.add_argument("--no-profile", action="store_true", help="stage seconds only")
    parser.add_argument("--bytes", action="store_true", help="bytes per trajectory per table")
    parser.add_argument("--layout", choices=("full", "compact"), default="full",
                        help="preferences.layout (compact: prompts by reference)")
    parser.add_argument("--top", type=int, default=35, help="functions listed")
    parser.add_argument("--save", help="write the cProfile stats to this file")
    args = parser.parse_args()
    from datagen.pipeline.chunk import Chunk, tune_gc

    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    out = tempfile.mkdtemp(prefix="profile-pipeline-")
    try:
        processor = build(out, args.n, args.chunk_size, {"preferences.layout": args.layout})
        processor.process(Chunk(10_000, 2 * args.n, 2 * args.n + 200))  # warm-up: caches
        tune_gc()  # as in a ChunkWorker
        profiler = None if args.no_profile else cProfile.Profile()
        if profiler:
            profiler.enable()
        seconds, wall, sizes = run_chunks(processor, args.n, args.chunk_size)
        if profiler:
            profiler.disable()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print_stages(seconds, args.n, wall, sizes["process_cpu"])
    if args.bytes:
        print_bytes(sizes, args.n)
    if profiler:
        stats = pstats.Stats(profiler)
        if args.save:
            stats.dump_stats(args.save)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
