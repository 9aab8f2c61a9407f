"""The `vllm` teacher's engine actors: refused before any chunk runs when the cluster can never
hold them; otherwise the chunk workers wait for them, boundedly (teachers/vllm_placement.py).

The chunk workers create the engines at their first batch, so nothing else sees them before:
`teacher.vllm.num_cpus: 1000`, or `num_gpus: 1` on a CPU-only cluster, hung the run at that
batch. As for the trainer's workers (trainer/placement.py), only what can be proven impossible
is refused: an engine actor that does not fit one of its own tensor-parallel bundles (on any
cluster); on a Ray this run started (nothing scales it or joins it), an engine no node holds,
or the engines and one chunk worker beside them more than the cluster holds; under an
autoscaler, more than its node types reach. Anything else (other jobs holding the resources,
a node that may join) is waited for.
"""

from __future__ import annotations

import logging

import ray

from datagen.config import GenerateConfig
from datagen.pipeline.cluster import ClusterError, cluster_has
from datagen.teachers.vllm_placement import TP_BUNDLE, describe_engine, engine_shape

log = logging.getLogger(__name__)
Resources = dict[str, float]


def engine_demand(config: GenerateConfig) -> Resources:
    """What the run's engines hold in all (nothing unless the teacher is `vllm`)."""
    vllm = config.teacher.vllm
    if config.teacher.backend != "vllm" or vllm is None:
        return {}
    return {name: amount * vllm.num_engines for name, amount in engine_shape(vllm).items()}


def ceiling(started_here: bool) -> Resources | None:
    """The most the cluster can ever hold, where that is known: a Ray this process started
    holds what it holds; an autoscaler's node types cap what it can add. None: unknown."""
    if started_here:
        return ray.cluster_resources()
    try:
        from ray._private.state import state

        return state.get_max_resources_from_cluster_config()
    except Exception:  # noqa: BLE001 - an internal API: without it, the bounded wait only
        return None


def check_engines(config: GenerateConfig, worker: Resources, started_here: bool) -> None:
    """A ClusterError naming teacher.vllm.* if the cluster can never place the engines beside
    one chunk worker (`worker`: what one asks for); a warning if it cannot now."""
    engines = engine_demand(config)
    if not engines:
        return
    total = _plus(engines, worker)
    problem = _never_fits(config, total, started_here)
    if problem:
        raise ClusterError(f"the cluster can never place the vLLM engines: {problem}")
    if not fits(total, ray.cluster_resources()):
        log.warning("the cluster cannot hold the vLLM engines now; each chunk worker waits up "
                    "to %gs (teacher.vllm.place_timeout_s) for them: %s",
                    config.teacher.vllm.place_timeout_s, _in_all(config, total))


def _never_fits(config: GenerateConfig, total: Resources, started_here: bool) -> str | None:
    vllm = config.teacher.vllm
    if vllm.tensor_parallel_size > 1 and vllm.num_cpus > TP_BUNDLE["CPU"]:
        return (f"with teacher.vllm.tensor_parallel_size > 1 the engine actor runs in one of its "
                f"GPU 1, CPU 1 bundles, which teacher.vllm.num_cpus={vllm.num_cpus:g} does not "
                f"fit (at most 1)")
    shape = engine_shape(vllm)
    if started_here and not any(fits(shape, node) for node in _alive_nodes()):
        return f"no node holds one engine ({describe_engine(vllm)}); the cluster has " \
               f"{cluster_has(shape)}"
    limit = ceiling(started_here)
    if limit is not None and not fits(total, limit):
        autoscaled = "" if started_here else ", at most " + ", ".join(
            f"{name} {limit.get(name, 0):g}" for name in total) + " with its autoscaler"
        return f"{_in_all(config, total)}{autoscaled}"
    return None


def _in_all(config: GenerateConfig, total: Resources) -> str:
    asked = ", ".join(f"{name} {amount:g}" for name, amount in total.items())
    return (f"teacher.vllm.num_engines={config.teacher.vllm.num_engines} x "
            f"({describe_engine(config.teacher.vllm)}) beside one chunk worker = {asked} in all; "
            f"the cluster has {cluster_has(total)}")


def _alive_nodes() -> list[Resources]:
    return [node["Resources"] for node in ray.nodes() if node.get("Alive")]


def fits(wanted: Resources, offered: Resources) -> bool:
    """Every resource `wanted` is there in `offered` (a node, the cluster, a ceiling)."""
    return all(amount <= offered.get(name, 0) for name, amount in wanted.items())


def _plus(a: Resources, b: Resources) -> Resources:
    return {name: a.get(name, 0) + b.get(name, 0) for name in {**a, **b}}
