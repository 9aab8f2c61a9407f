"""Building the model to train (and frozen copies of it), shared by every recipe.

`start_student` is each worker's setup: tokenizer and its special ids, the model (resumed,
from `model.init_from`, or random of `model.builder`), the engine (DDP or DeepSpeed ZeRO)
and the position to continue from. `load_frozen` builds a forward-only model (an online
SAD teacher, a DPO reference).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from trainer.checkpoint_check import CheckpointError, non_finite_weight
from trainer.checkpoints import Position, load_state
from trainer.config import TrainConfig
from trainer.engines import (DDPEngine, DeepSpeedEngine, read_deepspeed_config,
                             skip_cpu_shm_comm, world_size)
from trainer.model import BUILDERS, AgentQwen2Config, AgentQwen2ForCausalLM
from trainer.model.builders import freeze_below_top_layers
from trainer.tokens import TextTokenizer, load_tokenizer, special_ids


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


def zero3(ds_config: dict | None) -> bool:
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
    if zero3(ds_config):
        # Transformers partitions weights while loading when this object exists (it needs
        # the `accelerate` package).
        from transformers.integrations import HfDeepSpeedConfig

        keep_alive = HfDeepSpeedConfig(ds_config)  # noqa: F841
    model, info = AgentQwen2ForCausalLM.from_pretrained(
        source, dtype=dtype, output_loading_info=True, **modification_kwargs(cfg, special))
    if problem := non_finite_weight(model, source):  # a lasting failure: not restarted
        raise CheckpointError(f"{problem}; start from a checkpoint whose weights are finite")
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
    if resume_dir and zero3(ds_config):
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


def freeze(model: AgentQwen2ForCausalLM, device: torch.device) -> AgentQwen2ForCausalLM:
    """Forward only: no gradients, eval mode, on `device`."""
    model.requires_grad_(False)
    return model.eval().to(device)


def load_frozen(source: str, dtype: str, device: torch.device, *,
                field: str) -> AgentQwen2ForCausalLM:
    """A checkpoint as it was saved (its own modifications), forward only. Weights holding
    nan or inf are a CheckpointError naming `field` (the config field that chose it): its
    targets would be nan, and every step would "diverge" with advice to lower optim.lr."""
    model = AgentQwen2ForCausalLM.from_pretrained(source, dtype=getattr(torch, dtype))
    if problem := non_finite_weight(model, source):
        raise CheckpointError(f"{field}: {problem}; it must hold finite weights")
    return freeze(model, device)


@dataclass
class Student:
    """A worker's training state: what `start_student` returns."""

    tokenizer: TextTokenizer
    special: dict[str, int]
    engine: Any                      # DDPEngine | DeepSpeedEngine
    position: Position
    deepspeed: bool


def start_student(cfg: TrainConfig, resume_dir: str | None, micro_batch_rows: int) -> Student:
    """Model, engine and start position (from the checkpoint when resuming).
    `micro_batch_rows`: rows per forward, DeepSpeed's micro-batch size."""
    tokenizer = load_tokenizer(cfg.tokenizer)
    special = special_ids(tokenizer)
    deepspeed = cfg.scaling.strategy == "deepspeed"
    ds_config = read_deepspeed_config(cfg.scaling.deepspeed_config, micro_batch_rows,
                                      cfg.optim) if deepspeed else None
    if deepspeed:
        skip_cpu_shm_comm(world_size())
    model = build_student(cfg, special, round_up(len(tokenizer)), resume_dir, ds_config)
    if cfg.model.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if ds_config is not None:
        engine = DeepSpeedEngine(model, ds_config, cfg.optim, cfg.run.max_steps)
    else:
        engine = DDPEngine(model, cfg.optim, cfg.run.max_steps)
    state = load_state(resume_dir)
    position = Position(**state["position"]) if state else Position()
    if state:
        engine.load_state_dict(state["engine"])
        if ds_config is not None:
            engine.load_sharded(resume_dir)
    return Student(tokenizer, special, engine, position, deepspeed)
