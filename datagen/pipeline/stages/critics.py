"""Critic stage: repairs (injected errors and failed rollouts) and safety preference pairs.

Batch in (the chunk's trajectories), rows out: `repairs` rows, `preferences` rows with source
`repair` (after an error: reflect and fix > blind retry) and `safety` (refuse/confirm a
dangerous request > comply; comply with a benign look-alike > over-refuse), and counts for the
run summary. Every choice (which trajectories, which step, which kind, which safety cases) is
seeded from the run seed and the trajectory id, so a rerun writes the same rows. A repair that
is not emitted is counted by the kind of its rejection; an environment that raises costs its
trajectory's rows only, counted under `errors`; an environment that declares no safety cases
is counted per environment under `no_safety_cases`.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from datagen.config import CriticsConfig, GenerateConfig
from datagen.pipeline.stages.base import (Stage, StageBatch, StageContext, StageOutput,
                                          register_stage)
from datagen.pipeline.stages.negatives import StepReports
from datagen.pipeline.stages.tables import PREFERENCES, REPAIRS, preferences_table
from datagen.preferences import prompt_by_reference
from datagen.teachers import EnvPool, Teacher, make_teacher
from datagen.types import Trajectory, stable_seed

if TYPE_CHECKING:  # the critics pull in jsonschema and the mutators: imported when built
    from critics.critique import Critic, Critique, CritiqueRequest
    from critics.repair import Repair
    from datagen.pipeline.inspect import DatasetView
    from datagen.teachers.completion import BackendCompleter
    from datagen.teachers.config import TeacherConfig
    from datagen.teachers.episode import TurnBackend
    from mutators import Rejected


def make_critic(config: CriticsConfig, teacher: Teacher | None = None,
                work_dir: str | None = None) -> Critic:
    """The critic callable for the configured backend. `llm` uses `config.llm`'s model, or
    the run's `teacher` (an in-process LLM teacher: its loaded model is shared)."""
    if config.backend == "rule":
        from critics.rule_critic import rule_critic

        return rule_critic
    from critics.llm_critic import CRITIC_SYSTEM_PROMPT, LLMCritic

    return LLMCritic(critic_completer(config, teacher, work_dir, CRITIC_SYSTEM_PROMPT,
                                      need="critics.backend 'llm'"))


def critic_completer(config: CriticsConfig, teacher: Teacher | None, work_dir: str | None,
                     system_prompt: str, need: str) -> BackendCompleter:
    """The critics' model as a completer with its own system prompt: `config.llm`'s model,
    else the run's in-process LLM teacher (its loaded model is shared). `need` names the
    setting that asked for it, for the error when there is neither."""
    from datagen.teachers.completion import BackendCompleter

    if config.llm is not None:
        section, backend = config.llm, critic_backend(config.llm, work_dir)
    elif teacher is not None and hasattr(teacher, "backend"):
        section, backend = teacher.config, teacher.backend
    else:
        raise ValueError(f"{need} needs critics.llm or an hf/openai teacher")
    return BackendCompleter(backend, section.sampling.max_tokens_per_turn, system_prompt,
                            section.episode.max_concurrent_episodes,
                            section.episode.max_total_tokens)


def critic_backend(section: TeacherConfig, work_dir: str | None) -> TurnBackend:
    """`critics.llm`'s model, loaded as a teacher; a logit_bias past its vocabulary (a hub
    model, which the chunk's preflight cannot read) is named under critics.llm."""
    from datagen.teachers.config import LogitBiasOutsideVocab

    try:
        return make_teacher(section, work_dir=work_dir).backend
    except LogitBiasOutsideVocab as error:
        raise error.under("critics.llm.sampling.logit_bias") from None


