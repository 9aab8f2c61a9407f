"""Recipe `dpo`: preference training on preferences/ pairs (negatives, repairs, safety),
through the modified model's own forward.

Supports: loss types sigmoid (DPO, with label smoothing = conservative DPO) and ipo, an
RPO/SFT term on the chosen completions (`rpo_alpha`), `beta`, per-source loss weights and
source filters, per-kind loss weights and filters (`kind_weights`: glob on the pair's kind,
trainer.pair_weights); the reference as a frozen copy of the starting weights or as log-probs
precomputed in a Ray Data pass (trainer.reference); the MCH trained on the same pairs (the
chosen completion's call = a correct step, the rejected one's = a wrong step); split
embeddings from span labels and landmark attention as in SAD; DDP or DeepSpeed ZeRO (with a
precomputed reference); resume. Starts from a SAD checkpoint with `model.init_from`.
Config: `dpo`, `data.max_seq_len`, `model`, `optim`, `run`, `scaling`.

Not TRL's DPOTrainer: it patches the model with a fused LM head that calls the base model
directly, so this model's forward (ACT embedding, landmarks, MCH) would never run, and its
collator drops span labels. The loss here equals TRL 1.16's on a plain model (tested).

Cost per step: one forward + backward over 2 x `dpo.batch_size` rows (each pair's chosen and
rejected row share the batch; the prompt is in both rows, as in TRL), plus the reference's
forward over the same rows (no backward) unless precomputed: ~1.3x a SAD step on the same
tokens with a frozen reference, ~1x precomputed (benchmarks/bench_trainer.py --only dpo).

Per step: a micro-batch of pairs -> the reference's completion log-probs (frozen copy, or
the stored ones) -> forward with the preference loss computed inside the model -> MCH loss
-> backward -> clip + AdamW (or DeepSpeed's step) -> metrics.jsonl (loss, rewards,
margins, accuracy, overall and per source) on rank 0; checkpoints and resume as SAD's.
With `dpo.anchor_weight` > 0, each step also backpropagates that weight x the SAD loss of a
trajectory micro-batch from a second stream (trainer.anchor) before the optimizer step.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import torch

from trainer.anchor import Anchor, add_anchor, anchor_record
from trainer.checkpoints import Position, StepReports, resume_directory, resumed_stream
from trainer.config import TrainConfig
from trainer.distributed import flatten, gather_lists, reduce_metrics, start_worker, unflatten
from trainer.engines import average_gradients
from trainer.losses import balanced_mch_loss
from trainer.metrics import RunningAUROC, peak_flops, rounded, train_flops_per_token
from trainer.model import AgentQwen2ForCausalLM
from trainer.pair_batches import Pairs
from trainer.pair_collate import batch_hash, pair_tensors
from trainer.preference_loss import PreferenceSettings, make_preference_loss_fn
from trainer.readers.preferences import PairSettings, build_pair_dataset
from trainer.recipes.sad import build_dataset as build_trajectory_stream, mch_scores
from trainer.reference import (build_reference, precompute_reference, preference_settings,
                               reference_logps)
from trainer.student import round_up, start_student

PER_PAIR = ("pairs", "loss", "chosen_rewards", "rejected_rewards", "margins", "correct",
            "chosen_logps", "rejected_logps")


# -- driver side ---------------------------------------------------------------------------

def pair_settings(cfg: TrainConfig, reference_dir: str | None) -> PairSettings:
    return PairSettings(shards=cfg.shards, tokenizer=cfg.tokenizer,
                        max_seq_len=cfg.data.max_seq_len, sources=tuple(cfg.dpo.sources),
                        pairs_per_batch=cfg.dpo.batch_size,
                        bucket_pool_batches=cfg.dpo.bucket_pool_batches, seed=cfg.run.seed,
                        reference_dir=reference_dir, consistency=cfg.data.consistency,
                        kind_weights=cfg.dpo.kind_weight_items())


# Modifications a DPO run must share with the checkpoint it starts from (the model section
# overrides the checkpoint's, so a mismatch would train another architecture than the one
# SAD trained and `trainer eval` scores as the "before")
START_FIELDS = ("split_embeddings", "use_landmark", "landmark_block_size", "use_mch")


def check_start(cfg: TrainConfig) -> None:
    """Refuse, before any work, a `model` section that differs from the starting
    checkpoint's modifications (a plain Qwen2 start, without them, is not checked)."""
    if not cfg.model.init_from:
        return
    path = Path(cfg.model.init_from) / "config.json"
    if not path.is_file():
        return
    saved = json.loads(path.read_text())
    if saved.get("model_type") != "agent_qwen2":
        return
    fields = [f for f in START_FIELDS if f != "landmark_block_size" or cfg.model.use_landmark]
    differ = [f"model.{f}={getattr(cfg.model, f)!r} but the checkpoint has {saved.get(f)!r}"
              for f in fields if f in saved and saved[f] != getattr(cfg.model, f)]
    if differ:
        raise ValueError(f"model.init_from {cfg.model.init_from}: {'; '.join(differ)} (set the "
                         f"model section as the SAD run's)")


