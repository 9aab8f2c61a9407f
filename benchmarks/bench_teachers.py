"""Throughput and overhead of the LLM teachers, one chunk end to end (rollout, rows, Parquet).

    .venv/bin/python benchmarks/bench_teachers.py --backend openai-fake  # loopback fake, 0.5 s/turn
    .venv/bin/python benchmarks/bench_teachers.py --backend openai-vllm  # loopback vLLM, tiny model
    .venv/bin/python benchmarks/bench_teachers.py --backend hf           # Transformers, tiny model
    .venv/bin/python benchmarks/bench_teachers.py --backend vllm         # in-process engine actor

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
real environments: it isolates the pipeline's own cost. `openai-vllm`, `vllm` and `hf` use the
tiny random Qwen2 (turns are noise and end early): figures for the protocol and the batching,
not for a real model. `vllm` runs its episodes inside a Ray engine actor, where the driver
cannot clock the model calls: its in-flight figures print as nan; its one chunk also includes
the engine's start-up (bench_teacher_ratio.py discards a warm-up repetition instead).
`bench_teacher_ratio.py` replays a run's turns through the bare engine (issue 16).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

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


def tree_cpu_seconds() -> float:
    """User + system CPU seconds so far of this process and its live descendants (a loopback
    server and its engine, a local Ray and its workers): what a run costs in CPU, which other
    jobs on a shared machine change far less than its wall time."""
    import psutil

    me, total = psutil.Process(), 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:  # exited meanwhile
            continue
        total += times.user + times.system
    return total


class ModelClock:
    """Wraps a backend's `generate` to measure wall time with no model call in flight
    (`backend` None: a backend in another process; only the rollout's wall time is kept)."""

    def __init__(self, backend: TurnBackend | None) -> None:
        self.in_flight, self.idle, self.since = 0, 0.0, None
        self.started = self.stopped = self.changed = self.area = 0.0
        self.clocked = backend is not None
        if backend is None:
            return
        original = backend.generate

        async def generate(request):
            self._enter()
            try:
                return await original(request)
            finally:
                self._exit()
        backend.generate = generate

    def start(self) -> None:
        self.started = self.since = self.changed = time.perf_counter()
        self.area = 0.0  # integral of calls in flight over time: their mean is area / wall

    def stop(self) -> None:
        self.stopped = time.perf_counter()
        self._count(self.stopped)
        if self.in_flight == 0 and self.since is not None:
            self.idle += self.stopped - self.since

    def _count(self, now: float) -> None:
        self.area += self.in_flight * (now - self.changed)
        self.changed = now

    def _enter(self) -> None:
        now = time.perf_counter()
        self._count(now)
        if self.in_flight == 0 and self.since is not None:
            self.idle += now - self.since
        self.in_flight += 1

    def _exit(self) -> None:
        self._count(time.perf_counter())
        self.in_flight -= 1
        if self.in_flight == 0:
            self.since = time.perf_counter()

    def mean_in_flight(self) -> float:
        """Model calls in flight, averaged over the rollout (the batch the model saw)."""
        if not self.clocked:
            return float("nan")
        return self.area / max(self.stopped - self.started, 1e-9)

    def idle_share(self) -> float:
        if not self.clocked:
            return float("nan")
        return self.idle / max(self.stopped - self.started, 1e-9)


def teacher_section(args, model: Path | None, base_url: str | None) -> dict:
    episode = {"max_turns": 12, "max_total_tokens": 4000,
               "max_concurrent_episodes": args.concurrency}
    sampling = {"max_tokens_per_turn": args.max_tokens, "logprobs": 5}
    if args.chatty and model is not None:  # short turns with tool-call markers: many turns
        from transformers import AutoTokenizer

        from tests.datagen.teachers.helpers import chatty_bias

        sampling["logit_bias"] = chatty_bias(AutoTokenizer.from_pretrained(model))
    if args.backend == "hf":
        return {"backend": "hf", "hf": {"model": str(model), "max_batch_size": args.concurrency},
                "sampling": sampling, "episode": episode}
    if args.backend == "vllm":  # the tiny CPU engine as configs/teacher_vllm_tiny_cpu.yaml
        return {"backend": "vllm", "sampling": sampling, "episode": episode,
                "vllm": {"model": str(model), "num_gpus": 0, "dtype": "float32",
                         "max_model_len": 4096, "enforce_eager": True, "cpu_kv_cache_gib": 1}}
    openai = {"base_url": base_url, "model": str(model) if model else "fake", "cache": False,
              "initial_concurrency": args.concurrency, "max_concurrency": 4 * args.concurrency}
    if args.backend == "openai-vllm":
        openai.update(token_ids=True, tokenizer=str(model))
    return {"backend": "openai", "openai": openai, "episode": episode,
            "sampling": {**sampling, "logprobs": 5 if args.backend == "openai-vllm" else 0}}


def run_chunk(args, teacher: dict, out: Path) -> dict:
    config = GenerateConfig(out=str(out), num_trajectories=args.episodes,
                            chunk_size=args.episodes, envs=[{"name": e} for e in args.envs],
                            teacher=teacher, progress=False)
    processor = ChunkProcessor(config)
    clock = ModelClock(getattr(processor.teacher, "backend", None))
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
    started, cpu_started = time.perf_counter(), tree_cpu_seconds()
    record = processor.process(chunk)
    wall = time.perf_counter() - started
    cpu_s = tree_cpu_seconds() - cpu_started
    metas = [orjson.loads(m) for m in pq.read_table(out / "trajectories",
                                                    columns=["teacher_meta"]).column(0).to_pylist()]
    clocked = clock.clocked  # a remote backend's model_s is not comparable to the driver's wall
    rollout_s = clock.stopped - clock.started
    return {"episodes": len(metas), "wall": wall, "rollout": rollout_s,
            "tokens": sum(m["completion_tokens"] for m in metas),
            "turns": sum(m["turns"] for m in metas) / len(metas),
            "idle": clock.idle_share(), "in_flight": clock.mean_in_flight(),
            "rows": stages.get("trajectories", 0.0) / wall,
            "negatives": stages.get("negatives", 0.0) / wall,
            "outside": sum(1 - m["model_s"] / max(m["latency_s"], 1e-9)
                           for m in metas) / len(metas) if clocked else float("nan"),
            "post": (wall - rollout_s) / wall, "record": record, "processor": processor,
            "cpu_s": cpu_s}


def report(args, result: dict) -> None:
    print(f"backend={args.backend} episodes={result['episodes']} concurrency={args.concurrency} "
          f"envs={','.join(args.envs)}" + (f" latency={args.latency}s/turn"
                                           if args.backend == "openai-fake" else ""))
    print(f"  chunk wall            {result['wall']:.2f} s (rollout {result['rollout']:.2f} s)")
    print(f"  episodes/s            {result['episodes'] / result['wall']:.2f}")
    print(f"  generated tokens/s    {result['tokens'] / result['rollout']:.1f} (rollout)")
    print(f"  tokens per CPU second {result['tokens'] / result['cpu_s']:.1f} (this process "
          f"and its descendants)")
    print(f"  mean turns            {result['turns']:.2f}")
    print(f"  no model call in flight  {100 * result['idle']:.2f}% of rollout wall")
    print(f"  model calls in flight    {result['in_flight']:.1f} on average over the rollout")
    print(f"  episode outside model    {100 * result['outside']:.2f}% (mean per episode)")
    print(f"  after the rollout        {100 * result['post']:.2f}% of chunk wall: rows "
          f"{100 * result['rows']:.2f}%, negatives stage {100 * result['negatives']:.2f}%, "
          f"Parquet + rest {100 * (result['post'] - result['rows'] - result['negatives']):.2f}%")


def parse_args(argv: list[str] | None = None,
               parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["openai-fake", "openai-vllm", "hf", "vllm"],
                        default="openai-fake")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.5, help="openai-fake: s per turn")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS))
    parser.add_argument("--model", default="runs/tiny-qwen2", help="tiny model dir (built if "
                        "missing) for openai-vllm, vllm and hf")
    parser.add_argument("--chatty", action="store_true", help="tiny model: bias <|im_end|> "
                        "and the tool-call markers (the tests' chatty_bias), so turns end "
                        "early, fail to parse and get feedback: episodes of several turns")
    return parser.parse_args(argv)


