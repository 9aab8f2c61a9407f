"""The critic stage on a batch, and end to end through the pipeline."""

from __future__ import annotations

import polars as pl
import pytest

from datagen.pipeline.cli import main
from critics.llm_critic import LLMCritic
from datagen.config import (ConfigError, CriticsConfig, GenerateConfig, fingerprint,
                            load_config)
from datagen.pipeline.stages.critics import CriticStage, critic_totals
from datagen.pipeline import run_generation
from datagen.spans import check_tiling
from datagen.teachers import EnvPool
from datagen.types import Span, Step
from tests.critics.fakes import GoldCriticFake, garbage_critic
from tests.datagen.helpers import oracle_trajectories


def test_stage_is_deterministic_and_counts():
    trajectories = oracle_trajectories(30)
    config = CriticsConfig(inject_rate=1.0, safety_rate=0.5)
    first = CriticStage(config, run_seed=1).run(trajectories, EnvPool())
    again = CriticStage(config, run_seed=1).run(trajectories, EnvPool())
    assert all(first.tables[name].equals(again.tables[name]) for name in ("repairs",
                                                                           "preferences"))
    stats = critic_totals(first.stats)
    assert stats["injected"] == 30 and stats["repaired"] == len(first.rows("repairs")) >= 20
    assert stats["safety_dangerous"] > 0 and stats["safety_benign"] > 0
    assert {p["source"] for p in first.rows("preferences")} == {"repair", "safety"}
    assert set(first.stats["rejected"]) <= {"checker_rejected", "corrected_call_failed",
                                            "no_injectable_step"}  # kinds, not texts


def test_an_env_that_raises_costs_its_row_only(monkeypatch):
    trajectories = oracle_trajectories(6)
    pool = EnvPool()
    sql = pool.get("sql")
    monkeypatch.setattr(sql, "step", lambda call: (_ for _ in ()).throw(RuntimeError("boom")))
    batch = CriticStage(CriticsConfig(inject_rate=1.0, safety_rate=0.0), 0).run(trajectories,
                                                                                pool)
    n_sql = sum(t.task.env == "sql" for t in trajectories)
    assert batch.stats["counts"]["errors"] == n_sql
    assert batch.stats["rejected"]["env_raised_RuntimeError"] == n_sql
    assert len(batch.rows("repairs")) <= len(trajectories) - n_sql


def test_failed_rollouts_are_repaired_in_the_stage():
    trajectories = oracle_trajectories(3)
    for traj in trajectories:  # the teacher answered after its first call
        traj.steps = traj.steps[:1] + [Step("That should be it.", answer="no idea")]
        traj.success = False
    batch = CriticStage(CriticsConfig(safety_rate=0.0), 0).run(trajectories, EnvPool())
    assert batch.stats["counts"]["failed_rollouts"] == 3
    assert batch.stats["repaired"]["failed_rollout"] == 3


def test_config_defaults_and_what_an_llm_critic_needs():
    assert GenerateConfig().critics.enabled and GenerateConfig().critics.backend == "rule"
    with pytest.raises(ConfigError, match="critics.backend 'llm' needs a model: teacher.backend "
                                          "is 'oracle'; set critics.llm"):
        load_config(None, {"critics.backend": "llm"})
    with pytest.raises(ConfigError, match="critics.llm.backend is 'vllm'.*vllm serve"):
        load_config(None, {"critics.backend": "llm", "critics.llm": {
            "backend": "vllm", "vllm": {"model": "m"}}})
    with pytest.raises(ConfigError, match="critics.llm is set but critics.backend is 'rule'"):
        load_config(None, {"critics.llm": OPENAI_CRITIC})
    with pytest.raises(ConfigError, match="critics.llm.openai.typo: unknown field"):
        load_config(None, {"critics.backend": "llm",
                           "critics.llm": {**OPENAI_CRITIC, "openai": {"base_url": "x",
                                                                       "model": "m", "typo": 1}}})
    config = load_config(None, {"critics.backend": "llm", "critics.llm": OPENAI_CRITIC})
    assert config.critics.llm.openai.model == "critic"
    assert fingerprint(config) != fingerprint(GenerateConfig())


OPENAI_CRITIC = {"backend": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1",
                                                 "model": "critic", "max_retries": 0}}


def test_llm_critic_stage_asks_once_per_batch_and_its_repairs_pass_the_checker():
    trajectories = oracle_trajectories(30)
    config = CriticsConfig(backend="llm", inject_rate=1.0, safety_rate=0.5)
    fake = GoldCriticFake([traj.task for traj in trajectories])
    batch = CriticStage(config, 1, LLMCritic(fake)).run(trajectories, EnvPool())
    assert len(fake.batches) == 1 and fake.batches[0] >= 20  # the whole batch in one call
    repairs = batch.rows("repairs")
    assert len(repairs) == sum(batch.stats["repaired"].values()) >= 20
    assert all(row["success"] and row["critique"].startswith("The call to `")
               for row in repairs)
    assert critic_totals(batch.stats)["safety_dangerous"] > 0
    again = CriticStage(config, 1, LLMCritic(GoldCriticFake(fake.by_instruction.values())))
    assert again.run(trajectories, EnvPool()).tables["repairs"].equals(batch.tables["repairs"])