def build_dataset(cfg: TrainConfig) -> tuple[Any, dict[str, Any]]:
    """The pair stream; with a precomputed reference, the reference pass runs first; with
    `dpo.anchor_weight`, {"train": pairs, "anchor": trajectories}."""
    check_start(cfg)
    reference_dir = None
    if cfg.dpo.reference == "precomputed":
        reference_dir = precompute_reference(cfg, pair_settings(cfg, None))
    pairs, info = build_pair_dataset(pair_settings(cfg, reference_dir))
    if not cfg.anchored:
        return pairs, info
    # recipe sad's stream from the same data section, dpo.anchor_batch_size trajectories each
    anchor, anchor_info = build_trajectory_stream(cfg, cfg.dpo.anchor_batch_size)
    return {"train": pairs, "anchor": anchor}, {**info, "anchor": anchor_info}


def loop_extras(cfg: TrainConfig, dataset: Any) -> dict[str, Any]:
    return {}


# -- one step ------------------------------------------------------------------------------

def _per_pair_sums(parts: dict[str, torch.Tensor], source_index: torch.Tensor,
                   sources: tuple[str, ...], kind_index: torch.Tensor | None = None,
                   patterns: tuple[str, ...] = ()) -> dict[str, Any]:
    """Sums over pairs, overall, per configured source and per `dpo.kind_weights` pattern
    (under "kinds": the pairs whose kind it decides); every rank reports every source and
    pattern, zeros included, so the sums reduce in one collective."""
    values = {"pairs": torch.ones_like(parts["pair_loss"]), "loss": parts["pair_loss"],
              "chosen_rewards": parts["chosen_rewards"],
              "rejected_rewards": parts["rejected_rewards"],
              "margins": parts["chosen_rewards"] - parts["rejected_rewards"],
              "correct": (parts["chosen_rewards"] > parts["rejected_rewards"]).to(parts["pair_loss"].dtype),
              "chosen_logps": parts["chosen_logps"], "rejected_logps": parts["rejected_logps"]}
    sums = {"all": {name: float(value.sum()) for name, value in values.items()}}
    for index, source in enumerate(sources):
        mine = source_index == index
        sums[source] = {name: float(value[mine].sum()) for name, value in values.items()}
    if patterns and kind_index is not None:
        sums["kinds"] = {pattern: {name: float(value[kind_index == index].sum())
                                   for name, value in values.items()}
                         for index, pattern in enumerate(patterns)}
    return sums


