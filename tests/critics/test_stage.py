"""The critic stage on a batch, and end to end through the pipeline."""

from __future__ import annotations

import polars as pl
import pytest

from datagen.cli import main
from datagen.config import ConfigError, CriticsConfig, GenerateConfig, load_config
from datagen.critic_stage import CriticStage
from datagen.pipeline import run_generation
from datagen.spans import check_tiling
from datagen.teachers import EnvPool
from datagen.types import Span, Step
from tests.datagen.helpers import oracle_trajectories


def test_stage_is_deterministic_and_counts():
    trajectories = oracle_trajectories(30)
    config = CriticsConfig(inject_rate=1.0, safety_rate=0.5)
    first = CriticStage(config, run_seed=1).run(trajectories, EnvPool())
    again = CriticStage(config, run_seed=1).run(trajectories, EnvPool())
    assert first.repairs == again.repairs and first.preferences == again.preferences
    stats = first.stats()
    assert stats["injected"] == 30 and sum(stats["repaired"].values()) == len(first.repairs) >= 20
    assert stats["safety_dangerous"] > 0 and stats["safety_benign"] > 0
    assert {p["source"] for p in first.preferences} == {"repair", "safety"}


def test_an_env_that_raises_costs_its_row_only(monkeypatch):
    trajectories = oracle_trajectories(6)
    pool = EnvPool()
    sql = pool.get("sql")
    monkeypatch.setattr(sql, "step", lambda call: (_ for _ in ()).throw(RuntimeError("boom")))
    batch = CriticStage(CriticsConfig(inject_rate=1.0, safety_rate=0.0), 0).run(trajectories,
                                                                                pool)
    n_sql = sum(t.task.env == "sql" for t in trajectories)
    assert batch.counts["errors"] == n_sql and len(batch.repairs) <= len(trajectories) - n_sql


def test_failed_rollouts_are_repaired_in_the_stage():
    trajectories = oracle_trajectories(3)
    for traj in trajectories:  # the teacher answered after its first call
        traj.steps = traj.steps[:1] + [Step("That should be it.", answer="no idea")]
        traj.success = False
    batch = CriticStage(CriticsConfig(safety_rate=0.0), 0).run(trajectories, EnvPool())
    assert batch.counts["failed_rollouts"] == 3
    assert batch.repaired["failed_rollout"] == 3


def test_config_defaults_and_llm_backend_refused():
    assert GenerateConfig().critics.enabled and GenerateConfig().critics.backend == "rule"
    with pytest.raises(ConfigError, match="critics.backend"):
        load_config(None, {"critics.backend": "llm"})


def test_pipeline_writes_repairs_and_all_preference_sources(ray_head, tmp_path, capsys):
    out = tmp_path / "out"
    summary = run_generation(GenerateConfig(out=str(out), num_trajectories=120, chunk_size=60,
                                            progress=False))
    assert summary.complete and summary.counts["repairs"] > 20
    assert summary.critics["repaired"] == summary.counts["repairs"]  # the summary line's count
    assert f"critics: {summary.counts['repairs']:,} repairs" in summary.format()
    repairs = pl.read_parquet(out / "repairs" / "*.parquet")
    assert repairs["success"].all() and repairs["error_kind"].n_unique() >= 4
    for row in repairs.iter_rows(named=True):
        spans = [Span(**span) for span in row["spans"]]
        assert check_tiling(row["text"], spans) is None
        assert [s.step for s in spans if s.kind == "ERROR"] == [row["error_step"]]
    prefs = pl.read_parquet(out / "preferences" / "*.parquet")
    assert set(prefs["source"].unique()) == {"negative", "repair", "safety"}
    assert main(["inspect", str(out), "--samples", "1"]) == 0
    shown = capsys.readouterr().out
    assert "repairs per env and error kind" in shown and "ERROR" in shown
    assert "preferences per source and kind" in shown and "safety" in shown
