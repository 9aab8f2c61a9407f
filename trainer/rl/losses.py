"""PPO's loss terms over generated tokens (`mask`), each a masked mean over the minibatch's
generated tokens, with the statistics metrics.jsonl logs."""

from __future__ import annotations

import torch

from trainer.rl.advantages import masked_mean


def clipped_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor,
                      advantages: torch.Tensor, mask: torch.Tensor, clip: float,
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip (Schulman et al. 2017): mean of max(-A r, -A clip(r, 1-e, 1+e)), r the
    probability ratio to the rollout policy. Also the clip fraction and the approximate KL
    to the rollout policy (k3 estimator)."""
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {"clip_fraction": masked_mean((clipped > unclipped).float(), mask),
                 "approx_kl": masked_mean(torch.exp(-log_ratio) - 1 + log_ratio, mask),
                 "ratio": masked_mean(ratio, mask)}
    return loss, stats


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       mask: torch.Tensor, clip: float,
                       ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """0.5 * mean of max((V - R)^2, (V_clipped - R)^2), V_clipped = V_old + clip(V - V_old,
    -c, c); with clip 0 the plain squared error."""
    unclipped = (values - returns) ** 2
    if clip <= 0:
        return 0.5 * masked_mean(unclipped, mask), {"value_clip_fraction": torch.zeros(())}
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    clipped = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {"value_clip_fraction": masked_mean((clipped > unclipped).float(), mask)}
    return loss, stats


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from the sampled token's log-probs
    (Schulman, "Approximating KL divergence"): k1 = log p - log q (unbiased, can be
    negative), k3 = exp(log q - log p) - (log q - log p) - 1 (unbiased, >= 0, lower variance)."""
    if estimator == "k1":
        return logprobs - ref_logprobs
    if estimator == "k3":
        delta = ref_logprobs - logprobs
        return torch.exp(delta) - delta - 1
    raise ValueError(f"unknown KL estimator {estimator!r} (k1 or k3)")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's next-token distribution, in nats."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)
