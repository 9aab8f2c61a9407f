"""Preference losses (the DPO recipe's objective), computed from the model's final hidden
states inside its own forward, chunked like the SAD losses.

A batch holds P pairs as 2P rows, [chosen rows; rejected rows], each row prompt +
completion; `completion_mask` marks the completion tokens. A row's sequence log-probability
is the sum of log p(token) over its completion tokens (position t-1 predicts token t), so
the prompt conditions both completions and never counts itself. With the reference's sums
(a frozen copy's forward, or precomputed):

    chosen_ratio = logp(chosen) - ref_logp(chosen), rejected_ratio likewise
    sigmoid (DPO): -(1 - eps) * log sigmoid(beta * d) - eps * log sigmoid(-beta * d),
                   d = chosen_ratio - rejected_ratio; eps = label smoothing (conservative
                   DPO: the label is wrong with probability eps; 0 = TRL's "sigmoid")
    ipo:           (d' - 1 / (2 * beta))^2, d' the ratios divided by their completion
                   lengths (TRL's length-normalised IPO)
    rpo_alpha:     + alpha * NLL of the chosen completions (mean over their tokens; TRL's
                   "sft" loss type added with weight alpha: RPO)

rewards = beta * ratio (detached). Pairs are weighted per source and per kind: the pair
losses average as sum(w * loss) / sum(n), w = source weight x kind weight, n = the source
weight (trainer.pair_weights: source weights set shares, kind weights scale absolutely), and
the NLL's tokens carry their pair's w and n likewise; with all weights 1 every term equals
TRL 1.16's (tests/trainer/test_preference_loss.py runs TRL on the same batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
import torch.nn.functional as F
from torch import nn

from trainer.losses import LossSettings, TeacherSignal, per_token_losses

LossType = Literal["sigmoid", "ipo"]


@dataclass(frozen=True)
class PreferenceSettings:
    loss_type: LossType = "sigmoid"
    beta: float = 0.1
    label_smoothing: float = 0.0
    rpo_alpha: float = 0.0
    chunk_size: int = 512
    recompute: bool | None = None  # None: recompute chunk logits when the full logits are large


def token_logps(hidden: torch.Tensor, head: nn.Module, input_ids: torch.Tensor,
                settings: PreferenceSettings) -> torch.Tensor:
    """log p(token t) at every prediction position [B, T-1], chunked (trainer.losses)."""
    chunked = LossSettings("sft", chunk_size=settings.chunk_size, recompute=settings.recompute)
    return -per_token_losses(hidden, head, input_ids, TeacherSignal("onehot"), chunked)


def completion_sums(logps: torch.Tensor, completion_mask: torch.Tensor,
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row sum of completion-token log-probabilities [B] and completion lengths [B]."""
    mask = completion_mask[:, 1:].to(logps.dtype)
    return (logps * mask).sum(dim=1), mask.sum(dim=1)


def pair_losses(chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor,
                ref_rejected: torch.Tensor, chosen_tokens: torch.Tensor,
                rejected_tokens: torch.Tensor, settings: PreferenceSettings,
                ) -> dict[str, torch.Tensor]:
    """Per-pair loss [P] and rewards [P] from sequence log-probabilities (module doc)."""
    chosen_ratio = chosen - ref_chosen.to(chosen.dtype)
    rejected_ratio = rejected - ref_rejected.to(rejected.dtype)
    beta = settings.beta
    if settings.loss_type == "sigmoid":
        delta = chosen_ratio - rejected_ratio
        eps = settings.label_smoothing
        loss = -(1 - eps) * F.logsigmoid(beta * delta) - eps * F.logsigmoid(-beta * delta)
    elif settings.loss_type == "ipo":
        delta = chosen_ratio / chosen_tokens.clamp(min=1.0) - \
            rejected_ratio / rejected_tokens.clamp(min=1.0)
        loss = (delta - 1 / (2 * beta)) ** 2
    else:
        raise ValueError(f"unknown preference loss type {settings.loss_type!r}")
    return {"loss": loss, "chosen_rewards": beta * chosen_ratio.detach(),
            "rejected_rewards": beta * rejected_ratio.detach()}


def weighted_mean(values: torch.Tensor, weight: torch.Tensor,
                  norm: torch.Tensor | None = None) -> torch.Tensor:
    """sum(weight * values) / sum(norm); norm defaults to the weights (a weighted mean)."""
    weight = weight.to(values.dtype)
    norm = weight if norm is None else norm.to(values.dtype)
    return (values * weight).sum() / norm.sum().clamp(min=1e-6)


def make_preference_loss_fn(input_ids: torch.Tensor, completion_mask: torch.Tensor,
                            ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
                            pair_weight: torch.Tensor, settings: PreferenceSettings,
                            pair_norm: torch.Tensor | None = None,
                            ) -> Callable[[torch.Tensor, nn.Module], tuple[torch.Tensor, dict]]:
    """The `loss_fn(hidden, lm_head)` the model calls inside its forward for a pair batch;
    returns the scalar loss and per-pair parts (log-probabilities, rewards, losses).
    `pair_norm` (default `pair_weight`): each pair's share of the normaliser (module doc)."""
    pair_norm = pair_weight if pair_norm is None else pair_norm

    def loss_fn(hidden: torch.Tensor, head: nn.Module) -> tuple[torch.Tensor, dict]:
        logps = token_logps(hidden, head, input_ids, settings)
        sums, lengths = completion_sums(logps, completion_mask)
        pairs = sums.shape[0] // 2
        parts = pair_losses(sums[:pairs], sums[pairs:], ref_chosen, ref_rejected,
                            lengths[:pairs], lengths[pairs:], settings)
        loss = preference = weighted_mean(parts["loss"], pair_weight, pair_norm)
        nll = torch.zeros((), dtype=logps.dtype, device=logps.device)
        if settings.rpo_alpha > 0:
            tokens = completion_mask[:pairs, 1:].to(logps.dtype)
            token_weight = tokens * pair_weight.to(logps.dtype).unsqueeze(1)
            token_norm = tokens * pair_norm.to(logps.dtype).unsqueeze(1)
            nll = -(logps[:pairs] * token_weight).sum() / token_norm.sum().clamp(min=1e-6)
            loss = loss + settings.rpo_alpha * nll
        parts.update(chosen_logps=sums[:pairs].detach(), rejected_logps=sums[pairs:].detach(),
                     preference=preference.detach(), nll=nll.detach(),
                     pair_loss=parts["loss"].detach())
        return loss, parts
    return loss_fn


def sequence_logps_fn(input_ids: torch.Tensor, completion_mask: torch.Tensor,
                      settings: PreferenceSettings,
                      ) -> Callable[[torch.Tensor, nn.Module], tuple[torch.Tensor, dict]]:
    """A `loss_fn` whose "loss" is each row's completion log-probability [B]: the
    reference's forward (frozen copy, or the precompute pass) calls the model with it."""
    def loss_fn(hidden: torch.Tensor, head: nn.Module) -> tuple[torch.Tensor, dict]:
        sums, _ = completion_sums(token_logps(hidden, head, input_ids, settings), completion_mask)
        return sums, {}
    return loss_fn
