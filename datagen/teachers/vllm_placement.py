"""What one vLLM engine asks Ray for, and how long a chunk worker waits for its engines.

An engine is one Ray actor: `teacher.vllm.num_cpus` and `num_gpus` on a node, or, with
`tensor_parallel_size` N > 1, a placement group of N {GPU 1, CPU 1} bundles packed on one node
(STRICT_PACK) that the actor (its CPUs taken from one bundle) and vLLM's N workers run in.
The driver refuses engines a cluster can never hold before any chunk runs
(datagen/pipeline/placement.py, from `engine_shape`); what may still come (other jobs holding
the resources, an autoscaler adding a node) is waited for here, boundedly. Before, the chunk
worker waited on the engines with no bound: `num_cpus: 1000`, or `num_gpus: 1` on a CPU-only
cluster, hung the run at its first batch.

A chunk worker waits once: `teacher.vllm.place_timeout_s` (default 300 s) for the engines to be
placed, then `teacher.vllm.start_timeout_s` (default 1,800 s) for them to load. Past either, or
when an engine's start raised (a model that does not load, `teacher.sampling.logit_bias` ids
past its vocabulary), the batch raises EngineNotReady, in one line that names the field to
change where there is one, so the chunk fails with that reason in the summary and no marker: a
rerun retries it. Later
batches of that worker check without waiting and fail at once while the engines are still not
ready (one wait per worker, not one per chunk: 100 chunks do not take 100 x 300 s to fail).
"""

from __future__ import annotations

from typing import Any

import ray

from datagen.teachers.config import VLLMConfig

TP_BUNDLE = {"GPU": 1.0, "CPU": 1.0}  # one tensor-parallel rank; the actor runs in one


class EngineNotReady(RuntimeError):
    """The run's vLLM engines were not placed, or did not start, within the bound; or an
    engine's start raised."""


def engine_bundles(config: VLLMConfig) -> list[dict[str, float]]:
    """The placement group of a tensor-parallel engine (STRICT_PACK: all on one node)."""
    return [dict(TP_BUNDLE) for _ in range(config.tensor_parallel_size)]


def engine_shape(config: VLLMConfig) -> dict[str, float]:
    """What one engine holds on one node, zero amounts left out."""
    if config.tensor_parallel_size > 1:
        return {name: amount * config.tensor_parallel_size for name, amount in TP_BUNDLE.items()}
    return {name: amount for name, amount in (("CPU", config.num_cpus),
                                              ("GPU", config.num_gpus)) if amount}


def describe_engine(config: VLLMConfig) -> str:
    """`teacher.vllm.num_cpus=1000 -> CPU 1000 per engine`, for messages."""
    if config.tensor_parallel_size > 1:
        return (f"teacher.vllm.tensor_parallel_size={config.tensor_parallel_size} -> "
                f"{config.tensor_parallel_size} bundles of GPU 1, CPU 1 on one node per engine")
    asked = ", ".join(f"{name} {amount:g}" for name, amount in engine_shape(config).items())
    return (f"teacher.vllm.num_cpus={config.num_cpus:g}, num_gpus={config.num_gpus:g} -> "
            f"{asked or 'nothing'} per engine")


def wait_engines_ready(placed: list[Any], ready: list[Any], config: VLLMConfig,
                       place_s: float, start_s: float) -> None:
    """Wait for the engines' actors to be placed (`placed`: their `__ray_ready__`), then for
    their engines (`ready`); EngineNotReady past a bound, or with the first line of the error
    of an engine whose start raised (not Ray's traceback dump). An actor that died in its
    constructor raises its own error, as `ray.get` gives it."""
    done, _ = ray.wait(placed, num_returns=len(placed), timeout=place_s)
    if len(done) < len(placed):
        raise EngineNotReady(
            f"{len(placed) - len(done)} of {len(placed)} vLLM engine actors not placed within "
            f"{place_s:g}s (teacher.vllm.place_timeout_s; {describe_engine(config)}; "
            f"teacher.vllm.num_engines={config.num_engines}): other jobs may hold the "
            f"resources, or an autoscaler still be adding nodes")
    ray.get(placed)  # an actor that died in its constructor raises here
    try:
        ray.get(ready, timeout=start_s)
    except ray.exceptions.GetTimeoutError:
        raise EngineNotReady(f"vLLM engines placed but not started within {start_s:g}s "
                             f"(teacher.vllm.start_timeout_s; loading {config.model})") from None
    except ray.exceptions.RayTaskError as exc:  # ready() raised in the engine actor
        # the reason before the model's path: a chunk's reason is cut at 300 characters
        raise EngineNotReady(f"a vLLM engine failed to start: {_first_line(exc)} (loading "
                             f"{config.model})") from None


def _first_line(exc: ray.exceptions.RayTaskError) -> str:
    """`Type: first line` of the actor's own error, else of Ray's wrapper."""
    cause = getattr(exc, "cause", None) or exc
    lines = str(cause).strip().splitlines() or [""]
    return f"{type(cause).__name__}: {lines[0][:300]}"
