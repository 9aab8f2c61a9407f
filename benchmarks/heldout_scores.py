"""Held-out scores of a checkpoint as one flat record, for benchmark tables: `trainer eval`'s
report (`trainer.eval.evaluate`) reduced to the numbers recipes are compared by, plus a
tokenizer-independent cross-entropy.

Cross-entropy per token cannot compare students with different tokenizers (a 16k-vocabulary
token carries a whole phrase, a 4k one a syllable), so the record adds nats per character:
the REASON + ACT negative log-likelihood of the held-out gold trajectories divided by the
characters of their REASON + ACT spans (the same oracle rollouts the step-level metrics use,
counted once per task set).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

STEP_KEYS = ("next_call_exact_match", "right_tool_rate", "schema_valid_rate",
             "closed_turn_rate", "copy_rate", "act_ce", "reason_ce", "act_token_accuracy")


@lru_cache(maxsize=8)
def heldout_span_chars(envs: tuple[str, ...], num_tasks: int, eval_seed: int) -> int:
    """Characters of REASON and ACT spans in the oracle's gold trajectories of the held-out
    tasks (those the oracle solves, as the step-level metrics skip the others)."""
    from datagen.chat import render_trajectory
    from datagen.teachers import EnvPool, OracleTeacher

    from trainer.heldout import heldout_tasks

    pool, teacher, chars = EnvPool(), OracleTeacher(), 0
    for task in heldout_tasks(envs, num_tasks, eval_seed).tasks:
        trajectory = teacher.safe_rollout(task, pool)
        if trajectory.success:
            _, spans = render_trajectory(trajectory)
            chars += sum(s.end - s.start for s in spans if s.kind in ("REASON", "ACT"))
    return chars


def flat_scores(report: dict[str, Any], span_chars: int) -> dict[str, Any]:
    """The numbers a benchmark table shows, from a `trainer eval` report."""
    record: dict[str, Any] = {}
    steps = report.get("step_level")
    if steps:
        record.update({key: steps[key] for key in STEP_KEYS})
        nll = steps["act_ce"] * steps["act_tokens"] + steps["reason_ce"] * steps["reason_tokens"]
        record["nats_per_char"] = nll / max(span_chars, 1)
        record["mch_auroc"] = (steps.get("mch") or {}).get("auroc")
        record["call_steps"] = steps["call_steps"]
    episodes = report.get("episodes")
    if episodes:
        record.update(success_rate=episodes["success_rate"],
                      syntax_error_rate=episodes["syntax_error_rate"],
                      mean_steps=episodes["mean_steps"])
    irr = report.get("irr")
    if irr:
        record["irr"] = irr["overall"]["irr"]
        record["irr_episodes"] = irr["overall"]["n"]
    record["eval_seconds"] = sum(report.get("seconds", {}).values())
    return record


def score_checkpoint(checkpoint: str, num_tasks: int, *, episodes: bool = False,
                     irr_tasks: int = 0, envs: Sequence[str] = ("sql", "fs", "enterprise"),
                     eval_seed: int = 0, shards: Sequence[str] = (), threads: int = 1,
                     max_new_tokens: int = 256,
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(flat record, full report) of `trainer eval` on `num_tasks` held-out tasks: step
    level, and episodes (+ IRR) when asked. The preference, negative-kind and safety
    sections are off (not in these tables; safety alone costs ~10 min a checkpoint on a
    loaded 2-core machine)."""
    from trainer.eval import EvalConfig, evaluate

    config = EvalConfig(checkpoint=checkpoint, envs=tuple(envs), num_tasks=num_tasks,
                        eval_seed=eval_seed, shards=tuple(shards), steps=True,
                        episodes=episodes, irr_tasks=irr_tasks if episodes else 0,
                        preferences=False, negatives=False, safety=False, safety_worlds=0,
                        max_new_tokens=max_new_tokens, threads=threads)
    report = evaluate(config)
    return flat_scores(report, heldout_span_chars(tuple(envs), num_tasks, eval_seed)), report
