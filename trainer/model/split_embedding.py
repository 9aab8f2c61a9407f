"""Split embeddings: a second input-embedding matrix for tool-call (code/JSON) tokens.

Natural-language reasoning and JSON tool calls use the same tokens very differently (a `{` or
a quote means structure in a call, punctuation in prose). A second embedding matrix, used only
at tool-call positions and initialised as a copy of the base matrix, lets the model learn a
"code mode" reading of the same vocabulary without disturbing the base embedding.

Which positions are in code mode:
- training: tokens of an ACT span from its `<tool_call>` marker to the end of the span
  (`<tool_call> ... </tool_call><|im_end|>\\n`), read from the span labels;
- generation: a state machine over the token stream that enters code mode at `<tool_call>`
  and leaves one token after `<|im_end|>`.
Both rules mark exactly the same tokens of a rendered trajectory, so the model sees at
generation time what it was trained on. Final-answer ACT spans (no `<tool_call>`) stay in the
base mode in both. Without a `tool_call_start_id` the whole ACT span is code mode.
"""

from __future__ import annotations

import torch
from torch import nn

from trainer.contract import ACT


def act_mode_from_spans(input_ids: torch.Tensor, span_ids: torch.Tensor,
                        tool_call_start_id: int | None) -> torch.Tensor:
    """Boolean [B, T]: positions that use the ACT embedding, from span labels.

    Within each contiguous ACT run, code mode starts at the first `<tool_call>` token of the
    run. Vectorised: a cumulative count of markers, re-based at each run start."""
    is_act = span_ids == ACT
    if tool_call_start_id is None:
        return is_act
    is_marker = (input_ids == tool_call_start_id) & is_act
    markers_so_far = torch.cumsum(is_marker.long(), dim=-1)
    previous_act = torch.nn.functional.pad(is_act[:, :-1], (1, 0), value=False)
    run_start = is_act & ~previous_act
    # Count of markers strictly before each run start; non-decreasing, so cummax spreads it
    # over the run.
    base_at_start = torch.where(run_start, markers_so_far - is_marker.long(),
                                torch.zeros_like(markers_so_far))
    base = torch.cummax(base_at_start, dim=-1).values
    return is_act & (markers_so_far - base > 0)


class ToolCallModeMachine:
    """Generation-time mode tracker for a batch of sequences (one state per row).

    `step(tokens)` takes the token each row is about to feed to the model and returns whether
    that token is embedded in code mode."""

    NORMAL, CALL, TAIL = 0, 1, 2

    def __init__(self, batch_size: int, tool_call_start_id: int, im_end_id: int) -> None:
        self.start_id, self.end_id = tool_call_start_id, im_end_id
        self.state = [self.NORMAL] * batch_size

    def step(self, tokens: list[int]) -> list[bool]:
        modes = []
        for row, token in enumerate(tokens):
            state = self.state[row]
            if state == self.NORMAL and token == self.start_id:
                state = self.CALL
            in_code = state != self.NORMAL
            if state == self.TAIL:
                state = self.NORMAL  # the newline after <|im_end|> closed the span
            elif state == self.CALL and token == self.end_id:
                state = self.TAIL
            self.state[row] = state
            modes.append(in_code)
        return modes


def act_mode_from_tokens(token_ids: list[int], tool_call_start_id: int, im_end_id: int,
                         ) -> list[bool]:
    """The state machine run over one token list (used to label generated candidates)."""
    machine = ToolCallModeMachine(1, tool_call_start_id, im_end_id)
    return [machine.step([token])[0] for token in token_ids]


def embed_split(input_ids: torch.Tensor, act_mode: torch.Tensor | None, base: nn.Embedding,
                act: nn.Embedding) -> torch.Tensor:
    """Embed with `act` where `act_mode` is set and `base` elsewhere.

    Both lookups run over the whole batch (a gather each, cheap next to a layer) so that both
    matrices take part in every step, which DDP and ZeRO-3 expect of a parameter."""
    base_embeds = base(input_ids)
    if act_mode is None:
        return base_embeds
    return torch.where(act_mode.unsqueeze(-1), act(input_ids), base_embeds)
