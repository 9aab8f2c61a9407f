"""Throughput and overhead of the LLM teachers, one chunk end to end (rollout, rows, Parquet).

    .venv/bin/python benchmarks/bench_teachers.py --backend openai-fake  # loopback fake, 0.5 s/turn
    .venv/bin/python benchmarks/bench_teachers.py --backend openai-vllm  # loopback vLLM, tiny model
    .venv/bin/python benchmarks/bench_teachers.py --backend hf           # Transformers, tiny model

Reports episodes/s, generated tokens/s, mean turns, and three overhead figures:
- `no model call in flight`: share of the rollout's wall time during which not one turn was
  waiting on the model - time the pipeline spends outside the model call (target < 5% at 64
  concurrent episodes);
- `episode outside model`: mean over episodes of 1 - (time in model calls / episode wall time):
  environment steps, parsing, validation and event-loop queueing on each episode's critical path;
- `after the rollout`: share of the chunk's wall time spent after the rollout, split into the
  trajectory rows (rendering, token and top-k columns), the negatives stage (mutating and
  re-executing every correct call: only successful episodes have any) and the rest (Parquet).

`openai-fake` answers with `ScriptedAgent` (the gold solution; a fake teacher, not a model) after
`--latency` seconds, so episodes run their full length through the real HTTP client and the
real environments: it isolates the pipeline's own cost. `openai-vllm` and `hf` use the tiny
random Qwen2 (turns are noise and end early): figures for the protocol and the batching, not
for a real model.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from datagen.envs import DEFAULT_ENVS  # noqa: E402
from datagen.pipeline.chunk import ChunkProcessor, plan_chunks  # noqa: E402
from datagen.config import GenerateConfig  # noqa: E402
from datagen.teachers.episode import TurnBackend  # noqa: E402


def timed(obj, name: str, totals: dict[str, float], key: str | None = None) -> None:
    """Accumulate the wall time of `obj.name(...)` calls into totals[key or name]."""
    original = getattr(obj, name)
    key = key or name

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[key] = totals.get(key, 0.0) + time.perf_counter() - started
    setattr(obj, name, wrapper)


class ModelClock:
    """Wraps a backend's `generate` to measure wall time with no model call in flight."""

    def __init__(self, backend: TurnBackend) -> None:
        self.in_flight, self.idle, self.since = 0, 0.0, None
        self.started = self.stopped = 0.0
        original = backend.generate

        async def generate(request):
            self._enter()
            try:
                return await original(request)
            finally:
                self._exit()
        backend.generate = generate

    def start(self) -> None:
        self.started = self.since = time.perf_counter()

    def stop(self) -> None:
        self.stopped = time.perf_counter()
        if self.in_flight == 0 and self.since is not None:
            self.idle += self.stopped - self.since

    def _enter(self) -> None:
        if self.in_flight == 0 and self.since is not None:
            self.idle += time.perf_counter() - self.since
        self.in_flight += 1

    def _exit(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.since = time.perf_counter()

    def idle_share(self) -> float:
        return self.idle / max(self.stopped - self.started, 1e-9)


def teacher_section(args, model: Path | None, base_url: str | None) -> dict:
    episode = {"max_turns": 12, "max_total_tokens": 4000,
               "max_concurrent_episodes": args.concurrency}
    if args.backend == "hf":
        return {"backend": "hf", "hf": {"model": str(model), "max_batch_size": args.concurrency},
                "sampling": {"max_tokens_per_turn": args.max_tokens, "logprobs": 5},
                "episode": episode}
    openai = {"base_url": base_url, "model": str(model) if model else "fake", "cache": False,
              "initial_concurrency": args.concurrency, "max_concurrency": 4 * args.concurrency}
    if args.backend == "openai-vllm":
        openai.update(token_ids=True, tokenizer=str(model))
    return {"backend": "openai", "openai": openai, "episode": episode,
            "sampling": {"max_tokens_per_turn": args.max_tokens,
                         "logprobs": 5 if args.backend == "openai-vllm" else 0}}


def run_chunk(args, teacher: dict, out: Path) -> dict:
    config = GenerateConfig(out=str(out), num_trajectories=args.episodes,
                            chunk_size=args.episodes, envs=[{"name": e} for e in args.envs],
                            teacher=teacher, progress=False)
    processor = ChunkProcessor(config)
    clock = ModelClock(processor.teacher.backend)
    chunk = plan_chunks(config)[0]
    original_rollout = processor.rollout

    def rollout(chunk_):
        clock.start()
        try:
            return original_rollout(chunk_)
        finally:
            clock.stop()
    processor.rollout = rollout
    stages: dict[str, float] = {}
    for stage in processor.stages:
        timed(stage, "run", stages, key=stage.name)
    started = time.perf_counter()
    record = processor.process(chunk)
    wall = time.perf_counter() - started
    metas = [orjson.loads(m) for m in pq.read_table(out / "trajectories",
                                                    columns=["teacher_meta"]).column(0).to_pylist()]
    rollout_s = clock.stopped - clock.started
    return {"episodes": len(metas), "wall": wall, "rollout": rollout_s,
            "tokens": sum(m["completion_tokens"] for m in metas),
            "turns": sum(m["turns"] for m in metas) / len(metas),
            "idle": clock.idle_share(), "rows": stages.get("trajectories", 0.0) / wall,
            "negatives": stages.get("negatives", 0.0) / wall,
            "outside": sum(1 - m["model_s"] / max(m["latency_s"], 1e-9)
                           for m in metas) / len(metas),
            "post": (wall - rollout_s) / wall, "record": record}


def report(args, result: dict) -> None:
    print(f"backend={args.backend} episodes={result['episodes']} concurrency={args.concurrency} "
          f"envs={','.join(args.envs)}" + (f" latency={args.latency}s/turn"
                                           if args.backend == "openai-fake" else ""))
    print(f"  chunk wall            {result['wall']:.2f} s (rollout {result['rollout']:.2f} s)")
    print(f"  episodes/s            {result['episodes'] / result['wall']:.2f}")
    print(f"  generated tokens/s    {result['tokens'] / result['rollout']:.1f} (rollout)")
    print(f"  mean turns            {result['turns']:.2f}")
    print(f"  no model call in flight  {100 * result['idle']:.2f}% of rollout wall")
    print(f"  episode outside model    {100 * result['outside']:.2f}% (mean per episode)")
    print(f"  after the rollout        {100 * result['post']:.2f}% of chunk wall: rows "
          f"{100 * result['rows']:.2f}%, negatives stage {100 * result['negatives']:.2f}%, "
          f"Parquet + rest {100 * (result['post'] - result['rows'] - result['negatives']):.2f}%")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["openai-fake", "openai-vllm", "hf"],
                        default="openai-fake")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.5, help="openai-fake: s per turn")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS))
    parser.add_argument("--model", default="runs/tiny-qwen2", help="tiny model dir (built if "
                        "missing) for openai-vllm and hf")
    args = parser.parse_args(argv)
    model = Path(args.model) if args.backend != "openai-fake" else None
    if model is not None and not (model / "config.json").exists():
        from scripts.make_tiny_model import make_tiny_model

        make_tiny_model(model)
    out = Path(tempfile.mkdtemp(prefix="bench-teachers-"))
    server = None
    try:
        base_url = None
        if args.backend == "openai-fake":
            from tests.datagen.teachers.fault_server import FaultServer, ScriptedAgent
            from tests.datagen.teachers.helpers import make_tasks

            tasks = make_tasks(args.episodes, envs=tuple(args.envs))
            server = FaultServer(ScriptedAgent(tasks), latency_s=args.latency).start()
            base_url = server.base_url
        elif args.backend == "openai-vllm":
            from tests.datagen.teachers.vllm_server import VLLMServer

            server = VLLMServer(model)
            server.wait_ready()
            base_url = server.base_url
        report(args, run_chunk(args, teacher_section(args, model, base_url), out))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
