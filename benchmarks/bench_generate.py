"""Throughput and memory of the oracle generation pipeline, end to end on local Ray.

    .venv/bin/python benchmarks/bench_generate.py                 # 10k and 100k trajectories
    .venv/bin/python benchmarks/bench_generate.py --sizes 20000 --stages
    .venv/bin/python benchmarks/bench_generate.py --demo 2000 8000 --compare-workers 1 2

Reports trajectories/s per worker core (spans and Parquet writing included) and the peak RSS
of the driver plus the chunk workers, sampled every 100 ms. Ray start-up is excluded: Ray is
started before the clock, and the seconds the pipeline spends starting its worker actors
(process, imports, environments) are shown apart (`start s`) and left out of `traj/s/core`;
`(incl. start)` counts them. Chunks default to the pipeline's default size. `--stages` also
times each stage of a chunk in one process, without Ray, to show where the time goes.

`--demo N1 N2` measures `configs/demo.yaml`'s pipeline (trajectories + three negatives per
correct call with the execution check + repairs + safety + preferences, spans, Parquet) with
each worker count of `--compare-workers` (default: `--workers`): N1 and N2 trajectories are
timed in separate runs and differenced, (N2 - N1) / (wall2 - wall1) / workers, so whatever a run costs once (worker
start-up, the first chunk's caches, the manifest) drops out. With two worker counts it reports
the per-core efficiency of the larger (its per-core rate over the smaller's) and projects a
64-core node two ways: linear (64 x the larger count's per-core rate) and losing that
efficiency again at every doubling of the core count (a pessimistic bound on a machine whose
cores are shared, as here). `uptime`'s load average is printed before and after, and the CPU
per trajectory of the chunk workers, the driver and Ray's own processes, differenced the same
way: if the workers' figure rises with the worker count, the cores were not free.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import psutil


class PeakRss:
    """Samples the summed RSS of this process and of the `ray::ChunkWorker` processes among
    its descendants (the local Ray it started; another Ray on the host is not counted), and
    the workers' CPU seconds (the last sample before a worker exits: within 100 ms).

    Finding the workers means reading every process's command line (~8 ms of driver CPU, which
    competes with the workers on a small machine), so they are looked up once a second and
    their RSS is read every 100 ms."""

    def __init__(self) -> None:
        self.peak = 0
        self.worker_cpu: dict[int, float] = {}  # pid -> CPU seconds when last sampled
        self._workers: list[psutil.Process] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _find_workers(self) -> None:
        workers = []
        for proc in psutil.Process().children(recursive=True):
            try:
                if "ChunkWorker" in " ".join(proc.cmdline()):
                    workers.append(proc)
            except psutil.Error:
                pass
        self._workers = workers

    def _sample(self) -> int:
        total = psutil.Process().memory_info().rss
        for proc in self._workers:
            try:
                total += proc.memory_info().rss
                times = proc.cpu_times()
                self.worker_cpu[proc.pid] = times.user + times.system
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        ticks = 0
        while not self._stop.is_set():
            if ticks % 10 == 0:
                self._find_workers()
            self.peak = max(self.peak, self._sample())
            ticks += 1
            time.sleep(0.1)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# Configurations measured: trajectories alone (the issue-2 target), then with each later stage.
# Critics are on by default in GenerateConfig, so every configuration says explicitly whether
# it runs them.
STAGES = {
    "trajectories": {"negatives": {"enabled": False}, "critics": {"enabled": False}},
    "+negatives": {"negatives": {"enabled": True}, "critics": {"enabled": False}},
    "+critics": {"negatives": {"enabled": True}, "critics": {"enabled": True}},
}


def run_pipeline(n: int, workers: int, chunk_size: int, stages: dict) -> dict:
    from datagen.config import GenerateConfig
    from datagen.pipeline import run_generation
    from datagen.pipeline.stages.trajectories import per_env

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
    working = wall - summary.startup_seconds
    return {"n": n, "wall_s": wall, "startup_s": summary.startup_seconds,
            "per_core": n / working / workers, "per_core_wall": n / wall / workers,
            "peak_rss_mib": rss.peak / 2**20, "mib_on_disk": size / 2**20,
            "success": min(e["success_rate"]
                           for e in per_env(summary.stats["trajectories"]).values())}


DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
PROJECTED_CORES = 64


def run_demo(n: int, workers: int) -> dict:
    """One run of configs/demo.yaml's pipeline with `n` trajectories on `workers` workers."""
    from datagen.config import load_config
    from datagen.pipeline import run_generation

    out = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    config = load_config(DEMO_CONFIG, {"out": str(out), "num_trajectories": n,
                                       "num_workers": workers, "progress": False})
    try:
        ray_before, driver_before = _ray_cpu(), _cpu(psutil.Process())
        with PeakRss() as rss:
            started = time.perf_counter()
            summary = run_generation(config)
            wall = time.perf_counter() - started
        cpu = {"workers": sum(rss.worker_cpu.values()),
               "driver": _cpu(psutil.Process()) - driver_before,
               "ray": _ray_cpu() - ray_before}
        sizes = {table.name: sum(f.stat().st_size for f in table.glob("part-*.parquet"))
                 for table in out.iterdir() if table.is_dir() and not table.name.startswith("_")}
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"n": n, "wall_s": wall, "startup_s": summary.startup_seconds,
            "peak_rss_mib": rss.peak / 2**20, "bytes": sizes, "cpu": cpu}


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def _ray_cpu() -> float:
    """CPU seconds of Ray's own processes under this driver (raylet, GCS, dashboard, agents,
    idle workers), chunk workers left out: what a run costs besides the chunks."""
    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            if "ChunkWorker" not in " ".join(proc.cmdline()):
                total += _cpu(proc)
        except psutil.Error:
            pass
    return total


