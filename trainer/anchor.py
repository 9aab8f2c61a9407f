"""The DPO recipe's trajectory anchor (`dpo.anchor_weight`): a SAD loss on a second stream of
trajectory micro-batches, added to every preference step (the PPO-ptx idea: keep the
pretraining - here the distillation - objective beside the preference one).

Why: from a student that already calls tools, DPO on safety pairs alone cost it the agent
(held-out next-call exact 0.53 -> 0.15 at the shipped lr, README "DPO before/after,
measured"): nothing in the pair loss holds the trajectories' likelihood up.

Per DPO step: the pair micro-batch's backward, then `anchor_weight` x the SAD loss (as recipe
'sad' computes it from the `loss` section, MCH on `data.mch_rows` negatives included) of the
next micro-batch of the "anchor" stream (trainer.data, read as recipe 'sad' reads the `data`
section), then one optimizer step. Both backward passes run without DDP's hooks and the
gradients are averaged over the ranks once. The anchor stream's place is checkpointed in the
position's anchor_* fields, so a resumed run neither repeats nor skips anchor batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch

from trainer.checkpoints import Position, resumed_stream
from trainer.collate import Collate, Documents
from trainer.config import TrainConfig
from trainer.distributed import reduce_metrics
from trainer.metrics import train_flops_per_token
from trainer.recipes.sad import SUMMED, forward_backward, load_teacher


@dataclass
class Anchor:
    """The worker's side: the stream, its collate function and the SAD teacher (online
    teachers run their forward here too)."""

    cfg: TrainConfig
    collate: Collate
    teacher: Any
    stream: Iterator[tuple[int, int, Documents]]

    @classmethod
    def start(cls, cfg: TrainConfig, pad_id: int, position: Position,
              device: torch.device) -> "Anchor":
        collate = Collate(pad_id, with_topk=cfg.loss.teacher == "topk",
                          pack_to=cfg.data.max_seq_len if cfg.data.packing else None)
        stream = resumed_stream(position.anchor_epoch, position.anchor_batch_in_epoch,
                                collate.documents,
                                "the anchor stream yields no batch: no trajectory has a "
                                "REASON/ACT token within data.max_seq_len", dataset="anchor")
        return cls(cfg, collate, load_teacher(cfg, device), stream)

    def step(self, engine: Any, position: Position, device: torch.device,
             ) -> tuple[dict[str, float], int]:
        """The next anchor micro-batch's weighted SAD loss, backward (no optimizer step).
        Returns this rank's metrics (the unweighted loss and its parts) and the batch's
        fingerprint; moves the position's anchor fields."""
        epoch, index, documents = next(self.stream)
        position.anchor_epoch, position.anchor_batch_in_epoch = epoch, index + 1
        batch = {name: value.to(device) for name, value in self.collate.tensors(documents).items()}
        metrics, _ = forward_backward(self.cfg, engine, batch, self.teacher,
                                      scale=self.cfg.dpo.anchor_weight)
        teacher_config = self.teacher.config if self.teacher is not None else None
        metrics["flops"] = metrics["tokens"] * train_flops_per_token(
            engine.unwrapped.config, batch["input_ids"].shape[1], teacher_config)
        return metrics, documents.fingerprint()


def anchor_record(metrics: dict[str, float], device: torch.device) -> dict[str, Any]:
    """metrics.jsonl's `anchor` entry from this rank's anchor metrics (reduced over ranks)."""
    metrics = reduce_metrics(metrics, device, SUMMED)
    steps = metrics["mch_steps"]
    return {"loss": round(metrics["loss"], 6), "lm_loss": round(metrics["lm_loss"], 6),
            "reason": round(metrics["reason"], 6), "act": round(metrics["act"], 6),
            "mch": round(metrics["mch"], 6),
            "mch_acc": round(metrics["mch_correct"] / steps, 4) if steps else None,
            "tokens": int(metrics["tokens"]), "reason_tokens": int(metrics["reason_tokens"]),
            "act_tokens": int(metrics["act_tokens"])}


def add_anchor(metrics: dict[str, float], anchor: dict[str, float], weight: float) -> None:
    """The step's totals (loss, tokens, padding slots, FLOPs) with the anchor's added."""
    metrics["loss"] += weight * anchor["loss"]
    for name in ("tokens", "slots", "flops"):
        metrics[name] += anchor[name]
