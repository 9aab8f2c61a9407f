"""The LLM-teacher pipeline's generated tokens/s against the bare engine's (issue 16, "Also").

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/bench_teacher_ratio.py --backend vllm
    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/bench_teacher_ratio.py --backend openai-vllm
    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/bench_teacher_ratio.py --backend hf

Each repetition runs two arms back to back on the same loaded model (A/B interleaved:
A1 B1 A2 B2 ..., after one discarded warm-up repetition):
- A, the pipeline: one chunk of `bench_teachers.run_chunk` (episodes, environments, parsing,
  validation, rows, Parquet), `--concurrency` episodes at a time. Its turns are then read back
  from the rows it wrote (`recorded_turns`): every maximal run of generated tokens (the tokens
  that carry a teacher top-k) is one turn; its prompt is every id before it, its length the
  run's length, checked against `teacher_meta.completion_tokens` of the row.
- B, the bare engine: exactly those prompts at exactly those lengths (`min_tokens` =
  `max_tokens` = the recorded length, so a turn that stopped at <|im_end|> costs the same), the
  same sampling (temperature, top-p, logprobs), `--concurrency` requests in flight, no
  episodes: `vllm` -> the same AsyncLLM in the same engine actor (`ReplayEngineActor.replay`);
  `openai-vllm` -> the same loopback vLLM server hit directly with the request body the
  backend builds (aiohttp, no retries, no parsing beyond `usage`); `hf` -> a plain batched
  `model.generate` loop over the same model object (left-padded batches of `--concurrency` in
  recorded order, no top-k: it does less work than the pipeline).

Reported per arm: generated tokens / wall, A also over the rollout only, and generated tokens
per CPU second of this process and its descendants (engine, server, local Ray: other jobs on
a shared machine move this far less than wall time); the ratios A / B per repetition, then
median and range, with the 1-minute load average at each arm. The bare
figure is an upper bound, not the same workload: B's requests are all known up front and
none waits for an earlier turn, an environment step or a parse, while in A a turn's prompt
exists only once the previous turn was generated, parsed and executed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling bench_teachers

from bench_teachers import (parse_args, run_chunk, serving, teacher_section,  # noqa: E402
                            tiny_model, tree_cpu_seconds)
from datagen.teachers.vllm_engine import VLLMEngineActor, VLLMTeacher  # noqa: E402


@dataclass(frozen=True)
class Turn:
    """One generated turn of a pipeline run: the exact prompt ids and how many ids it got."""

    prompt_ids: list[int]
    generated: int


def row_turns(input_ids: list[int], topk_ids: list[list[int]]) -> list[Turn]:
    """The turns of one trajectory row. Generated tokens are the ones with a top-k entry
    (template text, observations and the glue after a turn have none), so each maximal run of
    them is one turn, and everything before the run is the prompt that turn was given."""
    turns, start = [], None
    for position, top in enumerate([*topk_ids, []]):  # the sentinel closes a trailing run
        if top and start is None:
            start = position
        elif not top and start is not None:
            turns.append(Turn(list(input_ids[:start]), position - start))
            start = None
    return turns


def recorded_turns(out: Path) -> list[Turn]:
    """Every turn of a run's trajectories table, in row order. A row whose runs do not add up
    to its `completion_tokens` (a turn without top-k, re-tokenised ids) is refused: the
    replay would not be the same work."""
    table = pq.read_table(out / "trajectories",
                          columns=["id", "input_ids", "teacher_topk_ids", "teacher_meta"])
    turns: list[Turn] = []
    for row in table.to_pylist():
        found = row_turns(row["input_ids"], row["teacher_topk_ids"])
        meta = orjson.loads(row["teacher_meta"])
        if sum(turn.generated for turn in found) != meta.get("completion_tokens", 0):
            raise ValueError(f"row {row['id']}: the top-k runs hold "
                             f"{sum(t.generated for t in found)} generated tokens, "
                             f"teacher_meta says {meta.get('completion_tokens')}")
        turns += found
    return turns


class ReplayEngineActor(VLLMEngineActor):
    """The `vllm` backend's engine actor plus a bare replay on its own engine."""

    async def replay(self, turns: list[Turn], concurrency: int) -> tuple[float, int]:
        """All turns through AsyncLLM, `concurrency` at a time: (wall seconds, ids generated)."""
        from vllm import TokensPrompt

        await self.backend.start()
        gate, tag = asyncio.Semaphore(concurrency), uuid.uuid4().hex[:8]

        async def one(index: int, turn: Turn) -> int:
            async with gate:
                params = self.backend.sampling_params(turn.generated, min_tokens=turn.generated)
                final = None
                async for final in self.backend.engine.generate(
                        TokensPrompt(prompt_token_ids=turn.prompt_ids), params,
                        request_id=f"replay-{tag}-{index}"):
                    pass
                return len(final.outputs[0].token_ids)

        started = time.perf_counter()
        counts = await asyncio.gather(*(one(i, turn) for i, turn in enumerate(turns)))
        return time.perf_counter() - started, sum(counts)