def dpo_step(cfg: TrainConfig, engine: Any, batch: dict[str, torch.Tensor],
             reference: AgentQwen2ForCausalLM | None, settings: PreferenceSettings,
             ) -> tuple[dict[str, Any], dict[str, list]]:
    """One micro-batch of pairs: reference log-probs, the preference loss through the
    model's forward, the MCH loss, backward. Returns this rank's sums and scalars, and the
    MCH scores of its labelled steps (taken before this step's update)."""
    if reference is not None:
        ref_chosen, ref_rejected = reference_logps(reference, batch, settings)
    else:
        ref_chosen, ref_rejected = batch["ref_chosen"], batch["ref_rejected"]
        if bool(torch.isnan(ref_chosen).any() | torch.isnan(ref_rejected).any()):
            raise ValueError("a pair reached training without reference log-probs")
    loss_fn = make_preference_loss_fn(batch["input_ids"], batch["completion_mask"], ref_chosen,
                                      ref_rejected, batch["pair_weight"], settings,
                                      batch["pair_norm"])
    use_mch = cfg.model.use_mch and bool((batch["mch_labels"] >= 0).any())
    out = engine.module(input_ids=batch["input_ids"], span_ids=batch["span_ids"],
                        use_cache=False, loss_fn=loss_fn,
                        mch_positions=batch["mch_positions"] if use_mch else None)
    mch_value, mch_count = out.loss * 0.0, 0
    scored = {"mch_scores": [], "mch_step_labels": []}
    if use_mch:
        mch_value, mch_count = balanced_mch_loss(out.mch_logits, batch["mch_labels"])
        scored = mch_scores(out.mch_logits, batch["mch_labels"])
    total = out.loss + cfg.dpo.mch_weight * mch_value
    engine.backward(total)
    parts = out.loss_parts
    labels = scored["mch_step_labels"]
    correct = sum((score > 0) == (label == 1) for score, label in zip(scored["mch_scores"], labels))
    real = batch["span_ids"] >= 0
    metrics = {"loss": float(total.detach()), "preference": float(parts["preference"]),
               "nll": float(parts["nll"]), "mch": float(mch_value.detach()),
               "mch_steps": float(mch_count), "mch_correct": float(correct),
               "tokens": float(real.sum()), "slots": float(real.numel()),
               "completion_tokens": float(batch["completion_mask"].sum()),
               "sums": _per_pair_sums(parts, batch["source_index"], tuple(cfg.dpo.sources),
                                      batch["kind_index"], tuple(cfg.dpo.kind_weights))}
    return metrics, scored


# -- the loop ------------------------------------------------------------------------------

def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """Entry point of every worker; `loop_config` = {"train": TrainConfig as JSON}."""
    cfg, context, rank, device = start_worker(loop_config)
    with resume_directory() as resume_dir:
        student = start_student(cfg, resume_dir, 2 * cfg.dpo.batch_size)
    engine, position, special = student.engine, student.position, student.special
    reference = None
    if cfg.dpo.reference == "model":
        reference = build_reference(cfg, special, round_up(len(student.tokenizer)), device)
    settings = preference_settings(cfg)
    sources = tuple(cfg.dpo.sources)
    reports = StepReports(cfg, rank, student, "dpo")
    peak = peak_flops(device)
    running_auroc = RunningAUROC(cfg.run.mch_auroc_window)
    anchor = Anchor.start(cfg, special["pad"], position, device) if cfg.anchored else None
    trained = [p for p in engine.unwrapped.parameters() if p.requires_grad]
    engine.unwrapped.train()
    last = time.perf_counter()
    stream = resumed_stream(position.epoch, position.batch_in_epoch, Pairs.from_batch_row,
                            f"the dataset yields no pair: none of sources {list(sources)} "
                            f"fits data.max_seq_len")
    while position.step < cfg.run.max_steps:
        epoch, index, pairs = next(stream)
        position.epoch, position.batch_in_epoch = epoch, index + 1
        tensors = pair_tensors(pairs, special["pad"], special["tool_call_start"], sources,
                               dict(cfg.dpo.source_weights),
                               kind_weights=cfg.dpo.kind_weight_items())
        batch = {name: value.to(device) for name, value in tensors.items()}
        # with an anchor: two backward passes, then the gradients averaged over ranks once
        with engine.no_sync() if anchor else contextlib.nullcontext():
            metrics, scored = dpo_step(cfg, engine, batch, reference, settings)
            metrics["flops"] = metrics["tokens"] * train_flops_per_token(
                engine.unwrapped.config, batch["input_ids"].shape[1],
                reference.config if reference is not None else None)
            if anchor:
                anchor_metrics, anchor_batch = anchor.step(engine, position, device)
        if anchor:
            average_gradients(trained)
            add_anchor(metrics, anchor_metrics, cfg.dpo.anchor_weight)
        flops_per_token = metrics.pop("flops") / max(metrics["tokens"], 1.0)  # this rank's
        gathered = gather_lists({**scored, "batches": [batch_hash(pairs)],
                                 "anchor_batches": [anchor_batch] if anchor else []})
        running_auroc.update(gathered["mch_scores"], gathered["mch_step_labels"])
        lr = engine.lr
        # an inf/nan norm raises TrainingDiverged naming position.step + 1 (the engine's
        # schedule counts these same steps), before the update and its checkpoint
        metrics["grad_norm"] = engine.step()
        position.step += 1
        metrics.update(too_long=float(pairs.too_long), empty=float(pairs.empty))
        sums = flatten(metrics.pop("sums"))
        metrics = reduce_metrics(metrics, device, {"mch_steps", "mch_correct", "tokens", "slots",
                                                   "completion_tokens", "too_long", "empty"})
        sums = unflatten(reduce_metrics(sums, device, sums.keys()))
        now = time.perf_counter()
        elapsed, last = now - last, now
        record = _record(metrics, sums, position, lr, elapsed, flops_per_token, peak,
                         context.get_world_size(), cfg.dpo.rpo_alpha > 0)
        record.update(mch_auroc=rounded(running_auroc.value()), batches=gathered["batches"])
        if anchor:
            record.update(anchor=anchor_record(anchor_metrics, device),
                          anchor_batches=gathered["anchor_batches"])
        reports.step(record)
    reports.close()


