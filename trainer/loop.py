"""The pieces of the per-worker training step (`trainer.worker` strings them together).

Per step: a composed micro-batch (LM documents + MCH negatives, trainer.batching) from this
worker's dataset shard -> (curriculum filter, never leaving a batch without LM rows) ->
forward with the chunked SAD loss computed inside the model -> MCH loss -> backward (or
PCGrad) -> clip + AdamW (or DeepSpeed's step) -> metrics.jsonl + progress bar on rank 0.
A checkpoint (Hugging Face weights + tokenizer + trainer state; DeepSpeed's sharded state
too) is reported to Ray Train every `save_every` steps and at the end; a rerun into the same
run_dir gets the latest one from `ray.train.get_checkpoint()` and continues: step count,
optimizer and scheduler state, and the data position within the epoch.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
import torch.distributed as dist

from trainer.config import TrainConfig
from trainer.collate import Collate, Documents
from trainer.engines import DDPEngine, world_size
from trainer.losses import (ACT, LossSettings, TeacherSignal, balanced_mch_loss, make_loss_fn,
                            pcgrad_combine)
from trainer.model import BUILDERS, AgentQwen2Config, AgentQwen2ForCausalLM
from trainer.model.builders import freeze_below_top_layers
from trainer.model.split_embedding import act_mode_from_spans
from trainer.tokens import ERROR as ERROR_SPAN_ID

STATE_FILE = "trainer_state.pt"


@dataclass
class Position:
    """Where training stands: optimizer steps done and the place in the data stream."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0


