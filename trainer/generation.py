"""A checkpoint as an agent policy: one assistant turn at a time, with the model's
modifications active at generation time.

- split embeddings: the prompt's code-mode positions come from its span labels (the same
  rule as training); generated tokens go through the `<tool_call>` state machine;
- landmark attention: the model inserts landmarks as the KV cache grows and decodes with
  top-k block retrieval (trainer.model.landmark);
- hybrid mode: the first (greedy) turn switches to the slow path when it is truncated (no
  `<|im_end|>` within the token budget), unparsable (a `<tool_call>` that datagen's parser
  rejects), an invalid call (unknown tool or schema errors, when the tools are known), or, on
  a model with an MCH, a well-formed call the head scores under the threshold. The slow path
  samples `num_candidates` more turns; a well-formed turn beats a broken one, then the MCH's
  confidence decides (the greedy turn competes too; ties keep the earlier turn). `Turn`
  records the trigger and what the slow path cost, so an evaluation can report the switch
  rate per trigger and the latency overhead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from datagen.chat import parse_assistant
from mutators import validate

from trainer.model import AgentQwen2ForCausalLM
from trainer.model.split_embedding import ToolCallModeMachine, act_mode_from_spans, \
    act_mode_from_tokens
from trainer.tokens import TextTokenizer, special_ids, tokenize_with_spans


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 256
    temperature: float = 0.0            # 0 = greedy for the first attempt
    hybrid: bool = True                 # slow path on broken turns, and on low MCH confidence
    threshold: float | None = None      # default: the model config's mch_threshold
    num_candidates: int | None = None   # default: the model config's mch_num_candidates
    candidate_temperature: float = 0.8  # sampling temperature of the slow path
    seed: int = 0


@dataclass
class Turn:
    text: str                           # the assistant turn, up to and including <|im_end|>
    confidence: float | None            # MCH confidence of the kept turn (None: not scored)
    switched: bool                      # the slow path ran
    seconds: float                      # wall time of the whole turn
    slow_seconds: float                 # of which the slow path
    ids: list[int] = field(default_factory=list)  # the kept turn's token ids
    # why the slow path ran: truncated | unparsable | invalid_call | low_confidence (the
    # first that applies, in that order); None when it did not run
    trigger: str | None = None
    problem: str | None = None          # what is wrong with the kept turn (None: well-formed)
    # log-prob of each kept token under the distribution it was sampled from (behaviour policy)
    logprobs: list[float] = field(default_factory=list)


class AgentPolicy:
    """Generates assistant turns from a rendered conversation (text + spans)."""

    def __init__(self, model: AgentQwen2ForCausalLM, tokenizer: TextTokenizer,
                 config: GenerationConfig = GenerationConfig()) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config
        self.ids = special_ids(tokenizer)
        (newline_ids,), _ = tokenizer.encode(["\n"])
        self.newline = newline_ids[-1]  # closes the ACT span after <|im_end|>
        self.generator = torch.Generator().manual_seed(config.seed)
        model_config = model.config
        self.use_mch = config.hybrid and getattr(model_config, "use_mch", False)
        self.threshold = config.threshold if config.threshold is not None else \
            getattr(model_config, "mch_threshold", 0.5)
        self.num_candidates = config.num_candidates or getattr(model_config, "mch_num_candidates", 4)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_prompt(self, text: str, spans: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids [1, T] and code-mode flags [1, T] of a rendered conversation."""
        ids, labels = tokenize_with_spans(self.tokenizer, [text], [spans])
        input_ids = torch.tensor([ids[0]], dtype=torch.long)
        span_ids = torch.tensor(labels[0], dtype=torch.long).unsqueeze(0)
        act_mode = act_mode_from_spans(input_ids, span_ids, self.ids["tool_call_start"])
        return input_ids.to(self.device), act_mode.to(self.device)

    def _pick(self, logits: torch.Tensor, temperature: float) -> torch.Tensor:
        if temperature <= 0:
            return logits.argmax(-1)
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        return torch.multinomial(probs.cpu(), 1, generator=self.generator).squeeze(-1).to(logits.device)

    @torch.no_grad()
    def sample(self, input_ids: torch.Tensor, act_mode: torch.Tensor, count: int,
               temperature: float, max_new_tokens: int | None = None) -> list[list[int]]:
        """`count` continuations decoded in lockstep with a KV cache; each ends at
        <|im_end|> (included) or after `max_new_tokens` (default: the config's)."""
        return self.sample_scored(input_ids, act_mode, count, temperature, max_new_tokens)[0]

    @torch.no_grad()
    def sample_scored(self, input_ids: torch.Tensor, act_mode: torch.Tensor, count: int,
                      temperature: float, max_new_tokens: int | None = None,
                      ) -> tuple[list[list[int]], list[list[float]]]:
        """`sample`, and each generated token's log-probability under the distribution it
        was drawn from (softmax of logits / temperature; of the logits when greedy): the
        behaviour policy's log-probs an RL learner compares its own against."""
        ids, modes = input_ids.expand(count, -1), act_mode.expand(count, -1)
        out = self.model(input_ids=ids, act_mode=modes, use_cache=True, logits_to_keep=1)
        cache, logits = out.past_key_values, out.logits[:, -1]
        machine = ToolCallModeMachine(count, self.ids["tool_call_start"], self.ids["im_end"])
        generated: list[list[int]] = [[] for _ in range(count)]
        logprobs: list[list[float]] = [[] for _ in range(count)]
        done = [False] * count
        for _ in range(max_new_tokens or self.config.max_new_tokens):
            chosen = self._pick(logits, temperature)
            scale = temperature if temperature > 0 else 1.0
            chosen_logprobs = torch.log_softmax(logits.float() / scale, dim=-1).gather(
                -1, chosen[:, None]).squeeze(-1).tolist()
            tokens = [self.ids["pad"] if done[row] else tok for row, tok in enumerate(chosen.tolist())]
            for row, token in enumerate(tokens):
                if not done[row]:
                    generated[row].append(token)
                    logprobs[row].append(chosen_logprobs[row])
                    done[row] = token == self.ids["im_end"]
            if all(done):
                break
            mode = torch.tensor([machine.step(tokens)], device=self.device).T
            step = torch.tensor([tokens], device=self.device).T
            out = self.model(input_ids=step, act_mode=mode, past_key_values=cache,
                             use_cache=True, logits_to_keep=1)
            cache, logits = out.past_key_values, out.logits[:, -1]
        return generated, logprobs

    @torch.no_grad()
    def confidence(self, input_ids: torch.Tensor, act_mode: torch.Tensor,
                   turns: list[list[int]]) -> list[float | None]:
        """MCH confidence of each turn that makes a tool call (None for the others), read
        at the newline that closes the ACT span, as in training."""
        scored = [i for i, t in enumerate(turns) if self.ids["tool_call_start"] in t
                  and t and t[-1] == self.ids["im_end"]]
        result: list[float | None] = [None] * len(turns)
        if not scored:
            return result
        rows = [turns[i] + [self.newline] for i in scored]
        width = input_ids.shape[1] + max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.ids["pad"], dtype=torch.long, device=self.device)
        modes = torch.zeros_like(ids, dtype=torch.bool)
        positions = []
        for row, turn in enumerate(rows):
            end = input_ids.shape[1] + len(turn)
            ids[row, :end] = torch.cat([input_ids[0], torch.tensor(turn, device=self.device)])
            turn_modes = act_mode_from_tokens(turn, self.ids["tool_call_start"], self.ids["im_end"])
            modes[row, :end] = torch.cat([act_mode[0], torch.tensor(turn_modes, device=self.device)])
            positions.append([end - 1])
        out = self.model(input_ids=ids, act_mode=modes, logits_to_keep=1,
                         mch_positions=torch.tensor(positions, device=self.device))
        for row, index in enumerate(scored):
            result[index] = float(torch.sigmoid(out.mch_logits[row, 0]))
        return result

    def act(self, text: str, spans: list[dict], tools: list[dict[str, Any]] | None = None,
            max_new_tokens: int | None = None) -> Turn:
        """The next assistant turn for a conversation that ends with the assistant header;
        `tools` (the specs offered) lets the hybrid mode catch invalid calls too."""
        started = time.perf_counter()
        input_ids, act_mode = self.encode_prompt(text, spans)
        return self._turn(input_ids, act_mode, max_new_tokens, started, tools)

    def act_on_tokens(self, prompt_ids: list[int], span_ids: list[int],
                      max_new_tokens: int | None = None,
                      tools: list[dict[str, Any]] | None = None) -> Turn:
        """The next assistant turn for an exact token prompt with its span kind per token
        (an episode's token trace, as datagen's LLM teachers keep it): no re-tokenising."""
        started = time.perf_counter()
        input_ids = torch.tensor([prompt_ids], dtype=torch.long)
        span_tensor = torch.tensor([span_ids], dtype=torch.long)
        act_mode = act_mode_from_spans(input_ids, span_tensor, self.ids["tool_call_start"])
        return self._turn(input_ids.to(self.device), act_mode.to(self.device), max_new_tokens,
                          started, tools)

    def problem(self, ids: list[int], tools: list[dict[str, Any]] | None = None) -> str | None:
        """What makes a generated turn unusable ("truncated", "unparsable", "invalid_call"),
        or None: a closed final answer or a well-formed call (valid when `tools` is given)."""
        if not ids or ids[-1] != self.ids["im_end"]:
            return "truncated"
        parsed = parse_assistant(self.tokenizer.decode(ids[:-1]))
        if parsed.error is not None:
            return "unparsable"
        if parsed.call is None or tools is None:
            return None
        tool = next((t for t in tools if t.get("function", {}).get("name") == parsed.call.name),
                    None)
        return "invalid_call" if tool is None or validate(parsed.call.as_dict(), tool) else None

    def _trigger(self, problem: str | None, confidence: float | None) -> str | None:
        if not self.config.hybrid:
            return None
        if problem is not None:
            return problem
        return "low_confidence" if confidence is not None and confidence < self.threshold \
            else None

    def _turn(self, input_ids: torch.Tensor, act_mode: torch.Tensor,
              max_new_tokens: int | None, started: float,
              tools: list[dict[str, Any]] | None = None) -> Turn:
        """Greedy (or configured) turn, then the slow path when it is broken or, with an MCH,
        not trusted (see the module docstring)."""
        turns, logprobs = self.sample_scored(input_ids, act_mode, 1, self.config.temperature,
                                             max_new_tokens)
        confidences = self.confidence(input_ids, act_mode, turns) if self.use_mch else [None]
        problems = [self.problem(turns[0], tools)]
        trigger = self._trigger(problems[0], confidences[0])
        slow = 0.0
        if trigger is not None:
            slow_started = time.perf_counter()
            candidates, candidate_logprobs = self.sample_scored(
                input_ids, act_mode, self.num_candidates, self.config.candidate_temperature,
                max_new_tokens)
            turns, logprobs = turns + candidates, logprobs + candidate_logprobs
            confidences = confidences + (self.confidence(input_ids, act_mode, candidates)
                                         if self.use_mch else [None] * len(candidates))
            problems = problems + [self.problem(turn, tools) for turn in candidates]
            slow = time.perf_counter() - slow_started
        best = max(range(len(turns)), key=lambda i: (
            problems[i] is None, -1.0 if confidences[i] is None else confidences[i]))
        return Turn(self.tokenizer.decode(turns[best]), confidences[best], trigger is not None,
                    time.perf_counter() - started, slow, turns[best], trigger, problems[best],
                    logprobs[best])
