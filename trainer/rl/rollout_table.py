"""Each iteration's rollouts as Parquet: the columns of `trajectories/` (datagen.rows, with
the token and teacher columns of LLM teachers: `teacher_topk_*` hold the sampled token and
its behaviour log-prob) plus what the learner made of them, so they open in Polars beside
generated data:

    iteration, group         the PPO iteration; the task the rollout is a copy of
    reward_total             the episode's reward (trainer.rl.rewards) ...
    reward_<component>       ... and its parts: success, turn_cost, penalty/<class> as
                             reward_penalty_<class>
    error_classes            the error classes of its turns, in order (list<string>)
    kl_penalty               kl_coef x the KL to the reference summed over its tokens, as
                             folded into the rewards the advantages came from (kl_in: reward;
                             0 otherwise; null: not trained on): the advantages are those of
                             reward_total - kl_penalty
    advantage                mean advantage over its generated tokens (null: not trained on)
    token_advantages         per token, aligned with input_ids (0 outside generated tokens)

Written to a temporary name and renamed, one file per iteration and learner rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import torch

if TYPE_CHECKING:
    from datagen.types import Trajectory
    from trainer.rl.batches import RolloutBatch
    from trainer.rl.rewards import EpisodeReward


def rollout_table(trajectories: list["Trajectory"], rewards: list["EpisodeReward"],
                  groups: list[str], iteration: int, batch: "RolloutBatch",
                  advantages: torch.Tensor, kl_penalties: torch.Tensor | None = None,
                  ) -> pa.Table:
    from datagen.rows import render, trajectory_table
    from datagen.teachers.trace import teacher_columns

    rendered = [render(traj) for traj in trajectories]
    tokens, teacher = teacher_columns(trajectories, rendered, None, None)
    table = trajectory_table(trajectories, rendered, tokens, teacher)
    mean_advantage: list[float | None] = [None] * len(trajectories)
    kl_penalty: list[float | None] = [None] * len(trajectories)
    token_advantages: list[list[float]] = [[0.0] * len(t.tokens.ids) if t.tokens else []
                                           for t in trajectories]
    for row, index in enumerate(batch.rows):
        mask = batch.mask[row]
        length = len(trajectories[index].tokens.ids)
        mean_advantage[index] = float(advantages[row][mask].mean()) if bool(mask.any()) else None
        token_advantages[index] = advantages[row, :length].tolist()
        kl_penalty[index] = float(kl_penalties[row]) if kl_penalties is not None else None
    extra = {"iteration": pa.array([iteration] * len(trajectories), pa.int32()),
             "group": pa.array(groups, pa.string()),
             "reward_total": pa.array([r.total for r in rewards], pa.float32())}
    for name in rewards[0].components if rewards else ():
        column = "reward_" + name.replace("/", "_")
        extra[column] = pa.array([r.components[name] for r in rewards], pa.float32())
    extra["error_classes"] = pa.array([r.turn_class_names for r in rewards],
                                      pa.list_(pa.string()))
    extra["kl_penalty"] = pa.array(kl_penalty, pa.float32())
    extra["advantage"] = pa.array(mean_advantage, pa.float32())
    extra["token_advantages"] = pa.array(token_advantages, pa.list_(pa.float32()))
    for name, column in extra.items():
        table = table.append_column(name, column)
    return table


def write_rollouts(table: pa.Table, run_dir: str, iteration: int, rank: int) -> Path:
    directory = Path(run_dir) / "rollouts"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"iter-{iteration:06d}-rank{rank}.parquet"
    temporary = path.with_suffix(".parquet.tmp")
    pq.write_table(table, temporary, compression="zstd", compression_level=1)
    temporary.replace(path)
    return path
