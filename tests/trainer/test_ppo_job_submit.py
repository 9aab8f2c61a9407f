"""`ray job submit` of a PPO fit to a token-authenticated head, as a cluster user runs it: the
job's driver (`python -m trainer fit --config configs/ppo_tiny.yaml`, from the uploaded
working directory) starts the learner and its rollout actors on the cluster and writes the
run's metrics, rollouts and checkpoint."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.conftest import ray_job_submit
from trainer.metrics import read_metrics

pytestmark = pytest.mark.slow


def test_ray_job_submit_runs_a_ppo_fit(ray_head, tiny_tokenizer_dir, tmp_path):
    run_dir = tmp_path / "run"
    overrides = [f"run_dir={run_dir}", f"tokenizer={tiny_tokenizer_dir}", "model.init_from=null",
                 "model.builder=tiny", "model.use_landmark=false", "ppo.envs=[sql]",
                 "ppo.tasks_per_iteration=1", "ppo.group_size=2", "ppo.max_tokens_per_turn=8",
                 "ppo.max_turns=1", "ppo.minibatch_size=2", "run.max_steps=1",
                 "run.progress=false"]
    entrypoint = ["python", "-m", "trainer", "fit", "--config", "configs/ppo_tiny.yaml"]
    for item in overrides:
        entrypoint += ["--set", item]
    result = ray_job_submit(ray_head, entrypoint=entrypoint, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "succeeded" in result.stdout
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [1] and records[0]["episodes"] == 2
    rollouts = pl.read_parquet(run_dir / "rollouts" / "iter-000000-rank0.parquet")
    assert rollouts.height == 2 and rollouts["group"].n_unique() == 1
    checkpoints = sorted(p for p in Path(run_dir).glob("checkpoint_*") if p.is_dir())
    assert checkpoints and (checkpoints[-1] / "value_head.safetensors").exists()
