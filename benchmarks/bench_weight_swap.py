"""Weight swaps under load: a vLLM engine actor (CPU build, the tiny random Qwen2) plays
episodes while its weights are swapped between two models every `--interval` seconds.

    .venv/bin/python benchmarks/bench_weight_swap.py --episodes 32 --swaps 6

Reports, per swap, the phases `SyncedVLLMEngineActor` records (stage: writing the state dict
to safetensors, turns still running; drain: new turns held while the admitted ones finish;
load: engine paused, `reload_weights` + prefix-cache reset), and for the rollout: episodes/s
and turns/s with and without swaps, how many episodes straddled a swap (turns on two or more
weight versions) and that every turn's version is one the actor served. The model is noise
(turns end early): figures for the swap mechanism, not for a real model; a 32B model's stage
and load are dominated by writing and reading ~64 GB (README "PPO").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo


def two_models(directory: Path) -> tuple[Path, list, list]:
    """The tiny model and the full state dicts of it and of a second one (seed 1, random
    final-norm scale, so its tokens differ: see tests/datagen/teachers/test_vllm_weights.py)."""
    import torch
    from transformers import AutoModelForCausalLM

    from scripts.make_tiny_model import make_tiny_model

    first = make_tiny_model(directory / "seed0")
    second = AutoModelForCausalLM.from_pretrained(make_tiny_model(directory / "seed1", seed=1),
                                                  dtype=torch.float32)
    with torch.no_grad():
        norm = second.model.norm.weight
        norm.copy_(torch.randn(norm.shape, generator=torch.Generator().manual_seed(1)))
    state = AutoModelForCausalLM.from_pretrained(first, dtype=torch.float32).state_dict()
    return first, list(state.items()), list(second.state_dict().items())


def start_engine(model: Path, max_tokens: int, chatty: bool):
    import ray
    from transformers import AutoTokenizer

    from datagen.teachers.config import TeacherConfig
    from datagen.teachers.vllm_weights import SyncedVLLMEngineActor
    from tests.datagen.teachers.helpers import chatty_bias

    config = TeacherConfig(
        backend="vllm", name="swap-bench",
        vllm={"model": str(model), "num_gpus": 0, "dtype": "float32", "max_model_len": 4096,
              "enforce_eager": True, "cpu_kv_cache_gib": 1},
        sampling={"max_tokens_per_turn": max_tokens, "temperature": 1.0,
                  "logit_bias": chatty_bias(AutoTokenizer.from_pretrained(model))
                  if chatty else {}},
        episode={"max_turns": 6, "max_total_tokens": 4000, "on_invalid_turn": "feedback",
                 "max_concurrent_episodes": 64})
    actor = ray.remote(SyncedVLLMEngineActor).options(
        num_cpus=1, max_concurrency=1000,
        runtime_env={"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1",
                                  "VLLM_LOGGING_LEVEL": "WARNING"}},
    ).remote(config.model_dump_json())
    started = time.perf_counter()
    ray.get(actor.ready.remote(), timeout=1200)
    return actor, time.perf_counter() - started


def rollout(actor, tasks) -> tuple[list, float]:
    import ray

    started = time.perf_counter()
    trajectories = ray.get(actor.rollout_batch.remote(tasks))
    return trajectories, time.perf_counter() - started


def rollout_with_swaps(actor, tasks, weights: list, swaps: int, interval: float):
    """Rollout batches back to back while the main thread swaps weights every `interval` s;
    returns the trajectories, the wall time and each swap's record."""
    import ray

    trajectories: list = []
    stop = threading.Event()

    def play() -> None:
        while not stop.is_set():
            trajectories.extend(rollout(actor, tasks)[0])

    started = time.perf_counter()
    thread = threading.Thread(target=play)
    thread.start()
    records = []
    for i in range(swaps):
        time.sleep(interval)
        state = ray.get(actor.weights_state.remote())
        seconds = ray.get(actor.load_weights.remote(weights=weights[(i + 1) % 2]))
        after = ray.get(actor.weights_state.remote())
        records.append({"total_s": seconds, **after["last_swap"],
                        "turns_in_engine_at_request": state["in_flight"],
                        "version": after["version"]})
    stop.set()
    thread.join()
    return trajectories, time.perf_counter() - started, records


def summarise(trajectories: list, wall: float) -> dict:
    turns = sum(t.meta["turns"] for t in trajectories)
    straddled = sum(len(set(t.meta["weights_versions"])) > 1 for t in trajectories)
    kinds: dict[str, int] = {}
    for traj in trajectories:
        kinds[traj.error_kind or "success"] = kinds.get(traj.error_kind or "success", 0) + 1
    return {"episodes": len(trajectories), "turns": turns, "wall_s": round(wall, 2),
            "generated_tokens": sum(t.meta["completion_tokens"] for t in trajectories),
            "outcomes": kinds,
            "episodes_per_s": round(len(trajectories) / wall, 2),
            "turns_per_s": round(turns / wall, 2),
            "tokens_per_s": round(sum(t.meta["completion_tokens"] for t in trajectories) / wall),
            "straddled_a_swap": straddled,
            "versions_seen": sorted({v for t in trajectories for v in t.meta["weights_versions"]})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--swaps", type=int, default=6)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between swaps")
    parser.add_argument("--max-tokens", type=int, default=128, help="max tokens per turn")
    parser.add_argument("--chatty", action="store_true", help="bias the random model to end "
                        "turns and emit call markers (more, shorter turns)")
    args = parser.parse_args()

    import ray

    from tests.datagen.teachers.helpers import make_tasks

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory(prefix="swap-bench-") as directory:
            model, first, second = two_models(Path(directory))
            weights = [ray.put(first), ray.put(second)]
            actor, start_s = start_engine(model, args.max_tokens, args.chatty)
            tasks = make_tasks(args.episodes, envs=("sql", "fs"))
            rollout(actor, tasks[:4])  # warm-up
            plain = summarise(*rollout(actor, tasks))
            version0 = ray.get(actor.weights_state.remote())["version"]
            trajectories, wall, records = rollout_with_swaps(
                actor, tasks, weights, args.swaps, args.interval)
            swapped = summarise(trajectories, wall)
            served = set(range(version0, version0 + len(records) + 1))
            assert set(swapped["versions_seen"]) <= served, (swapped, served)
            report = {"engine_start_s": round(start_s, 1), "without_swaps": plain,
                      "with_swaps": swapped, "swaps": [
                          {k: round(v, 3) if isinstance(v, float) else v
                           for k, v in r.items()} for r in records]}
            for phase in ("stage_s", "drain_s", "load_s", "total_s"):
                values = [r[phase] for r in records]
                if values:
                    report[f"{phase}_median"] = round(statistics.median(values), 3)
                    report[f"{phase}_max"] = round(max(values), 3)
            print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
