"""`python -m trainer fit`: the Ray Train job.

Topology (readable here, in one place):

    driver:  TrainConfig -> recipe (`recipe:`, trainer.recipes) -> its Ray Data stream over
             OUT/ (sad: trainer.data; dpo: trainer.readers.preferences, after the reference
             pass when dpo.reference is precomputed, + trainer.data's as "anchor" with
             dpo.anchor_weight; ppo: none) -> TorchTrainer
    workers: `scaling.num_workers` x TorchTrainer worker (`cpus_per_worker` CPUs, a GPU each
             with use_gpu) running the recipe's train_loop_per_worker; gloo on CPU, NCCL on
             GPU; DDP or DeepSpeed ZeRO inside; ppo: each worker also starts its rollout
             actors (trainer.rl.rollout, `ppo.rollout_workers` x `ppo.rollout_cpus` CPUs)
    storage: run_dir = Ray Train's storage_path/name: checkpoints + run state; rerunning with
             the same run_dir resumes from the latest checkpoint; metrics.jsonl beside them
    faults:  a dead worker (killed, OOM, node lost) restarts the worker group up to
             `run.max_failures` times, each time from the latest checkpoint (same resume
             path as a rerun); past that, the job fails and a rerun resumes; bad data
             (DataError), a diverged step (TrainingDiverged: gradient norm inf/nan, the
             update not applied) and weights that are not finite (CheckpointError) would fail
             the same way again: the run ends at the first (trainer.retries), reported apart
    placement: workers the cluster can never hold are refused before any work; others are
             waited for at most `scaling.worker_start_timeout_s` (trainer.placement)

CPU sizing: Ray Data needs a CPU of its own to read and tokenise; a 2-CPU machine runs one
1-CPU worker (two 1-CPU workers starve the reader).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config import TrainConfig
from trainer.data_checks import DataError
from trainer.recipes import load_recipe
from trainer.shard_files import is_uri
from trainer.tokens import tokenizer_problem

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class FitResult:
    run_dir: str
    checkpoint: str | None          # latest checkpoint directory (Hugging Face format)
    metrics: dict[str, Any]         # last reported metrics
    data: dict[str, Any]            # what the data stream was built from


def checkpoint_dir(path: str | None, field: str) -> str | None:
    """A checkpoint directory as given, a run directory's newest checkpoint (so a DPO run
    can start from `runs/tiny`), or None; a path that is neither is refused naming `field`
    (Transformers would take it for a hub id, in a worker, minutes later)."""
    if not path:
        return path
    from trainer.eval import resolve_checkpoint  # light: torch/datagen load lazily there

    from trainer.checkpoint_check import CheckpointError

    try:
        return resolve_checkpoint(path)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{field}: {exc}") from None
    except CheckpointError as exc:
        raise CheckpointError(f"{field}: {exc}") from None


def absolute_paths(cfg: TrainConfig) -> TrainConfig:
    """Workers do not share the driver's working directory: resolve paths here (and run
    directories given as checkpoints to their newest checkpoint, once, at the start)."""
    def absolute(path: str | None) -> str | None:  # a URI is the same everywhere
        return str(Path(path).expanduser().resolve()) if path and not is_uri(path) else path

    updates = {"run_dir": absolute(cfg.run_dir), "shards": absolute(cfg.shards),
               "tokenizer": absolute(cfg.tokenizer)}
    model = cfg.model.model_copy(update={"init_from": checkpoint_dir(absolute(cfg.model.init_from),
                                                                      "model.init_from")})
    teacher_model = absolute(cfg.loss.teacher_model)
    if loads_teacher_model(cfg):
        teacher_model = checkpoint_dir(teacher_model, "loss.teacher_model")
    loss = cfg.loss.model_copy(update={"teacher_model": teacher_model})
    dpo = cfg.dpo.model_copy(update={"reference_model": checkpoint_dir(absolute(cfg.dpo.reference_model),
                                                                     "dpo.reference_model"),
                                     "reference_dir": absolute(cfg.dpo.reference_dir)})
    scaling = cfg.scaling.model_copy(update={"deepspeed_config": absolute(cfg.scaling.deepspeed_config)})
    return cfg.model_copy(update={**updates, "model": model, "loss": loss, "dpo": dpo,
                                  "scaling": scaling})


def loads_teacher_model(cfg: TrainConfig) -> bool:
    """Whether the workers load `loss.teacher_model` (trainer.recipes.sad.load_teacher)."""
    return cfg.recipe == "sad" and cfg.loss.teacher == "online" and cfg.loss.objective != "sft"


def check_deepspeed_config(cfg: TrainConfig) -> None:
    """The DeepSpeed JSON read here, before Ray starts: a bad one is one line naming
    scaling.deepspeed_config (a ValueError), not a worker failure after Ray's start."""
    if cfg.scaling.strategy == "deepspeed":
        from trainer.engines import deepspeed_json  # torch: the recipe imports it anyway

        deepspeed_json(cfg.scaling.deepspeed_config)


