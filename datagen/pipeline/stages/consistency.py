"""Consistency stage (issue 18): votes, falsification and confidence for K rollouts per task.

With `consistency.enabled` the chunk processor rolls every task out `k` times
(datagen/pipeline/consistency.py: sampling, outcome keys, the vote); this stage writes one
`consistency` row per rollout: its outcome, the votes for it, agreement, whether it is the
task's majority, the falsification verdict (critics/falsify.py), the scorer's confidence, and
`kept` = in the majority, agreement >= min_agreement, not falsified, confidence >=
min_confidence (when set).

Why a side table keyed by `trajectory_id`, not nullable columns in `trajectories`: the
trajectories schema is the contract every trainer reader, `datagen verify`, the contract test
and older OUTs share; columns that only some runs write would make two schemas of one table
(and a schema version bump) for data that is a verdict *about* the rows, not part of them.
The side table exists only when the filter is on, leaves every reader of the other tables
unchanged, and is one join away (`trajectories.join(consistency, left_on="id",
right_on="trajectory_id")`). All K rollouts stay in `trajectories` (nothing is lost); training
on kept rows only is a filter on that join (README "Consistency filter").

Errors are data: an environment that raises while a rollout's calls are replayed gives that
row no outcome (it casts no vote) and an `error`; a scorer that raises leaves `confidence`
null for the chunk and is counted.
"""

from __future__ import annotations

import time
from itertools import groupby
from typing import TYPE_CHECKING, Any

from datagen.config import ConsistencyConfig, GenerateConfig
from datagen.pipeline.consistency import Vote, outcome_key, vote
from datagen.pipeline.stages.base import (Stage, StageBatch, StageContext, StageOutput, Table,
                                          register_stage)
from datagen.rows import CONSISTENCY_SCHEMA
from datagen.scorers import ConfidenceScorer, make_scorer
from datagen.teachers import EnvPool
from datagen.teachers.base import describe_exception
from datagen.types import Trajectory

if TYPE_CHECKING:
    from critics.falsify import LLMFalsifier, Verdict
    import polars as pl

    from datagen.pipeline.inspect import DatasetView

    Frame = pl.DataFrame | pl.LazyFrame

CONSISTENCY = Table("consistency", CONSISTENCY_SCHEMA, "one row per rollout of a run with the "
                    "consistency filter (k rollouts per task)", {
    "trajectory_id": "the rollout (`id` in trajectories)",
    "task_id": "its task; the task's k rollouts share it",
    "env": "environment",
    "sample": "which of the task's rollouts (0 = the one a run without the filter writes)",
    "k": "rollouts of this task",
    "outcome": "canonical outcome: `state:<hash>` (state tasks) or `answer:<normalised>|"
               "state:<hash>` (questions); null = no final answer (casts no vote)",
    "votes": "rollouts of the task with this outcome (0 without an outcome)",
    "agreement": "votes / k",
    "in_majority": "the outcome is the task's unique plurality (a tie: no majority)",
    "falsifier": "the check that decided: rule | llm | off",
    "falsified": "a concrete reason a step is wrong was found (null: not checked or the "
                 "model's reply was unreadable)",
    "falsify_step": "the step the reason is about",
    "falsify_kind": "failed turn kind, schema_invalid, tool_error, no_answer, "
                    "ungrounded_answer, critic, unreadable_reply, critic_failed",
    "falsify_reason": "the reason, in words",
    "confidence": "the configured scorer's confidence in [0, 1] (null: no scorer)",
    "kept": "in_majority, agreement >= min_agreement, not falsified, confidence >= "
            "min_confidence (when set)",
    "error": "why the outcome could not be computed (the environment raised on replay)",
})


