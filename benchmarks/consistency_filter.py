"""Consistency filter (issue 18): what share it discards and how much it raises the
checker-verified success of the rollouts it keeps.

    # an OUT written with consistency.enabled (e.g. an hf / policy teacher run):
    python benchmarks/consistency_filter.py --out OUT
    # in process, no Ray: the oracle with noise as the teacher
    python benchmarks/consistency_filter.py --noisy-oracle 0.3 --tasks 120 --k 5
    # in process, no Ray: the teacher of a datagen config (an hf / policy checkpoint)
    python benchmarks/consistency_filter.py --config teacher.yaml --tasks 12 --k 3

The noisy oracle (`NoisyOracleFake`, a scripted stand-in for a sampling model) plays each
rollout as the oracle does, except that with probability `noise` (seeded per rollout) one
gold call is replaced by a verified logical error (mutators, `logical_error`: another entity,
shifted value, swapped arguments) and a question's answer is spoiled (a number shifted by
one, else "unknown"). The checker (`success`) is never read by the filter: it is what the
figures measure.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl  # noqa: E402

from datagen.config import load_config  # noqa: E402
from datagen.pipeline.chunk import ChunkProcessor, plan_chunks  # noqa: E402
from datagen.teachers.oracle import OracleTeacher  # noqa: E402
from datagen.types import GoldStep, ToolCall, stable_seed  # noqa: E402
from mutators import mutate  # noqa: E402

_NUMBER = re.compile(r"\d+")


class NoisyOracleFake(OracleTeacher):
    """FAKE sampling teacher: the oracle with one wrong call (and answer) per noisy rollout."""

    def __init__(self, noise: float) -> None:
        super().__init__("noisy_oracle")
        self.noise = noise

    def rollout(self, task, env, round_=0):
        rng = random.Random(stable_seed(task.id, "noise"))
        if not task.gold or rng.random() >= self.noise:
            return super().rollout(task, env, round_)
        wrong = self._wrong_gold(task, env, rng)
        answer = task.answer and (_NUMBER.sub(lambda m: str(int(m.group()) + 1), task.answer, 1)
                                  if _NUMBER.search(task.answer) else "unknown")
        traj = super().rollout(dataclasses.replace(task, gold=wrong, answer=answer), env, round_)
        traj.task = task
        final = traj.steps[-1] if traj.steps else None
        traj.success = final is not None and final.answer is not None and \
            env.check(task, final.answer)
        traj.reward = 1.0 if traj.success else 0.0
        return traj

    @staticmethod
    def _wrong_gold(task, env, rng: random.Random) -> list[GoldStep]:
        """The gold steps with one call replaced by a logical error in the state it runs in."""
        at = rng.randrange(len(task.gold))
        env.reset(task)
        for step in task.gold[:at]:
            env.step(step.call.as_dict())
        call = task.gold[at].call
        tool = next(t for t in env.tools() if t["function"]["name"] == call.name)
        negatives = mutate(call.as_dict(), tool, rng.randrange(2**31), env=env,
                           kinds=["logical_error"])
        if not negatives:
            return list(task.gold)
        bad = ToolCall(negatives[0].call["name"], negatives[0].call["arguments"])
        return [*task.gold[:at], GoldStep(bad, task.gold[at].purpose), *task.gold[at + 1:]]


def figures(trajectories: pl.DataFrame, consistency: pl.DataFrame) -> dict[str, float]:
    rows = trajectories.select("id", "success").join(
        consistency, left_on="id", right_on="trajectory_id")
    kept = rows.filter(pl.col("kept"))
    first = rows.filter(pl.col("sample") == 0)  # what a run without the filter writes
    majority = rows.filter(pl.col("in_majority"))
    survived = rows.filter(pl.col("falsified") != True)  # noqa: E712 - null: not falsified
    rate = lambda frame: frame["success"].mean() if frame.height else float("nan")  # noqa: E731
    return {"rollouts": rows.height, "tasks": rows["task_id"].n_unique(),
            "k": int(rows["k"].max()), "success_all": rate(rows),
            "success_sample0": rate(first), "kept": kept.height,
            "discarded_share": 1 - kept.height / max(rows.height, 1),
            "success_kept": rate(kept), "success_majority_only": rate(majority),
            "success_not_falsified_only": rate(survived),
            "tasks_with_a_kept_rollout": kept["task_id"].n_unique(),
            "tasks_with_a_success": rows.filter(pl.col("success"))["task_id"].n_unique(),
            "falsified_share": rows["falsified"].fill_null(False).mean()}


def run_in_process(config_path: str | None, noise: float | None, tasks: int, k: int,
                   seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One chunk of `tasks` tasks through the chunk processor (no Ray, nothing written)."""
    config = load_config(config_path, {"num_trajectories": tasks, "chunk_size": tasks,
                                       "seed": seed, "out": "/tmp/consistency-bench-unused",
                                       "negatives.enabled": False, "critics.enabled": False,
                                       "consistency.enabled": True, "consistency.k": k})
    processor = ChunkProcessor(config)
    if noise is not None:
        processor.teacher = NoisyOracleFake(noise)
    trajectories = processor.rollout(plan_chunks(config)[0])
    tables, _ = processor.run_stages(trajectories)
    return pl.from_arrow(tables["trajectories"]), pl.from_arrow(tables["consistency"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="an OUT written with consistency.enabled")
    parser.add_argument("--noisy-oracle", type=float, help="noise rate of the fake teacher")
    parser.add_argument("--config", help="a datagen config whose teacher rolls out")
    parser.add_argument("--tasks", type=int, default=120)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", help="write the in-process run's two tables here (parquet), "
                        "to re-tune the filter on them without rolling out again")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.out:
        trajectories = pl.read_parquet(f"{args.out}/trajectories/*.parquet",
                                       columns=["id", "success"])
        consistency = pl.read_parquet(f"{args.out}/consistency/*.parquet")
    elif args.noisy_oracle is not None or args.config:
        trajectories, consistency = run_in_process(args.config, args.noisy_oracle, args.tasks,
                                                   args.k, args.seed)
    else:
        parser.error("give --out, --noisy-oracle or --config")
    if args.save:
        Path(args.save).mkdir(parents=True, exist_ok=True)
        trajectories.write_parquet(Path(args.save) / "trajectories.parquet")
        consistency.write_parquet(Path(args.save) / "consistency.parquet")
    for name, value in figures(trajectories, consistency).items():
        print(f"{name:28} {value:.3f}" if isinstance(value, float) else f"{name:28} {value}")
    kinds = consistency.filter(pl.col("falsified").fill_null(False)).group_by(
        "falsify_kind").len().sort("len", descending=True)
    print("falsified by kind:", dict(zip(kinds["falsify_kind"], kinds["len"])))
    print(f"seconds                      {time.perf_counter() - started:.1f}")


if __name__ == "__main__":
    main()
