"""Hard-negative stage: three typed negatives for every correct tool call, as rows.

For each successful trajectory the environment is replayed from `reset`: before each step the
mutators get the call, its tool, the other tools and the live environment (so logical errors
use entities that really exist and are verified to change the observation), then the correct
call is executed to move on. Each negative becomes a `negatives` row and a `preferences` row
(prompt up to the step; chosen = the correct turn; rejected = the same reasoning with the
wrong call), which is also the meta-cognitive head's "incorrect step" label.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson

from datagen.config import NegativesConfig
from datagen.envs import Environment
from datagen.preferences import TrajectoryView, negative_preference
from datagen.teachers import EnvPool
from datagen.teachers.base import describe_exception
from datagen.types import ToolCall, Trajectory, stable_seed
from mutators import ALL_KINDS, KINDS, Negative, mutate_report


@dataclass
class NegativeBatch:
    """Rows for the negatives and preferences tables, plus per-kind counts for the summary."""

    negatives: list[dict[str, Any]] = field(default_factory=list)
    preferences: list[dict[str, Any]] = field(default_factory=list)
    produced: Counter = field(default_factory=Counter)
    impossible: Counter = field(default_factory=Counter)
    reasons: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    errors: int = 0

    def stats(self) -> dict[str, Any]:
        kinds = sorted(set(self.produced) | set(self.impossible))
        return {"kinds": {k: {"produced": self.produced[k], "impossible": self.impossible[k]}
                          for k in kinds},
                "top_impossible": {k: dict(self.reasons[k].most_common(3)) for k in kinds
                                   if self.reasons[k]},
                "replay_errors": self.errors}


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def negative_row(traj: Trajectory, step: int, call: ToolCall, negative: Negative) -> dict:
    return {
        "trajectory_id": traj.id, "env": traj.task.env, "step": step, "kind": negative.kind,
        "subkind": negative.subkind, "path": negative.path, "tool": call.name,
        "original": _json(call.as_dict()), "mutated": _json(negative.call),
        "original_value": _json(negative.original), "mutated_value": _json(negative.mutated),
        "errors": list(negative.errors), "schema_valid": negative.schema_valid,
        "outcome_changed": negative.outcome_changed, "description": negative.description,
    }


def _short_reason(reason: str) -> str:
    return reason.split(" (", 1)[0][:120]


class NegativeStage:
    """Runs the mutators over a batch of trajectories (one environment instance per family)."""

    def __init__(self, config: NegativesConfig, run_seed: int) -> None:
        self.config = config
        self.run_seed = run_seed
        self.kinds = ALL_KINDS if config.extra_kinds else KINDS
        self.kinds = tuple(k for k in self.kinds if k in config.kinds or k not in KINDS)

    def run(self, trajectories: list[Trajectory], envs: EnvPool) -> NegativeBatch:
        batch = NegativeBatch()
        for traj in trajectories:
            if traj.success:
                try:
                    self._replay(traj, envs.get(traj.task.env), batch)
                except Exception as exc:  # an env that breaks on replay costs its rows only
                    batch.errors += 1
                    batch.reasons["replay"][_short_reason(describe_exception(exc))] += 1
        return batch

    def _replay(self, traj: Trajectory, env: Environment, batch: NegativeBatch) -> None:
        env.reset(traj.task)
        view = TrajectoryView(traj)
        tools = {tool["function"]["name"]: tool for tool in traj.tools}
        for index, step in enumerate(traj.steps):
            if step.call is None:
                continue
            report = mutate_report(step.call.as_dict(), tools[step.call.name],
                                   seed=stable_seed(self.run_seed, traj.id, index),
                                   env=env if self.config.execute else None,
                                   other_tools=traj.tools, kinds=self.kinds,
                                   max_env_checks=self.config.max_env_checks)
            for negative in report.negatives:
                batch.produced[negative.kind] += 1
                batch.negatives.append(negative_row(traj, index, step.call, negative))
                batch.preferences.append(negative_preference(view, index, negative))
            for kind, reason in report.impossible.items():
                batch.impossible[kind] += 1
                batch.reasons[kind][_short_reason(reason)] += 1
            env.step(step.call.as_dict())
