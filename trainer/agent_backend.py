"""A trained checkpoint as the turn backend of datagen's `hf` teacher (`python -m trainer eval`).

datagen's `HFBackend` loads the checkpoint (importing `trainer.model` registers the modified
architecture with `AutoModelForCausalLM`, so the same loader reads plain Qwen2 and our model)
and keeps everything around the model: the micro-batcher, the episode loop, the token trace.
`PolicyBackend` replaces only the decoding: each turn comes from `AgentPolicy`, which drives
the modifications the batched decoder knows nothing about - the ACT embedding (code mode from
the prompt's span labels, then the `<tool_call>` state machine), landmark retrieval over the
KV cache, and the hybrid mode (slow path on truncated, unparsable or invalid turns and on low
MCH confidence; the request's tool specs decide validity). The turns it produced are kept
for the hybrid-mode metrics.
"""

from __future__ import annotations

from typing import Any

from datagen.teachers.config import HFConfig, SamplingConfig
from datagen.teachers.episode import Generation, TurnRequest
from datagen.teachers.hf import HFBackend
from datagen.teachers.trace import turn_text
from trainer.generation import AgentPolicy, GenerationConfig, Turn
from trainer.tokens import TextTokenizer


def plain_decoding_problem(model_config: Any) -> str | None:
    """Why the batched (plain Qwen2) decoder would not compute what this model computes, or
    None. The MCH only scores turns, so it does not change plain decoding."""
    active = [name for name in ("split_embeddings", "use_landmark")
              if getattr(model_config, name, False)]
    if not active:
        return None
    return (f"the checkpoint uses {' and '.join(active)}, which the batched decoder does not "
            f"drive; use --decoder policy")


class PolicyBackend(HFBackend):
    """HFBackend whose turns are AgentPolicy turns, one episode's turn at a time."""

    def __init__(self, config: HFConfig, sampling: SamplingConfig,
                 generation: GenerationConfig) -> None:
        super().__init__(config, sampling)
        self.policy = AgentPolicy(self.model, TextTokenizer(self.tokenizer_name), generation)
        self.turns: list[Turn] = []

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "decoder": "policy", "hybrid": self.policy.config.hybrid,
                "mch_hybrid": self.policy.use_mch,
                "logprobs_mode": None}

    def generate_batch(self, requests: list[TurnRequest]) -> list[Generation]:
        return [self._generate(request) for request in requests]

    def _generate(self, request: TurnRequest) -> Generation:
        turn = self.policy.act_on_tokens(request.prompt_ids, request.prompt_span_ids,
                                         request.max_tokens, request.tools)
        self.turns.append(turn)
        closed = bool(turn.ids) and turn.ids[-1] == self.im_end_id
        return Generation(text=turn_text(self.tokenizer, turn.ids), token_ids=turn.ids,
                          finish_reason="stop" if closed else "length",
                          prompt_tokens=len(request.prompt_ids),
                          completion_tokens=len(turn.ids), seconds=turn.seconds)
