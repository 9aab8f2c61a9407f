"""`train_loop_per_worker`: what each Ray Train worker runs (see trainer.loop for the
pieces), plus checkpoint writing and reading.

Checkpoint layout (one directory per report, kept by Ray Train under run_dir):
    config.json, model.safetensors, tokenizer files   Hugging Face format: from_pretrained works
    trainer_state.pt                                  step, data position, optimizer+scheduler
    deepspeed/                                        DeepSpeed's sharded state (strategy deepspeed)
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from trainer.config import TrainConfig
from trainer.curriculum import CurriculumSampler
from trainer.collate import Collate
from trainer.engines import DDPEngine, DeepSpeedEngine, read_deepspeed_config
from trainer.loop import (STATE_FILE, Position, admit, any_rank, batches, build_student,
                          forward_backward, gather_scores, load_teacher, reduce_metrics,
                          round_up)
from trainer.metrics import MetricsLog, RunningAUROC, peak_flops, train_flops_per_token
from trainer.tokens import load_tokenizer, special_ids


def _progress_bar(cfg: TrainConfig, rank: int, start: int):
    if rank != 0 or not cfg.run.progress:
        return None
    from ray.experimental.tqdm_ray import tqdm  # renders on the driver's console

    bar = tqdm(total=cfg.run.max_steps, desc="train", unit="step")
    bar.update(start)  # a resumed run starts where the last one stopped
    return bar


def report_checkpoint(engine: Any, tokenizer: Any, position: Position, metrics: dict,
                      rank: int, deepspeed: bool) -> None:
    """Write a checkpoint in a temporary directory and hand it to Ray Train (which copies it
    into run_dir and keeps the newest `keep_checkpoints`)."""
    import ray.train

    directory = Path(tempfile.mkdtemp(prefix="ckpt-"))
    try:
        engine.save_weights(directory, is_writer=rank == 0)
        engine.save_sharded(directory)
        if rank == 0:
            tokenizer.save(directory)
            torch.save({"position": position.__dict__, "engine": engine.state_dict(),
                        "rng": torch.get_rng_state()}, directory / STATE_FILE)
        writes = rank == 0 or deepspeed  # DeepSpeed ranks each contribute their shards
        checkpoint = ray.train.Checkpoint.from_directory(str(directory)) if writes else None
        ray.train.report(metrics, checkpoint=checkpoint)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _load_state(resume_dir: str | None) -> dict[str, Any] | None:
    if resume_dir is None:
        return None
    return torch.load(Path(resume_dir) / STATE_FILE, map_location="cpu", weights_only=False)


def _setup(cfg: TrainConfig, resume_dir: str | None, device: torch.device):
    """Model, engine, teacher and start position (from the checkpoint when resuming)."""
    tokenizer = load_tokenizer(cfg.tokenizer)
    special = special_ids(tokenizer)
    ds_config = read_deepspeed_config(cfg.scaling.deepspeed_config, cfg.data.batch_size, cfg.optim) \
        if cfg.scaling.strategy == "deepspeed" else None
    model = build_student(cfg, special, round_up(len(tokenizer)), resume_dir, ds_config)
    if cfg.model.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if ds_config is not None:
        engine = DeepSpeedEngine(model, ds_config, cfg.optim, cfg.run.max_steps)
    else:
        engine = DDPEngine(model, cfg.optim, cfg.run.max_steps)
    state = _load_state(resume_dir)
    position = Position(**state["position"]) if state else Position()
    if state:
        engine.load_state_dict(state["engine"])
        if ds_config is not None:
            engine.load_sharded(resume_dir)
    teacher = load_teacher(cfg, device)
    return tokenizer, special, engine, teacher, position


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """Entry point of every worker; `loop_config` = {"train": TrainConfig as JSON,
    "curriculum_quantiles": [...] or None}."""
    import ray.train
    import ray.train.torch

    cfg = TrainConfig.model_validate(loop_config["train"])
    context = ray.train.get_context()
    rank = context.get_world_rank()
    device = ray.train.torch.get_device()
    checkpoint = ray.train.get_checkpoint()
    with checkpoint.as_directory() if checkpoint else contextlib.nullcontext() as resume_dir:
        tokenizer, special, engine, teacher, position = _setup(cfg, resume_dir, device)
    sampler = None
    if loop_config.get("curriculum_quantiles"):
        c = cfg.curriculum
        sampler = CurriculumSampler(loop_config["curriculum_quantiles"], cfg.run.max_steps,
                                    c.start_fraction, c.ramp_fraction, c.schedule)
    collate = Collate(special["pad"], with_topk=cfg.loss.teacher == "topk",
                      pack_to=cfg.data.max_seq_len if cfg.data.packing else None)
    log = MetricsLog(Path(cfg.run_dir) / "metrics.jsonl", enabled=rank == 0)
    peak = peak_flops(device)
    bar = _progress_bar(cfg, rank, position.step)
    running_auroc = RunningAUROC(cfg.run.mch_auroc_window)
    engine.unwrapped.train()
    last = time.perf_counter()
    stream = batches(cfg, collate, position)
    while position.step < cfg.run.max_steps:
        epoch, index, documents = next(stream)
        position.epoch, position.batch_in_epoch = epoch, index + 1
        admitted = 1.0
        if sampler is not None:
            keep = sampler.admit(torch.from_numpy(documents.complexity), position.step).numpy()
            admitted = float(keep.mean())
            documents = admit(documents, keep)
            if any_rank(documents is None, device):  # ranks skip together or DDP would hang
                continue
        batch = {name: value.to(device) for name, value in collate.tensors(documents).items()}
        metrics, scored = forward_backward(cfg, engine, batch, teacher)
        running_auroc.update(*gather_scores(scored))
        lr = engine.lr  # the rate this step uses (step() advances the schedule)
        metrics["grad_norm"] = engine.step()
        position.step += 1
        metrics = reduce_metrics(metrics, device)
        flops_per_token = train_flops_per_token(
            engine.unwrapped.config, batch["input_ids"].shape[1],
            teacher.config if teacher is not None else None)
        now = time.perf_counter()
        elapsed, last = now - last, now
        record = _record(metrics, position, lr, elapsed, admitted, flops_per_token, peak,
                         context.get_world_size())
        record["mch_auroc"] = _rounded(running_auroc.value())
        log.write(record)
        if bar is not None:
            bar.update(1)
            bar.set_description(f"train loss {record['loss']:.3f}")
        final = position.step >= cfg.run.max_steps
        if final or (cfg.run.save_every and position.step % cfg.run.save_every == 0):
            report_checkpoint(engine, tokenizer, position, record, rank,
                              cfg.scaling.strategy == "deepspeed")
    if bar is not None:
        bar.close()


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _record(metrics: dict[str, float], position: Position, lr: float, elapsed: float,
            admitted: float, flops_per_token: float, peak: float | None, workers: int,
            ) -> dict[str, Any]:
    tokens_per_s = metrics["tokens"] / max(elapsed, 1e-9)
    record = {"step": position.step, "epoch": position.epoch,
              "loss": round(metrics["loss"], 6), "lm_loss": round(metrics["lm_loss"], 6),
              "reason": round(metrics["reason"], 6), "act": round(metrics["act"], 6),
              "mch": round(metrics["mch"], 6),
              "mch_acc": metrics["mch_correct"] / metrics["mch_steps"] if metrics["mch_steps"] else None,
              "mch_steps": int(metrics["mch_steps"]), "mch_negatives": int(metrics["mch_negatives"]),
              "tokens": int(metrics["tokens"]), "tokens_per_s": round(tokens_per_s, 1),
              "lm_tokens_per_s": round(metrics["lm_tokens"] / max(elapsed, 1e-9), 1),
              "padding": round(1 - metrics["tokens"] / max(metrics["slots"], 1), 4),
              "step_time": round(elapsed, 4), "lr": lr, "grad_norm": round(metrics["grad_norm"], 4),
              "mfu": round(tokens_per_s * flops_per_token / (peak * workers), 4) if peak else None,
              "pcgrad_conflict": bool(metrics["pcgrad_conflict"])}
    if admitted < 1.0:
        record["curriculum_admitted"] = round(admitted, 3)
    return record

