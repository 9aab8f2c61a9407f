"""A checkpoint as a pair scorer (`trainer.pref_eval`): log π(completion | prompt) of both
sides of every pair, with one prompt forward per distinct prompt.

Pairs that share a prompt (the hard negatives of one gold step and the step itself) are
scored together: the prompt's KV cache is built once; the distinct completions then go
through in one right-padded batch on copies of that cache. Prompts are visited in sorted
order and each starts from the previous prompt's cache cut at their common prefix (the
system turn of an environment, a trajectory's earlier steps), so only the new tokens go
through the model: the prompts of a trajectory's steps cost about one forward of the
trajectory. Position t of a completion is predicted by the hidden state before it (the
prompt's last for the first token), and logits are computed only at those positions, so
[B, T, V] never exists. Code mode (split embeddings) comes from the span labels, as in
training; landmark models take tokens after a cache with retrieval opened to every block,
which equals the grouped softmax of one full forward (tested against full forwards).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch
from transformers import DynamicCache

from trainer.model.split_embedding import act_mode_from_spans
from trainer.pref_eval import SIDES, PairExample, PairScore
from trainer.step_scorer import exact_retrieval, prefix_cache
from trainer.tokens import TextTokenizer, special_ids

Completion = tuple[tuple[int, ...], tuple[int, ...]]  # token ids, span kinds


class TorchPairScorer:
    """Scores PairExamples with an AgentQwen2ForCausalLM (or plain Qwen2) checkpoint."""

    def __init__(self, model: torch.nn.Module, tokenizer: TextTokenizer, max_rows: int = 8,
                 ) -> None:
        self.model = model.eval()
        self.ids = special_ids(tokenizer)
        self.max_rows = max_rows

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def score(self, pairs: Sequence[PairExample]) -> list[PairScore]:
        groups: defaultdict[Completion, set[Completion]] = defaultdict(set)
        for pair in pairs:
            prompt = (tuple(pair.prompt_ids), tuple(pair.prompt_spans))
            for side in SIDES:
                groups[prompt].add(self._completion(pair, side))
        logps: dict[tuple[Completion, Completion], float] = {}
        self._previous: tuple[list[int], DynamicCache] | None = None
        for prompt in sorted(groups):  # a prompt right after the prompts it extends
            ordered = sorted(groups[prompt])
            for completion, value in zip(ordered, self._score_group(prompt, ordered)):
                logps[prompt, completion] = value
        self._previous = None
        return [PairScore(*(logps[(tuple(p.prompt_ids), tuple(p.prompt_spans)),
                                  self._completion(p, side)] for side in SIDES))
                for p in pairs]

    @staticmethod
    def _completion(pair: PairExample, side: str) -> Completion:
        return tuple(getattr(pair, f"{side}_ids")), tuple(getattr(pair, f"{side}_spans"))

    def _act_mode(self, ids: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        return act_mode_from_spans(ids, spans, self.ids["tool_call_start"])

    @torch.inference_mode()
    def _score_group(self, prompt: Completion, completions: list[Completion]) -> list[float]:
        """Summed log-probabilities of each completion after `prompt`."""
        cache, last = self._prompt_cache(prompt)
        values = []
        for first in range(0, len(completions), self.max_rows):
            chunk = completions[first:first + self.max_rows]
            values += self._score_chunk(cache, last, chunk)
        return values

    def _prompt_cache(self, prompt: Completion) -> tuple[DynamicCache, torch.Tensor]:
        """The prompt's KV cache and its last hidden state, from the previous prompt's cache
        cut at the shared prefix when there is one."""
        ids = torch.tensor([prompt[0]], dtype=torch.long)
        mode = self._act_mode(ids, torch.tensor([prompt[1]], dtype=torch.long))
        shared, past = 0, None
        if self._previous is not None:
            earlier, cache = self._previous
            shared = next((i for i, (a, b) in enumerate(zip(earlier, prompt[0])) if a != b),
                          min(len(earlier), len(prompt[0])))
            shared = min(shared, len(prompt[0]) - 1)  # at least one token goes through
            past = prefix_cache(self.model, cache, 0, shared, 1) if shared else None
        with exact_retrieval(self.model):
            out = self.model(input_ids=ids[:, shared:].to(self.device),
                             act_mode=mode[:, shared:].to(self.device), past_key_values=past,
                             use_cache=True, return_hidden=True, logits_to_keep=1)
        self._previous = (list(prompt[0]), out.past_key_values)
        return out.past_key_values, out.hidden[0, -1]

    def _score_chunk(self, cache: DynamicCache, last: torch.Tensor,
                     completions: list[Completion]) -> list[float]:
        width = max(len(ids) for ids, _ in completions)
        ids = torch.full((len(completions), width), self.ids["pad"], dtype=torch.long)
        spans = torch.zeros_like(ids)
        for row, (tokens, kinds) in enumerate(completions):
            ids[row, :len(tokens)] = torch.tensor(tokens)
            spans[row, :len(tokens)] = torch.tensor(kinds)
        past = DynamicCache(ddp_cache_data=[
            (layer.keys.expand(len(completions), -1, -1, -1).contiguous(),
             layer.values.expand(len(completions), -1, -1, -1).contiguous())
            for layer in cache.layers])
        with exact_retrieval(self.model):
            hidden = self.model(input_ids=ids.to(self.device),
                                act_mode=self._act_mode(ids, spans).to(self.device),
                                past_key_values=past, use_cache=True, return_hidden=True,
                                logits_to_keep=1).hidden
        values = []
        for row, (tokens, _) in enumerate(completions):
            states = torch.cat([last[None], hidden[row, :len(tokens) - 1]])
            logits = self.model.lm_head(states).double()
            targets = torch.tensor(tokens, device=logits.device)
            values.append(float(torch.log_softmax(logits, -1).gather(-1, targets[:, None]).sum()))
        return values
