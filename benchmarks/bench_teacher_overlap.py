"""The `vllm` teacher through `datagen generate` with more chunk workers than engines, against
the bare engine (issue 16, "Also": >= 0.9 of the engine's own tokens/s end to end).

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/bench_teacher_overlap.py --workers 1 2

`bench_teacher_ratio.py` times one chunk in one process: the chunk's rows, critics and Parquet
run after its rollout while the engine idles, so its end-to-end ratio is capped below the
rollout's. A run shares each engine among several chunk workers (the shipped 32B config: 8
workers for 4 engines) so that one chunk's episodes keep the engine busy while another chunk's
stages run. This benchmark measures that, on the product's own path:

- one engine actor (the `vllm` backend's, plus `replay`) is started and warmed up first, by
  name, so every chunk worker of every run finds it (`VLLMTeacher.engines`);
- A, per worker count W: `run_generation` (the code `datagen generate` runs) over `--chunks`
  chunks of `--episodes` episodes with `num_workers` = W, into a fresh OUT. Generated tokens
  (the rows' `teacher_meta.completion_tokens`) over the run's wall time once its first worker
  was ready (`RunSummary.seconds - startup_seconds`): dispatch, every chunk's rollout, stages
  and Parquet, markers, the tail where the last chunk's stages run alone;
- B: exactly the turns A generated, read back from its rows (`recorded_turns`), through the
  same engine with no episodes, `--concurrency` requests in flight: the engine's
  `max_concurrent_episodes`, which holds per engine across the workers' batches, so A never has
  more turns in flight than B.

Per repetition the worker counts run in alternating order (1 2, 2 1, ...), each A followed by
its B, after `--warmup` discarded repetitions. On a CPU host the engine and the chunk workers
share the cores: a worker's stages take CPU from the engine instead of overlapping with it, so
this measures less overlap than an engine on a GPU would allow.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import orjson
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its siblings

from bench_teacher_ratio import ReplayEngineActor, recorded_turns, spread  # noqa: E402
from bench_teachers import parse_args, teacher_section, tiny_model  # noqa: E402
from datagen.teachers.vllm_engine import VLLMTeacher  # noqa: E402


def generated_tokens(out: Path) -> tuple[int, int]:
    """(rows, generated tokens) of a run's trajectories table."""
    metas = pq.read_table(out / "trajectories", columns=["teacher_meta"]).column(0).to_pylist()
    return len(metas), sum(orjson.loads(meta)["completion_tokens"] for meta in metas)


def run_arm(args, teacher: dict, workers: int, engine) -> dict[str, float]:
    """A with `workers` chunk workers, then B on its turns."""
    import ray

    from datagen.config import GenerateConfig
    from datagen.pipeline.driver import run_generation

    out = Path(tempfile.mkdtemp(prefix="bench-overlap-"))
    try:
        config = GenerateConfig(out=str(out), num_trajectories=args.chunks * args.episodes,
                                chunk_size=args.episodes, envs=[{"name": e} for e in args.envs],
                                teacher=teacher, progress=False, num_workers=workers)
        load = os.getloadavg()[0]
        summary = run_generation(config)
        if not summary.complete or summary.failed_chunks:
            raise RuntimeError(f"the run did not complete: {summary.failed_chunks}")
        engines = [name for name in _named_actors() if name.startswith("datagen-vllm-")]
        if len(engines) != 1:  # a worker that made its own engine would not be measured
            raise RuntimeError(f"expected the one warmed-up engine, found {engines}")
        rows, tokens = generated_tokens(out)
        turns = recorded_turns(out)
        seconds, count = ray.get(engine.replay.remote(turns, args.concurrency))
        if count < tokens:
            raise RuntimeError(f"the bare replay generated {count} of {tokens} tokens")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    steady = summary.seconds - summary.startup_seconds
    pipeline = tokens / steady
    return {"workers": workers, "episodes": rows, "turns": len(turns), "tokens": tokens,
            "seconds": summary.seconds, "startup": summary.startup_seconds,
            "pipeline": pipeline, "bare": tokens / seconds,
            "ratio": pipeline * seconds / tokens, "load": load}


def _named_actors() -> list[str]:
    from ray.util import list_named_actors

    return list(list_named_actors())


def show(label: str, arm: dict[str, float], concurrency: int) -> None:
    print(f"{label} W={arm['workers']}: {arm['episodes']} episodes, {arm['turns']} turns, "
          f"{arm['tokens']} tokens in {arm['seconds']:.1f} s ({arm['startup']:.1f} s starting) "
          f"| pipeline {arm['pipeline']:,.1f} tok/s | bare {arm['bare']:,.1f} at {concurrency} "
          f"| ratio {arm['ratio']:.3f} | load {arm['load']:.1f}", flush=True)


def report(args, arms: list[dict[str, float]]) -> None:
    print(f"backend=vllm chunks={args.chunks} episodes per chunk={args.episodes} "
          f"concurrency={args.concurrency} max_tokens={args.max_tokens} "
          f"envs={','.join(args.envs)} reps={args.reps} (median, range)")
    for workers in args.workers:
        mine = [arm for arm in arms if arm["workers"] == workers]

        def line(key: str, digits: int = 1) -> str:
            return spread([arm[key] for arm in mine], digits)
        print(f"  {workers} worker(s): pipeline {line('pipeline')} tok/s; bare "
              f"{line('bare')}; ratio {line('ratio', 3)}; load {line('load')}")


def main(argv: list[str] | None = None) -> int:
    import ray

    from datagen.teachers.config import TeacherConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--chunks", type=int, default=8, help="chunks per run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="repetitions run and discarded")
    parser.add_argument("--json", help="also write the arms here")
    argv = ["--backend", "vllm", "--episodes", "64", *(argv if argv is not None else sys.argv[1:])]
    args = parse_args(argv, parser)
    if args.backend != "vllm":
        parser.error("this benchmark is for the vllm backend (engine actors shared by workers)")
    args.model = str(Path(args.model).resolve())  # the engine's name hashes the teacher config
    model = tiny_model(args)
    VLLMTeacher.engine_class = ReplayEngineActor  # the pipeline's own actor, plus `replay`
    ray.init(num_cpus=max(args.workers) + 1, include_dashboard=False, log_to_driver=False)
    try:
        teacher = teacher_section(args, model, None)
        holder = VLLMTeacher(TeacherConfig(**teacher))  # keeps the named engine alive
        engine = holder.engines()[0]
        arms = []
        for rep in range(args.warmup + args.reps):
            order = args.workers if rep % 2 == 0 else args.workers[::-1]
            for workers in order:
                arm = run_arm(args, teacher, workers, engine)
                warm = rep < args.warmup
                show(f"warm-up {rep + 1}" if warm else f"rep {rep - args.warmup + 1}", arm,
                     args.concurrency)
                if rep >= args.warmup:
                    arms.append(arm)
        report(args, arms)
        if args.json:
            Path(args.json).write_bytes(orjson.dumps({"args": vars(args), "arms": arms},
                                                     option=orjson.OPT_INDENT_2))
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
