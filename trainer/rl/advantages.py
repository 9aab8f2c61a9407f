"""Advantages over generated tokens: GAE with a critic, or a group baseline without one.

Tensors are [B, T] with `mask` true at generated tokens only: prompt, observations and
template glue between turns are not actions, so GAE runs over the generated tokens as one
sequence per episode (a masked position passes the next action's value and advantage through
unchanged), and the value after the last generated token is 0 (the episode is over).
"""

from __future__ import annotations

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) along the generated tokens of
    each row: delta_t = r_t + gamma * V_next - V_t, A_t = delta_t + gamma * lam * A_next.
    Returns (advantages, returns = advantages + values), both 0 outside `mask`."""
    mask = mask.bool()
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    for t in range(values.shape[1] - 1, -1, -1):
        here = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = torch.where(here, advantage, torch.zeros_like(advantage))
        next_value = torch.where(here, values[:, t], next_value)
        next_advantage = torch.where(here, advantage, next_advantage)
    returns = torch.where(mask, advantages + values, torch.zeros_like(values))
    return advantages, returns


def group_advantages(rewards: torch.Tensor, groups: list[str], mode: str,
                     eps: float = 1e-4) -> torch.Tensor:
    """One advantage per episode from the other rollouts of the same task.

    grpo: (r - mean of the group) / (std of the group + eps), the sample std as in GRPO
          (Shao et al. 2024; TRL); a group whose rewards are all equal gets 0.
    rloo: r - mean of the *other* rollouts of the group (Ahmadian et al. 2024), which is
          k / (k - 1) * (r - group mean); no scaling.
    A group of one rollout has no baseline: its advantage is 0."""
    advantages = torch.zeros_like(rewards)
    by_group: dict[str, list[int]] = {}
    for index, group in enumerate(groups):
        by_group.setdefault(group, []).append(index)
    for members in by_group.values():
        if len(members) < 2:
            continue
        index = torch.tensor(members)
        values = rewards[index]
        centred = values - values.mean()
        if mode == "grpo":
            advantages[index] = centred / (values.std() + eps)
        elif mode == "rloo":
            advantages[index] = centred * len(members) / (len(members) - 1)
        else:
            raise ValueError(f"unknown group advantage mode {mode!r} (grpo or rloo)")
    return advantages


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked entries (unbiased variance, as TRL's masked_whiten);
    0 outside the mask."""
    mean = masked_mean(values, mask)
    count = mask.sum().clamp(min=2)
    variance = (((values - mean) ** 2) * mask).sum() / (count - 1)
    return torch.where(mask.bool(), (values - mean) * torch.rsqrt(variance + eps),
                       torch.zeros_like(values))