def test_llm_critic_replies_that_cannot_be_read_cost_their_repairs_only():
    trajectories = oracle_trajectories(12)
    config = CriticsConfig(backend="llm", inject_rate=1.0, safety_rate=1.0)
    batch = CriticStage(config, 1, LLMCritic(garbage_critic)).run(trajectories, EnvPool())
    assert not batch.rows("repairs") and "errors" not in batch.stats.get("counts", {})
    assert batch.stats["rejected"]["critic_gave_no_call"] >= 8
    assert {p["source"] for p in batch.rows("preferences")} == {"safety"}


def test_a_critic_backend_that_answers_no_critique_fails_the_batch_not_its_repairs():
    """Before, a dead critic endpoint dropped every repair of every chunk as "not emitted" and
    the run completed without them (its rerun found nothing to do). A batch of at least
    MIN_CALLS_JUDGED critiques all failing in the backend now fails; fewer failures, or replies
    that cannot be read, still cost their repairs only."""
    from datagen.teachers.base import MIN_CALLS_JUDGED, BackendAnsweredNone

    def down(prompts: list[str]) -> list[str]:
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    trajectories = oracle_trajectories(12)
    config = CriticsConfig(backend="llm", inject_rate=1.0, safety_rate=0.0)
    with pytest.raises(BackendAnsweredNone, match=r"^the critic's backend failed all \d+ "
                       r"critiques of the chunk: ConnectionRefusedError: \[Errno 111\]"):
        CriticStage(config, 1, LLMCritic(down)).run(trajectories, EnvPool())
    few = CriticStage(config, 1, LLMCritic(down)).run(trajectories[:2], EnvPool())
    assert few.stats["rejected"] and not few.rows("repairs")  # under MIN_CALLS_JUDGED: rows

    def some_down(prompts: list[str]) -> list:
        return [TimeoutError("slow")] * (len(prompts) - 1) + ["<critique>x</critique>"]

    mixed = CriticStage(config, 1, LLMCritic(some_down)).run(trajectories, EnvPool())
    assert sum(mixed.stats["rejected"].values()) >= MIN_CALLS_JUDGED - 1


def test_a_run_whose_critic_endpoint_is_down_writes_no_chunk(ray_head, tmp_path):
    """The endpoint is a closed loopback port: each chunk fails naming the critic, none is
    marked complete, so the run with the endpoint back regenerates them with their repairs."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    critic = {**OPENAI_CRITIC, "openai": {**OPENAI_CRITIC["openai"],
                                          "base_url": f"http://127.0.0.1:{port}/v1"}}
    out = tmp_path / "out"
    summary = run_generation(load_config(None, {
        "out": str(out), "num_trajectories": 60, "chunk_size": 30, "progress": False,
        "negatives.enabled": False, "critics.backend": "llm", "critics.llm": critic}))
    assert not summary.complete and [chunk for chunk, _ in summary.failed_chunks] == [0, 1]
    for _, error in summary.failed_chunks:
        assert "BackendAnsweredNone: the critic's backend failed all " in error, error
    assert not list((out / "_chunks").glob("chunk-*.json"))


def test_pipeline_with_an_llm_critic_behind_a_loopback_endpoint(ray_head, tmp_path):
    from tests.datagen.teachers.fault_server import FaultServer

    trajectories = oracle_trajectories(60)
    server = FaultServer(GoldCriticFake([traj.task for traj in trajectories])).start()
    try:
        critic = {**OPENAI_CRITIC, "openai": {**OPENAI_CRITIC["openai"],
                                              "base_url": server.base_url}}
        out = tmp_path / "out"
        summary = run_generation(load_config(None, {
            "out": str(out), "num_trajectories": 60, "chunk_size": 30, "progress": False,
            "negatives.enabled": False, "critics.backend": "llm", "critics.llm": critic}))
    finally:
        server.stop()
    assert summary.complete and summary.counts["repairs"] >= 20
    prompts = [body["messages"][-1]["content"] for body in server.bodies]
    assert len(set(prompts)) == len(prompts)  # one request per critique (none for the dry run)
    assert summary.counts["repairs"] <= len(prompts) <= critic_totals(
        summary.stats["critics"])["injected"]
    assert all("tools" not in body and body["model"] == "critic" for body in server.bodies)
    repairs = pl.read_parquet(out / "repairs" / "*.parquet")
    assert repairs["success"].all()
    assert repairs["critique"].str.starts_with("The call to `").all()
    assert (out / "_cache").is_dir()  # critic replies are cached like teacher turns


def test_pipeline_writes_repairs_and_all_preference_sources(ray_head, tmp_path, capsys):
    out = tmp_path / "out"
    summary = run_generation(GenerateConfig(out=str(out), num_trajectories=120, chunk_size=60,
                                            progress=False))
    assert summary.complete and summary.counts["repairs"] > 20
    # the summary line's count
    assert critic_totals(summary.stats["critics"])["repaired"] == summary.counts["repairs"]
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