def round_up(value: int, multiple: int = 64) -> int:
    return -(-value // multiple) * multiple


def modification_kwargs(cfg: TrainConfig, special: dict[str, int]) -> dict[str, Any]:
    model = cfg.model
    return dict(split_embeddings=model.split_embeddings, use_landmark=model.use_landmark,
                landmark_block_size=model.landmark_block_size,
                landmark_retrieval_topk=model.landmark_retrieval_topk, use_mch=model.use_mch,
                mch_detach_backbone=model.mch_detach_backbone,
                tool_call_start_id=special["tool_call_start"], im_end_id=special["im_end"],
                pad_token_id=special["pad"])


def _copy_base_into_act_embedding(model: AgentQwen2ForCausalLM) -> None:
    """Initialise the ACT embedding from the loaded base embedding (also under ZeRO-3,
    where both are partitioned and must be gathered for the copy)."""
    act, base = model.act_embed_tokens.weight, model.model.embed_tokens.weight
    context = contextlib.nullcontext()
    if hasattr(act, "ds_id"):
        import deepspeed

        context = deepspeed.zero.GatheredParameters([act, base], modifier_rank=0)
    with context, torch.no_grad():
        act.copy_(base)


def _zero3(ds_config: dict | None) -> bool:
    return bool(ds_config) and ds_config.get("zero_optimization", {}).get("stage") == 3


def _construct_partitioned(config: AgentQwen2Config, dtype: torch.dtype,
                           ds_config: dict) -> AgentQwen2ForCausalLM:
    """The architecture only, partitioned as it is created (a 32B model never exists whole
    on one rank) and left uninitialised: the caller restores every weight from DeepSpeed's
    checkpoint. (Transformers cannot run its initialisation on partitioned parameters.)"""
    import deepspeed
    from transformers.initialization import no_init_weights

    with deepspeed.zero.Init(config_dict_or_path=ds_config), no_init_weights():
        model = AgentQwen2ForCausalLM(config).to(dtype)
        model.tie_weights()  # init_weights (skipped above) is where Transformers ties them
    return model


def _from_pretrained(source: str, cfg: TrainConfig, special: dict[str, int], dtype: torch.dtype,
                     ds_config: dict | None) -> AgentQwen2ForCausalLM:
    keep_alive = None
    if _zero3(ds_config):
        # Transformers partitions weights while loading when this object exists (it needs
        # the `accelerate` package).
        from transformers.integrations import HfDeepSpeedConfig

        keep_alive = HfDeepSpeedConfig(ds_config)  # noqa: F841
    model, info = AgentQwen2ForCausalLM.from_pretrained(
        source, dtype=dtype, output_loading_info=True, **modification_kwargs(cfg, special))
    if "act_embed_tokens.weight" in info["missing_keys"]:
        _copy_base_into_act_embedding(model)
    return model


def build_student(cfg: TrainConfig, special: dict[str, int], vocab_size: int,
                  resume_dir: str | None, ds_config: dict | None) -> AgentQwen2ForCausalLM:
    """The model to train: resumed, from a pretrained checkpoint, or random of `builder`.

    Resuming under ZeRO-3 builds the checkpoint's architecture partitioned and leaves the
    weights to DeepSpeed's sharded state (restored by the engine); otherwise they come from
    the checkpoint's Hugging Face files. Random weights are for small models (tests, the
    self-check): each rank builds the whole model before DeepSpeed partitions it; start a
    32B run from released weights with `init_from`."""
    dtype = getattr(torch, cfg.model.dtype)
    torch.manual_seed(cfg.run.seed)  # every rank starts from the same weights
    if resume_dir and _zero3(ds_config):
        return _construct_partitioned(AgentQwen2Config.from_pretrained(resume_dir), dtype, ds_config)
    if resume_dir or cfg.model.init_from:
        model = _from_pretrained(resume_dir or cfg.model.init_from, cfg, special, dtype, ds_config)
    else:
        config = BUILDERS[cfg.model.builder](vocab_size=vocab_size,
                                             **modification_kwargs(cfg, special))
        model = AgentQwen2ForCausalLM(config).to(dtype)
    if cfg.model.train_layers is not None:
        freeze_below_top_layers(model, cfg.model.train_layers)
    return model


def load_teacher(cfg: TrainConfig, device: torch.device) -> AgentQwen2ForCausalLM | None:
    """The online teacher (forward only), or None."""
    if cfg.loss.teacher != "online" or cfg.loss.objective == "sft":
        return None
    dtype = getattr(torch, cfg.model.dtype)
    teacher = AgentQwen2ForCausalLM.from_pretrained(cfg.loss.teacher_model, dtype=dtype)
    if cfg.data.packing and teacher.config.use_landmark:
        raise ValueError(f"data.packing: the online teacher {cfg.loss.teacher_model} uses "
                         f"landmark attention, whose blocks would span packed documents")
    teacher.requires_grad_(False)
    return teacher.eval().to(device)


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


def batches(cfg: TrainConfig, collate: Collate, start: Position,
            ) -> Iterator[tuple[int, int, Documents]]:
    """(epoch, batch index, documents of the micro-batch) forever, skipping what a resumed
    run already consumed."""
    import ray.train

    shard = ray.train.get_dataset_shard("train")
    epoch = start.epoch
    while True:
        seen = 0
        # one stream row = one composed micro-batch (trainer.batching)
        for index, row in enumerate(shard.iter_batches(batch_size=1, batch_format="numpy",
                                                       prefetch_batches=2)):
            seen += 1
            if epoch == start.epoch and index < start.batch_in_epoch:
                continue
            yield epoch, index, collate.documents(row)
        if seen == 0:
            raise RuntimeError("the dataset yields no batch: no trajectory (or repair) has a "
                               "REASON/ACT token within data.max_seq_len")
        epoch += 1


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
    if not cfg.model.split_embeddings or not bool((spans == ERROR_SPAN_ID).any()):
        return None
    as_act = torch.where(spans == ERROR_SPAN_ID, torch.full_like(spans, ACT), spans)
    return act_mode_from_spans(batch["input_ids"], as_act, tool_call_start_id)


def forward_backward(cfg: TrainConfig, engine: Any, batch: dict[str, torch.Tensor],
                     teacher: AgentQwen2ForCausalLM | None,
                     ) -> tuple[dict[str, float], dict[str, list]]:
    """One micro-batch: losses, gradients; returns scalar metrics of this rank and the MCH
    scores of its labelled steps (taken before this step's update)."""
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
        engine.backward(out.loss + extra)
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
        if world_size() > 1:
            dist.all_reduce(param.grad)
            param.grad /= world_size()
    return conflict


def any_rank(flag: bool, device: torch.device) -> bool:
    """Whether `flag` holds on any rank (every rank gets the same answer)."""
    if world_size() == 1:
        return flag
    value = torch.tensor([float(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def gather_scores(scored: dict[str, list]) -> tuple[list[float], list[int]]:
    """This step's labelled MCH scores of every rank (a few dozen floats each)."""
    if world_size() == 1:
        return scored["mch_scores"], scored["mch_step_labels"]
    everyone: list[dict[str, list] | None] = [None] * world_size()
    dist.all_gather_object(everyone, scored)
    return ([s for part in everyone for s in part["mch_scores"]],
            [label for part in everyone for label in part["mch_step_labels"]])


def reduce_metrics(metrics: dict[str, float], device: torch.device) -> dict[str, float]:
    """Average across ranks (token and step counts summed)."""
    if world_size() == 1:
        return metrics
    keys = sorted(metrics)
    values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    summed = {"tokens", "lm_tokens", "slots", "reason_tokens", "act_tokens", "mch_steps", "mch_correct",
              "mch_negatives"}
    return {k: float(v) if k in summed else float(v) / world_size()
            for k, v in zip(keys, values.tolist())}