@register_stage
class ConsistencyStage(Stage):
    """Counters: `rows` (rollouts, kept, in_majority, falsified, no_outcome, errors),
    `falsified` per kind, `tasks` (with_majority, without_majority)."""

    name = "consistency"
    tables = (CONSISTENCY,)

    def __init__(self, config: ConsistencyConfig, falsifier: LLMFalsifier | None = None,
                 scorer: ConfidenceScorer | None = None) -> None:
        self.config, self.falsifier, self.scorer = config, falsifier, scorer

    @classmethod
    def enabled(cls, config: GenerateConfig) -> bool:
        return config.consistency.enabled

    @classmethod
    def build(cls, config: GenerateConfig, context: StageContext) -> ConsistencyStage:
        consistency = config.consistency
        falsifier = (_llm_falsifier(config, context) if consistency.falsify == "critic"
                     and config.critics.backend == "llm" else None)
        scorer = (make_scorer(consistency.scorer, consistency.scorer_options)
                  if consistency.scorer else None)
        return cls(consistency, falsifier, scorer)

    def run(self, trajectories: list[Trajectory], envs: EnvPool) -> StageOutput:
        started, batch = time.perf_counter(), StageBatch()
        outcomes, errors = self._outcomes(trajectories, envs)
        votes: list[Vote] = []
        places: list[tuple[int, int]] = []  # (sample, k) per rollout
        for _, group in groupby(outcomes, key=lambda pair: pair[0].task.id):
            group_outcomes = [outcome for _, outcome in group]
            votes += vote(group_outcomes)
            places += [(j, len(group_outcomes)) for j in range(len(group_outcomes))]
        verdicts = self._verdicts(trajectories, [outcome for _, outcome in outcomes])
        confidence = self._confidence(trajectories, batch)
        for i, traj in enumerate(trajectories):
            row = self._row(traj, *places[i], votes[i], verdicts[i], confidence[i], errors[i])
            batch.add("consistency", row)
            self._count(batch, row)
        return batch.output(self.tables, seconds=round(time.perf_counter() - started, 4))

    def _outcomes(self, trajectories: list[Trajectory], envs: EnvPool
                  ) -> tuple[list[tuple[Trajectory, str | None]], list[str | None]]:
        outcomes, errors = [], []
        for traj in trajectories:
            try:
                outcomes.append((traj, outcome_key(envs.get(traj.task.env), traj)))
                errors.append(None)
            except Exception as exc:  # noqa: BLE001 - a broken env costs this row's vote
                outcomes.append((traj, None))
                errors.append(f"replay: {describe_exception(exc)}"[:500])
        return outcomes, errors

    def _verdicts(self, trajectories: list[Trajectory], outcomes: list[str | None]
                  ) -> list[Verdict | None]:
        """Rule check on every rollout; the LLM on the rule check's survivors."""
        if self.config.falsify == "off":
            return [None] * len(trajectories)
        from critics.falsify import rule_falsify

        verdicts: list[Verdict | None] = [
            rule_falsify(traj, answer_matters=not (outcome or "").startswith("state:"))
            for traj, outcome in zip(trajectories, outcomes)]
        if self.falsifier is not None:
            survivors = [i for i, v in enumerate(verdicts) if v is not None and not v.falsified]
            for i, verdict in zip(survivors, self.falsifier.verdicts(
                    [trajectories[i] for i in survivors])):
                verdicts[i] = verdict
        return verdicts

    def _confidence(self, trajectories: list[Trajectory], batch: StageBatch
                    ) -> list[float | None]:
        if self.scorer is None:
            return [None] * len(trajectories)
        try:
            scores = list(self.scorer(trajectories))
            if len(scores) != len(trajectories):
                raise ValueError(f"{len(scores)} scores for {len(trajectories)} rollouts")
        except Exception:  # noqa: BLE001 - a scorer that fails leaves the scores null
            batch.count("rows", "scorer_failed", len(trajectories))
            return [None] * len(trajectories)
        return [min(max(float(s), 0.0), 1.0) if s is not None else None for s in scores]

    def _row(self, traj: Trajectory, sample: int, k: int, vote_: Vote, verdict: Verdict | None,
             confidence: float | None, error: str | None) -> dict[str, Any]:
        falsified = verdict.falsified if verdict is not None else None
        kept = (vote_.in_majority and vote_.agreement >= self.config.min_agreement
                and falsified is not True and self._confident(confidence))
        return {"trajectory_id": traj.id, "task_id": traj.task.id, "env": traj.task.env,
                "sample": sample, "k": k, "outcome": vote_.outcome, "votes": vote_.votes,
                "agreement": vote_.agreement, "in_majority": vote_.in_majority,
                "falsifier": verdict.checker if verdict is not None else "off",
                "falsified": falsified, "falsify_step": verdict and verdict.step,
                "falsify_kind": verdict and verdict.kind,
                "falsify_reason": (verdict.reason or None) if verdict is not None else None,
                "confidence": confidence, "kept": kept, "error": error}

    def _confident(self, confidence: float | None) -> bool:
        threshold = self.config.min_confidence
        return threshold is None or (confidence is not None and confidence >= threshold)

    @staticmethod
    def _count(batch: StageBatch, row: dict[str, Any]) -> None:
        batch.count("rows", "rollouts")
        for flag in ("kept", "in_majority", "falsified"):
            if row[flag]:
                batch.count("rows", flag)
        if row["outcome"] is None:
            batch.count("rows", "no_outcome")
        if row["error"]:
            batch.count("rows", "errors")
        if row["falsified"]:
            batch.count("falsified", row["falsify_kind"] or "unknown")
        if row["sample"] == 0:
            batch.count("tasks", "tasks")

    @classmethod
    def summary_lines(cls, stats: dict[str, Any]) -> list[str]:
        rows = stats.get("rows", {})
        if not rows:
            return []
        total = rows.get("rollouts", 0)
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(
            stats.get("falsified", {}).items(), key=lambda item: -item[1])[:4])
        return [f"consistency: kept {rows.get('kept', 0):,} of {total:,} rollouts "
                f"({rows.get('kept', 0) / max(total, 1):.0%}) of "
                f"{stats.get('tasks', {}).get('tasks', 0):,} tasks; in majority "
                f"{rows.get('in_majority', 0):,}, no outcome {rows.get('no_outcome', 0):,}, "
                f"falsified {rows.get('falsified', 0):,}" + (f" ({kinds})" if kinds else "")]

    @classmethod
    def card_lines(cls, stats: dict[str, Any]) -> list[str]:
        return [f"- {line}" for line in cls.summary_lines(stats)]

    @classmethod
    def inspect_lines(cls, view: DatasetView) -> list[str]:
        """`filter_figures` per environment, then the falsified rollouts by kind."""
        import polars as pl

        consistency = view.scan("consistency")
        if consistency is None:
            return []
        trajectories = view.scan("trajectories", columns=["id", "success"])
        if trajectories is None:
            return view.table_lines(["consistency"])
        lines = ["", "consistency filter per environment:",
                 view.frame(view.collect(filter_figures(consistency, trajectories)))]
        falsified = view.collect(consistency.filter(pl.col("falsified").fill_null(False))
                                 .group_by("falsifier", "falsify_kind").len()
                                 .sort("len", descending=True))
        if falsified.height:
            lines += ["", "falsified by kind:", view.frame(falsified)]
        return lines


