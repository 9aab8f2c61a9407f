"""The modified Qwen2.5: split embeddings, landmark attention and a meta-cognitive head.

`AgentQwen2ForCausalLM` subclasses `Qwen2ForCausalLM`, so every Qwen2/Qwen2.5 weight keeps its
name and shape: a plain checkpoint loads unchanged and the new parameters
(`act_embed_tokens`, `landmark`, `mch`) are created when missing (the ACT embedding as a copy
of the loaded base embedding). With every modification off, `forward` is Qwen2's own forward.

Beyond Qwen2's arguments, `forward` takes:
- `span_ids` [B, T] (0 PROMPT, 1 REASON, 2 ACT, 3 OBS; negative = padding) or `act_mode`
  [B, T] bool, choosing the embedding per position (split embeddings);
- `loss_fn(hidden, lm_head) -> (loss, parts)`: computes the loss from the final hidden states
  inside forward, chunk by chunk, so the [B, T, V] logits never exist at once and ZeRO-3
  gathers the head inside the module's forward as it expects;
- `mch_positions` [B, S]: token indices at which to evaluate the MCH;
- `return_hidden`: also return the final hidden states of the regular tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, Qwen2ForCausalLM
from transformers import initialization as init
from transformers.modeling_outputs import CausalLMOutputWithPast

from trainer.model import landmark
from trainer.model.config import AgentQwen2Config
from trainer.model.mch import MetaCognitiveHead
from trainer.model.split_embedding import act_mode_from_spans, embed_split

LossFn = Callable[[torch.Tensor, nn.Module], tuple[torch.Tensor, dict[str, torch.Tensor]]]


@dataclass
class AgentCausalLMOutput(CausalLMOutputWithPast):
    """CausalLMOutputWithPast plus the final hidden states of the regular tokens, the MCH
    outputs, and the loss components a `loss_fn` reported."""

    hidden: torch.Tensor | None = None
    mch_logits: torch.Tensor | None = None
    mch_vectors: torch.Tensor | None = None
    loss_parts: dict[str, torch.Tensor] | None = None


class LandmarkToken(nn.Module):
    """The learned embedding of the landmark token (not a vocabulary entry, so the
    vocabulary and every checkpoint stay Qwen2's)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))

    def forward(self) -> torch.Tensor:
        # Read through a module call so that ZeRO-3 gathers the partitioned weight.
        return self.weight


class AgentQwen2ForCausalLM(Qwen2ForCausalLM):
    config_class = AgentQwen2Config
    config: AgentQwen2Config

    def __init__(self, config: AgentQwen2Config) -> None:
        if config.use_landmark:
            landmark.register()
            config._attn_implementation = landmark.LANDMARK_ATTENTION
        super().__init__(config)
        if config.split_embeddings:
            self.act_embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        if config.use_landmark:
            self.landmark = LandmarkToken(config.hidden_size)
        if config.use_mch:
            self.mch = MetaCognitiveHead(config.hidden_size, config.mch_hidden_size,
                                         config.mch_num_heads)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        # The ACT embedding starts as the base embedding; from_pretrained calls this only for
        # parameters the checkpoint lacks, after the base embedding has been loaded.
        if module is getattr(self, "act_embed_tokens", None):
            base = self.model.embed_tokens.weight
            # Under ZeRO-3 only the missing parameters are gathered here and the loaded base
            # is an empty partition: trainer.student then copies it with both gathered.
            if base.numel():
                init.copy_(module.weight, base)
        elif isinstance(module, LandmarkToken):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
        else:
            super()._init_weights(module)

    def embed(self, input_ids: torch.Tensor, span_ids: torch.Tensor | None = None,
              act_mode: torch.Tensor | None = None) -> torch.Tensor:
        """Input embeddings, using the ACT matrix in code mode (see split_embedding)."""
        base = self.model.embed_tokens
        if not self.config.split_embeddings:
            return base(input_ids)
        if act_mode is None and span_ids is not None:
            act_mode = act_mode_from_spans(input_ids, span_ids, self.config.tool_call_start_id)
        return embed_split(input_ids, act_mode, base, self.act_embed_tokens)

    def forward(self, input_ids: torch.LongTensor | None = None,
                attention_mask: torch.Tensor | None = None,
                position_ids: torch.LongTensor | None = None, past_key_values: Any = None,
                inputs_embeds: torch.FloatTensor | None = None,
                labels: torch.LongTensor | None = None, use_cache: bool | None = None,
                logits_to_keep: int | torch.Tensor = 0, span_ids: torch.Tensor | None = None,
                act_mode: torch.Tensor | None = None, loss_fn: LossFn | None = None,
                mch_positions: torch.Tensor | None = None, return_hidden: bool = False,
                **kwargs: Any) -> CausalLMOutputWithPast:
        if not self.config.modified and loss_fn is None and not return_hidden:
            return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                                   position_ids=position_ids, past_key_values=past_key_values,
                                   inputs_embeds=inputs_embeds, labels=labels,
                                   use_cache=use_cache, logits_to_keep=logits_to_keep, **kwargs)
        embeds = inputs_embeds if inputs_embeds is not None else \
            self.embed(input_ids, span_ids, act_mode)
        regular_index = None
        if self.config.use_landmark:
            offset = past_key_values.get_seq_length() if past_key_values is not None else 0
            embeds, regular_index, position_ids = landmark.insert_landmarks(
                embeds, self.landmark(), self.config.landmark_block_size, offset)
            attention_mask = None  # right padding only; see trainer.model.landmark
        outputs = self.model(inputs_embeds=embeds, attention_mask=attention_mask,
                             position_ids=position_ids, past_key_values=past_key_values,
                             use_cache=use_cache, **kwargs)
        hidden = outputs.last_hidden_state
        if regular_index is not None:
            hidden = hidden.index_select(1, regular_index)
        return self._heads(hidden, outputs.past_key_values, labels, logits_to_keep, loss_fn,
                           mch_positions, return_hidden, **kwargs)

    def _heads(self, hidden: torch.Tensor, cache: Any, labels: torch.Tensor | None,
               logits_to_keep: int | torch.Tensor, loss_fn: LossFn | None,
               mch_positions: torch.Tensor | None, return_hidden: bool,
               **kwargs: Any) -> AgentCausalLMOutput:
        loss, parts, logits = None, None, None
        if loss_fn is not None:
            loss, parts = loss_fn(hidden, self.lm_head)
        else:
            keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
            logits = self.lm_head(hidden[:, keep, :])
            if labels is not None:
                loss = self.loss_function(logits=logits, labels=labels,
                                          vocab_size=self.config.vocab_size, **kwargs)
        mch_logits = mch_vectors = None
        if self.config.use_mch and mch_positions is not None:
            states = hidden.detach() if self.config.mch_detach_backbone else hidden
            mch_logits, mch_vectors = self.mch(states, mch_positions)
        return AgentCausalLMOutput(loss=loss, logits=logits, past_key_values=cache,
                                   hidden=hidden if return_hidden else None,
                                   mch_logits=mch_logits, mch_vectors=mch_vectors,
                                   loss_parts=parts)


AutoConfig.register(AgentQwen2Config.model_type, AgentQwen2Config, exist_ok=True)
AutoModelForCausalLM.register(AgentQwen2Config, AgentQwen2ForCausalLM, exist_ok=True)
