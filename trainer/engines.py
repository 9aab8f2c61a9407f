"""Two ways to run a training step: DDP (CPU/gloo or GPU/NCCL) and DeepSpeed ZeRO.

Both expose the same small surface, so the training loop reads the same for a laptop and a
32B run: `module` (call it for the forward), `unwrapped` (the AgentQwen2ForCausalLM),
`backward(loss)`, `step() -> grad_norm`, `lr`, `state_dict()/load_state_dict()` for the
optimizer+scheduler, and `save_weights(dir)` in Hugging Face format.

`step()` raises TrainingDiverged when the gradient norm is inf or nan (a learning rate too
high, a bf16 overflow, a broken loss): the run stops at the step that diverged instead of
training on NaN and checkpointing NaN weights.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer.config import OptimConfig


class TrainingDiverged(RuntimeError):
    """A step's gradient norm was inf or nan. A rerun from the newest checkpoint meets the same
    data at the same rate (a resume keeps the run's learning rate), so it is reported without
    the rerun advice a lost worker gets (trainer.fit.lasting_failure), and Ray Train does not
    restart the workers for it (trainer.retries). One string argument: the exception travels
    from a Ray worker to the driver by pickling."""


def diverged(step: int, norm: float, applied: bool = False) -> TrainingDiverged:
    """The error of optimizer step `step` (1-based, as metrics.jsonl counts) whose gradient
    norm is `norm`; `applied`: DeepSpeed stepped anyway (see DeepSpeedEngine.step)."""
    value = f"{norm:g}" if math.isfinite(norm) and norm >= 0 else (
        "nan" if math.isnan(norm) else "inf" if norm > 0 else "inf or nan")
    update = "DeepSpeed applied the update" if applied else "the update was not applied"
    return TrainingDiverged(
        f"step {step}: gradient norm {value}, {update}; lower optim.lr or check the data. The "
        f"newest checkpoint holds the weights from before it: start a new run_dir from it "
        f"(model.init_from=<this run_dir>), as a resume keeps the old learning rate")


def lr_lambda(warmup_steps: int, max_steps: int, min_ratio: float):
    """Linear warmup, then cosine decay to `min_ratio` of the peak at `max_steps`."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(warmup_steps, 1)
        progress = min((step - warmup_steps) / max(max_steps - warmup_steps, 1), 1.0)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return factor


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def average_gradients(params: list[torch.nn.Parameter]) -> None:
    """Every parameter's gradient averaged over the ranks (zeros where a rank has none), for
    steps whose backward passes ran without DDP's hooks (PCGrad, the DPO anchor)."""
    if world_size() <= 1:
        return
    for param in params:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        dist.all_reduce(param.grad)
        param.grad /= world_size()


class DDPEngine:
    """torch AdamW + LambdaLR around a model that Ray Train's prepare_model wrapped in DDP
    (or left alone on one worker)."""

    def __init__(self, model: nn.Module, optim: OptimConfig, max_steps: int,
                 find_unused_parameters: bool = True, wrap: bool = True) -> None:
        self.unwrapped = self.module = model
        if wrap:  # wrap=False: one process without Ray Train (benchmarks, GPU self-checks)
            import ray.train.torch

            self.module = ray.train.torch.prepare_model(
                model, parallel_strategy_kwargs={"find_unused_parameters": find_unused_parameters})
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=optim.lr, betas=optim.betas,
                                           weight_decay=optim.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(optim.warmup_steps, max_steps, optim.min_lr_ratio))
        self.grad_clip = optim.grad_clip

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def no_sync(self):
        """Context without DDP's gradient hooks (PCGrad reduces gradients itself)."""
        import contextlib

        return self.module.no_sync() if hasattr(self.module, "no_sync") else contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        """Clip, then AdamW; a non-finite norm drops the gradients and raises TrainingDiverged
        before anything moves (weights, Adam's moments, the schedule).

        Every rank raises at the same step, so none waits in a collective for a rank that
        stopped: the norm is taken on gradients that are already the same on every rank -
        DDP's backward hooks all-reduce them, and the steps that run backward without the
        hooks (PCGrad in recipes/sad.py, the DPO anchor in recipes/dpo.py) call
        average_gradients before this. A nan or inf on one rank survives the mean."""
        params = [p for p in self.unwrapped.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip if self.grad_clip > 0 else float("inf"))
        if not math.isfinite(float(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            # the scheduler has stepped once per applied step: this one is its count + 1
            raise diverged(self.scheduler.last_epoch + 1, float(norm))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        # The loaded rate is the old run's next one; a resumed run with another max_steps
        # continues on its own schedule from the step it stands at.
        step = self.scheduler.last_epoch
        for group, base, factor in zip(self.optimizer.param_groups, self.scheduler.base_lrs,
                                       self.scheduler.lr_lambdas):
            group["lr"] = base * factor(step)

    def save_weights(self, directory: str | Path, is_writer: bool) -> None:
        if is_writer:
            self.unwrapped.save_pretrained(str(directory))

    def save_sharded(self, directory: str | Path) -> None:
        """DDP keeps full optimizer state on every rank: rank 0's copy is the checkpoint."""

    def load_sharded(self, directory: str | Path) -> None:
        """Nothing sharded to load (see save_sharded)."""


# The most bytes a DeepSpeed JSON may have (a real one is under 2 KiB).
DEEPSPEED_JSON_BYTES = 1 << 20


def deepspeed_json(path: str) -> dict[str, Any]:
    """The JSON object at `path` (scaling.deepspeed_config), read bounded: a missing file, a
    FIFO, a device, a huge file or anything but a JSON object is one ValueError naming the
    field. Called on the driver before Ray starts (fit.check_deepspeed_config) and again in
    each worker: a plain read there hung a fit on a FIFO forever, and a missing file failed
    after 65 s of worker start with advice to rerun."""
    from datagen.bounded_read import read_bounded

    field = "scaling.deepspeed_config"
    try:
        config = json.loads(read_bounded(path, DEEPSPEED_JSON_BYTES))
    except OSError as exc:
        problem = f"{path}: {exc.strerror.lower()}" if exc.strerror else str(exc)
        raise ValueError(f"{field}: {problem}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{field}: {path} is not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{field}: {path} holds a JSON {type(config).__name__}, not an object")
    return config


def read_deepspeed_config(path: str, micro_batch: int, optim: OptimConfig) -> dict[str, Any]:
    """The DeepSpeed JSON with the run's batch size, optimizer and clipping filled in."""
    config = deepspeed_json(path)
    config["train_micro_batch_size_per_gpu"] = micro_batch
    # One optimizer step per loop step, so run.max_steps, the schedule and the checkpoints
    # count the same thing under DDP and DeepSpeed; scale batch size with workers instead.
    config["gradient_accumulation_steps"] = 1
    config.pop("train_batch_size", None)  # derived by DeepSpeed from the two above
    config["gradient_clipping"] = optim.grad_clip
    # The optimizer is torch's AdamW handed to DeepSpeed, not an "optimizer" entry here:
    # DeepSpeed's own Adam kernels are JIT-compiled on first use (minutes on a fresh node).
    config.pop("optimizer", None)
    return config


def skip_cpu_shm_comm(ranks: int) -> None:
    """Keep DeepSpeed's CPU accelerator from JIT-compiling its shared-memory allreduce
    (`deepspeed_shm_comm`: 30-55 s of C++ on 2 cores, again for every new venv path) where it
    has no peer to reduce with: one rank on CPU (the CPU tests and self-check). DeepSpeed then
    keeps torch.distributed (gloo), as it does wherever the op cannot build. More ranks, or
    a GPU, are left to DeepSpeed. Call before the first DeepSpeed call of the process."""
    if ranks != 1:
        return
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() != "cpu":
        return
    import deepspeed.ops

    compatible = getattr(deepspeed.ops, "__compatible_ops__", None)  # probed once, then kept
    if isinstance(compatible, dict):
        compatible["deepspeed_shm_comm"] = False


class DeepSpeedEngine:
    """DeepSpeed's engine (ZeRO stage and bf16 from the JSON); checkpoints both as Hugging
    Face weights (gathered to rank 0 under ZeRO-3) and as DeepSpeed's sharded state."""

    def __init__(self, model: nn.Module, ds_config: dict[str, Any], optim: OptimConfig,
                 max_steps: int) -> None:
        import deepspeed

        self.unwrapped = model
        schedule = lr_lambda(optim.warmup_steps, max_steps, optim.min_lr_ratio)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                      lr=optim.lr, betas=optim.betas,
                                      weight_decay=optim.weight_decay)
        self.module, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, config=ds_config,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule))
        self.zero_stage = ds_config.get("zero_optimization", {}).get("stage", 0)

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def no_sync(self):
        raise NotImplementedError("PCGrad is not supported with DeepSpeed")

    def backward(self, loss: torch.Tensor) -> None:
        self.module.backward(loss)

    def step(self) -> float:
        """DeepSpeed's step, then TrainingDiverged if its gradient norm was inf or nan.

        Unlike DDPEngine, the check comes after the step: DeepSpeed clips and steps inside
        `module.step()` on gradients partitioned across ranks, and reports the norm after.
        DeepSpeed (0.19, ZeRO 1-3) itself skips a step whose norm is not finite, in float32
        and in bf16 unless `bf16.check_grad_overflow` is false, and reports the norm as inf;
        with that check off it applies the step and reports inf (or -1, its mark of a
        non-finite norm), and the weights may be NaN. Either way this raises before the
        step's checkpoint, so no weights of it are saved. The norm is the same on every rank
        (reduced inside DeepSpeed), so all ranks raise together. fp16 is left alone: its
        dynamic loss scaler skips overflowing steps by design while it searches a scale (and
        stops the run itself at its minimum scale)."""
        step = self.scheduler.last_epoch + 1
        self.module.step()
        reported = self.module.get_global_grad_norm()  # None: ZeRO-1/2 computed none
        norm = float(reported) if reported is not None else float("nan")
        applied = self.module.was_step_applied()  # False only on an overflow (1 micro-batch/step)
        finite = reported is None or (math.isfinite(norm) and norm >= 0)
        if (not applied or not finite) and not self.module.fp16_enabled():
            # a skipped step's norm may be stale or absent: -1 reads "inf or nan"
            raise diverged(step, norm if not finite else -1.0, applied=applied)
        return norm

    def state_dict(self) -> dict[str, Any]:
        return {}  # optimizer and scheduler live in DeepSpeed's own checkpoint

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def save_weights(self, directory: str | Path, is_writer: bool) -> None:
        if self.zero_stage == 3:  # collective: every rank takes part in the gather
            state = self.module._zero3_consolidated_16bit_state_dict()
        else:
            state = self.module.module.state_dict()
        if is_writer:
            self.unwrapped.save_pretrained(str(directory), state_dict=state)

    def save_sharded(self, directory: str | Path) -> None:
        self.module.save_checkpoint(str(Path(directory) / "deepspeed"), tag="state")

    def load_sharded(self, directory: str | Path) -> None:
        self.module.load_checkpoint(str(Path(directory) / "deepspeed"), tag="state")
