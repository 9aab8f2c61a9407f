"""The registry of confidence scorers the consistency filter can use (issue 18).

A scorer gives each trajectory a confidence in [0, 1] (None: cannot score it), e.g. the
trainer's meta-cognitive head over the trajectory's ACT steps. datagen never imports the
trainer: a module listed in `env_modules` registers the scorer by name (as the trainer
registers its `policy` teacher backend), and `consistency.scorer: NAME` picks it. Like the
teacher registry, this module imports nothing heavy, so the config can check names against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from datagen.types import Trajectory

ConfidenceScorer = Callable[[list["Trajectory"]], list["float | None"]]
ScorerFactory = Callable[[dict[str, Any]], ConfidenceScorer]
_SCORERS: dict[str, ScorerFactory] = {}


def register_scorer(name: str, factory: ScorerFactory) -> None:
    """Make `factory(options) -> scorer` available as `consistency.scorer: name`."""
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"scorer name {name!r} must be a non-empty identifier")
    _SCORERS[name] = factory


def registered_scorers() -> tuple[str, ...]:
    return tuple(_SCORERS)


def make_scorer(name: str, options: dict[str, Any]) -> ConfidenceScorer:
    if name not in _SCORERS:
        raise ValueError(f"unknown confidence scorer {name!r}; registered: "
                         f"{', '.join(_SCORERS) or 'none'}")
    return _SCORERS[name](options)
