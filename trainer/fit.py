"""`python -m trainer fit`: the Ray Train job.

Topology (readable here, in one place):

    driver:  TrainConfig -> Ray Data stream over OUT/ (trainer.data) -> TorchTrainer
    workers: `scaling.num_workers` x TorchTrainer worker (`cpus_per_worker` CPUs, a GPU each
             with use_gpu) running trainer.worker.train_loop_per_worker; gloo on CPU, NCCL on
             GPU; DDP or DeepSpeed ZeRO inside
    storage: run_dir = Ray Train's storage_path/name: checkpoints + run state; rerunning with
             the same run_dir resumes from the latest checkpoint; metrics.jsonl beside them

CPU sizing: Ray Data needs a CPU of its own to read and tokenise; a 2-CPU machine runs one
1-CPU worker (two 1-CPU workers starve the reader).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config import TrainConfig
from trainer.data import DataSettings, build_dataset, lm_complexities

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class FitResult:
    run_dir: str
    checkpoint: str | None          # latest checkpoint directory (Hugging Face format)
    metrics: dict[str, Any]         # last reported metrics
    data: dict[str, Any]            # what the data stream was built from


def absolute_paths(cfg: TrainConfig) -> TrainConfig:
    """Workers do not share the driver's working directory: resolve paths here."""
    def absolute(path: str | None) -> str | None:
        return str(Path(path).expanduser().resolve()) if path else path

    updates = {"run_dir": absolute(cfg.run_dir), "shards": absolute(cfg.shards),
               "tokenizer": absolute(cfg.tokenizer)}
    model = cfg.model.model_copy(update={"init_from": absolute(cfg.model.init_from)})
    loss = cfg.loss.model_copy(update={"teacher_model": absolute(cfg.loss.teacher_model)})
    scaling = cfg.scaling.model_copy(update={"deepspeed_config": absolute(cfg.scaling.deepspeed_config)})
    return cfg.model_copy(update={**updates, "model": model, "loss": loss, "scaling": scaling})


def init_ray(address: str | None) -> None:
    """Join `address` / $RAY_ADDRESS, or start a local Ray with the dashboard on (Ray Train's
    placement-group cleanup relies on the State API it serves)."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        "TOKENIZERS_PARALLELISM": "false"}}
    ray.init(address=address, include_dashboard=None if address else True,
             logging_level=logging.WARNING, runtime_env=runtime_env)


def data_settings(cfg: TrainConfig) -> DataSettings:
    return DataSettings(shards=cfg.shards, tokenizer=cfg.tokenizer,
                        max_seq_len=cfg.data.max_seq_len, batch_size=cfg.data.batch_size,
                        mch_rows=cfg.data.mch_rows,
                        bucket_pool_batches=cfg.data.bucket_pool_batches,
                        use_mch=cfg.model.use_mch, tables=tuple(cfg.data.tables),
                        table_weights=tuple(sorted(cfg.data.table_weights.items())),
                        read_topk=cfg.loss.teacher == "topk" and cfg.loss.objective != "sft",
                        check_tokenizer=cfg.data.check_tokenizer,
                        seed=cfg.run.seed, complexity_weights=tuple(cfg.curriculum.weights))


def curriculum_quantiles(dataset: Any, cfg: TrainConfig) -> list[float] | None:
    """Complexity quantiles over the whole stream (one pass over the scores only)."""
    if not cfg.curriculum.enabled:
        return None
    import numpy as np

    scores = lm_complexities(dataset)
    return np.quantile(scores, np.linspace(0, 1, 101)).tolist() if len(scores) else None


def fit(cfg: TrainConfig) -> FitResult:
    """Run (or resume) training as described by `cfg`; blocks until it ends."""
    import ray.train
    from ray.train.torch import TorchConfig, TorchTrainer

    from trainer.worker import train_loop_per_worker

    cfg = absolute_paths(cfg)
    init_ray(cfg.ray_address)
    dataset, data_info = build_dataset(data_settings(cfg))
    log.info("training data: %s", data_info)
    run_dir = Path(cfg.run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    scaling = cfg.scaling
    # DeepSpeed on CPU (tests, laptops) needs its CPU accelerator chosen in every worker.
    worker_env = {"DS_ACCELERATOR": "cpu"} if scaling.strategy == "deepspeed" and not scaling.use_gpu else {}
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"train": cfg.model_dump(mode="json"),
                           "curriculum_quantiles": curriculum_quantiles(dataset, cfg)},
        torch_config=TorchConfig(backend="nccl" if scaling.use_gpu else "gloo"),
        scaling_config=ray.train.ScalingConfig(
            num_workers=scaling.num_workers, use_gpu=scaling.use_gpu,
            resources_per_worker={"CPU": scaling.cpus_per_worker}),
        run_config=ray.train.RunConfig(
            name=run_dir.name, storage_path=str(run_dir.parent),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=cfg.run.keep_checkpoints),
            worker_runtime_env={"env_vars": worker_env} if worker_env else None),
        datasets={"train": dataset})
    result = trainer.fit()
    checkpoint = result.checkpoint.path if result.checkpoint is not None else None
    return FitResult(str(run_dir), checkpoint, dict(result.metrics or {}), data_info)
