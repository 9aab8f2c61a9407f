"""Curriculum by trajectory complexity, with a pacing schedule (off by default).

Each row carries a `complexity` score (tool-call steps, assistant tokens, teacher entropy;
see `trainer.tokens.complexity`). The driver computes quantiles of the score once; at
training step s the sampler admits rows whose score is below the quantile
`pacing(s / total)`: the easiest `start_fraction` of the data first, growing to all of it
after `ramp_fraction` of training (linear or square-root pacing, Platanios et al. 2019).
Rows above the current threshold are dropped from the batch, which costs reading them but
keeps the stream a plain Ray Data stream (no global sort, no per-step re-planning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
import torch


def pacing_fraction(progress: float, start_fraction: float, ramp_fraction: float,
                    schedule: Literal["linear", "root"] = "linear") -> float:
    """Fraction of the (easiest-first) data available at `progress` in [0, 1]."""
    if ramp_fraction <= 0:
        return 1.0
    ramp = min(max(progress / ramp_fraction, 0.0), 1.0)
    if schedule == "root":
        return min(1.0, math.sqrt(start_fraction ** 2 + (1 - start_fraction ** 2) * ramp))
    return min(1.0, start_fraction + (1 - start_fraction) * ramp)


@dataclass
class CurriculumSampler:
    """Admits rows by complexity according to the pacing schedule."""

    quantiles: Sequence[float]          # complexity at fractions 0, 1/(n-1), ..., 1
    total_steps: int
    start_fraction: float = 0.3
    ramp_fraction: float = 0.5
    schedule: Literal["linear", "root"] = "linear"

    @classmethod
    def from_scores(cls, scores: Sequence[float], total_steps: int, points: int = 101,
                    **options) -> "CurriculumSampler":
        values = np.quantile(np.asarray(scores, dtype=np.float64), np.linspace(0, 1, points))
        return cls(quantiles=values.tolist(), total_steps=total_steps, **options)

    def threshold(self, step: int) -> float:
        fraction = pacing_fraction(step / max(self.total_steps, 1), self.start_fraction,
                                   self.ramp_fraction, self.schedule)
        if fraction >= 1.0:
            return float("inf")
        return float(np.interp(fraction, np.linspace(0, 1, len(self.quantiles)), self.quantiles))

    def admit(self, complexity: torch.Tensor, step: int) -> torch.Tensor:
        """Boolean mask of the rows of a batch admitted at `step`."""
        return complexity <= self.threshold(step)
