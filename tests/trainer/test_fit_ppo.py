"""`recipe: ppo` end to end on CPU through Ray: a Ray Train learner worker and a rollout
actor in one job play sql tasks with a tiny random policy, write each iteration's rollouts as
Parquet (trajectories/' columns + rewards and advantages) and a metrics.jsonl record per
iteration, and checkpoint the value head beside the weights."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from datagen.rows import TRAJECTORY_SCHEMA
from trainer.config import CALL_CLASSES, load_config
from trainer.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
ITERATIONS = 2


@pytest.fixture(scope="module")
def ppo_run(ray_head, tiny_tokenizer_dir, tmp_path_factory):
    from trainer.fit import fit

    run_dir = tmp_path_factory.mktemp("ppo") / "run"
    cfg = load_config(ROOT / "configs" / "ppo_tiny.yaml", [
        f"run_dir={run_dir}", f"tokenizer={tiny_tokenizer_dir}", "model.init_from=null",
        "model.builder=tiny", "model.use_landmark=false", "data.max_seq_len=4096",
        "ppo.envs=[sql]", "ppo.tasks_per_iteration=2", "ppo.group_size=2",
        "ppo.max_tokens_per_turn=8", "ppo.max_turns=2", "ppo.minibatch_size=2",
        f"run.max_steps={ITERATIONS}", "run.save_every=1", "run.progress=false",
        "optim.lr=1e-3"])
    result = fit(cfg)
    return run_dir, result, read_metrics(run_dir / "metrics.jsonl")


def test_one_record_per_iteration_with_every_metric(ppo_run):
    _, result, records = ppo_run
    assert [r["step"] for r in records] == list(range(1, ITERATIONS + 1))
    assert result.data["recipe"] == "ppo"
    for record in records:
        assert record["episodes"] == 4 and 0 <= record["success_rate"] <= 1
        # random tokens never open a <tool_call>: no attempted call, so no syntax-error rate
        assert record["attempted_calls"] == 0 and record["syntax_error_rate"] is None
        for name in ("reward", "reward/success", "reward/turn_cost", "kl_k1", "kl_k3", "entropy", "value_loss", "policy_loss", "clip_fraction",
                     "approx_kl", "rollout_time", "learner_time", "grad_norm", "updates"):
            assert record[name] is not None, name
        assert {f"reward/penalty/{c}" for c in CALL_CLASSES} <= set(record)
        assert set(record["error_classes"]) == set(CALL_CLASSES)
        # 8 random tokens never close a turn: every episode is one truncated turn
        assert record["error_classes"]["truncated"] == 4
        assert record["reward"] == pytest.approx(-0.5 - 0.01, abs=1e-5)
        assert record["updates"] == 4  # 2 epochs x 2 minibatches of 2 episodes
        # the learner re-scores what the actor sampled with the same weights
        assert record["behaviour_logprob_gap"] < 1e-3
    # the reference is the starting policy: no divergence before the first update
    assert records[0]["kl_k1"] == pytest.approx(0, abs=1e-6)
    assert records[1]["kl_k3"] > 0


def test_rollouts_are_parquet_with_trajectory_columns_rewards_and_advantages(ppo_run):
    run_dir, _, _ = ppo_run
    files = sorted((run_dir / "rollouts").glob("*.parquet"))
    assert [f.name for f in files] == [f"iter-{i:06d}-rank0.parquet" for i in range(ITERATIONS)]
    frame = pl.read_parquet(files[0])
    assert set(TRAJECTORY_SCHEMA.names) <= set(frame.columns)
    assert {"input_ids", "span_ids", "teacher_topk_ids", "teacher_topk_logprobs", "iteration",
            "group", "reward_total", "reward_success", "reward_penalty_truncated",
            "error_classes", "advantage", "token_advantages"} <= set(frame.columns)
    assert frame.height == 4 and frame["group"].n_unique() == 2
    components = [c for c in frame.columns if c.startswith("reward_") and c != "reward_total"]
    assert frame.select(pl.sum_horizontal(components) - pl.col("reward_total")).to_series() \
        .abs().max() < 1e-5
    for row in frame.iter_rows(named=True):
        assert len(row["token_advantages"]) == len(row["input_ids"])
        generated = [bool(k) for k in row["teacher_topk_ids"]]
        assert sum(generated) == 8 and row["error_classes"] == ["truncated"]
        assert all(a == 0 for a, g in zip(row["token_advantages"], generated) if not g)


def test_the_checkpoint_carries_the_trained_value_head(ppo_run):
    import torch

    from trainer.rl.value_head import load_value_head
    from trainer.model import AgentQwen2ForCausalLM

    _, result, _ = ppo_run
    model = AgentQwen2ForCausalLM.from_pretrained(result.checkpoint)  # plain loading works
    head = load_value_head(result.checkpoint, model.config.hidden_size)
    assert head is not None and float(head.linear.weight.abs().sum()) > 0  # moved from zero
    assert torch.isfinite(head.linear.weight).all()
