"""Throughput and memory of the oracle generation pipeline, end to end on local Ray.

    .venv/bin/python benchmarks/bench_generate.py                 # 10k and 100k trajectories
    .venv/bin/python benchmarks/bench_generate.py --sizes 20000 --stages

Reports trajectories/s per worker core (spans and Parquet writing included; Ray start-up
excluded: Ray is started before the clock starts) and the peak RSS of the driver plus the chunk
workers, sampled every 100 ms. `--stages` also times each stage in one process, without Ray,
to show where the time goes.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psutil


class PeakRss:
    """Samples the summed RSS of this process and every `ray::ChunkWorker` process."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        total = psutil.Process().memory_info().rss
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if "ChunkWorker" in cmdline:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            time.sleep(0.1)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# Configurations measured: trajectories alone (the issue-2 target), then with each later stage.
STAGES = {
    "trajectories": {"negatives": {"enabled": False}},
    "+negatives": {"negatives": {"enabled": True}},
}


def run_pipeline(n: int, workers: int, chunk_size: int, stages: dict) -> dict:
    from datagen.config import GenerateConfig
    from datagen.pipeline import run_generation

    out = Path(tempfile.mkdtemp(prefix="bench-gen-"))
    config = GenerateConfig(out=str(out), num_trajectories=n, chunk_size=chunk_size,
                            num_workers=workers, progress=False, **stages)
    try:
        with PeakRss() as rss:
            started = time.perf_counter()
            summary = run_generation(config)
            wall = time.perf_counter() - started
        size = sum(f.stat().st_size for f in out.glob("*/part-*.parquet"))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"n": n, "wall_s": wall, "traj_per_s": n / wall, "per_core": n / wall / workers,
            "peak_rss_mib": rss.peak / 2**20, "mib_on_disk": size / 2**20,
            "success": min(e["success_rate"] for e in summary.per_env.values())}


def stage_profile(n: int) -> None:
    """Time each stage of a chunk in this process (no Ray)."""
    from datagen.chunk import ChunkProcessor
    from datagen.config import GenerateConfig
    from datagen.rows import render_row, rows_to_table, trajectory_schema
    from datagen.shards import parquet_bytes

    processor = ChunkProcessor(GenerateConfig(num_trajectories=n, out=tempfile.mkdtemp(),
                                              **STAGES["trajectories"]))
    timings = {}
    started = time.perf_counter()
    items = processor.source.generate(0, n, processor.envs)
    timings["generate tasks"] = time.perf_counter() - started
    started = time.perf_counter()
    trajectories = processor.teacher.rollout_batch(items, processor.envs)
    timings["oracle rollout (env steps + reasoning)"] = time.perf_counter() - started
    started = time.perf_counter()
    rows = [render_row(t)[0] for t in trajectories]
    timings["render text + spans + row"] = time.perf_counter() - started
    started = time.perf_counter()
    table = rows_to_table(rows, trajectory_schema(False))
    timings["build Arrow table"] = time.perf_counter() - started
    started = time.perf_counter()
    data = parquet_bytes(table)
    timings["write Parquet (zstd 1)"] = time.perf_counter() - started
    total = sum(timings.values())
    print(f"\nstage profile, {n:,} trajectories in one process ({n / total:,.0f} traj/s):")
    for stage, seconds in timings.items():
        print(f"  {stage:<42}{seconds * 1e6 / n:>8.0f} us/traj  {seconds / total:>6.1%}")
    print(f"  parquet: {len(data) / n:,.0f} bytes/traj")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--workers", type=int, default=psutil.cpu_count() or 1)
    parser.add_argument("--chunk-size", type=int, default=2000)
    parser.add_argument("--configs", nargs="+", default=list(STAGES), choices=list(STAGES))
    parser.add_argument("--stages", action="store_true", help="also profile stages in-process")
    args = parser.parse_args()
    import logging

    import ray

    ray.init(num_cpus=args.workers, logging_level=logging.WARNING)
    run_pipeline(2_000, args.workers, args.chunk_size, STAGES["trajectories"])  # warm-up
    print(f"{'config':<14}{'trajectories':>12}{'wall s':>9}{'traj/s':>9}{'traj/s/core':>13}"
          f"{'peak RSS MiB':>14}{'MiB on disk':>13}")
    for name in args.configs:
        for n in args.sizes:
            r = run_pipeline(n, args.workers, args.chunk_size, STAGES[name])
            print(f"{name:<14}{r['n']:>12,}{r['wall_s']:>9.1f}{r['traj_per_s']:>9,.0f}"
                  f"{r['per_core']:>13,.0f}{r['peak_rss_mib']:>14,.0f}{r['mib_on_disk']:>13.1f}")
    ray.shutdown()
    if args.stages:
        stage_profile(min(args.sizes[0], 5000))


if __name__ == "__main__":
    main()
