"""The DPO feed streams: a shard's micro-batches leave a pool at a time (the first after two
pools are tokenised, not the whole shard), and the Ray Data stream holds exactly the
batches the per-shard feed composes, in the run's shard order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from trainer.config import load_config
from trainer.readers import preferences
from trainer.readers.preferences import (build_pair_dataset, pair_batch_stream, shard_order,
                                         shuffled_pairs, training_pair_batches)
from trainer.recipes.dpo import pair_settings

ROOT = Path(__file__).resolve().parents[2]


def _settings(out, tokenizer_dir, *extra):
    cfg = load_config(ROOT / "configs" / "dpo_tiny.yaml", [
        f"run_dir={out}/run", f"shards={out}", f"tokenizer={tokenizer_dir}",
        f"model.init_from={out}", "model.use_landmark=false", "data.max_seq_len=1024",
        "dpo.batch_size=2", "dpo.bucket_pool_batches=4", *extra])
    return pair_settings(cfg, None)


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal batch tables (reference log-probs are NaN until filled: NaN == NaN here)."""
    refs = ["ref_chosen", "ref_rejected"]
    return a.drop_columns(refs).equals(b.drop_columns(refs)) and all(
        np.array_equal(pc.list_flatten(a.column(name)).to_numpy(),
                       pc.list_flatten(b.column(name)).to_numpy(), equal_nan=True)
        for name in refs)


@pytest.fixture(scope="module")
def critic_pairs():
    """Repair and safety pairs of 12 oracle trajectories, made in-process (no Ray)."""
    from datagen.config import CriticsConfig
    from datagen.pipeline.stages.critics import CriticStage
    from datagen.teachers import EnvPool
    from tests.datagen.helpers import oracle_trajectories

    batch = CriticStage(CriticsConfig(inject_rate=1.0, safety_rate=1.0), 0).run(
        oracle_trajectories(12), EnvPool())
    rows = batch.rows("preferences")
    return pa.table({name: [row[name] for row in rows]
                     for name in preferences.PREFERENCE_COLUMNS})


def _large_shard(table, copies):
    """`table` repeated `copies` times (new ids)."""
    parts = []
    for copy in range(copies):
        ids = pa.array([f"{pair_id}-{copy}" for pair_id in table.column("id").to_pylist()])
        parts.append(table.set_column(table.schema.get_field_index("id"), "id", ids))
    return pa.concat_tables(parts)


def _shard_pairs(out):
    """The pipeline's repair and safety pairs (its preferences/ table)."""
    table = pq.read_table(out / "preferences", columns=list(preferences.PREFERENCE_COLUMNS))
    return table.filter(pc.is_in(table.column("source"), pa.array(["repair", "safety"])))


def _poison_last_pool(table, settings):
    """`table` with null prompts in the rows the shuffle puts in the last pool: tokenising
    that pool raises, so a batch seen before the error left before the pool was reached."""
    order = {pair_id: i for i, pair_id in
             enumerate(shuffled_pairs(table, settings).column("id").to_pylist())}
    size = settings.pairs_per_batch * settings.bucket_pool_batches
    last = (table.num_rows - 1) // size * size
    poisoned = [order[pair_id] >= last for pair_id in table.column("id").to_pylist()]
    prompts = [None if bad else text for bad, text in
               zip(poisoned, table.column("prompt_text").to_pylist())]
    return table.set_column(table.schema.get_field_index("prompt_text"), "prompt_text",
                            pa.array(prompts, pa.string()))


def test_a_shards_first_batches_leave_before_the_rest_is_tokenised(
        critic_pairs, tiny_tokenizer_dir, tmp_path, monkeypatch):
    settings = _settings(tmp_path, tiny_tokenizer_dir, "dpo.sources=[repair, safety]",
                         "data.max_seq_len=8192")  # every pair fits: no pool is all dropped
    table = _large_shard(critic_pairs, copies=4)
    pools = -(-table.num_rows // (settings.pairs_per_batch * settings.bucket_pool_batches))
    assert pools >= 10
    tokenised = []
    real = preferences._pool_pairs
    monkeypatch.setattr(preferences, "_pool_pairs",
                        lambda pool, *a: tokenised.append(pool.num_rows) or real(pool, *a))
    stream = pair_batch_stream(table, settings)
    first = next(stream)
    assert first.num_rows == settings.bucket_pool_batches  # the first pool's micro-batches
    assert len(tokenised) == 2  # and one pool held back (for drop counts) were tokenised
    rest = list(stream)
    assert len(tokenised) == pools and sum(tokenised) == table.num_rows
    whole = training_pair_batches(table, settings)  # the same batches, all at once
    assert _same(pa.concat_tables([first, *rest]), whole)
    with pytest.raises(TypeError):  # the poisoned last pool is tokenised only at the end
        list(pair_batch_stream(_poison_last_pool(table, settings), settings))
    assert _same(next(pair_batch_stream(_poison_last_pool(table, settings), settings)), first)


def test_the_ray_stream_hands_on_a_batch_before_the_shard_is_done(
        ray_head, pipeline_out, trainer_tokenizer, tmp_path):
    settings = _settings(tmp_path, trainer_tokenizer, "dpo.sources=[repair, safety]")
    table = _large_shard(_shard_pairs(pipeline_out), copies=4)
    (tmp_path / "preferences").mkdir()
    pq.write_table(_poison_last_pool(table, settings),
                   tmp_path / "preferences" / "part-00000.parquet")
    dataset, _ = build_pair_dataset(settings)
    batches = iter(dataset.iter_batches(batch_size=1, batch_format="pyarrow"))
    first = next(batches)  # before this change: the whole shard first, so the error
    assert first.num_rows == 1 and len(first.column("ids")[0].as_py()) >= 1
    with pytest.raises(Exception, match="NoneType|TypeError"):
        list(batches)


def test_the_ray_stream_equals_the_per_shard_feed_in_shard_order(
        ray_head, pipeline_out, trainer_tokenizer):
    settings = _settings(pipeline_out, trainer_tokenizer, "run.seed=3")
    dataset, _ = build_pair_dataset(settings)
    dataset.context.execution_options.preserve_order = True  # as `trainer fit` ingests it
    streamed = pa.concat_tables(list(dataset.iter_batches(batch_size=None,
                                                          batch_format="pyarrow")))
    files = preferences.preference_files(pipeline_out)
    expected = pa.concat_tables([
        training_pair_batches(pq.read_table(f, columns=list(preferences.PREFERENCE_COLUMNS)),
                              settings) for f in shard_order(files, settings.seed)])
    assert streamed.num_rows == expected.num_rows > 1
    assert _same(streamed.select(expected.column_names), expected)