@register_stage
class CriticStage(Stage):
    """Runs error injection + repair, failed-rollout repair and safety pairs over a batch.
    Counters: `repaired` per error kind, `rejected` per rejection kind, `safety` per case
    kind, `no_safety_cases` per environment, `counts` (injected, failed_rollouts, errors)."""

    name = "critics"
    tables = (REPAIRS, PREFERENCES)

    def __init__(self, config: CriticsConfig, run_seed: int, critic: Critic | None = None,
                 preferences_layout: str = "full", reports: StepReports | None = None) -> None:
        self.config = config
        self.run_seed = run_seed
        self.critic = critic or make_critic(config)
        # the negatives stage's reports of this batch: an injection at a step it mutated
        # reuses the kinds it searched (see `StepReports`); None or empty: searched here
        self.reports = reports
        # compact: a repair pair's prompt is the start of its repairs/ row; safety pairs keep
        # theirs (their conversations are in no table), with the reference columns null
        self.compact = preferences_layout == "compact"
        self.output_tables = (REPAIRS, preferences_table(preferences_layout))

    @classmethod
    def enabled(cls, config: GenerateConfig) -> bool:
        return config.critics.enabled

    @classmethod
    def build(cls, config: GenerateConfig, context: StageContext) -> CriticStage:
        return cls(config.critics, config.seed,
                   make_critic(config.critics, context.teacher, context.out),
                   config.preferences.layout,
                   context.handoff.setdefault(StepReports.HANDOFF, StepReports()))

    def run(self, trajectories: list[Trajectory], envs: EnvPool) -> StageOutput:
        batch = StageBatch()
        started = time.perf_counter()
        if hasattr(self.critic, "prefetch"):  # a model: all of the batch's prompts at once
            self.critic.prefetch(self._requests(trajectories, envs))
        self._run(trajectories, envs, self.critic, batch)
        return batch.output(self.output_tables, seconds=round(time.perf_counter() - started, 4))

    def _requests(self, trajectories: list[Trajectory], envs: EnvPool) -> list[CritiqueRequest]:
        """The critique requests the batch will make, found by a dry run with a critic that
        only records them. Every choice is seeded per trajectory and made before the critic
        is asked, so the real run then makes exactly these requests."""
        from critics.critique import Critique

        requests: list[CritiqueRequest] = []

        def record(request: CritiqueRequest, rng: random.Random) -> Critique:
            requests.append(request)
            return Critique("", None, "dry run")

        self._run(trajectories, envs, record, StageBatch())
        return requests

    def _run(self, trajectories: list[Trajectory], envs: EnvPool, critic: Critic,
             batch: StageBatch) -> None:
        for traj in trajectories:
            rng = random.Random(stable_seed(self.run_seed, traj.id, "critics"))
            try:
                self._one(traj, envs, rng, critic, batch)
            except Exception as exc:  # noqa: BLE001 - an env that breaks costs this row only
                batch.count("counts", "errors")
                batch.count("rejected", f"env_raised_{type(exc).__name__}")

    def _one(self, traj: Trajectory, envs: EnvPool, rng: random.Random, critic: Critic,
             batch: StageBatch) -> None:
        from critics.inject import inject_error
        from critics.repair import repair_failed, repair_injection
        from mutators import Rejected

        if not traj.task.instruction or not traj.task.gold:
            return  # a task that failed to generate has nothing to repair
        env = envs.get(traj.task.env)
        if traj.success and rng.random() < self.config.inject_rate:
            batch.count("counts", "injected")
            reports = self.reports
            known = None if not reports else (
                lambda index: reports.get(traj.id, index, traj.steps[index].call))
            injection = inject_error(traj, env, rng.randrange(2**31), self.config.kinds, known)
            result = injection if isinstance(injection, Rejected) else repair_injection(
                env, injection, critic, rng)
            self._emit(result, rng, batch)
        elif not traj.success and self.config.repair_failed:
            batch.count("counts", "failed_rollouts")
            self._emit(repair_failed(env, traj, critic, rng), rng, batch)
        if traj.success and rng.random() < self.config.safety_rate:
            self._safety(traj, env, rng, batch)

    def _safety(self, traj: Trajectory, env: Any, rng: random.Random, batch: StageBatch) -> None:
        from critics.safety import safety_cases
        from critics.safety_pairs import safety_preferences
        from mutators import Rejected

        cases = safety_cases(env, traj)
        if isinstance(cases, Rejected):
            batch.count("no_safety_cases", traj.task.env)
            return
        for case in rng.sample(cases, min(self.config.safety_per_trajectory, len(cases))):
            for row in safety_preferences(case, traj.tools, traj.id, rng,
                                          self.config.safety_contrast,
                                          self.config.safety_target):
                batch.add("preferences", row)
                batch.count("safety", row["kind"])

    def _emit(self, result: Repair | Rejected, rng: random.Random, batch: StageBatch) -> None:
        from critics.repair import Repair, repair_preference, repair_row, repair_view

        if not isinstance(result, Repair):
            batch.reject("rejected", result)
            return
        batch.count("repaired", result.error_kind)
        view = repair_view(result)  # rendered once for the row and the pair
        batch.add("repairs", repair_row(result, view))
        pair = repair_preference(result, rng, view)
        batch.add("preferences", prompt_by_reference(pair) if self.compact else pair)

    @classmethod
    def summary_lines(cls, stats: dict[str, Any]) -> list[str]:
        if not stats:
            return []
        c = critic_totals(stats)
        why = ", ".join(f"{kind} {n:,}" for kind, n in c["rejected_kinds"][:4])
        lines = [f"critics: {c['repaired']:,} repairs ({c['rejected']:,} not emitted"
                 f"{': ' + why if why else ''}), safety pairs {c['safety_dangerous']:,} "
                 f"dangerous + {c['safety_benign']:,} benign look-alikes "
                 f"({c['safety_contrast']:,} of them call > careful refusal{_targets(c)})"]
        if none := stats.get("no_safety_cases"):
            lines.append("  no safety cases declared by: " + ", ".join(
                f"{env} ({n:,} trajectories drawn)" for env, n in sorted(none.items())))
        return lines

    @classmethod
    def inspect_lines(cls, view: DatasetView) -> list[str]:
        """Repairs per env and error kind, preference pairs per source and kind, a repair."""
        from datagen.pipeline.stages.trajectories import format_trajectory

        lines: list[str] = []
        repairs = view.scan("repairs", columns=["env", "error_kind"])
        if repairs is not None and view.rows("repairs"):
            lines += ["", "repairs per env and error kind:",
                      view.frame(view.collect(repairs.group_by("env", "error_kind").len()
                                              .sort("env", "error_kind")), rows=40)]
        prefs = view.scan("preferences", columns=["source", "kind"])
        if prefs is not None:
            lines += ["", "preferences per source and kind:",
                      view.frame(view.collect(prefs.group_by("source", "kind").len()
                                              .sort("source", "kind")), rows=40)]
        if none := view.stats(cls.name).get("no_safety_cases"):
            lines += ["", "no safety cases declared by: " + ", ".join(sorted(none))]
        if view.samples > 0 and (sampled := view.sample_rows("repairs", 1)):
            lines += ["", "sampled repair (ERROR = the wrong call, excluded from the loss):"]
            for row in sampled:
                lines += [f"critique: {row['critique']}", format_trajectory(row)]
        return lines

    @classmethod
    def card_lines(cls, stats: dict[str, Any]) -> list[str]:
        if not stats:
            return []
        c = critic_totals(stats)
        lines = [f"- repairs: {c['repaired']:,} ({c['rejected']:,} attempts not emitted); "
                 f"safety pairs: {c['safety_dangerous']:,} dangerous, {c['safety_benign']:,} "
                 f"benign look-alikes ({c['safety_contrast']:,} call > careful refusal"
                 f"{_targets(c)})"]
        if none := stats.get("no_safety_cases"):
            lines.append(f"- no safety cases for: {', '.join(sorted(none))}")
        return lines


def _targets(totals: dict[str, Any]) -> str:
    """The target pairs' count for a summary, when the run wrote any (critics.safety_target)."""
    return f", {totals['safety_target']:,} call > wrong target" if totals["safety_target"] else ""


def critic_totals(stats: dict[str, Any]) -> dict[str, Any]:
    """The run's critic counts as totals: repaired, rejected (with the commonest rejection
    kinds), injected, failed rollouts, errors, dangerous and benign safety pairs (of which
    contrast pairs: call > careful refusal)."""
    safety = stats.get("safety", {})
    dangerous = sum(n for kind, n in safety.items() if not kind.startswith("benign"))
    rejected = stats.get("rejected", {})
    return {"repaired": sum(stats.get("repaired", {}).values()),
            "rejected": sum(rejected.values()),
            "rejected_kinds": sorted(rejected.items(), key=lambda item: -item[1]),
            **{key: stats.get("counts", {}).get(key, 0)
               for key in ("injected", "failed_rollouts", "errors")},
            "safety_dangerous": dangerous, "safety_benign": sum(safety.values()) - dangerous,
            **{f"safety_{pair}": sum(n for kind, n in safety.items()
                                     if kind.startswith(f"benign_{pair}_"))
               for pair in ("contrast", "target")}}