def failure_cause(exc: BaseException) -> str:
    """The first worker's error in one line: Ray's own text is a truncated snippet that ends
    in retry advice, so the cause is taken from the failure object and its first line kept
    (`OSError: ZSTD decompression failed: Data corruption detected`). A data stage's error
    reaches here as a task error whose `cause` is the stage's own exception (Ray Data raises
    it unwrapped, `original_map_errors`), so a DataError arrives with its shard and row; a
    lasting failure (lasting_kind) is its message alone (the caller names its kind)."""
    error = root_error(exc)
    first = (str(error).strip().splitlines() or [""])[0][:300]
    return first if lasting_kind(error) else f"{type(error).__name__}: {first}"


def lasting_failure(exc: BaseException) -> str | None:
    """"bad data", "diverged" or "bad checkpoint" when the failure behind `exc` would recur on
    a rerun or a restart (the same rows; the same rate from the same checkpoint; the same
    weights), else None (a lost worker, an OOM, a corrupt read: a rerun resumes past it)."""
    return lasting_kind(root_error(exc))


def lasting_kind(error: BaseException) -> str | None:
    from trainer.checkpoint_check import CheckpointError
    from trainer.engines import TrainingDiverged  # torch: imported once a fit has failed

    if isinstance(error, DataError):
        return "bad data"
    if isinstance(error, CheckpointError):  # raised in a worker: weights not finite (student)
        return "bad checkpoint"
    return "diverged" if isinstance(error, TrainingDiverged) else None


def root_error(exc: BaseException) -> BaseException:
    """The error behind `exc`: the first worker's failure, then down the `cause` (Ray's task
    errors) / `__cause__` / `__context__` chain: its last lasting failure (lasting_kind; a
    `RayTaskError(DataError)` is one too, with Ray's traceback as text), else the failure's
    own cause (an error raised while handling another is the one to show, not the one it
    replaced)."""
    failures = getattr(exc, "worker_failures", None) or {}
    first = failures[min(failures)] if failures else getattr(exc, "controller_failure", None) or exc
    chain: list[BaseException] = []
    error: Any = first
    while isinstance(error, BaseException) and all(error is not e for e in chain):
        chain.append(error)
        error = getattr(error, "cause", None) or error.__cause__ or error.__context__
    lasting = [e for e in chain if lasting_kind(e)]
    return lasting[-1] if lasting else getattr(first, "cause", None) or first


