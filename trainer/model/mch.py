"""Meta-cognitive head (MCH): a confidence that an ACT step is correct.

One extra attention block reads the backbone's last hidden states and, at the last token of
each tool-call ACT step, emits a logit (the step is correct) and the vector it came from.
It is trained with a binary loss on correct steps (label 1) against mutator negatives
(label 0: the same trajectory with that step's call replaced by a wrong one). At generation
time a low confidence switches the agent to a slower mode (see `trainer.generation`).

The block is narrow (`mch_hidden_size`, default 256): it projects the backbone states down
once, so at 32B scale it costs a fraction of one backbone layer. Queries are only the scored
positions, keys are every position up to each of them (causal), so the cost is
O(steps x length), not O(length^2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_LABEL = -1


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class MetaCognitiveHead(nn.Module):
    """Pre-norm attention block + MLP + scalar score, evaluated at chosen positions."""

    def __init__(self, backbone_size: int, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.down = nn.Linear(backbone_size, hidden_size)
        self.attn_norm = _RMSNorm(hidden_size)
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key_value = nn.Linear(hidden_size, 2 * hidden_size)
        self.attn_out = nn.Linear(hidden_size, hidden_size)
        self.mlp_norm = _RMSNorm(hidden_size)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, 4 * hidden_size), nn.SiLU(),
                                 nn.Linear(4 * hidden_size, hidden_size))
        self.score = nn.Linear(hidden_size, 1)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        return x.view(batch, length, self.num_heads, width // self.num_heads).transpose(1, 2)

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [B, T, H_backbone]; positions [B, S] (token index, -1 = none).

        Returns logits [B, S] and vectors [B, S, hidden_size] (zeros where position is -1)."""
        states = self.down(hidden)
        safe = positions.clamp(min=0)
        picked = states.gather(1, safe.unsqueeze(-1).expand(-1, -1, states.shape[-1]))
        normed_keys = self.attn_norm(states)
        key, value = self.key_value(normed_keys).chunk(2, dim=-1)
        query = self.query(self.attn_norm(picked))
        key_index = torch.arange(states.shape[1], device=hidden.device)
        visible = key_index[None, None, :] <= safe[:, :, None]  # [B, S, T] causal per query
        attended = F.scaled_dot_product_attention(
            self._heads(query), self._heads(key), self._heads(value),
            attn_mask=visible.unsqueeze(1))
        attended = attended.transpose(1, 2).reshape(picked.shape)
        vectors = picked + self.attn_out(attended)
        vectors = vectors + self.mlp(self.mlp_norm(vectors))
        logits = self.score(vectors).squeeze(-1)
        present = positions >= 0
        return logits.masked_fill(~present, 0.0), vectors * present.unsqueeze(-1)


def mch_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Mean binary cross-entropy over labelled steps (labels 0/1; -1 = ignore).

    Returns the loss (0 with a graph when nothing is labelled, so DDP still sees the head)
    and the number of labelled steps."""
    labelled = labels != IGNORE_LABEL
    count = int(labelled.sum())
    if count == 0:
        return logits.sum() * 0.0, 0
    return F.binary_cross_entropy_with_logits(logits[labelled], labels[labelled].float()), count