def tiny_model(args) -> Path | None:
    """The model directory the backend loads (built when missing); None for the fake."""
    model = Path(args.model) if args.backend != "openai-fake" else None
    if model is not None and not (model / "config.json").exists():
        from scripts.make_tiny_model import make_tiny_model

        make_tiny_model(model)
    return model


@contextmanager
def serving(args, model: Path | None) -> Iterator[str | None]:
    """What the backend talks to, for the duration: a loopback server for openai-* (yields
    its base_url) or a local Ray for vllm (the engine actor lives there)."""
    server = None
    try:
        if args.backend == "openai-fake":
            from tests.datagen.teachers.fault_server import FaultServer, ScriptedAgent
            from tests.datagen.teachers.helpers import make_tasks

            tasks = make_tasks(args.episodes, envs=tuple(args.envs))
            server = FaultServer(ScriptedAgent(tasks), latency_s=args.latency).start()
        elif args.backend == "openai-vllm":
            from tests.datagen.teachers.vllm_server import VLLMServer

            server = VLLMServer(model)
            server.wait_ready()
        elif args.backend == "vllm":
            import ray

            ray.init(include_dashboard=False, log_to_driver=False)
        yield server.base_url if server is not None else None
    finally:
        if server is not None:
            server.stop()
        if args.backend == "vllm":
            import ray

            ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model = tiny_model(args)
    out = Path(tempfile.mkdtemp(prefix="bench-teachers-"))
    try:
        with serving(args, model) as base_url:
            report(args, run_chunk(args, teacher_section(args, model, base_url), out))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
