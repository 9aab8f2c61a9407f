"""`preferences.layout: compact`: negative and repair pairs store their prompt by reference
to their trajectory (trajectories/, repairs/), and the readers join it back to exactly the full
layout's rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from datagen.config import GenerateConfig, fingerprint, public_dump
from datagen.pipeline.shards import ShardStore
from datagen.preferences import join_prompts
from datagen.readers import load_preferences
from tests.datagen.helpers import rewrite_shard


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


@pytest.mark.parametrize("column, change, problem", [
    ("prompt_chars", lambda n: n + 10**6, "prompt_chars .* is outside trajectory"),
    ("prompt_chars", lambda n: -n, "prompt_chars .* is outside trajectory"),
    ("prompt_chars", lambda n: 0, "prompt_chars 0 is outside trajectory"),
    ("prompt_chars", lambda n: n - 1, "prompt_chars .* does not end at an assistant turn"),
    ("prompt_messages", lambda n: n + 1000, "prompt_messages .* is outside trajectory"),
    ("prompt_messages", lambda n: n - 1,
     "prompt_messages 1 does not end before an assistant turn")])
def test_a_prompt_reference_that_does_not_fit_its_trajectory_is_named(outs, column, change,
                                                                      problem):
    shard = _shards(outs["compact"], "preferences")[0]
    pairs = pq.read_table(shard).slice(0, 1)  # the first pair is a negative (by reference)
    damaged = pairs.set_column(pairs.schema.get_field_index(column), column,
                               pa.array([change(pairs.column(column)[0].as_py())], pa.int64()))
    conversations = pq.read_table(outs["compact"] / "trajectories" / shard.name)
    join_prompts(pairs, conversations, str(shard))  # the undamaged pair joins
    with pytest.raises(ValueError, match=f"pair {pairs.column('id')[0]}: {problem}.*{shard}"):
        join_prompts(damaged, conversations, str(shard))


def test_load_preferences_names_a_bad_reference_itself(outs, tmp_path):
    # the join's error used to arrive under datasets' "An error occurred while generating
    # the dataset", its message only in the cause
    pytest.importorskip("datasets")
    out = tmp_path / "out"
    shutil.copytree(outs["compact"], out)
    def push_first_prompt_past_its_trajectory(pairs: pa.Table) -> pa.Table:
        chars = pairs.column("prompt_chars").to_pylist()
        chars[0] += 10**6  # the first pair is a negative (by reference)
        column = pairs.schema.get_field_index("prompt_chars")
        return pairs.set_column(column, pairs.field(column),
                                pa.array(chars, pairs.field(column).type))

    shard = rewrite_shard(out, "preferences", 0, push_first_prompt_past_its_trajectory)
    with pytest.raises(ValueError, match=f"prompt_chars .* is outside trajectory .*{shard.name}"):
        load_preferences(out, cache_dir=str(tmp_path / "cache"))


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


@pytest.fixture(scope="module")
def layout_tokenizer(outs, tmp_path_factory) -> Path:
    from tests.conftest import load_script

    directory = tmp_path_factory.mktemp("layout_tokenizer")
    assert load_script("scripts/build_tokenizer.py").main([
        "--shards", str(outs["full"] / "trajectories"), "--out", str(directory),
        "--vocab-size", "1000"]) == 0
    return directory


def _with_path(shard: Path) -> pa.Table:
    table = pq.read_table(shard)
    return table.append_column("path", pa.array([str(shard)] * table.num_rows, pa.string()))


def test_the_trainer_joins_compact_prompts_back_to_the_full_layouts_text(outs, tmp_path):
    from trainer.contract import PREFERENCE_COLUMNS
    from trainer.readers.compact_prompts import joined_prompts

    columns = list(PREFERENCE_COLUMNS)
    for full_shard, compact_shard in zip(_shards(outs["full"], "preferences"),
                                         _shards(outs["compact"], "preferences"), strict=True):
        joined = joined_prompts(_with_path(compact_shard), str(outs["compact"]))
        assert "prompt_chars" not in joined.column_names
        assert joined.select(columns).equals(pq.read_table(full_shard, columns=columns))
        full = _with_path(full_shard)
        assert joined_prompts(full, str(outs["full"])) is full  # the full layout passes as is
        stored = _with_path(compact_shard)
        safety = stored.filter(pc.equal(stored.column("source"), "safety"))
        assert joined_prompts(safety, str(outs["compact"])).select(columns).equals(
            safety.select(columns))  # a block of inline prompts only: nothing to read
    from trainer.readers.compact_prompts import with_prompt_text

    stored = _with_path(_shards(outs["compact"], "preferences")[0])
    first = stored.slice(0, 1)  # a negative pair, by reference
    with pytest.raises(ValueError, match="prompt_chars 99999 is outside its conversation"):
        with_prompt_text(first.set_column(first.schema.get_field_index("prompt_chars"),
                                          "prompt_chars", pa.array([99_999], pa.int32())),
                         {first.column("trajectory_id")[0].as_py(): "short"}, "here")
    copy = tmp_path / "out"
    shutil.copytree(outs["compact"], copy)
    for shard in _shards(copy, "repairs"):  # repair pairs' conversations are in repairs/
        shard.unlink()
    with pytest.raises(ValueError, match="refers to conversation .* compact needs"):
        joined_prompts(_with_path(_shards(copy, "preferences")[0]), str(copy))


def _pair_stream(out: Path, tokenizer: Path) -> tuple[dict[str, tuple], dict]:
    """The DPO feed's pairs by id (source, token ids, span labels) and the stream's info."""
    from trainer.pair_batches import Pairs
    from trainer.readers.preferences import PairSettings, build_pair_dataset

    dataset, info = build_pair_dataset(PairSettings(shards=str(out), tokenizer=str(tokenizer),
                                                    max_seq_len=4096))
    pairs, dropped = {}, 0
    for row in dataset.iter_batches(batch_size=1, batch_format="numpy"):
        batch = Pairs.from_batch_row(row)
        dropped += batch.too_long + batch.empty
        for i, pair_id in enumerate(batch.ids):
            pairs[pair_id] = (batch.sources[i], *(list(getattr(batch, part)[i]) for part in (
                "prompt_ids", "chosen_ids", "rejected_ids", "prompt_spans", "chosen_spans")))
    return pairs, {**info, "dropped": dropped}


def test_the_dpo_pair_stream_is_the_same_for_both_layouts(ray_head, outs, layout_tokenizer):
    full, full_info = _pair_stream(outs["full"], layout_tokenizer)
    compact, compact_info = _pair_stream(outs["compact"], layout_tokenizer)
    assert compact == full and compact_info == full_info
    assert {pair[0] for pair in full.values()} == {"negative", "repair", "safety"}
    assert len(full) + full_info["dropped"] == sum(  # every pair once, trained or dropped
        pq.read_metadata(shard).num_rows for shard in _shards(outs["full"], "preferences"))


def test_sad_mch_negatives_are_the_same_for_both_layouts(outs, layout_tokenizer):
    from trainer.documents import ReadSettings
    from trainer.readers.preferences import negative_documents

    settings = ReadSettings(tokenizer=str(layout_tokenizer), max_seq_len=4096, use_mch=True,
                            read_topk=False, complexity_weights=(1.0, 0.0, 0.0))
    documents = {}
    for layout, out in outs.items():
        shard = _shards(out, "trajectories")[0]
        table = pq.read_table(shard, columns=["id", "text", "success"])  # as the SAD stream
        table = table.append_column("path", pa.array([str(shard)] * table.num_rows))
        rows = negative_documents(table, settings, 6, {})
        documents[layout] = [[list(value) for value in rows.columns[name]]
                             for name in ("input_ids", "span_ids", "mch_positions", "mch_labels")]
    assert len(documents["full"][0]) == 6 and documents["compact"] == documents["full"]


def test_dpo_reference_log_probs_are_the_same_for_both_layouts(ray_head, outs, layout_tokenizer,
                                                               tmp_path):
    """`dpo.reference: precomputed` scores the compact layout's pairs with their prompts
    joined back: the same log-probs per pair as from the full layout."""
    import numpy as np

    from tests.trainer.test_dpo import _checkpoint, _config
    from trainer.recipes.dpo import pair_settings
    from trainer.reference import precompute_reference

    start = _checkpoint(tmp_path, layout_tokenizer)
    scores = {}
    for layout, out in outs.items():
        copy = tmp_path / layout
        shutil.copytree(out, copy)
        cfg = _config(copy, layout_tokenizer, start, "dpo.reference=precomputed",
                      "dpo.reference_batch_size=8", "dpo.sources=[repair]")
        directory = Path(precompute_reference(cfg, pair_settings(cfg, None)))
        table = pa.concat_tables(pq.read_table(p) for p in sorted(directory.glob("part-*")))
        scores[layout] = {row["id"]: (row["ref_chosen"], row["ref_rejected"])
                          for row in table.to_pylist()}
    assert scores["compact"].keys() == scores["full"].keys() and len(scores["full"]) >= 5
    ids = sorted(scores["full"])
    np.testing.assert_allclose([scores["compact"][i] for i in ids],
                               [scores["full"][i] for i in ids], rtol=1e-5, atol=1e-5)