def job_env_vars() -> dict[str, str]:
    """Environment of the fit's Ray job (workers, Ray Data's actors). Ray Data's usage
    collection is off unless the user set RAY_DATA_USAGE_DISABLED: its driver thread queries a
    Prometheus on localhost:9090 every 10 s (a cluster of ours runs none), and at interpreter
    exit that daemon thread can print a connection-refused traceback (seen at the end of a CI
    run). Set here for this process too, which executes Ray Data's plans."""
    os.environ.setdefault("RAY_DATA_USAGE_DISABLED", "1")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                        os.environ.get("PYTHONPATH")])),
            "TOKENIZERS_PARALLELISM": "false",
            "RAY_DATA_USAGE_DISABLED": os.environ["RAY_DATA_USAGE_DISABLED"]}


def init_ray(address: str | None, worker_tracebacks: bool = False) -> bool:
    """Join `address` / $RAY_ADDRESS, or start a local Ray with the dashboard on (Ray Train's
    placement-group cleanup relies on the State API it serves). True if this process started
    the Ray it is connected to, in this call or before (`trainer loop` starts one for all its
    fits): nothing else scales or joins it, so workers it cannot hold are refused at once
    (trainer.placement). Without an address, ray.init joins a `ray start` head of this host
    if there is one: not started here. The workers' logs are printed without traceback frames
    unless `worker_tracebacks` (trainer.worker_logs)."""
    import ray

    from datagen.pipeline.cluster import check_address, started_here
    from trainer.worker_logs import hide_worker_tracebacks

    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS")
        check_address(address)  # bounded: ray.init alone retried a silent address for minutes
        runtime_env = {"env_vars": job_env_vars()}
        ray.init(address=address, include_dashboard=None if address else True,
                 logging_level=logging.WARNING, runtime_env=runtime_env)
    hide_worker_tracebacks(not worker_tracebacks)
    return started_here()


def parquet_reader_without_actors() -> None:
    """Ray Data 2.60's default Parquet reader (datasource v2) lists files in a 1-CPU task that
    waits for footer-reading actors, each of which needs a free CPU to be placed. With the
    training worker holding the other CPU of a 2-CPU node they never are, and the fit hangs
    (seen in the distillation loop's round-0 fit: ListFiles RUNNING, FooterReader x16
    PENDING_CREATION, for 10 minutes). The v1 reader reads footers inside its read tasks.
    Set on the driver's DataContext before the dataset is built: the dataset carries it to
    the workers that read it."""
    import ray.data

    ray.data.DataContext.get_current().use_datasource_v2 = False


def original_map_errors() -> None:
    """A data stage's exception reaches Ray Train as itself, not as Ray Data's
    `UserCodeException("UDF failed to process a data block.")`: Ray 2.60 chains the original
    with `raise ... from`, and the chain does not survive the pickling from the stage's
    task to the training worker (checked: only the wrapper's text arrives), so a DataError's
    shard and row would be lost. Set on the driver's DataContext, like the reader above."""
    import ray.data

    ray.data.DataContext.get_current().raise_original_map_exception = True


def with_console_progress(cfg: TrainConfig) -> TrainConfig:
    """`run.progress` unset: bars when the driver's stderr is a terminal. Under `ray job
    submit` the driver's stderr is the job's log file, where every redraw of every bar became
    a line (~500 lines for a 2-step fit); decided here, where the console is, and sent to the
    workers as a plain true / false."""
    if cfg.run.progress is not None:
        return cfg
    run = cfg.run.model_copy(update={"progress": sys.stderr.isatty()})
    return cfg.model_copy(update={"run": run})


def data_progress_bars(enabled: bool) -> None:
    """Ray Data's bars (one per stage of the training stream) follow `run.progress` (before,
    they were on even with run.progress false)."""
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = enabled


def ordered_ingest() -> Any:
    """Ray Train's ingest with the stream's order kept: a resumed run skips the micro-batches
    its checkpoint consumed by position, which is only the same batches if the order is the
    same (without it, a resumed run trained a batch of the first leg again in 1 of 2 tries).
    One worker resumes exactly; with several, the streaming split hands blocks to ranks as
    they ask, so each rank skips as many batches as it consumed, not necessarily the same."""
    import copy

    import ray.data
    import ray.train

    options = copy.deepcopy(ray.data.DataContext.get_current().execution_options)
    options.preserve_order = True
    return ray.train.DataConfig(execution_options=options)


