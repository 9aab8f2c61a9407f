"""Placing the fit's workers: refused at once when the cluster can never hold them, waited for
a bounded time (`scaling.worker_start_timeout_s`) when it might still.

Ray Train 2.60 (v2) waits 60 s for its workers' placement group
(RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S), counts a controller failure and asks again, forever
(FailureConfig.controller_failure_limit defaults to -1), logging a traceback each time:
`scaling.cpus_per_worker=64` on a 2-CPU machine waited with no end. A request larger than the
cluster now is not always wrong, though: an autoscaler may add a node, a lost node may come
back, another job may end. So only what can be proven impossible is refused outright - more
than a Ray this fit started holds (nothing scales it or joins it), or more than an autoscaler's
node types can reach (the check Ray Train makes itself, made here before any wait) - and the
rest is waited for, boundedly: the driver holds a placement group of the workers' bundles until
it is placed or the bound passes, then releases it for Ray Train's own. Ray Train's wait gets
the same bound and no retry, for the gap between the two and for the restarts after a worker
dies (run.max_failures).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator

from datagen.pipeline.cluster import ClusterError, cluster_has
from datagen.pipeline.placement import ceiling, fits
from trainer.config import ScalingConfig, TrainConfig

log = logging.getLogger(__name__)


def worker_resources(scaling: ScalingConfig) -> dict[str, float]:
    """One worker's bundle, as Ray Train is given it."""
    return {"CPU": float(scaling.cpus_per_worker), **({"GPU": 1.0} if scaling.use_gpu else {})}


def all_workers(scaling: ScalingConfig) -> dict[str, float]:
    return {name: amount * scaling.num_workers
            for name, amount in worker_resources(scaling).items()}


def describe(scaling: ScalingConfig) -> str:
    """What scaling asks for next to what the cluster has and has free, for messages."""
    wanted = all_workers(scaling)
    asked = ", ".join(f"{name} {amount:g}" for name, amount in wanted.items())
    gpu = " + a GPU (scaling.use_gpu)" if scaling.use_gpu else ""
    return (f"scaling.num_workers={scaling.num_workers} x scaling.cpus_per_worker="
            f"{scaling.cpus_per_worker}{gpu} asks for {asked} in all; the cluster has "
            f"{cluster_has(wanted)}")


def place_workers(scaling: ScalingConfig, started_here: bool) -> None:
    """Return once the cluster can place the workers; a ClusterError naming scaling.* if it
    never can, or has not within scaling.worker_start_timeout_s."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    limit = ceiling(started_here)
    if limit is not None and not fits(all_workers(scaling), limit):
        raise never_placed(scaling)
    if not fits(all_workers(scaling), ray.cluster_resources()):
        log.warning("waiting up to %gs (scaling.worker_start_timeout_s) for the cluster to "
                    "grow: %s", scaling.worker_start_timeout_s, describe(scaling))
    group = placement_group([worker_resources(scaling)] * scaling.num_workers,
                            strategy="PACK")  # as Ray Train places them
    try:
        placed = group.wait(scaling.worker_start_timeout_s)
    finally:
        remove_placement_group(group)
    if not placed:
        raise not_placed(scaling)


def check_rollout_actors(cfg: TrainConfig, started_here: bool) -> None:
    """PPO's rollout actors run beside the learners, outside their placement group: refuse a
    request the cluster can never hold with the learners (ClusterError naming ppo.*). A
    request that may still fit is waited for by the learner, boundedly (`start_actors`)."""
    limit = ceiling(started_here)
    if cfg.recipe != "ppo" or limit is None:
        return
    actors = cfg.scaling.num_workers * cfg.ppo.rollout_workers * cfg.ppo.rollout_cpus
    learners = all_workers(cfg.scaling)["CPU"]
    if actors + learners > limit.get("CPU", 0):
        raise ClusterError(
            f"the cluster can never place the PPO rollout actors: scaling.num_workers="
            f"{cfg.scaling.num_workers} x ppo.rollout_workers={cfg.ppo.rollout_workers} x "
            f"ppo.rollout_cpus={cfg.ppo.rollout_cpus:g} = CPU {actors:g} beside the learners' "
            f"CPU {learners:g}; the cluster has CPU {limit.get('CPU', 0):g}")


def never_placed(scaling: ScalingConfig) -> ClusterError:
    return ClusterError(f"the cluster can never place the workers: {describe(scaling)}")


def not_placed(scaling: ScalingConfig) -> ClusterError:
    return ClusterError(f"the workers were not placed within {scaling.worker_start_timeout_s:g}s "
                        f"(scaling.worker_start_timeout_s): {describe(scaling)}; other jobs may "
                        f"hold the rest, or an autoscaler still be adding nodes")


@contextlib.contextmanager
def bounded_worker_start(scaling: ScalingConfig) -> Iterator[None]:
    """Ray Train's own wait for its workers bounded as ours (its controller reads the variable
    from the driver's environment when the fit starts; FailureConfig(controller_failure_limit=0)
    keeps it from asking again), and its timeout raised as the same ClusterError."""
    from ray.train import ControllerError
    from ray.train.v2._internal.constants import WORKER_GROUP_START_TIMEOUT_S_ENV_VAR as name
    from ray.train.v2._internal.exceptions import (InsufficientClusterResourcesError,
                                                   WorkerGroupStartupTimeoutError)

    saved = os.environ.get(name)
    os.environ[name] = f"{scaling.worker_start_timeout_s:g}"
    try:
        yield
    except ControllerError as exc:
        if isinstance(exc.controller_failure, InsufficientClusterResourcesError):
            raise never_placed(scaling) from None
        if isinstance(exc.controller_failure, WorkerGroupStartupTimeoutError):
            raise not_placed(scaling) from None
        raise
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved
