"""Checkpoints and resume, shared by every recipe.

Checkpoint layout (one directory per report, kept by Ray Train under run_dir):
    config.json, model.safetensors, tokenizer files   Hugging Face format: from_pretrained works
    trainer_state.pt                                  step, data position, optimizer+scheduler
    training.json                                     the data it was trained on (lineage.py)
    deepspeed/                                        DeepSpeed's sharded state (strategy deepspeed)

A rerun into the same run_dir gets the latest checkpoint from `ray.train.get_checkpoint()`
and continues: step count, optimizer and scheduler state, and the position in the data
stream (`resumed_stream` skips the micro-batches the checkpointed steps consumed), so no
micro-batch is trained twice within an epoch. A worker group that Ray Train restarts after a
worker died (`run.max_failures`) resumes the same way, from the latest checkpoint.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import torch

from trainer.lineage import lineage, write_lineage

STATE_FILE = "trainer_state.pt"
Item = TypeVar("Item")


@dataclass
class Position:
    """Where training stands: optimizer steps done and the place in the data stream."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    anchor_epoch: int = 0            # a second stream's place (the DPO recipe's anchor)
    anchor_batch_in_epoch: int = 0


@contextlib.contextmanager
def resume_directory() -> Iterator[str | None]:
    """The latest checkpoint of this run as a local directory, or None on a fresh start."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    with checkpoint.as_directory() if checkpoint else contextlib.nullcontext() as directory:
        yield directory


def load_state(resume_dir: str | None) -> dict[str, Any] | None:
    if resume_dir is None:
        return None
    return torch.load(Path(resume_dir) / STATE_FILE, map_location="cpu", weights_only=False)


def report_checkpoint(engine: Any, tokenizer: Any, position: Position, metrics: dict,
                      rank: int, deepspeed: bool, record: dict[str, Any] | None = None) -> None:
    """Write a checkpoint in a temporary directory and hand it to Ray Train (which copies it
    into run_dir and keeps the newest `keep_checkpoints`); `record` is its lineage."""
    import ray.train

    directory = Path(tempfile.mkdtemp(prefix="ckpt-"))
    try:
        engine.save_weights(directory, is_writer=rank == 0)
        engine.save_sharded(directory)
        if rank == 0:
            tokenizer.save(directory)
            torch.save({"position": position.__dict__, "engine": engine.state_dict(),
                        "rng": torch.get_rng_state()}, directory / STATE_FILE)
            if record is not None:
                write_lineage(directory, record, position.step)
        writes = rank == 0 or deepspeed  # DeepSpeed ranks each contribute their shards
        checkpoint = ray.train.Checkpoint.from_directory(str(directory)) if writes else None
        ray.train.report(metrics, checkpoint=checkpoint)
        # The controller takes a report from the worker's one-slot queue when it polls (every
        # 2 s); until then the checkpoint is on storage but not registered, and a worker
        # killed meanwhile restarted from the one before (seen: from step 0, killed at step 5
        # a second after step 4's checkpoint). A second report returns once the first is taken.
        ray.train.report(metrics)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class StepReports:
    """What a recipe's loop does after each optimizer step: rank 0 appends the record to
    metrics.jsonl and moves the progress bar; every `run.save_every` steps and at the end
    all ranks report a checkpoint (trainer state = `position`)."""

    def __init__(self, cfg: Any, rank: int, student: Any, label: str) -> None:
        from trainer.metrics import MetricsLog, progress_bar

        self.cfg, self.rank, self.student, self.label = cfg, rank, student, label
        self.lineage = lineage(cfg) if rank == 0 else None
        self.log = MetricsLog(Path(cfg.run_dir) / "metrics.jsonl", enabled=rank == 0)
        self.log.resume_at(student.position.step)
        self.bar = progress_bar(cfg.run.max_steps, student.position.step,
                                rank == 0 and cfg.run.progress)

    def step(self, record: dict[str, Any]) -> None:
        position = self.student.position
        self.log.write(record)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_description(f"{self.label} loss {record['loss']:.3f}")
        run = self.cfg.run
        if position.step >= run.max_steps or (run.save_every and position.step % run.save_every == 0):
            report_checkpoint(self.student.engine, self.student.tokenizer, position, record,
                              self.rank, self.student.deepspeed, self.lineage)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def resumed_stream(start_epoch: int, start_batch: int, convert: Callable[[dict], Item],
                   empty_message: str, dataset: str = "train",
                   ) -> Iterator[tuple[int, int, Item]]:
    """(epoch, batch index, converted stream row) forever from this worker's shard of
    `dataset`, one stream row per micro-batch, skipping what a resumed run already consumed
    (the first `start_batch` rows of epoch `start_epoch`)."""
    import ray.train

    shard = ray.train.get_dataset_shard(dataset)
    epoch = start_epoch
    while True:
        seen = 0
        for index, row in enumerate(shard.iter_batches(batch_size=1, batch_format="numpy",
                                                       prefetch_batches=2)):
            seen += 1
            if epoch == start_epoch and index < start_batch:
                continue
            yield epoch, index, convert(row)
        if seen == 0:
            raise RuntimeError(empty_message)
        epoch += 1
