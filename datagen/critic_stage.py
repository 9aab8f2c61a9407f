"""Critic stage: repairs (injected errors and failed rollouts) and safety preference pairs.

Batch in (the chunk's trajectories), rows out: `repairs` rows, `preferences` rows with source
`repair` (after an error: reflect and fix > blind retry) and `safety` (refuse/confirm a
dangerous request > comply; comply with a benign look-alike > over-refuse), and counts for the
run summary. Every choice (which trajectories, which step, which kind, which safety cases) is
seeded from the run seed and the trajectory id, so a rerun writes the same rows. An
environment that raises costs its trajectory's rows only, counted under `errors`.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from critics.critique import Critic, Critique, CritiqueRequest
from critics.inject import inject_error
from critics.repair import (Repair, repair_failed, repair_injection, repair_preference,
                            repair_row)
from critics.rule_critic import rule_critic
from critics.safety import safety_cases
from critics.safety_pairs import safety_preference
from datagen.config import CriticsConfig
from datagen.teachers import EnvPool, Teacher, make_teacher
from datagen.types import Trajectory, stable_seed


@dataclass
class CriticBatch:
    """Rows for the repairs and preferences tables, and counts for the summary."""

    repairs: list[dict[str, Any]] = field(default_factory=list)
    preferences: list[dict[str, Any]] = field(default_factory=list)
    repaired: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)
    safety: Counter = field(default_factory=Counter)
    counts: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def stats(self) -> dict[str, Any]:
        dangerous = sum(n for k, n in self.safety.items() if not k.startswith("benign"))
        return {"repaired": dict(self.repaired), "rejected": dict(self.rejected.most_common(8)),
                "safety": dict(self.safety), "safety_dangerous": dangerous,
                "safety_benign": sum(self.safety.values()) - dangerous,
                **{key: self.counts[key] for key in ("injected", "failed_rollouts", "errors")},
                "seconds": round(self.seconds, 4)}


def make_critic(config: CriticsConfig, teacher: Teacher | None = None,
                work_dir: str | None = None) -> Critic:
    """The critic callable for the configured backend. `llm` uses `config.llm`'s model, or
    the run's `teacher` (an in-process LLM teacher: its loaded model is shared)."""
    if config.backend == "rule":
        return rule_critic
    from critics.llm_critic import CRITIC_SYSTEM_PROMPT, LLMCritic
    from datagen.teachers.completion import BackendCompleter

    if config.llm is not None:
        section, backend = config.llm, make_teacher(config.llm, work_dir=work_dir).backend
    elif teacher is not None and hasattr(teacher, "backend"):
        section, backend = teacher.config, teacher.backend
    else:
        raise ValueError("critics.backend 'llm' needs critics.llm or an hf/openai teacher")
    return LLMCritic(BackendCompleter(backend, section.sampling.max_tokens_per_turn,
                                      CRITIC_SYSTEM_PROMPT,
                                      section.episode.max_concurrent_episodes,
                                      section.episode.max_total_tokens))


class CriticStage:
    """Runs error injection + repair, failed-rollout repair and safety pairs over a batch."""

    def __init__(self, config: CriticsConfig, run_seed: int, critic: Critic | None = None) -> None:
        self.config = config
        self.run_seed = run_seed
        self.critic = critic or make_critic(config)

    def run(self, trajectories: list[Trajectory], envs: EnvPool) -> CriticBatch:
        batch = CriticBatch()
        started = time.perf_counter()
        if hasattr(self.critic, "prefetch"):  # a model: all of the batch's prompts at once
            self.critic.prefetch(self._requests(trajectories, envs))
        self._run(trajectories, envs, self.critic, batch)
        batch.seconds = time.perf_counter() - started
        return batch

    def _requests(self, trajectories: list[Trajectory], envs: EnvPool) -> list[CritiqueRequest]:
        """The critique requests the batch will make, found by a dry run with a critic that
        only records them. Every choice is seeded per trajectory and made before the critic
        is asked, so the real run then makes exactly these requests."""
        requests: list[CritiqueRequest] = []

        def record(request: CritiqueRequest, rng: random.Random) -> Critique:
            requests.append(request)
            return Critique("", None, "dry run")

        self._run(trajectories, envs, record, CriticBatch())
        return requests

    def _run(self, trajectories: list[Trajectory], envs: EnvPool, critic: Critic,
             batch: CriticBatch) -> None:
        for traj in trajectories:
            rng = random.Random(stable_seed(self.run_seed, traj.id, "critics"))
            try:
                self._one(traj, envs, rng, critic, batch)
            except Exception as exc:  # noqa: BLE001 - an env that breaks costs this row only
                batch.counts["errors"] += 1
                batch.rejected[f"error: {type(exc).__name__}"] += 1

    def _one(self, traj: Trajectory, envs: EnvPool, rng: random.Random, critic: Critic,
             batch: CriticBatch) -> None:
        if not traj.task.instruction or not traj.task.gold:
            return  # a task that failed to generate has nothing to repair
        env = envs.get(traj.task.env)
        if traj.success and rng.random() < self.config.inject_rate:
            batch.counts["injected"] += 1
            injection = inject_error(traj, env, rng.randrange(2**31), self.config.kinds)
            result = injection if isinstance(injection, str) else repair_injection(
                env, injection, critic, rng)
            self._emit(result, rng, batch)
        elif not traj.success and self.config.repair_failed:
            batch.counts["failed_rollouts"] += 1
            self._emit(repair_failed(env, traj, critic, rng), rng, batch)
        if traj.success and rng.random() < self.config.safety_rate:
            cases = safety_cases(env, traj)
            for case in rng.sample(cases, min(self.config.safety_per_trajectory, len(cases))):
                batch.preferences.append(safety_preference(case, traj.tools, traj.id, rng))
                batch.safety[case.kind if case.dangerous else f"benign_{case.call.name}"] += 1

    @staticmethod
    def _emit(result: Repair | str, rng: random.Random, batch: CriticBatch) -> None:
        if isinstance(result, str):
            batch.rejected[result[:80]] += 1
            return
        batch.repaired[result.error_kind] += 1
        batch.repairs.append(repair_row(result))
        batch.preferences.append(repair_preference(result, rng))
