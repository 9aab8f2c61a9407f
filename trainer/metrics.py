"""Throughput accounting: FLOPs per token, peak FLOPs per device, MFU, and the per-step
`metrics.jsonl` writer.

MFU = achieved model FLOPs / peak. Model FLOPs per trained token follow PaLM's accounting:
6 x (matmul parameters) + 12 x layers x hidden x sequence length (attention scores and
values), plus 2 x teacher matmul parameters for an online teacher's forward pass. Peak
numbers are dense bf16 tensor-core FLOPs from the vendors' data sheets.
"""

from __future__ import annotations

import json
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch

PEAK_BF16_FLOPS = {  # dense, no sparsity; longest key that matches the device name wins
    "H200": 989e12, "H100 PCIe": 756e12, "H100 NVL": 835e12, "H100": 989e12,
    "GH200": 989e12, "B200": 2250e12, "A100": 312e12, "A800": 312e12, "L40S": 362e12,
    "L40": 181e12, "L4": 121e12, "A10G": 70e12, "A10": 125e12, "RTX 4090": 165e12,
}


def peak_flops(device: torch.device) -> float | None:
    """Peak bf16 FLOP/s of `device`, None on CPU or an unknown GPU (then no MFU)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    matches = [key for key in PEAK_BF16_FLOPS if key in name]
    return PEAK_BF16_FLOPS[max(matches, key=len)] if matches else None


def matmul_params(config: Any) -> int:
    """Parameters that take part in matrix multiplies per token (embeddings excluded, the
    output head included)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    attention = hidden * head_dim * (2 * config.num_attention_heads + 2 * config.num_key_value_heads)
    mlp = 3 * hidden * config.intermediate_size
    return layers * (attention + mlp) + config.vocab_size * hidden


def train_flops_per_token(config: Any, seq_len: int, teacher_config: Any | None = None) -> float:
    """Forward + backward FLOPs per trained token (see module docstring)."""
    flops = 6 * matmul_params(config) + 12 * config.num_hidden_layers * config.hidden_size * seq_len
    if teacher_config is not None:
        flops += 2 * matmul_params(teacher_config) + \
            4 * teacher_config.num_hidden_layers * teacher_config.hidden_size * seq_len
    return float(flops)


class MetricsLog:
    """Appends one JSON object per step to `metrics.jsonl` (rank 0 only)."""

    def __init__(self, path: str | Path, enabled: bool) -> None:
        self.path, self.enabled = Path(path), enabled
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def resume_at(self, step: int) -> int:
        """Drop records of steps after `step` (the checkpoint a resumed run starts from): a
        killed run logged them, but their updates died with it and the resumed run trains
        them again, so each step keeps one record. Returns how many were dropped."""
        if not self.enabled or not self.path.exists():
            return 0
        lines = self.path.read_text().splitlines()
        kept = [line for line in lines if line.strip() and json.loads(line).get("step", 0) <= step]
        if len(kept) < len(lines):
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text("".join(line + "\n" for line in kept))
            temporary.replace(self.path)
        return len(lines) - len(kept)

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"time": round(time.time(), 3), **record}
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")


def rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def progress_bar(total: int, start: int, enabled: bool):
    """A tqdm bar on the driver's console (rank 0), or None."""
    if not enabled:
        return None
    from ray.experimental.tqdm_ray import tqdm  # renders on the driver's console

    bar = tqdm(total=total, desc="train", unit="step")
    bar.update(start)  # a resumed run starts where the last one stopped
    return bar


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl (for tests, notebooks and benchmarks)."""
    lines = Path(path).read_text().splitlines() if Path(path).exists() else []
    return [json.loads(line) for line in lines if line.strip()]


class RunningAUROC:
    """AUROC of the MCH's scores over the last `window` labelled steps (label 1 = correct
    step, 0 = wrong one). Each step's scores are taken in the forward pass before the
    optimizer trains on that batch, so in the first epoch this is a progressive held-out
    estimate; `None` until both classes are in the window."""

    def __init__(self, window: int) -> None:
        self.scores: deque[float] = deque(maxlen=window)
        self.labels: deque[int] = deque(maxlen=window)

    def update(self, scores: list[float], labels: list[int]) -> None:
        self.scores.extend(scores)
        self.labels.extend(labels)

    def value(self) -> float | None:
        return auroc(list(self.scores), list(self.labels))


def auroc(scores: list[float], labels: list[int]) -> float | None:
    """Area under the ROC curve (Mann-Whitney U with mid-ranks for ties); None without both
    classes."""
    import numpy as np

    values, truth = np.asarray(scores, dtype=np.float64), np.asarray(labels) == 1
    positives, negatives = int(truth.sum()), int((~truth).sum())
    if positives == 0 or negatives == 0:
        return None
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]  # 1-based mid-ranks
    return float((ranks[truth].sum() - positives * (positives + 1) / 2) / (positives * negatives))
