"""The stage interface: configured stages, the registry's checks, and a stage added from a test
module (tests/datagen/toy_stage.py) that appears everywhere a built-in stage does."""

from __future__ import annotations

import orjson
import polars as pl
import pyarrow as pa
import pytest

from datagen.config import GenerateConfig
from datagen.pipeline.card import type_name
from datagen.pipeline.cli import main
from datagen.pipeline.stages.base import (Stage, Table, add_counts, configured_stages,
                                          register_stage, stage_classes)

TOY = "tests.datagen.toy_stage"


def test_configured_stages_follow_the_config():
    names = [stage.name for stage in configured_stages(GenerateConfig())]
    assert names == ["trajectories", "negatives", "critics"]
    off = GenerateConfig(negatives={"enabled": False}, critics={"enabled": False})
    assert [stage.name for stage in configured_stages(off)] == ["trajectories"]
    # a stage from a user's module runs only in runs that list the module, even once imported
    with_toy = GenerateConfig(env_modules=[TOY], critics={"enabled": False})
    assert [s.name for s in configured_stages(with_toy)] == ["trajectories", "negatives",
                                                             "toy_tool_calls"]
    assert "toy_tool_calls" not in [s.name for s in configured_stages(GenerateConfig())]


def test_every_column_of_every_table_is_documented():
    for stage in stage_classes():
        for table in stage.tables:
            undocumented = [f.name for f in table.fields() if not table.columns.get(f.name)]
            assert not undocumented, (table.name, undocumented)
    assert type_name(pa.list_(pa.struct([("role", pa.string()), ("name", pa.string())]))) == \
        "list<struct<role, name>>"


def test_a_shared_table_must_keep_its_schema():
    class Clash(Stage):
        name = "clash"
        tables = (Table("preferences", pa.schema([("id", pa.string())]), "x", {"id": "x"}),)

        @classmethod
        def build(cls, config, context):
            return cls()

        def run(self, trajectories, envs):
            raise NotImplementedError

    with pytest.raises(ValueError, match="declares table 'preferences' with another schema"):
        register_stage(Clash)
    assert "clash" not in [stage.name for stage in stage_classes()]


def test_counts_merge_key_by_key():
    total = add_counts({}, {"calls": {"sql": 2}, "seconds": 0.5, "note": "text"})
    add_counts(total, {"calls": {"sql": 1, "fs": 4}, "seconds": 0.25})
    assert total == {"calls": {"sql": 3, "fs": 4}, "seconds": 0.75}


@pytest.mark.slow
def test_a_stage_from_one_file_appears_everywhere(ray_head, tmp_path, capsys):
    from datagen.pipeline import run_generation
    from datagen.pipeline.inspect import inspect_dataset
    from datagen.pipeline.verify import verify_output

    out = tmp_path / "out"
    config = GenerateConfig(out=str(out), num_trajectories=60, chunk_size=30, progress=False,
                            env_modules=[TOY], critics={"enabled": False})
    summary = run_generation(config)
    assert summary.complete
    calls = pl.read_parquet(out / "toy_tool_calls" / "*.parquet")
    trajectories = pl.read_parquet(out / "trajectories" / "*.parquet")
    assert calls.height == trajectories["n_steps"].sum() > 0  # its own table, every chunk
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["stages"][-1] == {"name": "toy_tool_calls", "tables": ["toy_tool_calls"]}
    assert manifest["counts"]["toy_tool_calls"] == calls.height
    assert len(manifest["shards"]["toy_tool_calls"]) == 2
    assert sum(manifest["stats"]["toy_tool_calls"]["calls"].values()) == calls.height
    assert f"toy_tool_calls: calls {calls.height:,}" in summary.format()
    card = (out / "README.md").read_text()
    assert "## Columns of `toy_tool_calls/`" in card and "| `tool` | string | the tool it" in card
    assert f"toy_tool_calls: {calls.height:,} rows; columns: trajectory_id, step, tool" in \
        inspect_dataset(out, samples=1)

    assert verify_output(out).ok
    stray = out / "toy_tool_calls" / "part-000099.parquet"
    stray.write_bytes(b"")
    shard = out / manifest["shards"]["toy_tool_calls"][1]["file"]
    shard.write_bytes(shard.read_bytes()[:-10])
    assert main(["verify", str(out), "--repair"]) == 1
    shown = capsys.readouterr().out
    assert "STRAY toy_tool_calls/part-000099.parquet" in shown
    assert "DAMAGED toy_tool_calls/part-000001.parquet" in shown
    assert not stray.exists() and run_generation(config).generated == 30  # chunk 1 again
    assert verify_output(out).ok

    # an OUT read where the stage's module is not imported: its tables, shown plainly
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    manifest["stages"][-1]["name"] = "ghost"
    (out / "manifest.json").write_bytes(orjson.dumps(manifest))
    shown = inspect_dataset(out, samples=0)
    assert "stage ghost (not registered here: its tables only)" in shown
    assert f"toy_tool_calls: {calls.height:,} rows" in shown
