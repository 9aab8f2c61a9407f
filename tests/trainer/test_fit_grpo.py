"""`recipe: ppo` with the critic-free estimators (`ppo.advantage: grpo | rloo`) end to end on
local Ray: two rollout actors play each task's group, the learner gives every episode its
group's baseline advantage, trains no value head, and the rollout Parquet shows advantages
that are exactly the group-normalised (grpo) episode rewards. `rloo` takes the same path with
another estimator: its arithmetic is checked in test_ppo_math.py and test_ppo_policy.py, not
by a second end-to-end fit (~30 s of CI)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from trainer.config import load_config
from trainer.metrics import read_metrics

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ITERATIONS = 2
TASKS, GROUP = 2, 2


def _expected(objective: list[float], mode: str) -> list[float]:
    """The estimators written out for one group (as the README states them)."""
    k = len(objective)
    mean = sum(objective) / k
    if mode == "grpo":
        std = (sum((r - mean) ** 2 for r in objective) / (k - 1)) ** 0.5  # sample std
        return [(r - mean) / (std + 1e-4) for r in objective]
    return [r - (sum(objective) - r) / (k - 1) for r in objective]


@pytest.fixture(scope="module", params=["grpo"])
def group_run(request, ray_head, tiny_tokenizer_dir, tmp_path_factory):
    from trainer.fit import fit

    run_dir = tmp_path_factory.mktemp(request.param) / "run"
    cfg = load_config(ROOT / "configs" / "ppo_tiny.yaml", [
        f"run_dir={run_dir}", f"tokenizer={tiny_tokenizer_dir}", "model.init_from=null",
        "model.builder=tiny", "model.use_landmark=false", f"ppo.advantage={request.param}",
        "ppo.envs=[sql]", f"ppo.tasks_per_iteration={TASKS}", f"ppo.group_size={GROUP}",
        "ppo.rollout_workers=2", "ppo.rollout_cpus=0.5", "ppo.max_tokens_per_turn=8",
        "ppo.max_turns=2", "ppo.minibatch_size=2",
        # a random policy's episodes all earn the same reward (one truncated turn): the
        # entropy bonus moves the policy in iteration 1, so in iteration 2 the KL folded into
        # the rewards tells the rollouts of a task apart
        "ppo.entropy_coef=0.01", "ppo.kl_in=reward", "ppo.kl_coef=0.05",
        f"run.max_steps={ITERATIONS}", "run.progress=false", "optim.lr=1e-3"])
    result = fit(cfg)
    return request.param, run_dir, result


def test_group_advantages_are_the_estimator_of_the_episode_rewards(group_run):
    mode, run_dir, _ = group_run
    files = sorted((run_dir / "rollouts").glob("*.parquet"))
    assert [f.name for f in files] == [f"iter-{i:06d}-rank0.parquet" for i in range(ITERATIONS)]
    moved = 0
    for path in files:
        frame = pl.read_parquet(path)
        assert frame.height == TASKS * GROUP and frame["id"].n_unique() == frame.height
        for (group,), members in frame.group_by("group", maintain_order=True):
            assert members.height == GROUP, group
            objective = (members["reward_total"] - members["kl_penalty"]).to_list()
            want = _expected(objective, mode)
            assert members["advantage"].to_list() == pytest.approx(want, rel=1e-3, abs=1e-4), \
                group
            for row, advantage in zip(members.iter_rows(named=True), want):
                generated = [a for a, k in zip(row["token_advantages"], row["teacher_topk_ids"])
                             if k]
                assert generated == pytest.approx([advantage] * len(generated), rel=1e-3,
                                                  abs=1e-4)
            moved += any(abs(a) > 1e-6 for a in want)
    # iteration 1: policy = reference, equal rewards, no advantage; iteration 2: every group
    assert moved == TASKS


def test_no_critic_is_trained_or_saved(group_run):
    _, run_dir, result = group_run
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, ITERATIONS + 1))
    assert all("value_loss" not in r and r["updates"] == 4 for r in records)
    assert records[1]["kl_k3"] > 0
    assert not (Path(result.checkpoint) / "value_head.safetensors").exists()
