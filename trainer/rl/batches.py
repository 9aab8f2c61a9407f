"""Played episodes -> the learner's token tensors.

The token trace of each episode (datagen.teachers.trace) is the exact sequence the policy saw
and produced. Rollouts record a one-entry top-k for every generated token (the sampled token
and its behaviour log-prob, trainer.agent_backend), so `topk_counts > 0` marks exactly the
generated tokens: the actions PPO scores. The prompt, the observations and the template glue
between turns (`<|im_end|>\\n`, the next assistant header) are context only.

A turn is a maximal run of generated tokens; turn i's reward (trainer.rl.rewards) is placed at
its last token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from datagen.types import Trajectory
    from trainer.rl.rewards import EpisodeReward


@dataclass
class RolloutBatch:
    """Right-padded [N, T] tensors of the usable episodes (`rows`: their indices in the
    iteration's list of trajectories)."""

    input_ids: torch.Tensor
    span_ids: torch.Tensor
    mask: torch.Tensor                 # generated tokens
    rewards: torch.Tensor              # turn rewards at each turn's last generated token
    behaviour_logprobs: torch.Tensor   # as recorded while sampling
    episode_rewards: torch.Tensor      # [N] totals
    groups: list[str]
    rows: list[int]
    dropped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)

    def select(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """The tensors of a minibatch, trimmed to its longest row."""
        width = int(self.mask[index].nonzero()[:, 1].max()) + 1 if bool(self.mask[index].any()) else 1
        return {name: getattr(self, name)[index, :width]
                for name in ("input_ids", "span_ids", "mask", "rewards", "behaviour_logprobs")}


def turn_ends(mask: np.ndarray) -> list[int]:
    """Index of the last token of every run of True in `mask`."""
    ends = np.flatnonzero(mask & ~np.append(mask[1:], False))
    return ends.tolist()


def build_batch(trajectories: list["Trajectory"], rewards: list["EpisodeReward"],
                groups: list[str], pad_id: int, max_len: int) -> RolloutBatch:
    """Tensors of every episode with generated tokens that fits `max_len`; the others are
    counted in `dropped` (no_tokens: the episode never reached the model; too_long)."""
    rows, dropped = [], {"no_tokens": 0, "too_long": 0, "turn_mismatch": 0}
    for index, traj in enumerate(trajectories):
        trace = traj.tokens
        counts = np.frombuffer(trace.topk_counts, dtype=np.int32) if trace is not None else None
        if counts is None or not counts.any():
            dropped["no_tokens"] += 1
        elif len(trace.ids) > max_len:
            dropped["too_long"] += 1
        else:
            rows.append(index)
    width = max((len(trajectories[i].tokens.ids) for i in rows), default=1)
    n = len(rows)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    span_ids = torch.full((n, width), -1, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.bool)
    token_rewards = torch.zeros((n, width))
    behaviour = torch.zeros((n, width))
    for row, index in enumerate(rows):
        trace, reward = trajectories[index].tokens, rewards[index]
        length = len(trace.ids)
        generated = np.frombuffer(trace.topk_counts, dtype=np.int32) > 0
        input_ids[row, :length] = torch.tensor(trace.ids)
        span_ids[row, :length] = torch.tensor(trace.span_ids)
        mask[row, :length] = torch.from_numpy(generated.copy())
        # one entry per generated token (the sampled one): flat logprobs line up with them
        behaviour[row, torch.from_numpy(np.flatnonzero(generated))] = torch.from_numpy(
            np.frombuffer(trace.topk_logprobs, dtype=np.float32).copy())
        ends = turn_ends(generated)
        if len(ends) != len(reward.turn_rewards):  # should not happen: keep the total
            dropped["turn_mismatch"] += 1
            token_rewards[row, ends[-1]] = reward.total
        else:
            token_rewards[row, torch.tensor(ends)] = torch.tensor(reward.turn_rewards)
    return RolloutBatch(input_ids, span_ids, mask, token_rewards, behaviour,
                        torch.tensor([rewards[i].total for i in rows], dtype=torch.float32),
                        [groups[i] for i in rows], rows, dropped)