def _means(sums: dict[str, float]) -> dict[str, float | int | None]:
    """TRL's metric names from pair sums: means over the pairs."""
    pairs = sums["pairs"]
    if not pairs:
        return {"pairs": 0}

    def mean(name: str) -> float:
        return round(sums[name] / pairs, 6)
    return {"pairs": int(pairs), "loss": mean("loss"), "rewards/chosen": mean("chosen_rewards"),
            "rewards/rejected": mean("rejected_rewards"), "rewards/margins": mean("margins"),
            "rewards/accuracies": mean("correct"), "logps/chosen": mean("chosen_logps"),
            "logps/rejected": mean("rejected_logps")}


def _record(metrics: dict[str, float], sums: dict[str, dict[str, float]], position: Position,
            lr: float, elapsed: float, flops_per_token: float, peak: float | None,
            workers: int, with_nll: bool) -> dict[str, Any]:
    tokens_per_s = metrics["tokens"] / max(elapsed, 1e-9)
    overall = _means(sums.pop("all"))
    kinds = sums.pop("kinds", None)
    record = {"step": position.step, "epoch": position.epoch, "loss": round(metrics["loss"], 6),
              "dpo_loss": round(metrics["preference"], 6), **{k: v for k, v in overall.items()
                                                               if k != "loss"},
              "sources": {source: _means(values) for source, values in sums.items()},
              **({"kinds": {pattern: _means(values) for pattern, values in kinds.items()}}
                 if kinds else {}),
              "mch": round(metrics["mch"], 6),
              "mch_acc": metrics["mch_correct"] / metrics["mch_steps"] if metrics["mch_steps"] else None,
              "mch_steps": int(metrics["mch_steps"]),
              "tokens": int(metrics["tokens"]), "completion_tokens": int(metrics["completion_tokens"]),
              "tokens_per_s": round(tokens_per_s, 1),
              "padding": round(1 - metrics["tokens"] / max(metrics["slots"], 1), 4),
              "step_time": round(elapsed, 4), "lr": lr, "grad_norm": round(metrics["grad_norm"], 4),
              "mfu": round(tokens_per_s * flops_per_token / (peak * workers), 4) if peak else None,
              "pairs_too_long": int(metrics["too_long"]), "pairs_empty": int(metrics["empty"])}
    if with_nll:
        record["nll"] = round(metrics["nll"], 6)
    return record
