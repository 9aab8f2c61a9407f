"""Recipe `sad`: Structured Agent Distillation on trajectories (and repairs), with the MCH.

Supports: objectives sad (span-level KD: lambda_r * KL_REASON + lambda_a * KL_ACT), token_kd
and sft (baselines); teachers onehot (scripted, = span-weighted CE), topk (stored teacher
logprobs) and online (a frozen teacher model forward in the same job); PCGrad between the
REASON and ACT gradients; a curriculum by trajectory complexity; repairs as LM documents;
the MCH on every composed micro-batch (LM documents' calls + `data.mch_rows` negatives);
packing; DDP or DeepSpeed ZeRO; resume. Config: `loss`, `curriculum`, `data`.

Cost per step: one forward + backward over `data.batch_size + data.mch_rows` rows (the
negatives cost like LM rows); the logits never exist whole (chunked loss in the forward);
an online teacher adds its forward; PCGrad a second backward.

Per step: a composed micro-batch from this worker's dataset shard -> (curriculum filter,
never leaving a batch without LM rows) -> forward with the chunked SAD loss computed inside
the model -> MCH loss -> backward (or PCGrad) -> clip + AdamW (or DeepSpeed's step) ->
metrics.jsonl + progress bar on rank 0; checkpoints every `run.save_every` steps and at the
end (trainer.checkpoints).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

import numpy as np
import torch

from trainer.checkpoints import Position, StepReports, resume_directory, resumed_stream
from trainer.collate import Collate, Documents
from trainer.config import TrainConfig
from trainer.contract import ACT, ERROR
from trainer.curriculum import CurriculumSampler
from trainer.data import DataSettings, build_dataset as build_stream, lm_complexities
from trainer.data_checks import DataError
from trainer.distributed import any_rank, gather_lists, reduce_metrics, start_worker
from trainer.engines import DDPEngine, average_gradients
from trainer.losses import (LossSettings, TeacherSignal, balanced_mch_loss, make_loss_fn,
                            pcgrad_combine)
from trainer.metrics import RunningAUROC, peak_flops, rounded, train_flops_per_token
from trainer.model import AgentQwen2ForCausalLM
from trainer.model.split_embedding import act_mode_from_spans
from trainer.student import load_frozen, start_student

SUMMED = {"tokens", "lm_tokens", "slots", "reason_tokens", "act_tokens", "mch_steps",
          "mch_correct", "mch_negatives"}


# -- driver side ---------------------------------------------------------------------------

def data_settings(cfg: TrainConfig, batch_size: int | None = None) -> DataSettings:
    """The trajectory stream's settings from the data section; `batch_size` replaces
    data.batch_size (the DPO anchor's dpo.anchor_batch_size)."""
    return DataSettings(shards=cfg.shards, tokenizer=cfg.tokenizer,
                        max_seq_len=cfg.data.max_seq_len,
                        batch_size=batch_size or cfg.data.batch_size,
                        mch_rows=cfg.data.mch_rows,
                        bucket_pool_batches=cfg.data.bucket_pool_batches,
                        use_mch=cfg.model.use_mch, tables=tuple(cfg.data.tables),
                        table_weights=tuple(sorted(cfg.data.table_weights.items())),
                        read_topk=cfg.loss.teacher == "topk" and cfg.loss.objective != "sft",
                        check_tokenizer=cfg.data.check_tokenizer,
                        seed=cfg.run.seed, complexity_weights=tuple(cfg.curriculum.weights),
                        consistency=cfg.data.consistency)


def build_dataset(cfg: TrainConfig, batch_size: int | None = None) -> tuple[Any, dict[str, Any]]:
    return build_stream(data_settings(cfg, batch_size))


def loop_extras(cfg: TrainConfig, dataset: Any) -> dict[str, Any]:
    """Complexity quantiles over the whole stream (one pass over the scores only)."""
    if not cfg.curriculum.enabled:
        return {"curriculum_quantiles": None}
    scores = lm_complexities(dataset)
    quantiles = np.quantile(scores, np.linspace(0, 1, 101)).tolist() if len(scores) else None
    return {"curriculum_quantiles": quantiles}


# -- one step ------------------------------------------------------------------------------

def load_teacher(cfg: TrainConfig, device: torch.device) -> AgentQwen2ForCausalLM | None:
    """The online teacher (forward only), or None."""
    if cfg.loss.teacher != "online" or cfg.loss.objective == "sft":
        return None
    teacher = load_frozen(cfg.loss.teacher_model, cfg.model.dtype, device,
                          field="loss.teacher_model")
    if cfg.data.packing and teacher.config.use_landmark:
        raise ValueError(f"data.packing: the online teacher {cfg.loss.teacher_model} uses "
                         f"landmark attention, whose blocks would span packed documents")
    return teacher


def teacher_signal(cfg: TrainConfig, batch: dict[str, torch.Tensor],
                   teacher: AgentQwen2ForCausalLM | None) -> TeacherSignal:
    if cfg.loss.objective == "sft" or cfg.loss.teacher == "onehot":
        return TeacherSignal("onehot")
    if cfg.loss.teacher == "topk":
        return TeacherSignal("topk", topk_ids=batch["topk_ids"],
                             topk_logprobs=batch["topk_logprobs"],
                             topk_present=batch["topk_present"])
    with torch.no_grad():  # span_ids: a teacher with split embeddings reads ACT in code mode
        out = teacher(input_ids=batch["input_ids"], span_ids=batch["span_ids"],
                      act_mode=embedding_mode(cfg, batch, teacher.config.tool_call_start_id),
                      position_ids=batch.get("position_ids"), use_cache=False,
                      return_hidden=True, logits_to_keep=1)
    return TeacherSignal("online", hidden=out.hidden, head=teacher.lm_head)


def admit(documents: Documents, keep: np.ndarray) -> Documents | None:
    """The documents the curriculum admits; None when no LM document is left (a step of
    MCH negatives alone would train without LM loss)."""
    if not bool((keep & (documents.lm_weight > 0)).any()):
        return None
    return documents.select(keep)


def embedding_mode(cfg: TrainConfig, batch: dict[str, torch.Tensor],
                   tool_call_start_id: int | None) -> torch.Tensor | None:
    """ACT-embedding positions when the batch holds a repair's wrong call (span ERROR): the
    call was written in code mode like any call (at generation time the state machine embeds
    the agent's own wrong calls that way), so it is embedded as ACT although it carries no
    loss. None otherwise: the model derives the mode from span_ids itself."""
    spans = batch["span_ids"]
    if not cfg.model.split_embeddings or not bool((spans == ERROR).any()):
        return None
    as_act = torch.where(spans == ERROR, torch.full_like(spans, ACT), spans)
    return act_mode_from_spans(batch["input_ids"], as_act, tool_call_start_id)


def forward_backward(cfg: TrainConfig, engine: Any, batch: dict[str, torch.Tensor],
                     teacher: AgentQwen2ForCausalLM | None, scale: float = 1.0,
                     ) -> tuple[dict[str, float], dict[str, list]]:
    """One micro-batch: losses, gradients (of `scale` x the loss: the DPO recipe's anchor
    weight); returns scalar metrics of this rank (unscaled) and the MCH scores of its
    labelled steps (taken before this step's update)."""
    settings = LossSettings(cfg.loss.objective, cfg.loss.lambda_reason, cfg.loss.lambda_act,
                            cfg.loss.temperature, cfg.loss.chunk_size, cfg.loss.recompute_chunks)
    loss_fn = make_loss_fn(batch["input_ids"], batch["span_ids"],
                           teacher_signal(cfg, batch, teacher), settings, batch["lm_weight"])
    use_mch = cfg.model.use_mch and bool((batch["mch_labels"] >= 0).any())
    act_mode = embedding_mode(cfg, batch, engine.unwrapped.config.tool_call_start_id)
    context = engine.no_sync() if cfg.loss.pcgrad else contextlib.nullcontext()
    with context:
        out = engine.module(input_ids=batch["input_ids"], span_ids=batch["span_ids"],
                            position_ids=batch.get("position_ids"),  # packed rows
                            use_cache=False,  # else Qwen2Model builds a KV cache (and with
                            # it, no per-document mask from the position ids)
                            act_mode=act_mode, loss_fn=loss_fn,
                            mch_positions=batch["mch_positions"] if use_mch else None)
    parts = out.loss_parts
    mch_value, mch_count = out.loss * 0.0, 0
    scored = {"mch_scores": [], "mch_step_labels": []}
    if use_mch:
        mch_value, mch_count = balanced_mch_loss(out.mch_logits, batch["mch_labels"])
        scored = mch_scores(out.mch_logits, batch["mch_labels"])
    extra = cfg.loss.mch_weight * mch_value
    metrics = {"pcgrad_conflict": 0.0}
    if cfg.loss.pcgrad:
        metrics["pcgrad_conflict"] = float(_pcgrad_backward(cfg, engine, parts, extra))
    else:
        engine.backward(scale * (out.loss + extra))
    parts = {name: value.detach() for name, value in parts.items()}
    labels = scored["mch_step_labels"]
    correct = sum((score > 0) == (label == 1) for score, label in zip(scored["mch_scores"], labels))
    metrics.update(loss=float((out.loss + extra).detach()), lm_loss=float(out.loss.detach()),
                   reason=float(parts["reason"]), act=float(parts["act"]),
                   reason_tokens=float(parts["reason_tokens"]), act_tokens=float(parts["act_tokens"]),
                   mch=float(mch_value.detach()), mch_steps=float(mch_count),
                   mch_correct=float(correct), mch_negatives=float(labels.count(0)),
                   tokens=float((batch["span_ids"] >= 0).sum()),
                   lm_tokens=float(lm_rows_tokens(batch)),
                   slots=float(batch["span_ids"].numel()))
    return metrics, scored


def lm_rows_tokens(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Real tokens of LM documents (MCH negatives excluded); packed rows: tokens of weight
    > 0 (each document's first token, which carries no loss, is not counted)."""
    weight = batch["lm_weight"]
    weight = weight.unsqueeze(1) if weight.dim() == 1 else weight
    return ((batch["span_ids"] >= 0) & (weight > 0)).sum()


def mch_scores(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, list]:
    """The MCH's logit and label of every labelled step (for accuracy and AUROC)."""
    labelled = labels >= 0
    return {"mch_scores": logits.detach()[labelled].float().tolist(),
            "mch_step_labels": labels[labelled].tolist()}


def _pcgrad_backward(cfg: TrainConfig, engine: DDPEngine, parts: dict[str, torch.Tensor],
                     extra: torch.Tensor) -> bool:
    """Gradients of the REASON and ACT terms separately, projected when they conflict,
    plus the MCH gradient; reduced across ranks by hand (DDP hooks are off)."""
    params = [p for p in engine.unwrapped.parameters() if p.requires_grad]
    reason = cfg.loss.lambda_reason * parts["reason"]
    act = cfg.loss.lambda_act * parts["act"]
    grads_r = torch.autograd.grad(reason, params, retain_graph=True, allow_unused=True)
    grads_a = torch.autograd.grad(act, params, retain_graph=extra.requires_grad, allow_unused=True)
    combined, conflict = pcgrad_combine(list(grads_r), list(grads_a))
    if extra.requires_grad:
        grads_o = torch.autograd.grad(extra, params, allow_unused=True)
        combined = [g if o is None else (o if g is None else g + o) for g, o in zip(combined, grads_o)]
    for param, grad in zip(params, combined):
        param.grad = torch.zeros_like(param) if grad is None else grad.detach()
    average_gradients(params)
    return conflict


# -- the loop ------------------------------------------------------------------------------

def documents_stream(position: Position, collate: Collate, max_seq_len: int,
                     ) -> Iterator[tuple[int, int, Documents]]:
    """This worker's micro-batches from `position` on. A stream with none is bad data (a
    DataError, not retried): a restart reads the same rows with the same max_seq_len (the
    reader logs, per table, the rows whose kept prefix has nothing to train)."""
    empty = (f"the dataset yields no batch: no trajectory (or repair) has a REASON/ACT token "
             f"within data.max_seq_len ({max_seq_len} tokens); raise data.max_seq_len, or "
             f"check the shards' span labels")
    try:
        yield from resumed_stream(position.epoch, position.batch_in_epoch, collate.documents,
                                  empty)
    except RuntimeError as exc:
        if exc.args != (empty,):
            raise
        raise DataError(empty) from None


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """Entry point of every worker; `loop_config` = {"train": TrainConfig as JSON,
    "curriculum_quantiles": [...] or None}."""
    cfg, context, rank, device = start_worker(loop_config)
    with resume_directory() as resume_dir:
        student = start_student(cfg, resume_dir, cfg.data.batch_size)
    engine, position = student.engine, student.position
    teacher = load_teacher(cfg, device)
    sampler = None
    if loop_config.get("curriculum_quantiles"):
        c = cfg.curriculum
        sampler = CurriculumSampler(loop_config["curriculum_quantiles"], cfg.run.max_steps,
                                    c.start_fraction, c.ramp_fraction, c.schedule)
    collate = Collate(student.special["pad"], with_topk=cfg.loss.teacher == "topk",
                      pack_to=cfg.data.max_seq_len if cfg.data.packing else None)
    reports = StepReports(cfg, rank, student, "train")
    peak = peak_flops(device)
    running_auroc = RunningAUROC(cfg.run.mch_auroc_window)
    engine.unwrapped.train()
    last = time.perf_counter()
    stream = documents_stream(position, collate, cfg.data.max_seq_len)
    while position.step < cfg.run.max_steps:
        epoch, index, documents = next(stream)
        position.epoch, position.batch_in_epoch = epoch, index + 1
        fingerprint = documents.fingerprint()  # the stream row's, before the curriculum
        admitted = 1.0
        if sampler is not None:
            keep = sampler.admit(torch.from_numpy(documents.complexity), position.step).numpy()
            admitted = float(keep.mean())
            documents = admit(documents, keep)
            if any_rank(documents is None, device):  # ranks skip together or DDP would hang
                continue
        batch = {name: value.to(device) for name, value in collate.tensors(documents).items()}
        metrics, scored = forward_backward(cfg, engine, batch, teacher)
        gathered = gather_lists({**scored, "batches": [fingerprint]})
        running_auroc.update(gathered["mch_scores"], gathered["mch_step_labels"])
        lr = engine.lr  # the rate this step uses (step() advances the schedule)
        # an inf/nan norm raises TrainingDiverged naming position.step + 1 (the engine's
        # schedule counts these same steps), before the update and its checkpoint
        metrics["grad_norm"] = engine.step()
        position.step += 1
        metrics = reduce_metrics(metrics, device, SUMMED)
        flops_per_token = train_flops_per_token(
            engine.unwrapped.config, batch["input_ids"].shape[1],
            teacher.config if teacher is not None else None)
        now = time.perf_counter()
        elapsed, last = now - last, now
        record = _record(metrics, position, lr, elapsed, admitted, flops_per_token, peak,
                         context.get_world_size())
        record.update(mch_auroc=rounded(running_auroc.value()), batches=gathered["batches"])
        reports.step(record)
    reports.close()


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
