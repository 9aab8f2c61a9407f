"""Issue 16's 5M run for any N: generate, kill once part way, resume, verify, size, read back.

    .venv/bin/python benchmarks/run_at_scale.py --n 5000000 --out /data/demo5m   # the real run
    nice -n 15 .venv/bin/python benchmarks/run_at_scale.py --n 20000 --layout compact

Steps, each timed:
  1. `datagen generate` of configs/demo.yaml (`--layout` sets preferences.layout) for N on
     local Ray (or `--address`), in its own process group; the summed RSS of that group's
     whole process tree (driver, Ray's own processes, chunk workers) is sampled every 200 ms;
  2. once `--kill-at` of the chunks are committed (markers in OUT/_chunks), the driver's
     process group and every process of its tree are SIGKILLed (a lost machine); the same
     command is rerun to the end: its wall time and the chunks it had to redo;
  3. `datagen verify OUT` (manifest counts, sha256 of every shard) and exactly N unique ids;
  4. bytes per trajectory per table and in all, extrapolated linearly to `--project` (5M);
  5. lazy read-back, timed: `pl.scan_parquet` with a filter and a group-by over trajectories
     and preferences, `ray.data.read_parquet(...).count()`, and (compact layout) that
     `datagen.readers.load_preferences` still opens it as TRL's conversational DPO format;
  6. prints a Markdown summary and writes it as JSON (`--json`).

Wall times include Ray's start-up in each run (as a user sees them). On a shared machine the
figures depend on the load: `uptime`'s load average is recorded before and after.

A run longer than the session that started it: every `datagen generate` of the run is recorded
in `OUT.run_at_scale.state.json` (beside OUT, rewritten every 10 s: wall so far, chunks
committed, peak RSS), and `--resume` continues from it after this script itself was killed
(a machine restart, an ended session). Such an interruption is a kill too: the run is counted
as killed part way, the planned SIGKILL is not repeated, and the report lists every
`datagen generate` of the run with how it ended.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import psutil

from datagen.bounded_read import read_bounded

REPO = Path(__file__).resolve().parents[1]
DEMO_CONFIG = REPO / "configs" / "demo.yaml"
TABLES = ("trajectories", "negatives", "repairs", "preferences")


def load_average() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


class TreeRss:
    """Peak of the summed RSS of a process and all its descendants (Ray's raylet, GCS and the
    chunk workers are children of the driver in a local Ray), sampled every `period` s."""

    def __init__(self, pid: int, period: float = 0.2) -> None:
        self.peak = 0
        self.peak_pipeline = 0  # the driver plus the ray::ChunkWorker processes alone
        self.pids: set[int] = set()
        self._is_worker: dict[int, bool] = {}
        self._ticks = 0  # every process seen, so a kill can reach stragglers
        self._root = psutil.Process(pid)
        self._period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> tuple[int, int]:
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return 0, 0
        total = pipeline = 0
        for proc in procs:
            try:
                rss = proc.memory_info().rss
                if not self._is_worker.get(proc.pid) and self._ticks % 5 == 0:
                    # a Ray worker starts as ray::IDLE and takes its actor's name later
                    self._is_worker[proc.pid] = "ChunkWorker" in " ".join(proc.cmdline())
                self.pids.add(proc.pid)
            except psutil.Error:
                continue
            total += rss
            if proc.pid == self._root.pid or self._is_worker.get(proc.pid):
                pipeline += rss
        return total, pipeline

    def _run(self) -> None:
        while not self._stop.is_set():
            total, pipeline = self._sample()
            self.peak = max(self.peak, total)
            self.peak_pipeline = max(self.peak_pipeline, pipeline)
            self._ticks += 1
            time.sleep(self._period)

    def __enter__(self) -> "TreeRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def committed_chunks(out: Path) -> int:
    return len(list((out / "_chunks").glob("chunk-*.json")))


def uncommitted_rows(out: Path, n: int, chunk_size: int) -> int:
    """Trajectories of the chunks without a marker: what a rerun has to generate."""
    done = {int(marker.stem.split("-")[1]) for marker in (out / "_chunks").glob("chunk-*.json")}
    return sum(min(chunk_size, n - start) for start in range(0, n, chunk_size)
               if start // chunk_size not in done)


def generate_command(args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", "datagen", "generate", "--config", str(DEMO_CONFIG),
           "--num-trajectories", str(args.n), "--out", str(args.out), "--no-progress",
           "--set", f"preferences.layout={args.layout}",
           "--set", f"chunk_size={args.chunk_size}"]
    if args.workers:
        cmd += ["--set", f"num_workers={args.workers}"]
    if args.address:
        cmd += ["--address", args.address]
    return cmd


def run_generate(args: argparse.Namespace, kill_after: int | None, log: Path,
                 record: dict, save) -> dict:
    """One `datagen generate` in its own process group; SIGKILLs the group once `kill_after`
    chunks are committed (None: runs to the end). `record` (this run's entry in the state) is
    updated and `save()`d every 10 s, so an interruption of this script leaves its figures."""
    started = time.perf_counter()
    at_start = committed_chunks(args.out)
    record.update(chunks_at_start=at_start, chunks_committed=at_start, finished=False,
                  killed=False, rc=None, wall_s=0.0, peak_rss_mib=0, peak_rss_pipeline_mib=0,
                  rows_todo=uncommitted_rows(args.out, args.n, args.chunk_size))
    save()
    with open(log, "ab") as sink:
        proc = subprocess.Popen(generate_command(args), stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=REPO)
        killed = False
        last_save = 0.0
        with TreeRss(proc.pid) as rss:
            while proc.poll() is None:
                if kill_after is not None and committed_chunks(args.out) >= kill_after:
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                    break
                if time.perf_counter() - last_save >= 10:
                    record.update(_progress(args.out, started, rss))
                    save()
                    last_save = time.perf_counter()
                time.sleep(0.1)
            proc.wait()
    if killed:
        _reap(rss.pids - {proc.pid})
    record.update(_progress(args.out, started, rss), rc=proc.returncode, killed=killed,
                  finished=True, chunk_cpu_s=None if killed else chunk_cpu_seconds(log))
    save()
    return record


def _progress(out: Path, started: float, rss: TreeRss) -> dict:
    return {"wall_s": round(time.perf_counter() - started, 1),
            "peak_rss_mib": round(rss.peak / 2**20),
            "peak_rss_pipeline_mib": round(rss.peak_pipeline / 2**20),
            "chunks_committed": committed_chunks(out)}


def _reap(pids: set[int], grace: float = 10.0) -> None:
    """SIGKILL, by pid, every process of this run's tree that is not in the driver's group
    (Ray's workers may sit in their own group; left alone they would finish and commit a chunk
    or two before they notice the raylet is gone), then wait until they are gone."""
    alive = [p for p in (_process(pid) for pid in pids) if p is not None]
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def chunk_cpu_seconds(log: Path) -> float | None:
    """Worker CPU seconds of the last run in `log`, from the line `datagen generate` ends with
    ("chunk CPU time (46.7 worker-s): ..."); less sensitive to other load than wall time."""
    found = re.findall(r"chunk CPU time \(([\d.]+) worker-s\)", log.read_text(errors="replace"))
    return float(found[-1]) if found else None


def verify(out: Path) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "datagen", "verify", str(out)], cwd=REPO,
                          capture_output=True, text=True)
    return {"rc": done.returncode, "seconds": round(time.perf_counter() - started, 2),
            "output": (done.stdout + done.stderr).strip()[-2000:]}


def unique_ids(out: Path, n: int) -> dict:
    import polars as pl

    ids = pl.scan_parquet(str(out / "trajectories" / "*.parquet")).select(
        pl.len().alias("rows"), pl.col("id").n_unique().alias("unique")).collect().row(0)
    return {"rows": ids[0], "unique": ids[1], "ok": ids[0] == ids[1] == n}


def table_bytes(out: Path, n: int, project: int) -> dict:
    manifest = json.loads((out / "manifest.json").read_text())
    sizes = {table: sum(f.stat().st_size for f in (out / table).glob("part-*.parquet"))
             for table in TABLES if (out / table).is_dir()}
    total = sum(sizes.values())
    return {"rows": manifest.get("counts", {}),
            "bytes_per_trajectory": {t: round(s / n) for t, s in sizes.items()},
            "total_bytes": total, "total_bytes_per_trajectory": round(total / n),
            "projected_gb": round(total / n * project / 1e9, 1)}


def timed(fn) -> tuple[object, float]:
    started = time.perf_counter()
    value = fn()
    return value, round(time.perf_counter() - started, 3)


def read_back(out: Path, layout: str, address: str | None) -> dict:
    import polars as pl

    trajectories = str(out / "trajectories" / "*.parquet")
    preferences = str(out / "preferences" / "*.parquet")
    by_env, t_traj = timed(lambda: (
        pl.scan_parquet(trajectories).filter(pl.col("success") & (pl.col("n_steps") >= 3))
        .group_by("env").agg(pl.len().alias("n"), pl.col("n_steps").mean().alias("steps"))
        .sort("env").collect()))
    by_kind, t_pref = timed(lambda: (
        pl.scan_parquet(preferences).filter(pl.col("source") != "safety")
        .group_by("source", "kind").agg(pl.len().alias("n")).sort("source", "kind").collect()))
    result = {"polars_trajectories_s": t_traj, "polars_preferences_s": t_pref,
              "successful_by_env": by_env.to_dicts(), "pairs_by_kind": by_kind.to_dicts()}
    result.update(ray_count(out, address))
    if layout == "compact":
        result["compact_opens_as_dpo"] = compact_opens(out)
    return result


def ray_count(out: Path, address: str | None) -> dict:
    import logging

    import ray

    logging.getLogger("ray.data").setLevel(logging.WARNING)
    _, t_init = timed(lambda: ray.init(address=address, num_cpus=None if address else 2,
                                       include_dashboard=False, log_to_driver=False))
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        count = lambda table: ray.data.read_parquet(str(out / table)).count()  # noqa: E731
        rows, t_count = timed(lambda: count("trajectories"))  # first: Ray Data's workers start
        _, t_again = timed(lambda: count("trajectories"))
        pref_rows, t_pref = timed(lambda: count("preferences"))
    finally:
        ray.shutdown()
    return {"ray_init_s": t_init, "ray_count_trajectories_s": t_count,
            "ray_count_trajectories_again_s": t_again, "ray_trajectories": rows,
            "ray_count_preferences_s": t_pref, "ray_preferences": pref_rows}


def compact_opens(out: Path, rows: int = 200) -> dict:
    """The compact layout's promise: load_preferences joins the prompts back and TRL's
    conversational DPO columns come out (prompt/chosen/rejected as message lists)."""
    from datagen.readers import load_preferences

    def first_rows() -> list[dict]:
        return list(load_preferences(out, streaming=True).take(rows))

    sample, seconds = timed(first_rows)
    ok = bool(sample) and all(
        isinstance(r["prompt"], list) and r["prompt"] and isinstance(r["chosen"], list)
        and isinstance(r["rejected"], list) and r["prompt"][0].get("role") for r in sample)
    return {"ok": ok, "rows_checked": len(sample), "first_rows_s": seconds}


def how_it_ended(run: dict) -> str:
    if not run.get("finished"):
        return "interrupted with this script (last record)"
    return "SIGKILLed as planned" if run["killed"] else f"exit {run['rc']}"


def summary_markdown(report: dict) -> str:
    a = report["args"]
    runs, rerun = report["runs"], report["runs"][-1]
    size = report["bytes"]
    rb = report["read_back"]
    peak = {key: max(run.get(key, 0) for run in runs)
            for key in ("peak_rss_mib", "peak_rss_pipeline_mib")}
    per_table = ", ".join(f"{t} {b:,}" for t, b in size["bytes_per_trajectory"].items())
    lines = [
        f"### run_at_scale: N = {a['n']:,}, layout {a['layout']}, chunks of {a['chunk_size']}",
        "",
        "| measure | value |",
        "|---|---|",
        f"| load average before / after | {report['load_before']} / {report['load_after']} |",
        *(f"| `datagen generate` {k + 1} of {len(runs)}: chunks {run['chunks_at_start']} -> "
          f"{run['chunks_committed']} of {report['chunks']} | {run['wall_s']} s, "
          f"{how_it_ended(run)} |" for k, run in enumerate(runs)),
        f"| last run, uninterrupted (did {report['chunks_redone']} chunks) | "
        f"{report['rerun_traj_per_s']:.1f} traj/s |",
        f"| peak RSS, process tree (Ray's own processes included) / driver + chunk workers | "
        f"{peak['peak_rss_mib']:,} / {peak['peak_rss_pipeline_mib']:,} MiB |",
        f"| total generate wall (all runs) | {report['generate_wall_s']} s = "
        f"{report['traj_per_s']:.1f} traj/s |",
        f"| `datagen verify` | exit {report['verify']['rc']}, {report['verify']['seconds']} s |",
        f"| unique ids | {report['ids']['unique']:,} of {report['ids']['rows']:,} rows "
        f"({'exactly N' if report['ids']['ok'] else 'NOT N'}) |",
        f"| bytes per trajectory | {per_table}; total {size['total_bytes_per_trajectory']:,} |",
        f"| on disk | {size['total_bytes'] / 2**20:,.1f} MiB; at {a['project']:,}: "
        f"**{size['projected_gb']} GB** (linear extrapolation) |",
        f"| `pl.scan_parquet` filter + group-by | trajectories {rb['polars_trajectories_s']} s, "
        f"preferences {rb['polars_preferences_s']} s |",
        f"| `ray.data.read_parquet(...).count()` | trajectories {rb['ray_count_trajectories_s']} s "
        f"(again {rb['ray_count_trajectories_again_s']} s; {rb['ray_trajectories']:,} rows), "
        f"preferences {rb['ray_count_preferences_s']} s "
        f"({rb['ray_preferences']:,}); `ray.init` {rb['ray_init_s']} s |",
        f"| time for {a['project']:,} at the rerun's rate | {report['projected_hours']:.1f} h "
        f"(linear extrapolation, start-up included) |",
    ]
    if "traj_per_cpu_s" in report:
        lines.append(f"| chunk CPU (rerun) | {report['traj_per_cpu_s']:.0f} traj per worker "
                     f"CPU-second: {a['project']:,} = {report['projected_cpu_hours']:.1f} CPU-h, "
                     f"{report['projected_cpu_hours'] / report['cores']:.1f} h on "
                     f"{report['cores']} free cores |")
    if "compact_opens_as_dpo" in rb:
        c = rb["compact_opens_as_dpo"]
        lines.append(f"| compact opens via `load_preferences` | {'yes' if c['ok'] else 'NO'} "
                     f"({c['rows_checked']} rows, {c['first_rows_s']} s) |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="trajectories to generate")
    parser.add_argument("--layout", choices=("full", "compact"), default="full",
                        help="preferences.layout")
    parser.add_argument("--chunk-size", type=int, default=500, help="tasks per chunk (demo: 500)")
    parser.add_argument("--workers", type=int, default=0, help="num_workers (0: the config's)")
    parser.add_argument("--kill-at", type=float, default=0.5,
                        help="share of chunks committed when the first run is SIGKILLed")
    parser.add_argument("--address", default=None, help="Ray address (default: a local Ray)")
    parser.add_argument("--out", type=Path, default=None,
                        help="OUT (default: a temporary directory, deleted unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep a temporary OUT")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run recorded in OUT.run_at_scale.state.json")
    parser.add_argument("--project", type=int, default=5_000_000,
                        help="N to extrapolate sizes and time to")
    parser.add_argument("--json", type=Path, default=Path("run_at_scale.json"),
                        help="where to write the summary as JSON")
    args = parser.parse_args(argv)
    if args.n < 1 or args.chunk_size < 1 or not 0 < args.kill_at < 1:
        parser.error("--n and --chunk-size must be positive and --kill-at within (0, 1)")
    if args.resume and args.out is None:
        parser.error("--resume needs the --out of the run to continue")
    return args


STATE_BYTES = 16 * 2**20  # a state holds one record per `datagen generate`: a few KB


def state_path(out: Path) -> Path:
    return out.parent / f"{out.name}.run_at_scale.state.json"


def save_state(out: Path, state: dict) -> None:
    """Written aside and renamed: this script is killed by design, a half-written state
    would lose the run's record."""
    path = state_path(out)
    partial_file = path.with_name(path.name + ".tmp")
    partial_file.write_text(json.dumps(state, indent=1))
    os.replace(partial_file, path)


def load_state(args: argparse.Namespace, chunks: int, kill_after: int) -> dict | None:
    """The recorded state for --resume (None with a message when it does not match), or a new
    one; a resumed run keeps its recorded arguments, so its figures stay one run's."""
    path = state_path(args.out)
    if not args.resume:
        if path.exists() or (args.out / "_chunks").exists():
            print(f"{args.out} already holds a run: add --resume to continue it", file=sys.stderr)
            return None
        return {"chunks": chunks, "kill_after": kill_after, "load_before": load_average(),
                "runs": []}
    if not path.is_file():
        print(f"--resume: no {path}", file=sys.stderr)
        return None
    try:
        state = json.loads(read_bounded(path, STATE_BYTES))
        recorded = {key: state["args"][key] for key in ("n", "layout", "chunk_size", "workers")}
        interrupted = bool(state["runs"]) and not state["runs"][-1]["finished"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"--resume: {path} is not a state this script wrote ({type(exc).__name__}: "
              f"{exc})", file=sys.stderr)
        return None
    for key, value in recorded.items():
        if value != getattr(args, key):
            print(f"--resume: --{key.replace('_', '-')} is {getattr(args, key)}, the run "
                  f"recorded {value}", file=sys.stderr)
            return None
    if interrupted:  # it died with this script: what it committed is on disk
        state["runs"][-1]["chunks_committed"] = committed_chunks(args.out)
    return state


def run_to_the_end(args: argparse.Namespace, state: dict, log: Path, save) -> dict | None:
    """`datagen generate` until one run ends with exit 0; the first is SIGKILLed at
    `kill_after` chunks unless an earlier run was already killed or interrupted."""
    while True:
        was_killed = any(run["killed"] or not run["finished"] for run in state["runs"])
        kill_after = None if was_killed else state["kill_after"]
        record: dict = {}
        state["runs"].append(record)
        run = run_generate(args, kill_after, log, record, save)
        if run["killed"]:
            continue
        return run if run["rc"] == 0 else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    temporary = args.out is None
    args.out = Path(args.out or tempfile.mkdtemp(prefix="run-at-scale-")).resolve()
    chunks = -(-args.n // args.chunk_size)
    if chunks < 2:
        print("--n must span at least 2 chunks to kill the run part way", file=sys.stderr)
        return 2
    kill_after = min(max(1, round(chunks * args.kill_at)), chunks - 1)
    state = load_state(args, chunks, kill_after)
    if state is None:
        return 2
    log = args.out.parent / f"{args.out.name}.generate.log"
    state.setdefault("args", {k: str(v) if isinstance(v, Path) else v
                              for k, v in vars(args).items() if k != "resume"})
    save = partial(save_state, args.out, state)
    report = state
    report["log"] = str(log)
    try:
        last = run_to_the_end(args, state, log, save)
        if last is None:
            print(f"the run failed; see {log}", file=sys.stderr)
            print(json.dumps(report, indent=1))
            return 1
        runs = state["runs"]
        if len(runs) < 2:
            print("the run ended before it could be killed part way; use more chunks or a "
                  "smaller --kill-at", file=sys.stderr)
            return 1
        wall = sum(run["wall_s"] for run in runs)
        rerun_rate = last["rows_todo"] / last["wall_s"]  # uninterrupted, Ray start-up in
        report.update(chunks_redone=last["chunks_committed"] - last["chunks_at_start"],
                      rows_redone=last["rows_todo"], generate_wall_s=round(wall, 1),
                      traj_per_s=args.n / wall, rerun_traj_per_s=rerun_rate,
                      projected_hours=args.project / rerun_rate / 3600)
        if last["chunk_cpu_s"]:
            per_cpu_s = last["rows_todo"] / last["chunk_cpu_s"]
            report.update(traj_per_cpu_s=per_cpu_s, cores=os.cpu_count(),
                          projected_cpu_hours=args.project / per_cpu_s / 3600)
        report["verify"] = verify(args.out)
        report["ids"] = unique_ids(args.out, args.n)
        report["bytes"] = table_bytes(args.out, args.n, args.project)
        report["read_back"] = read_back(args.out, args.layout, args.address)
        report["load_after"] = load_average()
        save()
    finally:
        if temporary and not args.keep:
            shutil.rmtree(args.out, ignore_errors=True)
            state_path(args.out).unlink(missing_ok=True)
    report["markdown"] = summary_markdown(report)
    args.json.write_text(json.dumps(report, indent=1))
    print(report["markdown"])
    ok = report["verify"]["rc"] == 0 and report["ids"]["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
