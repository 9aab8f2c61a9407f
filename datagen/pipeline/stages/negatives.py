"""Hard-negative stage: typed negatives for every correct tool call, as rows.

For each successful trajectory the environment is replayed from `reset`: before each step the
mutators get the call, its tool, the other tools and the live environment (so logical errors
use entities that really exist and are verified to change the observation), then the correct
call is executed to move on (`mutate_report(advance=True)`: usually by restoring the state its
outcome check reached by running that call). Each negative becomes a `negatives` row and a `preferences` row
(prompt up to the step; chosen = the correct turn; rejected = the same reasoning with the
wrong call), which is also the meta-cognitive head's "incorrect step" label. A kind that
cannot be made for a call is counted by the kind of its rejection (`no_candidate`,
`none_accepted` ...), never faked. The batch's reports are kept (`StepReports`) for the critics
stage, which injects its errors at some of the same steps. Without the execution check
(`negatives.execute: false`) the mutators get no environment, and the stage builds, resets and
steps none: each call is mutated from the trajectory alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from datagen.config import GenerateConfig, NegativesConfig
from datagen.envs import Environment, resolve_env
from datagen.pipeline.stages.base import (Stage, StageBatch, StageContext, StageOutput,
                                          register_stage)
from datagen.pipeline.stages.tables import NEGATIVES, PREFERENCES, preferences_table
from datagen.pipeline.stages.trajectories import Renderings
from datagen.preferences import TrajectoryView, negative_preference, prompt_by_reference
from datagen.teachers import EnvPool
from datagen.types import Step, ToolCall, Trajectory, stable_seed

if TYPE_CHECKING:
    from datagen.pipeline.inspect import DatasetView
    from mutators import MutationReport, Negative


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def negative_row(traj: Trajectory, step: int, call: ToolCall, negative: Negative,
                 original_json: str | None = None) -> dict:
    """A `negatives` row (`original_json`: the call's JSON, when the caller has it already)."""
    return {
        "trajectory_id": traj.id, "env": traj.task.env, "step": step, "kind": negative.kind,
        "subkind": negative.subkind, "path": negative.path, "tool": call.name,
        "original": original_json or _json(call.as_dict()), "mutated": _json(negative.call),
        "original_value": _json(negative.original), "mutated_value": _json(negative.mutated),
        "errors": list(negative.errors), "schema_valid": negative.schema_valid,
        "outcome_changed": negative.outcome_changed, "description": negative.description,
    }


def ran_cleanly(step: Step) -> bool:
    """The environment ran the call without an error. In an environment that
    `validates_arguments` (the built-ins: `datagen.envs._arguments`, the mutators' own
    validator) its arguments passed, so the mutators need not validate the original again."""
    return step.error is None and step.observation is not None and step.observation.error is None


def _vouches(envs: EnvPool, name: str) -> bool:
    """Whether environment `name` validates the arguments of the calls it runs (see
    `ran_cleanly`), asked of the instance the pool holds (the one that ran the rollout) or
    else of its class: without the execution check the stage builds, resets and steps no
    environment (the mutators get none, so replaying the trajectory was wasted work)."""
    env: Any = envs.held(name)
    return getattr(env if env is not None else resolve_env(name), "validates_arguments",
                   False) is True


class StepReports:
    """The negatives stage's mutation reports of its last batch, per (trajectory id, step).

    The critics stage injects its error at a step of a successful trajectory, in the same
    state (the environment replayed to that step) and for the same call: the kinds a report
    covers need not be searched again there (the critics' second `mutate_report` cost about
    half of that stage). Only reports made with the execution check are kept, so a reused
    logical error was run and shown to change the outcome, as one searched anew would be."""

    HANDOFF = "negative_reports"  # its name in `StageContext.handoff`

    def __init__(self) -> None:
        self._reports: dict[tuple[str, int], tuple[ToolCall, MutationReport]] = {}

    def clear(self) -> None:
        self._reports.clear()

    def put(self, traj_id: str, step: int, call: ToolCall, report: MutationReport) -> None:
        self._reports[(traj_id, step)] = (call, report)

    def get(self, traj_id: str, step: int, call: ToolCall) -> MutationReport | None:
        """The report of `step`, if it was made for this very call."""
        found = self._reports.get((traj_id, step))
        return found[1] if found is not None and found[0] == call else None

    def __len__(self) -> int:
        return len(self._reports)


@register_stage
class NegativeStage(Stage):
    """Runs the mutators over a batch of trajectories (one environment instance per family).
    Counters: `produced` and `impossible` per negative kind, `impossible_why` per
    `kind: rejection kind`, `replay_errors` per exception type."""

    name = "negatives"
    tables = (NEGATIVES, PREFERENCES)

    def __init__(self, config: NegativesConfig, run_seed: int,
                 preferences_layout: str = "full", reports: StepReports | None = None,
                 renderings: Renderings | None = None) -> None:
        # imported here: the mutators cost every worker's start-up only when the stage is on
        from mutators import mutate_report

        self.config, self.run_seed, self.mutate_report = config, run_seed, mutate_report
        # kept for the critics stage; a report made without executing proves less than the
        # critics' own check, so none is handed on then
        self.reports = reports if config.execute else None
        self.compact = preferences_layout == "compact"
        self.output_tables = (NEGATIVES, preferences_table(preferences_layout))
        # the trajectories stage's renderings of the same batch: a pair's prompt is cut from
        # the text that stage rendered, not from a second rendering
        self.renderings = renderings

    @classmethod
    def enabled(cls, config: GenerateConfig) -> bool:
        return config.negatives.enabled

    @classmethod
    def build(cls, config: GenerateConfig, context: StageContext) -> NegativeStage:
        return cls(config.negatives, config.seed, config.preferences.layout,
                   context.handoff.setdefault(StepReports.HANDOFF, StepReports()),
                   context.handoff.setdefault(Renderings.HANDOFF, Renderings()))

    def run(self, trajectories: list[Trajectory], envs: EnvPool) -> StageOutput:
        batch = StageBatch()
        if self.reports is not None:
            self.reports.clear()  # the last batch's steps are of no use to this one
        for traj in trajectories:
            if traj.success:
                try:
                    if self.config.execute:
                        self._replay(traj, envs.get(traj.task.env), batch)
                    else:
                        self._mutate(traj, None, _vouches(envs, traj.task.env), batch)
                except Exception as exc:  # an env that breaks on replay costs its rows only
                    batch.count("replay_errors", type(exc).__name__)
        return batch.output(self.output_tables)

    def _replay(self, traj: Trajectory, env: Environment, batch: StageBatch) -> None:
        env.reset(traj.task)
        self._mutate(traj, env, getattr(env, "validates_arguments", False) is True, batch)

    def _mutate(self, traj: Trajectory, env: Environment | None, vouched: bool,
                batch: StageBatch) -> None:
        """Every call's negatives and pairs; `env` (the execution check: reset to the task)
        is moved on past each call by `mutate_report`, None without the check."""
        view = TrajectoryView(traj, self.renderings.get(traj) if self.renderings else None)
        tools = {tool["function"]["name"]: tool for tool in traj.tools}
        executed = env is not None
        for index, step in enumerate(traj.steps):
            if step.call is None:
                continue
            # with the execution check, mutate_report also moves the env on past the call
            # (often by restoring the after-state its outcome check made: one step less)
            report = self.mutate_report(step.call.as_dict(), tools[step.call.name],
                                        seed=stable_seed(self.run_seed, traj.id, index),
                                        env=env,
                                        other_tools=traj.tools, kinds=self.config.kinds,
                                        max_env_checks=self.config.max_env_checks,
                                        original_valid=vouched and ran_cleanly(step),
                                        advance=executed)
            if self.reports is not None:
                self.reports.put(traj.id, index, step.call, report)
            original = _json(step.call.as_dict()) if report.negatives else None
            for negative in report.negatives:
                batch.count("produced", negative.kind)
                batch.add("negatives", negative_row(traj, index, step.call, negative, original))
                pair = negative_preference(view, index, negative)
                batch.add("preferences", prompt_by_reference(pair) if self.compact else pair)
            for kind, rejected in report.impossible.items():
                batch.count("impossible", kind)
                batch.count("impossible_why", f"{kind}: {rejected.kind}")

    @classmethod
    def summary_lines(cls, stats: dict[str, Any]) -> list[str]:
        kinds = kind_rates(stats)
        if not kinds:
            return []
        lines = ["negatives: " + ", ".join(f"{kind} {s['produced']:,.0f} "
                                           f"({s['impossible_rate']:.1%} impossible)"
                                           for kind, s in kinds.items())]
        why = sorted(stats.get("impossible_why", {}).items(), key=lambda item: -item[1])
        if why:
            lines.append("  impossible: " + ", ".join(f"{k} {n:,}" for k, n in why[:6]))
        if errors := stats.get("replay_errors"):
            lines.append("  replay errors: " + ", ".join(f"{k} {n:,}" for k, n in errors.items()))
        return lines

    @classmethod
    def inspect_lines(cls, view: DatasetView) -> list[str]:
        import polars as pl

        negatives = view.scan("negatives")
        if negatives is None:
            return []
        if view.rows("negatives") == 0:
            return ["", "negatives: none"]
        by_kind = view.collect(negatives.group_by("kind").agg(
            pl.len().alias("negatives"),
            pl.col("subkind").n_unique().alias("subkinds"),
            (~pl.col("schema_valid")).mean().round(3).alias("rejected_by_schema"),
            pl.col("outcome_changed").mean().round(3).alias("outcome_changed"),
        ).sort("kind"))
        if rates := kind_rates(view.stats(cls.name)):
            by_kind = by_kind.join(pl.DataFrame([
                {"kind": k, "impossible_rate": round(v["impossible_rate"], 3)}
                for k, v in rates.items()]), on="kind", how="left")
        subkinds = view.collect(negatives.group_by("kind", "subkind").len().sort(
            "kind", "len", descending=[False, True]))
        return ["", "negatives per kind:", view.frame(by_kind), "", "subkinds:",
                view.frame(subkinds, rows=60)]

    @classmethod
    def card_lines(cls, stats: dict[str, Any]) -> list[str]:
        return [f"- negatives of kind {kind}: {s['produced']:,.0f} ({s['impossible_rate']:.1%} "
                "of calls admit none)" for kind, s in kind_rates(stats).items()]


def kind_rates(stats: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per negative kind: produced, impossible, and the impossible rate."""
    produced, impossible = stats.get("produced", {}), stats.get("impossible", {})
    return {kind: {"produced": produced.get(kind, 0), "impossible": impossible.get(kind, 0),
                   "impossible_rate": impossible.get(kind, 0)
                   / max(produced.get(kind, 0) + impossible.get(kind, 0), 1)}
            for kind in sorted(set(produced) | set(impossible))}
