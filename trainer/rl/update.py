"""One PPO iteration's learner side, given the rollouts as tensors (trainer.rl.batches):
score them with the rollout weights and the reference, compute advantages, then
`ppo.epochs` passes of minibatch updates. Plain functions of tensors and a module, so the
tests run them without Ray."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from trainer.config import PPOConfig
from trainer.engines import world_size
from trainer.rl.advantages import gae, group_advantages, masked_mean, whiten
from trainer.rl.batches import RolloutBatch
from trainer.rl.losses import clipped_surrogate, clipped_value_loss, kl_penalty


@dataclass
class Scored:
    """Per-token tensors of an iteration's rollouts before any update [N, T]."""

    old_logprobs: torch.Tensor
    old_values: torch.Tensor | None
    ref_logprobs: torch.Tensor | None
    advantages: torch.Tensor
    returns: torch.Tensor | None
    rewards: torch.Tensor        # token rewards, the KL penalty folded in when kl_in=reward


@torch.no_grad()
def score_rollouts(model: Callable, reference: Callable | None, batch: RolloutBatch,
                   ppo: PPOConfig, device: torch.device) -> Scored:
    """Log-probs (and values) of the rollout weights, the reference's log-probs, token
    rewards and advantages, minibatch by minibatch (no gradients)."""
    n, width = batch.input_ids.shape
    old_lp, ref_lp = torch.zeros(n, width), torch.zeros(n, width)
    old_values = torch.zeros(n, width) if ppo.advantage == "gae" else None
    for index in torch.arange(n).split(ppo.minibatch_size):
        tensors = {k: v.to(device) for k, v in batch.select(index).items()}
        cols = tensors["input_ids"].shape[1]
        out = model(tensors["input_ids"], tensors["span_ids"], ppo.temperature, ppo.chunk_size,
                    with_entropy=False)
        old_lp[index, :cols] = out["logprobs"].float().cpu()
        if old_values is not None:
            old_values[index, :cols] = out["values"].float().cpu()
        if reference is not None:
            ref_lp[index, :cols] = reference(tensors["input_ids"], tensors["span_ids"],
                                             ppo.temperature, ppo.chunk_size,
                                             with_entropy=False)["logprobs"].float().cpu()
    mask = batch.mask
    rewards = batch.rewards.clone()
    if reference is not None and ppo.kl_in == "reward" and ppo.kl_coef > 0:
        rewards -= ppo.kl_coef * kl_penalty(old_lp, ref_lp, ppo.kl_estimator) * mask
    returns = None
    if ppo.advantage == "gae":
        advantages, returns = gae(rewards, old_values, mask, ppo.gamma, ppo.lam)
    else:
        totals = (rewards * mask).sum(1)  # the episode's reward (KL included, if folded in)
        per_episode = group_advantages(totals, batch.groups, ppo.advantage)
        advantages = per_episode[:, None] * mask
    if ppo.whiten_advantages and ppo.advantage == "gae":  # group modes are normalised already
        advantages = whiten(advantages, mask)
    return Scored(old_lp, old_values, ref_lp if reference is not None else None, advantages,
                  returns, rewards)


def minibatch_loss(model: Callable, tensors: dict[str, torch.Tensor], ppo: PPOConfig,
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The PPO loss of one minibatch (policy + value + KL-in-loss - entropy bonus)."""
    mask = tensors["mask"]
    out = model(tensors["input_ids"], tensors["span_ids"], ppo.temperature, ppo.chunk_size,
                with_entropy=True)
    policy_loss, stats = clipped_surrogate(out["logprobs"], tensors["old_logprobs"],
                                           tensors["advantages"], mask, ppo.clip_ratio)
    entropy = masked_mean(out["entropy"], mask)
    loss = policy_loss - ppo.entropy_coef * entropy
    stats = {**stats, "policy_loss": policy_loss.detach(), "entropy": entropy.detach()}
    if ppo.advantage == "gae":
        value_loss, value_stats = clipped_value_loss(out["values"], tensors["old_values"],
                                                     tensors["returns"], mask, ppo.value_clip)
        loss = loss + ppo.value_coef * value_loss
        stats.update(value_stats, value_loss=value_loss.detach())
    if "ref_logprobs" in tensors and ppo.kl_in == "loss" and ppo.kl_coef > 0:
        kl = masked_mean(kl_penalty(out["logprobs"], tensors["ref_logprobs"], ppo.kl_estimator),
                         mask)
        loss = loss + ppo.kl_coef * kl
        stats["kl_loss"] = kl.detach()
    return loss, stats


def minibatches_per_epoch(ppo: PPOConfig) -> int:
    return -(-ppo.tasks_per_iteration * ppo.group_size // ppo.minibatch_size)


def update(engine: Any, batch: RolloutBatch, scored: Scored, ppo: PPOConfig,
           device: torch.device, generator: torch.Generator) -> dict[str, float]:
    """`ppo.epochs` shuffled passes of minibatch steps; returns the mean of each statistic
    over the steps, the grad norm included. Needs at least one usable episode."""
    minibatches = minibatches_per_epoch(ppo)
    columns = {"old_logprobs": scored.old_logprobs, "advantages": scored.advantages}
    if scored.old_values is not None:
        columns.update(old_values=scored.old_values, returns=scored.returns)
    if scored.ref_logprobs is not None:
        columns["ref_logprobs"] = scored.ref_logprobs
    sums: dict[str, float] = {}
    steps = 0
    for _ in range(ppo.epochs):
        # A fixed number of minibatches (from the config, not from how many episodes were
        # usable), so every DDP rank takes the same number of optimizer steps.
        for index in torch.randperm(len(batch), generator=generator).tensor_split(minibatches):
            empty = len(index) == 0
            if empty and world_size() == 1:
                continue  # alone: no collective to keep in step, and Adam's momentum would move
            index = torch.zeros(1, dtype=torch.long) if empty else index
            tensors = batch.select(index)
            cols = tensors["input_ids"].shape[1]
            tensors.update({name: value[index, :cols] for name, value in columns.items()})
            tensors = {name: value.to(device) for name, value in tensors.items()}
            loss, stats = minibatch_loss(engine.module, tensors, ppo)
            engine.backward(loss * 0.0 if empty else loss)  # keeps DDP's collectives in step
            stats["grad_norm"] = engine.step()
            stats["loss"] = loss.detach()
            if empty:
                continue
            for name, value in stats.items():
                sums[name] = sums.get(name, 0.0) + float(value)
            steps += 1
    return {name: value / max(steps, 1) for name, value in sums.items()} | {"updates": steps}