def bare_vllm(processor: Any, turns: list[Turn], concurrency: int) -> tuple[float, int]:
    engine = processor.teacher.engines()[0]
    import ray

    return ray.get(engine.replay.remote(turns, concurrency))


def bare_openai(processor: Any, turns: list[Turn], concurrency: int) -> tuple[float, int]:
    """The server hit directly with the backend's own request bodies plus `min_tokens`."""
    import aiohttp

    from datagen.teachers.episode import TurnRequest

    backend = processor.teacher.backend
    bodies = []
    for index, turn in enumerate(turns):
        body = backend.request_body(TurnRequest([], turn.prompt_ids, [], turn.generated,
                                                f"replay:{index}"))
        bodies.append(orjson.dumps({**body, "min_tokens": turn.generated}))

    async def replay() -> tuple[float, int]:
        gate = asyncio.Semaphore(concurrency)
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector, headers={
                "Content-Type": "application/json"}) as session:
            async def one(payload: bytes) -> int:
                async with gate, session.post(backend.url, data=payload) as response:
                    body = orjson.loads(await response.read())
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status}: {str(body)[:200]}")
                    return int(body["usage"]["completion_tokens"])

            started = time.perf_counter()
            counts = await asyncio.gather(*(one(payload) for payload in bodies))
            return time.perf_counter() - started, sum(counts)

    return asyncio.run(replay())


def bare_hf(processor: Any, turns: list[Turn], concurrency: int,
            cache: str | None = None) -> tuple[float, int]:
    """A plain batched `model.generate` loop (left padding, recorded order) on the same model;
    a batch decodes to its longest turn, and only the recorded lengths count as generated.
    `cache` "static" asks generate for the preallocated KV cache the pipeline's loop uses."""
    import torch

    backend = processor.teacher.backend
    sampling = backend.sampling
    started = time.perf_counter()
    for first in range(0, len(turns), concurrency):
        batch = turns[first:first + concurrency]
        width, steps = max(len(t.prompt_ids) for t in batch), max(t.generated for t in batch)
        ids = torch.tensor([[backend.pad_id] * (width - len(t.prompt_ids)) + t.prompt_ids
                            for t in batch])
        mask = torch.tensor([[0] * (width - len(t.prompt_ids)) + [1] * len(t.prompt_ids)
                             for t in batch])
        with torch.inference_mode():
            backend.model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=steps, min_new_tokens=steps,
                do_sample=sampling.temperature > 0, temperature=sampling.temperature or None,
                top_p=sampling.top_p, pad_token_id=backend.pad_id,
                sequence_bias={(token,): bias for token, bias in sampling.logit_bias.items()}
                or None, cache_implementation=cache)
    return time.perf_counter() - started, sum(t.generated for t in turns)


BARE = {"vllm": bare_vllm, "openai-vllm": bare_openai, "hf": bare_hf}


