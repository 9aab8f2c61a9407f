"""Model builders: plain functions with the hyperparameters written out.

Each returns an `AgentQwen2Config`; `build_model(config)` instantiates it with random weights
(no hub download). Keyword arguments override any field, including the modification switches
(`split_embeddings=True, use_landmark=True, use_mch=True`) and `vocab_size` for tokenizers the
project trains itself.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from trainer.model.config import AgentQwen2Config
from trainer.model.modeling import AgentQwen2ForCausalLM


def tiny(**overrides: Any) -> AgentQwen2Config:
    """~1.5M parameters with a 4k vocabulary: CPU tests and demos. head_dim 64 (hidden 128,
    2 heads) so vLLM's CPU backend can load it too (it rejects head_dim 16)."""
    fields = dict(vocab_size=4000, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32768,
                  rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                  rms_norm_eps=1e-6, tie_word_embeddings=True, mch_hidden_size=64,
                  mch_num_heads=2)
    return AgentQwen2Config(**{**fields, **overrides})


def small(**overrides: Any) -> AgentQwen2Config:
    """`tiny` twice as wide and deep (hidden 256, 4 layers, 4 heads of 64, ~4M parameters
    besides the embeddings): the soft teacher of benchmarks/learning_effect.py."""
    fields = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2)
    return tiny(**{**fields, **overrides})


def qwen2_5_1_5b(**overrides: Any) -> AgentQwen2Config:
    """Qwen2.5-1.5B's shape (1.54B parameters): the GPU self-check's model."""
    fields = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                  num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                  max_position_embeddings=32768,
                  rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                  rms_norm_eps=1e-6, tie_word_embeddings=True)
    return AgentQwen2Config(**{**fields, **overrides})


def qwen2_5_32b(**overrides: Any) -> AgentQwen2Config:
    """Qwen2.5-32B's shape (32.8B parameters; 7B-72B pad the vocabulary to 152064).
    Production loads the released weights with `init_from`; this config documents the shape
    and sizes the MFU arithmetic."""
    fields = dict(vocab_size=152064, hidden_size=5120, intermediate_size=27648,
                  num_hidden_layers=64, num_attention_heads=40, num_key_value_heads=8,
                  max_position_embeddings=32768,
                  rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                  rms_norm_eps=1e-6, tie_word_embeddings=False, mch_hidden_size=512,
                  mch_num_heads=8)
    return AgentQwen2Config(**{**fields, **overrides})


BUILDERS: dict[str, Callable[..., AgentQwen2Config]] = {
    "tiny": tiny, "small": small, "qwen2_5_1_5b": qwen2_5_1_5b, "qwen2_5_32b": qwen2_5_32b,
}


def build_model(config: AgentQwen2Config, dtype: torch.dtype = torch.float32,
                ) -> AgentQwen2ForCausalLM:
    """A randomly initialised model of `config` (seed with torch.manual_seed first)."""
    model = AgentQwen2ForCausalLM(config)
    return model.to(dtype)


def freeze_below_top_layers(model: AgentQwen2ForCausalLM, train_layers: int) -> None:
    """Leave only the top `train_layers` decoder layers, the final norm and the MCH
    trainable. Embeddings (base and ACT) and the head, tied or not, are frozen too: a
    trainable input embedding would pull the backward pass through every layer again."""
    model.requires_grad_(False)
    layers = model.model.layers
    for layer in layers[len(layers) - min(train_layers, len(layers)):]:
        layer.requires_grad_(True)
    model.model.norm.requires_grad_(True)
    if getattr(model, "mch", None) is not None:
        model.mch.requires_grad_(True)


def count_parameters(model: torch.nn.Module, trainable_only: bool = True) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
