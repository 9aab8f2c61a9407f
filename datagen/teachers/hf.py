"""The `hf` teacher: a Transformers causal LM in the worker process, batched across episodes.

For small models on CPU or one GPU, and what the CPU tests and tiny end-to-end runs use. Turns
of all live episodes go through one left-padded batch (`MicroBatcher`), decoded here with the
model's KV cache rather than `generate()`: the loop records the top-k of the *raw* next-token
distribution (log-softmax of the logits before temperature / top-p, like vLLM's default
`raw_logprobs`) at every step, which keeps memory at batch x k instead of generate's
steps x batch x vocab `output_logits`, and knows exactly where each sequence stopped. The KV
cache is a preallocated `StaticCache` (the default dynamic cache concatenates the whole cache
at every step: 4x slower decoding at batch 64 on CPU), and only the last position's logits are
computed (`logits_to_keep=1`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from datagen.chat import IM_END
from datagen.teachers.config import HFConfig, SamplingConfig, TeacherConfig, check_logit_bias
from datagen.teachers.episode import Generation, TurnRequest
from datagen.teachers.llm import LLMTeacher
from datagen.teachers.microbatch import BatchedTurnBackend
from datagen.teachers.trace import decode, turn_text


@dataclass
class SampledTurn:
    """What the decode loop produced for one sequence."""

    ids: list[int]
    topk_ids: list[list[int]]
    topk_logprobs: list[list[float]]
    finish_reason: str


def _choose(logits: Any, sampling: SamplingConfig, generator: Any) -> Any:
    """Next token per row: greedy at temperature 0, else temperature + top-p sampling."""
    import torch

    if sampling.logit_bias:
        logits = logits.clone()
        for token, bias in sampling.logit_bias.items():
            logits[:, token] += bias
    if sampling.temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs > sampling.top_p
        sorted_probs[outside] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


class HFBackend(BatchedTurnBackend):
    """Batched decoding with a Transformers model; exact token ids and raw top-k logprobs."""

    def __init__(self, config: HFConfig, sampling: SamplingConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config, self.sampling = config, sampling
        self.tokenizer_name = config.tokenizer or config.model
        self.tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_name)
        self.model = AutoModelForCausalLM.from_pretrained(
            config.model, dtype=getattr(torch, config.dtype)).to(config.device).eval()
        check_logit_bias(sampling, self.model.config.vocab_size)
        self.im_end_id = self.tokenizer.convert_tokens_to_ids(IM_END)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.im_end_id
        self.generator = torch.Generator(device=config.device)
        self.generator.manual_seed(sampling.seed or 0)
        self.max_batch_size = config.max_batch_size
        self._stop_window = 2 * max((len(s) for s in sampling.stop), default=0) + 4

    def describe(self) -> dict[str, Any]:
        return {"backend": "hf", "model": self.config.model, "device": self.config.device,
                "dtype": self.config.dtype, "logprobs_mode": "raw"}

    def generate_batch(self, requests: list[TurnRequest]) -> list[Generation]:
        """One batch of turns (runs in a worker thread)."""
        started = time.perf_counter()
        turns = self.decode([r.prompt_ids for r in requests], [r.max_tokens for r in requests])
        seconds = time.perf_counter() - started
        return [Generation(text=turn_text(self.tokenizer, turn.ids), token_ids=turn.ids,
                           topk_ids=turn.topk_ids, topk_logprobs=turn.topk_logprobs,
                           finish_reason=turn.finish_reason, prompt_tokens=len(request.prompt_ids),
                           completion_tokens=len(turn.ids), seconds=seconds)
                for request, turn in zip(requests, turns)]

    def decode(self, prompts: list[list[int]], max_new: list[int]) -> list[SampledTurn]:
        """Left-pad the prompts and decode until every sequence stopped or hit its budget."""
        import torch
        from transformers import StaticCache

        device, k = self.config.device, self.sampling.logprobs
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts],
                            device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        turns = [SampledTurn([], [], [], "length") for _ in prompts]
        active = [True] * len(prompts)
        top_ids, top_logprobs = [], []
        cache = StaticCache(config=self.model.config, max_cache_len=width + max(max_new))
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                             past_key_values=cache, use_cache=True, logits_to_keep=1)
            for step in range(max(max_new)):
                logits = out.logits[:, -1, :]
                if k:
                    top = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)
                    top_ids.append(top.indices)
                    top_logprobs.append(top.values)
                chosen = _choose(logits, self.sampling, self.generator)
                self._advance(turns, active, chosen.tolist(), step, max_new)
                if not any(active):
                    break
                mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=1)
                positions = positions[:, -1:] + 1
                out = self.model(input_ids=chosen[:, None], attention_mask=mask,
                                 position_ids=positions, past_key_values=out.past_key_values,
                                 use_cache=True, logits_to_keep=1)
        if k:
            self._attach_topk(turns, torch.stack(top_ids, 1).tolist(),
                              torch.stack(top_logprobs, 1).tolist())
        return turns

    def _advance(self, turns: list[SampledTurn], active: list[bool], chosen: list[int],
                 step: int, max_new: list[int]) -> None:
        """Append this step's token to every active sequence; mark the ones that stopped."""
        for i, token in enumerate(chosen):
            if not active[i]:
                continue
            turns[i].ids.append(token)
            if token == self.im_end_id or self._hit_stop_string(turns[i].ids):
                turns[i].finish_reason, active[i] = "stop", False
            elif step + 1 >= max_new[i]:
                active[i] = False

    def _hit_stop_string(self, ids: list[int]) -> bool:
        if not self.sampling.stop:
            return False
        tail = decode(self.tokenizer, ids[-self._stop_window:])
        return any(stop in tail for stop in self.sampling.stop)

    @staticmethod
    def _attach_topk(turns: list[SampledTurn], ids: list, logprobs: list) -> None:
        """Per-sequence top-k lists, cut to the tokens each sequence actually generated."""
        for i, turn in enumerate(turns):
            turn.topk_ids = ids[i][:len(turn.ids)]
            turn.topk_logprobs = logprobs[i][:len(turn.ids)]


def make_hf_teacher(config: TeacherConfig) -> LLMTeacher:
    return LLMTeacher(config, HFBackend(config.hf, config.sampling))