def fit(cfg: TrainConfig) -> FitResult:
    """Run (or resume) training as described by `cfg`; blocks until it ends."""
    cfg = absolute_paths(cfg)
    check_deepspeed_config(cfg)
    recipe = load_recipe(cfg.recipe)
    if problem := tokenizer_problem(cfg.tokenizer):
        raise ValueError(problem)
    with run_dir_lock(cfg):
        return _train(cfg, recipe)


def run_dir_lock(cfg: TrainConfig) -> Any:
    """One run at a time in a run directory: a second `trainer fit` (a rerun started while
    the first still trains, a loop and a fit aimed at one place) would interleave checkpoints
    and metrics.jsonl; it is refused naming the holder (datagen's flock, released by the
    kernel when the holder dies, so a killed run never blocks its resume)."""
    from datagen.pipeline.runlock import FileRunLock, LockOwner

    run_dir = Path(cfg.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"run_dir {run_dir} is a file, not a directory")
    digest = hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()[:16]
    return FileRunLock(run_dir, LockOwner.current(digest), kind="trainer")


def _train(cfg: TrainConfig, recipe: Any) -> FitResult:
    import ray.train
    from ray.train.torch import TorchConfig, TorchTrainer

    from trainer.placement import (bounded_worker_start, check_rollout_actors, place_workers,
                                   worker_resources)
    from trainer.retries import StopOnLastingFailure, lasting_failures_unwrapped

    cfg = with_console_progress(cfg)
    started_here = init_ray(cfg.ray_address, cfg.run.worker_tracebacks)
    check_rollout_actors(cfg, started_here)
    place_workers(cfg.scaling, started_here)
    parquet_reader_without_actors()
    original_map_errors()
    data_progress_bars(cfg.run.progress)
    dataset, data_info = recipe.build_dataset(cfg)
    log.info("training data: %s", data_info)
    run_dir = Path(cfg.run_dir)
    scaling = cfg.scaling
    # DeepSpeed on CPU (tests, laptops) needs its CPU accelerator chosen in every worker.
    worker_env = {"DS_ACCELERATOR": "cpu"} if scaling.strategy == "deepspeed" and not scaling.use_gpu else {}
    trainer = TorchTrainer(
        recipe.train_loop_per_worker,
        train_loop_config={"train": cfg.model_dump(mode="json"),
                           **recipe.loop_extras(cfg, dataset)},
        torch_config=TorchConfig(backend="nccl" if scaling.use_gpu else "gloo"),
        scaling_config=ray.train.ScalingConfig(
            num_workers=scaling.num_workers, use_gpu=scaling.use_gpu,
            resources_per_worker=worker_resources(scaling)),
        run_config=ray.train.RunConfig(
            name=run_dir.name, storage_path=str(run_dir.parent),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=cfg.run.keep_checkpoints),
            failure_config=ray.train.FailureConfig(max_failures=cfg.run.max_failures,
                                                   controller_failure_limit=0),
            callbacks=[StopOnLastingFailure()],  # bad data, a divergence: no restart
            worker_runtime_env={"env_vars": worker_env} if worker_env else None),
        # ppo has no dataset: its data are the rollouts it plays in the loop; dpo with an
        # anchor has two (the pairs as "train", the trajectories as "anchor")
        **({"datasets": dataset if isinstance(dataset, dict) else {"train": dataset},
            "dataset_config": ordered_ingest()} if dataset is not None else {}))
    with bounded_worker_start(scaling), lasting_failures_unwrapped():
        result = trainer.fit()
    checkpoint = result.checkpoint.path if result.checkpoint is not None else None
    return FitResult(str(run_dir), checkpoint, dict(result.metrics or {}), data_info)
