"""Training in one process without a Ray cluster, for benchmarks that compare recipes per
CPU-second: the library's own training step (`trainer.recipes.sad.forward_backward`, the student
and teacher builders, the lr schedule of `trainer.engines`) on the micro-batches the data
stream composes (`trainer.data.training_batches`, called in-process), so a figure measured
here is what `python -m trainer fit` computes per step, without Ray Data's reader process
and Ray Train's worker around it (which `fit` adds: ~10-20 s to start, and a CPU for the
reader).

    rows = composed_rows(data_settings(cfg)).take(steps)  # the stream, in order, as dicts
    result = train_locally(cfg, rows, out_dir)           # HF checkpoint + tokenizer in out_dir

CPU time is this process's (`time.process_time`): the training steps only; composing the
rows is timed apart (`ComposedRows.cpu_seconds`).
"""

from __future__ import annotations

import glob
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from trainer.collate import Collate
from trainer.config import TrainConfig
from trainer.data import DataSettings, training_batches
from trainer.contract import TRAJECTORY_COLUMNS
from trainer.engines import DDPEngine
from trainer.recipes.sad import data_settings, forward_backward, load_teacher
from trainer.student import build_student, round_up
from trainer.tokens import load_tokenizer, special_ids


class ComposedRows:
    """The stream's epoch: composed micro-batches as the training loop gets them, composed
    shard by shard on demand (an arm of a few hundred steps reads one or two of the demo's
    six shards, not all of them)."""

    def __init__(self, settings: DataSettings, files: list[str]) -> None:
        self.settings, self.files = settings, files
        self.epoch: list[dict[str, list]] = []
        self.files_read = 0
        self.cpu_seconds = 0.0        # reading, tokenising and composing them

    def _compose_until(self, count: int) -> None:
        while len(self.epoch) < count and self.files_read < len(self.files):
            started = time.process_time()
            self.epoch.extend(_epoch_rows(self.settings, [self.files[self.files_read]]))
            self.files_read += 1
            self.cpu_seconds += time.process_time() - started
        if not self.epoch:
            raise ValueError("the shards yield no micro-batch (no REASON/ACT within max_seq_len)")

    def take(self, steps: int) -> list[dict[str, list]]:
        """The first `steps` micro-batches, epochs repeating (the stream's fixed seed gives
        the same batches every epoch)."""
        self._compose_until(steps)
        return [self.epoch[i % len(self.epoch)] for i in range(steps)]

    def epochs(self, steps: int) -> float:
        """Passes over the data `steps` micro-batches make (estimated from the shards read
        when not all were needed)."""
        self._compose_until(1)
        return steps / (len(self.epoch) * len(self.files) / self.files_read)

    def spread(self, count: int) -> list[dict[str, list]]:
        """`count` micro-batches evenly spread over those composed so far (a cost sample:
        batches are length-bucketed, so the first few can be all short or all long)."""
        self._compose_until(count)
        return [self.epoch[i * len(self.epoch) // count] for i in range(count)]


def _epoch_rows(settings: DataSettings, files: list[str]) -> list[dict[str, list]]:
    pool = settings.batch_size * settings.bucket_pool_batches
    rows: list[dict[str, list]] = []
    for path in files:
        table = pq.read_table(path, columns=list(TRAJECTORY_COLUMNS))
        table = table.append_column("path", pa.array([path] * table.num_rows))
        for start in range(0, table.num_rows, pool):
            batches = training_batches(table.slice(start, pool), settings)
            rows.extend({name: [value] for name, value in batch.items()}
                        for batch in batches.to_pylist())
    return rows


def composed_rows(settings: DataSettings) -> ComposedRows:
    """The stream's epoch, composed lazily: shards in an order drawn from the seed (Ray
    Data's `randomize_block_order`, one block per shard here), pools of consecutive rows."""
    files = sorted(glob.glob(f"{settings.shards}/trajectories/part-*.parquet"))
    if not files:
        raise FileNotFoundError(f"no trajectory shards under {settings.shards}/trajectories")
    order = np.random.default_rng(settings.seed).permutation(len(files))
    return ComposedRows(settings, [files[i] for i in order])


@dataclass
class LocalRun:
    checkpoint: str
    steps: int
    cpu_seconds: float
    wall_seconds: float
    tokens: int                       # real tokens of all rows (LM documents + negatives)
    lm_tokens: int                    # tokens of LM documents
    log: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        tail = self.log[-max(1, len(self.log) // 10):] or [{"lm_loss": float("nan")}]
        return {"steps": self.steps, "cpu_s": round(self.cpu_seconds, 1),
                "wall_s": round(self.wall_seconds, 1),
                "tokens_per_cpu_s": round(self.tokens / max(self.cpu_seconds, 1e-9), 1),
                "lm_tokens_per_cpu_s": round(self.lm_tokens / max(self.cpu_seconds, 1e-9), 1),
                "final_lm_loss": round(float(np.mean([r["lm_loss"] for r in tail])), 4)}


def cpu_seconds_per_step(cfg: TrainConfig, rows: list[dict[str, list]]) -> float:
    """Mean CPU seconds of a training step over `rows` (a throwaway model; the first step,
    which allocates, is left out)."""
    probe = train_locally(cfg.model_copy(update={"run": cfg.run.model_copy(
        update={"max_steps": len(rows) + 1})}), [rows[0]] + rows, None)
    return float(np.mean([record["cpu_s"] for record in probe.log[1:]]))


def steps_for_budget(cfg: TrainConfig, rows: list[dict[str, list]], cpu_budget_s: float,
                     ) -> int:
    """Steps that fill `cpu_budget_s` CPU seconds at this recipe's measured step cost."""
    return max(1, math.floor(cpu_budget_s / cpu_seconds_per_step(cfg, rows)))


def train_locally(cfg: TrainConfig, rows: list[dict[str, list]], out_dir: str | Path | None,
                  max_cpu_s: float | None = None, deadline: float | None = None) -> LocalRun:
    """`cfg.run.max_steps` steps over `rows` (cycled) from a fresh student, or fewer when
    the CPU time passes `max_cpu_s` or the clock passes `deadline` (`time.time()`; guards
    for unattended runs on a shared machine: the schedule is then cut short); the checkpoint (Hugging Face weights + tokenizer + metrics.jsonl) goes to
    `out_dir` unless None."""
    tokenizer = load_tokenizer(cfg.tokenizer)
    special = special_ids(tokenizer)
    model = build_student(cfg, special, round_up(len(tokenizer)), None, None)
    engine = DDPEngine(model.train(), cfg.optim, cfg.run.max_steps, wrap=False)
    teacher = load_teacher(cfg, torch.device("cpu"))
    collate = Collate(special["pad"], with_topk=cfg.loss.teacher == "topk",
                      pack_to=cfg.data.max_seq_len if cfg.data.packing else None)
    run = LocalRun(str(out_dir) if out_dir else "", 0, 0.0, 0.0, 0, 0)
    started, started_cpu = time.perf_counter(), time.process_time()
    for step in range(cfg.run.max_steps):
        step_cpu = time.process_time()
        batch = collate.tensors(collate.documents(rows[step % len(rows)]))
        lr = engine.lr
        metrics, _ = forward_backward(cfg, engine, batch, teacher)
        grad_norm = engine.step()
        run.tokens += int(metrics["tokens"])
        run.lm_tokens += int(metrics["lm_tokens"])
        run.log.append({"step": step + 1, "cpu_s": round(time.process_time() - step_cpu, 4),
                        "cpu_total_s": round(time.process_time() - started_cpu, 2),
                        "lm_loss": round(metrics["lm_loss"], 5),
                        "reason": round(metrics["reason"], 5), "act": round(metrics["act"], 5),
                        "mch": round(metrics["mch"], 5), "tokens": int(metrics["tokens"]),
                        "lr": lr, "grad_norm": round(grad_norm, 4)})
        if max_cpu_s is not None and time.process_time() - started_cpu > max_cpu_s:
            break
        if deadline is not None and time.time() > deadline:
            break
    run.steps = len(run.log)
    run.cpu_seconds = time.process_time() - started_cpu
    run.wall_seconds = time.perf_counter() - started
    if out_dir is not None:
        save_checkpoint(model, cfg, run, Path(out_dir))
    return run


def save_checkpoint(model: torch.nn.Module, cfg: TrainConfig, run: LocalRun, out: Path) -> None:
    """Hugging Face weights + tokenizer (what `trainer eval` and `model.init_from` read),
    the config that made them and the per-step log."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    load_tokenizer(cfg.tokenizer).save(out)
    (out / "train_config.json").write_text(cfg.model_dump_json(indent=2))
    with open(out / "metrics.jsonl", "w") as handle:
        for record in run.log:
            handle.write(json.dumps(record) + "\n")