def demo_rates(sizes: tuple[int, int], worker_counts: list[int]) -> dict[int, float]:
    """Per-core trajectories/s of the demo pipeline per worker count, by differencing."""
    small, large = sizes
    rates: dict[int, float] = {}
    print(f"demo pipeline ({DEMO_CONFIG.name}), runs of {small:,} and {large:,} differenced")
    print(f"{'workers':>8}{'N':>9}{'wall s':>9}{'start s':>9}{'peak RSS MiB':>14}"
          f"{'B/traj':>9}")
    for workers in worker_counts:
        runs = [run_demo(n, workers) for n in (small, large)]
        for r in runs:
            print(f"{workers:>8}{r['n']:>9,}{r['wall_s']:>9.1f}{r['startup_s']:>9.1f}"
                  f"{r['peak_rss_mib']:>14,.0f}{sum(r['bytes'].values()) / r['n']:>9,.0f}")
        rates[workers] = (large - small) / (runs[1]["wall_s"] - runs[0]["wall_s"]) / workers
        print(f"  -> {rates[workers]:,.0f} traj/s per core with {workers} worker(s); bytes per "
              "trajectory: " + ", ".join(f"{name} {b / large:,.0f}"
                                         for name, b in sorted(runs[1]["bytes"].items())))
        # CPU per trajectory, differenced like the rate: whether a second worker makes each
        # trajectory dearer (cores that are not free) or the run pays more around the chunks.
        print("     CPU us per trajectory: " + ", ".join(
            f"{part} {(runs[1]['cpu'][part] - runs[0]['cpu'][part]) / (large - small) * 1e6:,.0f}"
            for part in ("workers", "driver", "ray")))
    if len(rates) >= 2:
        few, many = min(rates), max(rates)
        efficiency = rates[many] / rates[few]
        doublings = math.log2(PROJECTED_CORES / many)
        print(f"per-core efficiency {many} vs {few} workers: {efficiency:.0%}; a "
              f"{PROJECTED_CORES}-core node: {PROJECTED_CORES * rates[many]:,.0f} traj/s if "
              f"linear, {PROJECTED_CORES * rates[many] * min(efficiency, 1) ** doublings:,.0f} "
              f"losing {1 - min(efficiency, 1):.0%} per doubling")
    return rates


