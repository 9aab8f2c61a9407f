"""Every round's student on the same held-out tasks (`trainer eval`), and the figures of the
round table taken from its report."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from trainer.loop.config import EvalSection

if TYPE_CHECKING:
    from trainer.eval import EvalConfig

STEP_METRICS = ("next_call_exact_match", "act_token_accuracy", "right_tool_rate",
                "schema_valid_rate", "copy_rate", "reason_ce", "act_ce")


def eval_config(section: EvalSection, checkpoint: str, training_roots: list[str]) -> "EvalConfig":
    """The `trainer eval` settings of a round (validated: the loop checks them at its start)."""
    from trainer.eval import EvalConfig

    return EvalConfig(checkpoint=checkpoint, envs=section.envs, num_tasks=section.num_tasks,
                      eval_seed=section.eval_seed, shards=tuple(training_roots),
                      preferences=False, negatives=False, safety=False,
                      irr_tasks=section.irr_tasks, max_steps=section.max_steps,
                      max_new_tokens=section.max_new_tokens, batch_size=section.batch_size,
                      threads=section.threads)


def run_eval(section: EvalSection, checkpoint: str, training_roots: list[str]) -> dict[str, Any]:
    """The full `trainer eval` report (step level, episodes, IRR when asked; the preference
    and safety sections are left to `trainer eval` itself). `training_roots`: every OUT the
    student has trained on, checked against the held-out tasks."""
    from trainer.eval import evaluate

    config = eval_config(section, checkpoint, training_roots)
    started = time.perf_counter()
    report = evaluate(config)
    report["wall_seconds"] = time.perf_counter() - started
    return report


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The round table's eval figures: episode success and syntax-error rate, step-level
    metrics, IRR: the share of episodes with an error injected into the oracle's rollout from
    which the student recovered to a checked success (`critics.irr`, via `trainer eval`), with
    its episode count `irr_n` and the tasks that admitted no injection `irr_skipped` (all
    None when `eval.irr_tasks` is 0; `irr` None when no episode ran)."""
    episodes = report.get("episodes", {})
    steps = report.get("step_level", {})
    irr = report.get("irr") or {}
    overall = irr.get("overall", {})
    return {"success_rate": episodes.get("success_rate"),
            "syntax_error_rate": episodes.get("syntax_error_rate"),
            "mean_steps": episodes.get("mean_steps"),
            **{name: steps.get(name) for name in STEP_METRICS},
            "irr": overall.get("irr") if overall.get("n") else None,
            "irr_n": overall.get("n"), "irr_skipped": irr.get("skipped"),
            "eval_tasks": report.get("tasks", {}).get("count")}
