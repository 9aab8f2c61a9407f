"""End to end on a local Ray head: generate, read back three ways, determinism, errors as rows."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pyarrow.parquet as pq
import pytest

from datagen.config import GenerateConfig
from datagen.pipeline import run_generation
from datagen.pipeline.stages.negatives import kind_rates
from datagen.spans import check_tiling
from datagen.types import Span

pytestmark = pytest.mark.slow


def _config(out, **fields) -> GenerateConfig:
    fields = {"num_trajectories": 300, "chunk_size": 100, "progress": False, **fields}
    return GenerateConfig(out=str(out), **fields)


def test_generates_real_trajectories_readable_by_polars_datasets_and_ray(ray_head, tmp_path):
    summary = run_generation(_config(tmp_path / "out"))
    assert summary.complete and summary.counts["trajectories"] == 300
    df = pl.read_parquet(tmp_path / "out" / "trajectories" / "*.parquet")
    assert df.height == 300 and df["id"].n_unique() == 300
    assert set(df["env"].unique()) == {"sql", "fs", "enterprise"}
    assert df["success"].all() and df["error"].null_count() == 300
    assert df["error_kind"].null_count() == 300
    assert df["n_steps"].mean() >= 4
    for row in df.head(50).iter_rows(named=True):
        spans = [Span(**span) for span in row["spans"]]
        assert check_tiling(row["text"], spans) is None
        assert orjson.loads(row["tools"])[0]["type"] == "function"

    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=str(tmp_path / "out/trajectories/*.parquet"),
                      split="train")
    assert len(ds) == 300 and ds[0]["spans"][0]["kind"] == "PROMPT"

    import ray

    rds = ray.data.read_parquet(str(tmp_path / "out" / "trajectories"))
    assert rds.count() == 300
    manifest = orjson.loads((tmp_path / "out" / "manifest.json").read_bytes())
    assert manifest["complete"] and manifest["counts"]["trajectories"] == 300
    assert sum(s["rows"] for s in manifest["shards"]["trajectories"]) == 300
    assert "| sql |" in (tmp_path / "out" / "README.md").read_text()

    negatives = pl.read_parquet(tmp_path / "out" / "negatives" / "*.parquet")
    preferences = pl.read_parquet(tmp_path / "out" / "preferences" / "*.parquet")
    assert set(negatives["kind"].unique()) == {"type_error", "hallucinated_key", "logical_error"}
    assert negatives["trajectory_id"].is_in(df["id"].implode()).all()
    # the critics stage (issue 4) appends repair and safety pairs to the same table
    assert preferences.filter(pl.col("source") == "negative").height == negatives.height
    assert set(preferences["source"].unique()) == {"negative", "repair", "safety"}
    assert manifest["counts"]["negatives"] == negatives.height
    kinds = kind_rates(manifest["stats"]["negatives"])
    assert kinds["hallucinated_key"]["produced"] > 0
    assert kinds["type_error"]["impossible_rate"] < 0.3
    assert [stage["name"] for stage in manifest["stages"]] == ["trajectories", "negatives",
                                                               "critics"]
    assert "logical_error" in summary.format()


def test_same_config_gives_identical_shards(ray_head, tmp_path):
    first = run_generation(_config(tmp_path / "a", num_trajectories=200))
    second = run_generation(_config(tmp_path / "b", num_trajectories=200, num_workers=1))
    assert first.complete and second.complete
    for name in ("a", "b"):
        assert (tmp_path / name / "manifest.json").exists()
    a = orjson.loads((tmp_path / "a" / "manifest.json").read_bytes())["shards"]
    b = orjson.loads((tmp_path / "b" / "manifest.json").read_bytes())["shards"]
    assert a == b  # same files, same sha256: bit for bit


def test_rerun_skips_complete_chunks(ray_head, tmp_path):
    config = _config(tmp_path / "out", num_trajectories=200)
    run_generation(config)
    shard = tmp_path / "out" / "trajectories" / "part-000000.parquet"
    before = shard.stat().st_mtime_ns
    summary = run_generation(config)
    assert summary.generated == 0 and summary.complete
    assert shard.stat().st_mtime_ns == before


def test_failing_generators_and_tools_become_rows(ray_head, tmp_path):
    config = _config(tmp_path / "out", num_trajectories=200, env_modules=["tests.datagen.toy_envs"],
                     envs=[{"name": "toy_flaky"}])
    summary = run_generation(config)
    assert summary.complete
    df = pl.read_parquet(tmp_path / "out" / "trajectories" / "*.parquet")
    assert df.height == 200
    failed = df.filter(~pl.col("success"))
    generator = failed.filter(pl.col("error").str.contains("task generation failed"))
    tool = failed.filter(pl.col("error").str.contains("read exploded"))
    assert generator.height > 0 and tool.height > 0
    assert generator.height + tool.height == failed.height
    assert set(generator["error_kind"]) == {"task_generation_failed"}
    assert set(tool["error_kind"]) == {"tool_raised"}
    errors = summary.stats["trajectories"]["error_kinds"]  # counted by kind, not by text
    assert errors == {"task_generation_failed": generator.height, "tool_raised": tool.height}
    assert "errors by kind: " in summary.format()
    assert (df.filter(pl.col("success"))["error"].null_count()
            == df.filter(pl.col("success")).height)
    # the user's environment module is part of the code that wrote each chunk
    import tests.datagen.toy_envs as toy_envs
    from datagen.provenance import source_digest

    (entry,) = orjson.loads((tmp_path / "out" / "manifest.json").read_bytes())["code"]
    assert entry["user_modules"] == "tests.datagen.toy_envs"
    assert entry["user_digest"] == source_digest([Path(toy_envs.__file__)])


def test_tokenizer_adds_aligned_token_columns(ray_head, tmp_path, tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    run_generation(_config(tmp_path / "out", num_trajectories=60, chunk_size=30,
                           tokenizer=str(tiny_tokenizer_dir)))
    table = pq.read_table(tmp_path / "out" / "trajectories")
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    assert set(table.column("tokenizer").to_pylist()) == {str(tiny_tokenizer_dir)}
    for row in table.slice(0, 10).to_pylist():
        assert len(row["input_ids"]) == len(row["span_ids"])
        assert tokenizer.decode(row["input_ids"]) == row["text"]
        act_ids = [t for t, k in zip(row["input_ids"], row["span_ids"]) if k == 2]
        acts = "".join(row["text"][s["start"]:s["end"]] for s in row["spans"] if s["kind"] == "ACT")
        assert tokenizer.decode(act_ids) == acts