def stage_profile(n: int, chunk_size: int) -> None:
    """Time each stage of `ChunkProcessor.process` in this process (no Ray), chunk by chunk as
    a worker runs them: tasks generated and rolled out slice by slice, the columnar table, the
    chunk's statistics, then the shard (zstd Parquet, sha256, fsync, rename) and its marker."""
    from datagen.pipeline.chunk import SEQUENTIAL_SLICE, Chunk, ChunkProcessor, tune_gc
    from datagen.pipeline.stages.trajectories import chunk_stats
    from datagen.config import GenerateConfig
    from datagen.rows import render, trajectory_table
    from datagen.types import Task

    out = tempfile.mkdtemp(prefix="bench-stages-")
    processor = ChunkProcessor(GenerateConfig(num_trajectories=2 * n, out=out,
                                              **STAGES["trajectories"]))
    processor.process(Chunk(1, n, min(2 * n, n + 500)))  # warm-up: connections, caches
    tune_gc()  # as in a ChunkWorker
    timings: dict[str, float] = defaultdict(float)
    size = 0
    for index, chunk_start in enumerate(range(0, n, chunk_size)):
        chunk_stop, trajectories = min(chunk_start + chunk_size, n), []
        for start in range(chunk_start, chunk_stop, SEQUENTIAL_SLICE):
            with _timed(timings, "generate tasks"):
                items = processor.source.generate(start, min(start + SEQUENTIAL_SLICE,
                                                             chunk_stop), processor.envs)
            with _timed(timings, "oracle rollout (env steps + reasoning)"):
                tasks = [item for item in items if isinstance(item, Task)]  # no TaskError
                trajectories += processor.teacher.rollout_batch(tasks, processor.envs)
        with _timed(timings, "render text + spans"):
            rendered = [render(traj) for traj in trajectories]
        with _timed(timings, "build Arrow table (columnar)"):
            table = trajectory_table(trajectories, rendered)
        with _timed(timings, "chunk statistics"):
            stats = chunk_stats(trajectories, [spans for _, spans in rendered])
        with _timed(timings, "write shard (zstd 1, sha256, fsync)"):
            record = processor.store.write_chunk(index, {"trajectories": table}, stats)
        size += record.shards["trajectories"].bytes
    shutil.rmtree(out, ignore_errors=True)
    total = sum(timings.values())
    print(f"\nstage profile, {n:,} trajectories in chunks of {chunk_size:,}, one process "
          f"({n / total:,.0f} traj/s):")
    for stage, seconds in timings.items():
        print(f"  {stage:<42}{seconds * 1e6 / n:>8.0f} us/traj  {seconds / total:>6.1%}")
    print(f"  parquet: {size / n:,.0f} bytes/traj")


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextmanager
def _timed(timings: dict[str, float], stage: str):
    started = time.perf_counter()
    yield
    timings[stage] += time.perf_counter() - started


def main() -> None:
    from datagen.config import GenerateConfig

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--workers", type=int, default=psutil.cpu_count() or 1)
    parser.add_argument("--chunk-size", type=int,
                        default=GenerateConfig.model_fields["chunk_size"].default)
    parser.add_argument("--configs", nargs="+", default=list(STAGES), choices=list(STAGES))
    parser.add_argument("--stages", action="store_true", help="also profile stages in-process")
    parser.add_argument("--demo", type=int, nargs=2, metavar=("N1", "N2"),
                        help="only the demo pipeline, N1 and N2 differenced, per --workers")
    parser.add_argument("--compare-workers", dest="worker_counts", type=int, nargs="+",
                        help="with --demo: the worker counts to compare (default: --workers)")
    args = parser.parse_args()
    import logging

    import ray

    print(f"uptime at start: {_uptime()}")
    if args.demo:
        counts = args.worker_counts or [args.workers]
        ray.init(num_cpus=max(counts), logging_level=logging.WARNING)
        run_demo(1_000, max(counts))  # warm-up: imports, page cache
        demo_rates(tuple(sorted(args.demo)), counts)
        ray.shutdown()
        print(f"uptime at end: {_uptime()}")
        return
    ray.init(num_cpus=args.workers, logging_level=logging.WARNING)
    run_pipeline(2_000, args.workers, args.chunk_size, STAGES["trajectories"])  # warm-up
    print(f"{'config':<14}{'trajectories':>12}{'wall s':>8}{'start s':>9}{'traj/s/core':>13}"
          f"{'(incl. start)':>15}{'peak RSS MiB':>14}{'MiB on disk':>13}")
    for name in args.configs:
        for n in args.sizes:
            r = run_pipeline(n, args.workers, args.chunk_size, STAGES[name])
            print(f"{name:<14}{r['n']:>12,}{r['wall_s']:>8.1f}{r['startup_s']:>9.1f}"
                  f"{r['per_core']:>13,.0f}{r['per_core_wall']:>15,.0f}"
                  f"{r['peak_rss_mib']:>14,.0f}{r['mib_on_disk']:>13.1f}")
    ray.shutdown()
    print(f"uptime at end: {_uptime()}")
    if args.stages:
        stage_profile(min(args.sizes[0], 5000), args.chunk_size)


if __name__ == "__main__":
    main()
