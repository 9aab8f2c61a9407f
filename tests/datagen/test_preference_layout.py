"""`preferences.layout: compact`: negative and repair pairs store their prompt by reference
to their trajectory (trajectories/, repairs/), and the readers join it back to exactly the full
layout's rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.config import GenerateConfig, fingerprint, public_dump
from datagen.pipeline.shards import ShardStore
from datagen.preferences import join_prompts
from datagen.readers import load_preferences


def _generate(root: Path, layout: str) -> Path:
    from datagen.pipeline.chunk import ChunkProcessor, plan_chunks

    config = GenerateConfig(out=str(root), num_trajectories=24, chunk_size=12, progress=False,
                            critics={"inject_rate": 1.0, "safety_rate": 1.0},
                            preferences={"layout": layout})
    processor = ChunkProcessor(config)
    records = [processor.process(chunk) for chunk in plan_chunks(config)]
    ShardStore(root).write_manifest("test", {}, len(records), records)
    return root


@pytest.fixture(scope="module")
def outs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("layout")
    return {layout: _generate(base / layout, layout) for layout in ("full", "compact")}


def _shards(out: Path, table: str) -> list[Path]:
    return sorted((out / table).glob("part-*.parquet"))


def test_compact_shards_join_back_to_the_full_layout_and_are_smaller(outs):
    full, compact = outs["full"], outs["compact"]
    for full_shard, compact_shard, trajectories, repairs in zip(
            _shards(full, "preferences"), _shards(compact, "preferences"),
            _shards(compact, "trajectories"), _shards(compact, "repairs"), strict=True):
        stored = pq.read_table(compact_shard)
        by_reference = [row for row in stored.to_pylist() if row["prompt_chars"] is not None]
        assert {row["source"] for row in by_reference} == {"negative", "repair"}
        assert all(row["prompt"] is None and row["prompt_text"] is None for row in by_reference)
        inline = [row for row in stored.to_pylist() if row["prompt_chars"] is None]
        assert {row["source"] for row in inline} == {"safety"}
        assert all(row["prompt"] and row["prompt_text"] for row in inline)
        columns = ["id", "text", "messages"]
        conversations = pa.concat_tables([pq.read_table(trajectories, columns=columns),
                                          pq.read_table(repairs, columns=columns)])
        assert join_prompts(stored, conversations).equals(pq.read_table(full_shard))
        with pytest.raises(ValueError, match="refers to trajectory"):  # repairs/ is needed
            join_prompts(stored, pq.read_table(trajectories))
        assert compact_shard.stat().st_size < full_shard.stat().st_size  # demo rates: ~50%
    for table in ("trajectories", "negatives", "repairs"):  # only preferences/ differ
        assert [p.read_bytes() for p in _shards(full, table)] == [
            p.read_bytes() for p in _shards(compact, table)]


def test_a_pair_whose_trajectory_is_missing_is_named():
    from datagen.pipeline.stages.tables import preferences_table
    from datagen.rows import TRAJECTORY_SCHEMA, rows_to_table

    pair = {"id": "p1", "trajectory_id": "gone", "source": "negative", "prompt_messages": 2,
            "prompt_chars": 10}
    pairs = rows_to_table([pair], preferences_table("compact").schema)
    with pytest.raises(ValueError, match="pair p1 refers to trajectory gone"):
        join_prompts(pairs, rows_to_table([], TRAJECTORY_SCHEMA))


def test_load_preferences_gives_the_same_dataset_for_both_layouts(outs, tmp_path):
    pytest.importorskip("datasets")
    full = load_preferences(outs["full"], cache_dir=str(tmp_path / "a"))
    compact = load_preferences(outs["compact"], cache_dir=str(tmp_path / "b"))
    assert compact.features == full.features
    assert compact.to_list() == full.to_list()
    streamed = load_preferences(outs["compact"], sources=["negative"], streaming=True)
    assert list(streamed) == [row for row in full if row["source"] == "negative"]


def test_the_default_layout_keeps_the_fingerprint_a_compact_one_changes_it():
    default, compact = GenerateConfig(), GenerateConfig(preferences={"layout": "compact"})
    assert "preferences" not in public_dump(default)
    assert public_dump(compact)["preferences"] == {"layout": "compact"}
    assert fingerprint(default) != fingerprint(compact)


def test_the_trainer_refuses_the_compact_layout_by_name(outs):
    from trainer.readers.preferences import preference_files

    assert preference_files(outs["full"])
    with pytest.raises(ValueError, match="preferences.layout: compact"):
        preference_files(outs["compact"])


def test_sad_mch_negatives_refuse_the_compact_layout_by_name(outs):
    from trainer.documents import ReadSettings
    from trainer.readers.preferences import negative_documents

    shard = outs["compact"] / "trajectories" / "part-000000.parquet"
    table = pq.read_table(shard, columns=["id", "success"])
    table = table.append_column("path", pa.array([str(shard)] * table.num_rows))
    settings = ReadSettings(tokenizer="unused", max_seq_len=64, use_mch=True, read_topk=False,
                            complexity_weights=(1.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="preferences.layout: compact"):
        negative_documents(table, settings, 4, {})
