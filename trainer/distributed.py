"""What every recipe's Ray Train worker does first (`start_worker`), and the collectives the
recipes use for metrics and for keeping ranks in step (gloo or NCCL; no-ops on one worker)."""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

import torch
import torch.distributed as dist

from trainer.config import TrainConfig
from trainer.engines import world_size


class WorkerStart(NamedTuple):
    cfg: TrainConfig
    context: Any            # ray.train's TrainContext (world rank and size)
    rank: int
    device: torch.device


def start_worker(loop_config: dict[str, Any]) -> WorkerStart:
    """The prologue of every recipe's train_loop_per_worker: the TrainConfig the driver sent
    (`loop_config["train"]`), this worker's Ray Train context, rank and device."""
    import ray.train
    import ray.train.torch

    context = ray.train.get_context()
    return WorkerStart(TrainConfig.model_validate(loop_config["train"]), context,
                       context.get_world_rank(), ray.train.torch.get_device())


def any_rank(flag: bool, device: torch.device) -> bool:
    """Whether `flag` holds on any rank (every rank gets the same answer)."""
    if world_size() == 1:
        return flag
    value = torch.tensor([float(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def gather_lists(local: dict[str, list]) -> dict[str, list]:
    """Each key's list concatenated over ranks (for a few dozen values per step)."""
    if world_size() == 1:
        return local
    everyone: list[dict[str, list] | None] = [None] * world_size()
    dist.all_gather_object(everyone, local)
    return {key: [value for part in everyone for value in part[key]] for key in local}


def reduce_metrics(metrics: dict[str, float], device: torch.device,
                   summed: Iterable[str]) -> dict[str, float]:
    """Metrics of every rank: keys in `summed` (counts, sums) added, the rest averaged."""
    if world_size() == 1:
        return metrics
    keys = sorted(metrics)
    values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    summed = set(summed)
    return {k: float(v) if k in summed else float(v) / world_size()
            for k, v in zip(keys, values.tolist())}


def flatten(nested: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """{"a": {"b": 1.0}} -> {"a|b": 1.0}, so nested sums reduce in one collective."""
    out: dict[str, float] = {}
    for key, value in nested.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}|"))
        else:
            out[name] = float(value)
    return out


def unflatten(flat: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split("|")
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return out