def filter_figures(consistency: Frame, trajectories: Frame) -> Frame:
    """Per environment (of DataFrames, or of LazyFrames as a query): rollouts, tasks, the
    share kept, and the checker's success of all rollouts, of sample 0 (what a run without
    the filter writes) and of the kept ones. The checker is read here only to measure the
    filter, never by it."""
    import polars as pl

    rows = consistency.join(trajectories.select("id", "success"), left_on="trajectory_id",
                            right_on="id", how="left")
    success = pl.col("success")
    return rows.group_by("env").agg(
        pl.len().alias("rollouts"), pl.col("task_id").n_unique().alias("tasks"),
        pl.col("kept").mean().round(3).alias("kept_share"),
        success.mean().round(3).alias("success_all"),
        success.filter(pl.col("sample") == 0).mean().round(3).alias("success_sample0"),
        success.filter(pl.col("kept")).mean().round(3).alias("success_kept"),
    ).sort("env")


def _llm_falsifier(config: GenerateConfig, context: StageContext) -> LLMFalsifier:
    """The critics' model (critics.llm, else the run's hf/openai teacher) as a falsifier."""
    from critics.falsify import FALSIFY_SYSTEM_PROMPT, LLMFalsifier
    from datagen.pipeline.stages.critics import critic_completer

    return LLMFalsifier(critic_completer(config.critics, context.teacher, context.out or None,
                                         FALSIFY_SYSTEM_PROMPT,
                                         need="consistency.falsify 'critic'"))
