"""A trained checkpoint as a turn backend of datagen's episode loop: the `policy` teacher.

`PolicyBackend` is a turn backend of its own (datagen's public `BatchedTurnBackend`, no
longer a subclass of `HFBackend` reaching into its model and tokenizer): it holds an
`AgentPolicy`, which drives the modifications a plain
decoder knows nothing about - the ACT embedding (code mode from the prompt's span labels, then
the `<tool_call>` state machine), landmark retrieval over the KV cache, and the hybrid mode
(slow path on truncated, unparsable or invalid turns and on low MCH confidence; the request's
tool specs decide validity) - and batches the turns of concurrent episodes with datagen's
`MicroBatcher`. Everything else (template, token trace, parser, schema check, environments,
checkers) is the episode loop's, identical to generation.

Importing this module registers the backend as `policy` (reading the `hf` config section)
in datagen's teacher registry, so `make_teacher(TeacherConfig(backend="policy", hf=...))`
plays a checkpoint; `trainer eval` and the PPO rollout actors build it directly with their
own `GenerationConfig`. With `record_logprobs`, every generated token carries its log-prob
under the sampling distribution as a one-entry top-k (the behaviour policy PPO needs; the
trace's `topk_counts > 0` then marks exactly the generated tokens).
"""

from __future__ import annotations

from typing import Any

from datagen.chat import IM_END
from datagen.teachers.config import HFConfig, SamplingConfig, TeacherConfig
from datagen.teachers.episode import Generation, TurnRequest
from datagen.teachers.llm import LLMTeacher
from datagen.teachers.microbatch import BatchedTurnBackend
from datagen.teachers.registry import register_backend
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


class PolicyBackend(BatchedTurnBackend):
    """Turns from `AgentPolicy`, one episode's turn at a time, batched across episodes by
    the micro-batcher (one model, one thread)."""

    def __init__(self, model: Any, tokenizer_dir: str, generation: GenerationConfig,
                 max_batch_size: int = 8, record_logprobs: bool = False,
                 describe: dict[str, Any] | None = None) -> None:
        from transformers import AutoTokenizer

        self.tokenizer_name = tokenizer_dir
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self.im_end_id = self.tokenizer.convert_tokens_to_ids(IM_END)
        self.policy = AgentPolicy(model, TextTokenizer(tokenizer_dir), generation)
        self.max_batch_size = max_batch_size
        self.record_logprobs = record_logprobs
        self.turns: list[Turn] = []
        self._describe = describe or {}

    @classmethod
    def from_checkpoint(cls, checkpoint: str, generation: GenerationConfig,
                        max_batch_size: int = 8, tokenizer: str | None = None,
                        device: str = "cpu") -> "PolicyBackend":
        """A checkpoint (ours or plain Qwen2) loaded as the policy."""
        import torch

        from trainer.model import AgentQwen2ForCausalLM

        model = AgentQwen2ForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
        return cls(model.to(device).eval(), tokenizer or checkpoint, generation, max_batch_size,
                   describe={"model": checkpoint, "device": device})

    def describe(self) -> dict[str, Any]:
        return {"backend": "policy", **self._describe, "decoder": "policy",
                "hybrid": self.policy.config.hybrid, "mch_hybrid": self.policy.use_mch,
                "logprobs_mode": "sampled" if self.record_logprobs else None}

    def generate_batch(self, requests: list[TurnRequest]) -> list[Generation]:
        return [self._generate(request) for request in requests]

    def _generate(self, request: TurnRequest) -> Generation:
        turn = self.policy.act_on_tokens(request.prompt_ids, request.prompt_span_ids,
                                         request.max_tokens, request.tools)
        self.turns.append(turn)
        closed = bool(turn.ids) and turn.ids[-1] == self.im_end_id
        topk_ids = topk_logprobs = None
        if self.record_logprobs:
            topk_ids = [[token] for token in turn.ids]
            topk_logprobs = [[logprob] for logprob in turn.logprobs]
        return Generation(text=turn_text(self.tokenizer, turn.ids), token_ids=turn.ids,
                          topk_ids=topk_ids, topk_logprobs=topk_logprobs,
                          finish_reason="stop" if closed else "length",
                          prompt_tokens=len(request.prompt_ids),
                          completion_tokens=len(turn.ids), seconds=turn.seconds)


def generation_from_sampling(sampling: SamplingConfig) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=sampling.max_tokens_per_turn,
                            temperature=sampling.temperature, seed=sampling.seed or 0)


def make_policy_teacher(config: TeacherConfig, work_dir: str | None = None) -> LLMTeacher:
    """The `policy` backend from a TeacherConfig (its `hf` section: checkpoint, tokenizer,
    device, batch size; sampling: temperature, turn budget, seed; hybrid mode on)."""
    hf: HFConfig = config.hf
    backend = PolicyBackend.from_checkpoint(hf.model, generation_from_sampling(config.sampling),
                                            hf.max_batch_size, hf.tokenizer, hf.device)
    return LLMTeacher(config, backend)


register_backend("policy", make_policy_teacher, "hf",
                 "a checkpoint of the modified model, modifications and hybrid mode active")
