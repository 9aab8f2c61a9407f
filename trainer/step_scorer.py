"""A checkpoint as a step scorer (`trainer.step_eval`): one batched forward per group of gold
trajectories, everything else read from it.

Per batch of gold trajectories (right-padded, sorted by length, at most `batch_tokens`):
1. one forward with the cache kept and the final hidden states returned (the logits are
   computed only at REASON/ACT targets, so [B, T, V] never exists): teacher-forced
   log-probabilities, ACT argmax hits, and the MCH at every gold call;
2. hard negatives: the gold prefix up to the call's ACT span is already in the cache, so only
   the wrong call's tokens go through the model (all negatives of a step in one batch), and
   the MCH reads the gold prefix's hidden states followed by theirs. Landmark models decode
   these tokens with retrieval opened to every block, which equals the grouped softmax of a
   full forward, so the score is the one a full forward of the negative gives;
3. the next call at every gold step, greedy, from the cache cut at the step's prompt:
   without landmark attention all steps of the batch decode together (left-padded cache rows
   + attention mask); with it (no padding mask) one step at a time, with the configured
   retrieval, as `AgentPolicy` decodes. A turn gets at most
   min(max_new_tokens, 2 x the gold turn's tokens + 16) tokens: a random model does not run
   to max_new_tokens at every step, and a turn twice the gold length is not the gold call.
   A row leaves the decode batch when its turn ends, and attention reads the cache's grouped
   K/V heads in place (`grouped_query_sdpa_on_cpu`): what a 135M model's eval costs on CPU.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from typing import Iterator, Sequence

import numpy as np
import torch
from transformers import DynamicCache, StaticCache

from trainer.model.landmark import landmark_slots
from trainer.model.split_embedding import ToolCallModeMachine
from trainer.step_eval import ACT, REASON, ExampleScores, GeneratedTurn, GoldExample
from trainer.tokens import TextTokenizer, special_ids

LOGIT_CHUNK = 1024  # target positions per lm_head call in the teacher-forced pass


def _at_least_fp32(values: torch.Tensor) -> torch.Tensor:
    return values if values.dtype == torch.float64 else values.float()


def prefix_cache(model: torch.nn.Module, cache: DynamicCache, row: int, tokens: int,
                 copies: int) -> DynamicCache:
    """A new cache holding row `row`'s first `tokens` regular tokens (and, with landmark
    attention, the landmarks among them), `copies` times."""
    config = model.config
    length = landmark_slots(0, tokens, config.landmark_block_size)[0] \
        if getattr(config, "use_landmark", False) else tokens
    return DynamicCache(ddp_cache_data=[
        (layer.keys[row:row + 1, :, :length].expand(copies, -1, -1, -1).contiguous(),
         layer.values[row:row + 1, :, :length].expand(copies, -1, -1, -1).contiguous())
        for layer in cache.layers])


@contextlib.contextmanager
def exact_retrieval(model: torch.nn.Module) -> Iterator[None]:
    """Landmark decoding that opens every block (= the grouped softmax of a full forward), so
    tokens fed after a cache score as they would in one forward; no-op without landmarks."""
    config = model.config
    landmark = bool(getattr(config, "use_landmark", False))
    saved = getattr(config, "landmark_retrieval_topk", None)
    if landmark:
        config.landmark_retrieval_topk = 1 << 30
    try:
        yield
    finally:
        if landmark:
            config.landmark_retrieval_topk = saved


@contextlib.contextmanager
def grouped_query_sdpa_on_cpu() -> Iterator[None]:
    """Let Transformers' sdpa attention read grouped K/V heads in place on CPU when a mask is
    given (`enable_gqa`), instead of `repeat_kv` copies. Transformers copies whenever there is
    a mask (a CUDA kernel-fallback rule); with a left-padded decode cache that copy is the
    whole cache, every layer, every token: 110 ms against 9 ms per layer for 10 rows x 4.5k
    cached positions of SmolLM2 (3 K/V heads for 9 query heads), bit-identical output."""
    from transformers.integrations import sdpa_attention

    original = sdpa_attention.use_gqa_in_sdpa

    def use_gqa(mask: torch.Tensor | None, key: torch.Tensor, value: torch.Tensor) -> bool:
        return key.device.type == "cpu" or original(mask, key, value)

    sdpa_attention.use_gqa_in_sdpa = use_gqa
    try:
        yield
    finally:
        sdpa_attention.use_gqa_in_sdpa = original


class TorchStepScorer:
    """Scores GoldExamples with an AgentQwen2ForCausalLM (or plain Qwen2) checkpoint."""

    def __init__(self, model: torch.nn.Module, tokenizer: TextTokenizer,
                 max_new_tokens: int = 256, batch_tokens: int = 32_768, max_rows: int = 8,
                 decode_rows: int = 32, max_padding: float = 0.25) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.ids = special_ids(tokenizer)
        self.max_new_tokens, self.batch_tokens = max_new_tokens, batch_tokens
        self.max_rows, self.decode_rows, self.max_padding = max_rows, decode_rows, max_padding
        config = model.config
        self.landmark = bool(getattr(config, "use_landmark", False))
        self.use_mch = bool(getattr(config, "use_mch", False))
        self.seconds: defaultdict[str, float] = defaultdict(float)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def score(self, examples: Sequence[GoldExample]) -> list[ExampleScores]:
        results: list[ExampleScores | None] = [None] * len(examples)
        for batch in self._batches(examples):
            for index, scores in zip(batch, self._score_batch([examples[i] for i in batch])):
                results[index] = scores
        return results  # type: ignore[return-value]

    def _batches(self, examples: Sequence[GoldExample]) -> Iterator[list[int]]:
        """Rows sorted by length, cut when the batch would exceed `batch_tokens` or
        `max_rows`, or when padding would pass `max_padding` of its real tokens: padded
        positions cost the full forward (quadratically in attention), and the batch's decode
        attends over its widest prompt (held-out SmolLM2 trajectories run 1.5k-4.3k tokens;
        one batch of all six padded 25.8k positions for 16.5k real ones)."""
        order = sorted(range(len(examples)), key=lambda i: len(examples[i].ids))
        batch: list[int] = []
        real = 0
        for index in order:
            width = len(examples[index].ids)  # sorted: the newest is the widest
            padded = (len(batch) + 1) * width
            if batch and (padded > self.batch_tokens or len(batch) >= self.max_rows
                          or padded > (1 + self.max_padding) * (real + width)):
                yield batch
                batch, real = [], 0
            batch.append(index)
            real += width
        if batch:
            yield batch

    @torch.inference_mode()
    def _score_batch(self, examples: list[GoldExample]) -> list[ExampleScores]:
        started = time.perf_counter()
        width = max(len(e.ids) for e in examples)
        ids = torch.full((len(examples), width), self.ids["pad"], dtype=torch.long)
        spans = torch.full_like(ids, -1)
        positions = torch.full((len(examples), max(1, *(len(e.calls) for e in examples))), -1)
        for row, example in enumerate(examples):
            ids[row, :len(example.ids)] = torch.tensor(example.ids)
            spans[row, :len(example.ids)] = torch.from_numpy(example.span_ids.astype(np.int64))
            positions[row, :len(example.calls)] = torch.tensor([c.score_at for c in example.calls])
        out = self.model(input_ids=ids.to(self.device), span_ids=spans.to(self.device),
                         use_cache=True, return_hidden=True, logits_to_keep=1,
                         mch_positions=positions.to(self.device) if self.use_mch else None)
        hidden, cache = out.hidden, out.past_key_values
        results = []
        for row, example in enumerate(examples):
            scores = ExampleScores(*self._teacher_forced(hidden[row], example), turns=[])
            if self.use_mch:
                scores.gold_confidence = torch.sigmoid(
                    _at_least_fp32(out.mch_logits[row, :len(example.calls)])).tolist()
            results.append(scores)
        self.seconds["forward"] += time.perf_counter() - started
        if self.use_mch:
            started = time.perf_counter()
            for row, (example, scores) in enumerate(zip(examples, results)):
                scores.negative_confidence = self._negative_confidence(hidden, cache, row, example)
            self.seconds["negatives"] += time.perf_counter() - started
        started = time.perf_counter()
        for scores, turns in zip(results, self._next_calls(hidden, cache, examples)):
            scores.turns = turns
        self.seconds["generate"] += time.perf_counter() - started
        return results

    def _teacher_forced(self, hidden: torch.Tensor, example: GoldExample,
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Log-probabilities of the REASON and ACT tokens and the ACT argmax hits."""
        labels = torch.from_numpy(example.span_ids[1:].astype(np.int64))
        targets = torch.tensor(example.ids[1:])
        index = ((labels == REASON) | (labels == ACT)).nonzero().squeeze(-1)
        logprobs, hits = [], []
        for chunk in index.split(LOGIT_CHUNK):
            logits = _at_least_fp32(self.model.lm_head(hidden[chunk.to(hidden.device)])).cpu()
            wanted = targets[chunk]
            logprobs.append(torch.log_softmax(logits, -1).gather(-1, wanted[:, None]).squeeze(-1))
            hits.append(logits.argmax(-1) == wanted)
        kinds = labels[index]
        logprob = torch.cat(logprobs) if logprobs else torch.zeros(0)
        hit = torch.cat(hits) if hits else torch.zeros(0, dtype=torch.bool)
        return (logprob[kinds == REASON].numpy(), logprob[kinds == ACT].numpy(),
                hit[kinds == ACT].numpy())

    def _prefix_cache(self, cache: DynamicCache, row: int, tokens: int, copies: int,
                      ) -> DynamicCache:
        return prefix_cache(self.model, cache, row, tokens, copies)

    def _negative_confidence(self, hidden: torch.Tensor, cache: DynamicCache, row: int,
                             example: GoldExample) -> list[float]:
        """MCH confidence of every hard negative of `example` (see the module docstring)."""
        confidence = [0.0] * len(example.negatives)
        groups: defaultdict[int, list[int]] = defaultdict(list)
        for index, negative in enumerate(example.negatives):
            groups[negative.call_index].append(index)
        for call_index, members in groups.items():
            prefix = example.calls[call_index].act_start
            rows = [example.negatives[i].act_ids for i in members]
            ids = torch.full((len(rows), max(map(len, rows))), self.ids["pad"], dtype=torch.long)
            spans = torch.full_like(ids, -1)
            for i, act_ids in enumerate(rows):
                ids[i, :len(act_ids)] = torch.tensor(act_ids)
                spans[i, :len(act_ids)] = ACT
            past = self._prefix_cache(cache, row, prefix, len(rows))
            with exact_retrieval(self.model):
                tail = self.model(input_ids=ids.to(self.device), span_ids=spans.to(self.device),
                                  past_key_values=past, use_cache=True, return_hidden=True,
                                  logits_to_keep=1).hidden
            states = torch.cat([hidden[row:row + 1, :prefix].expand(len(rows), -1, -1), tail], 1)
            at = torch.tensor([[prefix + len(act_ids) - 1] for act_ids in rows], device=self.device)
            logits, _ = self.model.mch(states, at)
            for i, value in zip(members, torch.sigmoid(_at_least_fp32(logits[:, 0])).tolist()):
                confidence[i] = value
        return confidence

    def _next_calls(self, hidden: torch.Tensor, cache: DynamicCache,
                    examples: list[GoldExample]) -> list[list[GeneratedTurn]]:
        """The greedy turn at every gold call step of the batch."""
        jobs = [(row, call.prompt_len, min(self.max_new_tokens,
                                           2 * (call.score_at + 1 - call.prompt_len) + 16))
                for row, example in enumerate(examples) for call in example.calls]
        sequences: list[list[int]] = []
        if self.landmark:
            for job in jobs:
                sequences += self._decode(hidden, cache, [job])
        else:
            for first in range(0, len(jobs), self.decode_rows):
                sequences += self._decode(hidden, cache, jobs[first:first + self.decode_rows])
        turns: list[list[GeneratedTurn]] = [[] for _ in examples]
        for (row, _, _), ids in zip(jobs, sequences):
            closed = bool(ids) and ids[-1] == self.ids["im_end"]
            turns[row].append(GeneratedTurn(self.tokenizer.decode(ids[:-1] if closed else ids), closed))
        return turns

    def _left_padded_cache(self, cache: DynamicCache, jobs: list[tuple[int, int, int]],
                           ) -> tuple[StaticCache, torch.Tensor]:
        """Rows of `cache` cut at each job's prompt, right-aligned in a preallocated cache
        with room for the longest continuation, and their padding mask. (A dynamic cache
        re-concatenates every row at every step: 190 ms a step at 32 rows x 4k tokens.)"""
        width = max(length for _, length, _ in jobs)
        mask = torch.zeros((len(jobs), width), dtype=torch.long, device=self.device)
        for i, (_, length, _) in enumerate(jobs):
            mask[i, width - length:] = 1
        past = StaticCache(config=self.model.config,
                           max_cache_len=width + max(cap for _, _, cap in jobs))
        for layer, target in zip(cache.layers, past.layers):
            keys = layer.keys.new_zeros((len(jobs), layer.keys.shape[1], width, layer.keys.shape[-1]))
            values = layer.values.new_zeros((len(jobs), *layer.values.shape[1:2], width,
                                             layer.values.shape[-1]))
            for i, (row, length, _) in enumerate(jobs):
                keys[i, :, width - length:] = layer.keys[row, :, :length]
                values[i, :, width - length:] = layer.values[row, :, :length]
            target.update(keys, values)
        return past, mask

    def _decode(self, hidden: torch.Tensor, cache: DynamicCache, jobs: list[tuple[int, int, int]],
                ) -> list[list[int]]:
        """Greedy continuations of the jobs' prompts (one job, or several without landmarks)."""
        if len(jobs) == 1 and self.landmark:
            (row, length, _), = jobs
            past, mask = self._prefix_cache(cache, row, length, 1), None
        else:
            past, mask = self._left_padded_cache(cache, jobs)
        states = torch.stack([hidden[row, length - 1] for row, length, _ in jobs])
        tokens = self.model.lm_head(states).argmax(-1).tolist()
        next_position = torch.tensor([[length] for _, length, _ in jobs], device=self.device)
        machine = ToolCallModeMachine(len(jobs), self.ids["tool_call_start"], self.ids["im_end"])
        generated: list[list[int]] = [[] for _ in jobs]
        live = list(range(len(jobs)))  # the jobs still decoding, in the order of the cache rows
        for step in range(max(cap for _, _, cap in jobs)):
            for job, token in zip(live, tokens):
                generated[job].append(token)
            keep = [row for row, job in enumerate(live) if generated[job][-1] != self.ids["im_end"]
                    and len(generated[job]) < jobs[job][2]]
            if not keep:
                break
            if len(keep) < len(live):
                # Finished rows leave the batch: a turn that closed early, or one with a short
                # budget, no longer pays for the longest one (the other rows are unchanged).
                index = torch.tensor(keep, device=self.device)
                for layer in past.layers:  # StaticLayer has no batch_select_indices
                    layer.keys, layer.values = layer.keys[index], layer.values[index]
                    layer.batch_size = len(keep)
                mask = mask[index] if mask is not None else None
                next_position = next_position[index]
                machine.state = [machine.state[row] for row in keep]
                live, tokens = [live[row] for row in keep], [tokens[row] for row in keep]
            kwargs = {}
            if mask is not None:
                mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
                kwargs = dict(attention_mask=mask, position_ids=next_position + step)
            with grouped_query_sdpa_on_cpu():
                out = self.model(input_ids=torch.tensor([tokens], device=self.device).T,
                                 act_mode=torch.tensor([machine.step(tokens)],
                                                       device=self.device).T,
                                 past_key_values=past, use_cache=True, logits_to_keep=1, **kwargs)
            past, tokens = out.past_key_values, out.logits[:, -1].argmax(-1).tolist()
        return generated