def repetition(args, teacher: dict, teachers: list[Any]) -> dict[str, float]:
    """A (the pipeline, one chunk) then B (its turns through the bare engine). The teachers
    are kept in `teachers`: a vLLM engine actor lives as long as a handle to it does."""
    out = Path(tempfile.mkdtemp(prefix="bench-ratio-"))
    try:
        load_a = os.getloadavg()[0]
        result = run_chunk(args, teacher, out)
        teachers.append(result["processor"].teacher)
        turns = recorded_turns(out)
        load_b, cpu_started = os.getloadavg()[0], tree_cpu_seconds()
        replay = BARE[args.backend]
        if args.generate_cache != "dynamic":
            replay = partial(replay, cache=args.generate_cache)
        bare_s, bare_tokens = replay(result["processor"], turns, args.concurrency)
        bare_cpu_s = tree_cpu_seconds() - cpu_started
    finally:
        shutil.rmtree(out, ignore_errors=True)
    generated = sum(turn.generated for turn in turns)
    if bare_tokens < generated:
        raise RuntimeError(f"the bare replay generated {bare_tokens} of {generated} tokens")
    pipeline = result["tokens"] / result["wall"]
    bare = generated / bare_s
    return {"episodes": result["episodes"], "turns": len(turns), "tokens": generated,
            "pipeline": pipeline, "rollout": result["tokens"] / result["rollout"],
            "bare": bare, "ratio": pipeline / bare, "ratio_rollout": result["tokens"]
            / result["rollout"] / bare, "load_a": load_a, "load_b": load_b,
            "pipeline_cpu": result["tokens"] / result["cpu_s"], "bare_cpu": generated / bare_cpu_s,
            "ratio_cpu": result["tokens"] / result["cpu_s"] / (generated / bare_cpu_s)}


def spread(values: list[float], digits: int = 1) -> str:
    """Median (min-max) of `values`."""
    return (f"{statistics.median(values):,.{digits}f} "
            f"({min(values):,.{digits}f}-{max(values):,.{digits}f})")


def show(label: str, rep: dict[str, float]) -> None:
    print(f"{label}: {rep['episodes']} episodes, {rep['turns']} turns, {rep['tokens']} "
          f"tokens | pipeline {rep['pipeline']:,.1f} tok/s (rollout {rep['rollout']:,.1f}) "
          f"load {rep['load_a']:.1f} | bare {rep['bare']:,.1f} tok/s load {rep['load_b']:.1f} "
          f"| ratio {rep['ratio']:.3f} (rollout {rep['ratio_rollout']:.3f}) | tokens per CPU-s "
          f"{rep['pipeline_cpu']:,.1f} vs {rep['bare_cpu']:,.1f}: {rep['ratio_cpu']:.3f}",
          flush=True)


def report(args, reps: list[dict[str, float]]) -> None:
    column = {key: [rep[key] for rep in reps] for key in reps[0]}
    print(f"backend={args.backend} generate_cache={args.generate_cache} concurrency={args.concurrency} episodes={args.episodes} "
          f"max_tokens={args.max_tokens} envs={','.join(args.envs)} chatty={args.chatty} "
          f"reps={len(reps)} "
          f"(median, range)")
    print(f"  pipeline tokens/s, end to end   {spread(column['pipeline'])}")
    print(f"  pipeline tokens/s, rollout only {spread(column['rollout'])}")
    print(f"  bare engine tokens/s            {spread(column['bare'])}")
    print(f"  ratio, end to end               {spread(column['ratio'], 3)}")
    print(f"  ratio, rollout only             {spread(column['ratio_rollout'], 3)}")
    print(f"  tokens per CPU second, pipeline {spread(column['pipeline_cpu'])}")
    print(f"  tokens per CPU second, bare     {spread(column['bare_cpu'])}")
    print(f"  ratio, per CPU second           {spread(column['ratio_cpu'], 3)}")
    print(f"  load average (1 min)            {spread(column['load_a'] + column['load_b'])}")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="repetitions run and discarded")
    parser.add_argument("--json", help="also write the repetitions here")
    parser.add_argument("--generate-cache", choices=["dynamic", "static"], default="dynamic",
                        help="hf: the KV cache of the bare `model.generate` (dynamic: its "
                        "default)")
    args = parse_args(argv, parser)
    if args.backend not in BARE:
        parser.error(f"--backend must be one of {sorted(BARE)} (a bare engine to compare with)")
    model = tiny_model(args)
    VLLMTeacher.engine_class = ReplayEngineActor  # the pipeline's own actor, plus `replay`
    with serving(args, model) as base_url:
        teacher, teachers, reps = teacher_section(args, model, base_url), [], []
        for i in range(args.warmup + args.reps):
            rep = repetition(args, teacher, teachers)
            show(f"warm-up {i + 1}" if i < args.warmup else f"rep {i - args.warmup + 1}", rep)
            if i >= args.warmup:
                reps.append(rep)
    report(args, reps)
    if args.json:
        Path(args.json).write_bytes(orjson.dumps({"args": vars(args), "reps": reps},
                                                 option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
