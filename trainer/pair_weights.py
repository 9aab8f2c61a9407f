"""Loss weights of preference pairs by their `kind` (the DPO recipe's `dpo.kind_weights`).

A kind weight is a glob pattern on the pair's `kind` column (`benign_*`,
`benign_contrast_*`, `destroy_data`, `type_error`) and a weight >= 0; the first pattern
that matches, in the order written, decides, and a kind no pattern matches weighs 1.

Kind weights scale a pair's loss absolutely: the batch loss is
sum(source_w * kind_w * loss) / sum(source_w), so with all kind weights 1 it is the source
weighting as before (and TRL's loss when those are 1 too), a kind weighted 2 doubles its
pairs' contribution even in a micro-batch that holds nothing else, and 0 takes its pairs out
of the gradient. (Source weights, normalised by their sum, only set shares within a batch:
with 2 pairs per micro-batch, a batch of one kind would cancel a normalised weight.) Pairs of
weight 0 are also dropped from the feed (a filter), so they cost no forward.

Pure Python (the config and Ray Data workers import it).
"""

from __future__ import annotations

import math
import re
from fnmatch import fnmatchcase

KindWeights = tuple[tuple[str, float], ...]   # (pattern, weight), in the order written

# Kinds are identifiers (`benign_contrast_drop_table`); a pattern may add `*`, `?` and
# `[...]` / `[!...]` classes. Anything else (spaces, `/`, an unclosed `[`) is a typo.
_PATTERN = re.compile(r"(?:[A-Za-z0-9_.\-]|\*|\?|\[!?[A-Za-z0-9_.\-]+\])+")


def check_kind_weights(weights: dict[str, float]) -> dict[str, float]:
    """The config's validation: every pattern well-formed, every weight finite and >= 0."""
    for pattern, weight in weights.items():
        if not isinstance(pattern, str) or not _PATTERN.fullmatch(pattern):
            raise ValueError(f"pattern {pattern!r} is not a glob on kind names (letters, "
                             f"digits, _ . -, and * ? [...])")
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"pattern {pattern!r}: weight {weight} must be finite and >= 0 "
                             f"(0 drops the kind)")
    return weights


def matching_pattern(kind: str | None, weights: KindWeights) -> int:
    """Index of the first pattern that matches `kind`, -1 if none does."""
    for index, (pattern, _) in enumerate(weights):
        if fnmatchcase(kind or "", pattern):
            return index
    return -1


def kind_weight(kind: str | None, weights: KindWeights) -> float:
    """The weight of one kind: the first matching pattern's, else 1."""
    index = matching_pattern(kind, weights)
    return weights[index][1] if index >= 0 else 1.0


def dropped(kinds: list[str | None], weights: KindWeights) -> list[bool]:
    """Which pairs a kind weight of 0 filters out of the feed."""
    zero = {kind: kind_weight(kind, weights) == 0.0 for kind in set(kinds)}
    return [zero[kind] for kind in kinds]
