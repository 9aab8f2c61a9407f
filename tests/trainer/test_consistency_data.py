"""The trainer reads only what the consistency filter kept (`data.consistency`): the SAD stream
(trajectories, their repairs), the DPO pair stream and the loop's replay pool, on a pipeline
OUT written with the filter on (k = 3, a fake teacher whose sample 1 answers a made-up figure
and whose sample 2 of even-seeded tasks ends without an answer). What was kept is read with
datagen's own reader (`datagen.readers.kept_trajectory_ids`), not the trainer's."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from trainer.contract import TRAJECTORY_COLUMNS
from trainer.data import DataSettings, build_dataset
from trainer.pair_batches import Pairs
from trainer.readers.consistency import kept_only, kept_trajectories
from trainer.readers.preferences import PairSettings, build_pair_dataset
from trainer.readers.trajectories import trajectory_shaped_documents

ROOT = Path(__file__).resolve().parents[2]
SEQ = 4096  # no document is cut: the stream's tokens equal a direct tokenisation's


@pytest.fixture(scope="module")
def consistency_out(ray_head, tmp_path_factory) -> Path:
    from datagen.config import GenerateConfig
    from datagen.pipeline import run_generation

    out = tmp_path_factory.mktemp("consistency") / "out"
    config = GenerateConfig(out=str(out), num_trajectories=12, chunk_size=6, progress=False,
                            num_workers=1, envs=[{"name": "sql"}],
                            env_modules=["tests.datagen.consistency_fakes"],
                            teacher={"backend": "wrong_sample_fake"},
                            consistency={"enabled": True, "k": 3},
                            critics={"inject_rate": 0.5, "safety_rate": 0.5})
    summary = run_generation(config)
    assert summary.complete and summary.counts["trajectories"] == 36
    return out


def _kept(out: Path) -> set[str]:
    from datagen.readers import kept_trajectory_ids

    return set(kept_trajectory_ids(out))


def _table(out: Path, name: str) -> pa.Table:
    return pa.concat_tables(pq.read_table(f) for f in sorted((out / name).glob("part-*.parquet")))


def _documents(table: pa.Table, tokenizer: Path) -> Counter:
    """Token sequences of the LM documents a table's rows make (as the stream's readers do)."""
    settings = DataSettings(shards="", tokenizer=str(tokenizer), max_seq_len=SEQ)
    rows, _ = trajectory_shaped_documents(table.select(list(TRAJECTORY_COLUMNS)),
                                          settings.read_settings(), 1.0)
    return Counter(tuple(ids.tolist()) for ids in rows.columns["input_ids"])


def _streamed(dataset) -> dict[float, Counter]:
    """LM documents of the stream by their loss weight (1 trajectories, 0.5 repairs)."""
    found: dict[float, Counter] = {1.0: Counter(), 0.5: Counter()}
    for batch in dataset.iter_batches(batch_size=1, batch_format="pyarrow"):
        ids = batch.column("input_ids")[0].as_py()
        start = 0
        for length, weight in zip(batch.column("lengths")[0].as_py(),
                                  batch.column("lm_weight")[0].as_py()):
            found[weight][tuple(ids[start:start + length])] += 1
            start += length
    return found


def _settings(out: Path, tokenizer: Path, **overrides) -> DataSettings:
    return DataSettings(shards=str(out), tokenizer=str(tokenizer), max_seq_len=SEQ,
                        batch_size=2, bucket_pool_batches=2, use_mch=False,
                        tables=("trajectories", "repairs"), table_weights=(("repairs", 0.5),),
                        **overrides)


def test_the_sad_stream_holds_exactly_the_kept_rollouts_and_their_repairs(
        consistency_out, trainer_tokenizer):
    kept = _kept(consistency_out)
    trajectories, repairs = _table(consistency_out, "trajectories"), _table(consistency_out, "repairs")
    is_kept = pc.is_in(trajectories.column("id"), pa.array(sorted(kept)))
    repair_kept = pc.is_in(repairs.column("source_id"), pa.array(sorted(kept)))
    # the data can tell the filter apart: rollouts and repairs on both sides of it
    assert 12 <= len(kept) < trajectories.num_rows
    assert 0 < pc.sum(repair_kept).as_py() < repairs.num_rows
    dataset, info = build_dataset(_settings(consistency_out, trainer_tokenizer))
    streamed = _streamed(dataset)
    assert streamed[1.0] == _documents(trajectories.filter(is_kept), trainer_tokenizer)
    assert streamed[0.5] == _documents(repairs.filter(repair_kept), trainer_tokenizer)
    dropped_repairs = repairs.num_rows - pc.sum(repair_kept).as_py()
    assert info["consistency"] == {
        "trajectories": {"read": len(kept), "dropped": trajectories.num_rows - len(kept)},
        "repairs": {"read": repairs.num_rows - dropped_repairs, "dropped": dropped_repairs}}


def test_all_reads_every_rollout_and_the_stream_is_the_same_every_time(
        consistency_out, trainer_tokenizer):
    import ray.data

    every, info = build_dataset(_settings(consistency_out, trainer_tokenizer, consistency="all"))
    assert info["consistency"] == "all rows"
    assert _streamed(every)[1.0] == _documents(_table(consistency_out, "trajectories"),
                                               trainer_tokenizer)
    # a resumed run skips the batches it consumed by position (trainer.checkpoints), which needs
    # the filtered stream in the same order every time (the order Ray Train's ingest keeps)
    context = ray.data.DataContext.get_current()
    before, context.execution_options.preserve_order = \
        context.execution_options.preserve_order, True
    try:
        runs = [[batch.column("input_ids")[0].as_py() for batch in
                 build_dataset(_settings(consistency_out, trainer_tokenizer))[0]
                 .iter_batches(batch_size=1, batch_format="pyarrow")] for _ in range(2)]
    finally:
        context.execution_options.preserve_order = before
    assert runs[0] == runs[1] and runs[0]


def test_the_pair_stream_keeps_pairs_of_kept_rollouts_and_every_safety_pair(
        consistency_out, trainer_tokenizer):
    kept = _kept(consistency_out)
    pairs = _table(consistency_out, "preferences")
    sources = dict(zip(*(_table(consistency_out, "repairs").column(c).to_pylist()
                         for c in ("id", "source_id"))))
    wanted = {row["id"] for row in pairs.select(["id", "trajectory_id", "source"]).to_pylist()
              if row["source"] == "safety"
              or (row["source"] == "negative" and row["trajectory_id"] in kept)
              or (row["source"] == "repair" and sources[row["trajectory_id"]] in kept)}
    by_source = Counter(pairs.column("source").to_pylist())
    assert all(by_source[s] for s in ("negative", "repair", "safety"))
    assert len(wanted) < pairs.num_rows - 1
    dataset, info = build_pair_dataset(PairSettings(shards=str(consistency_out),
                                                    tokenizer=str(trainer_tokenizer),
                                                    max_seq_len=SEQ))
    seen, dropped = [], 0
    for row in dataset.iter_batches(batch_size=1, batch_format="numpy"):
        batch = Pairs.from_batch_row(row)
        seen += batch.ids
        dropped += batch.too_long + batch.empty
    assert len(seen) == len(set(seen)) and set(seen) <= wanted
    assert len(seen) + dropped == len(wanted)
    assert info["consistency"]["read"] == len(wanted)
    assert info["consistency"]["dropped"] == pairs.num_rows - len(wanted)
    assert info["consistency"]["safety_read"] == by_source["safety"]
    assert "safety_dropped" not in info["consistency"]
    assert info["reference"] == "model"  # the paths the filter needs are no precomputed cache


def test_dpos_reference_cache_is_keyed_by_the_filter_only_when_it_filters(
        consistency_out, trainer_tokenizer, tmp_path):
    """The precomputed reference log-probs cover the pairs the run trains on: a filtered
    run's cache is keyed by the consistency shards too; an unfiltered run's key is as before
    (existing caches stay valid)."""
    from trainer.config import load_config
    from trainer.reference import reference_key

    def key(*extra):
        return reference_key(load_config(ROOT / "configs" / "dpo_tiny.yaml", [
            f"run_dir={tmp_path}/run", f"shards={consistency_out}",
            f"tokenizer={trainer_tokenizer}", f"model.init_from={tmp_path}", *extra]))

    filtered, every = key(), key("data.consistency=all")
    assert [name for name, *_ in filtered["consistency"]] == \
        sorted(p.name for p in (consistency_out / "consistency").glob("part-*.parquet"))
    assert "consistency" not in every and {**filtered, "consistency": None} != every
    assert {k: v for k, v in filtered.items() if k != "consistency"} == every


def test_kept_only_without_the_table_is_refused_and_auto_reads_everything(
        consistency_out, pipeline_out, trainer_tokenizer):
    assert kept_only(str(consistency_out), "auto") and kept_only(str(consistency_out), "kept_only")
    assert not kept_only(str(consistency_out), "all")
    assert not kept_only(str(pipeline_out), "auto") and not kept_only(str(pipeline_out), "all")
    with pytest.raises(ValueError, match="data.consistency is 'kept_only' but .* no consistency/"):
        build_dataset(DataSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                                   consistency="kept_only"))
    with pytest.raises(ValueError, match="data.consistency is 'kept_only'"):
        build_pair_dataset(PairSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                                        consistency="kept_only"))


def test_a_chunk_without_its_consistency_shard_is_refused(consistency_out, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(consistency_out, out)
    shard = sorted((out / "trajectories").glob("part-*.parquet"))[0]
    rows = pq.read_table(shard, columns=["id"])
    rows = rows.append_column("path", pa.array([str(shard)] * rows.num_rows))
    assert 0 < kept_trajectories(rows, str(out)).num_rows < rows.num_rows
    (out / "consistency" / shard.name).unlink()
    with pytest.raises(ValueError, match=f"consistency/{shard.name} is missing"):
        kept_trajectories(rows, str(out))


def test_the_loops_replay_pool_holds_round_zeros_kept_rows_only(consistency_out):
    from trainer.loop.mix import replay_pool

    kept = _kept(consistency_out)
    repairs = _table(consistency_out, "repairs")
    pool = replay_pool(consistency_out, ("trajectories", "repairs"), [])
    ids = pool.column("id").to_pylist()
    kept_repairs = [row["id"] for row in repairs.select(["id", "source_id"]).to_pylist()
                    if row["source_id"] in kept]
    assert sorted(ids) == sorted([*kept, *kept_repairs])
    every = replay_pool(consistency_out, ("trajectories", "repairs"), [], consistency="all")
    assert every.num_rows == _table(consistency_out, "trajectories").num_rows + repairs.num_rows


def test_the_sad_stream_reads_every_safety_document_once_with_the_filter_on(
        consistency_out, trainer_tokenizer):
    """Safety documents go with a kept rollout of their chunk, so the filter drops none."""
    from trainer.readers.safety import distinct_safety_texts, tokenise_safety

    settings = DataSettings(shards=str(consistency_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=SEQ, batch_size=2, bucket_pool_batches=2,
                            use_mch=False, tables=("trajectories", "safety"),
                            table_weights=(("safety", 0.5),))
    texts = [text for f in sorted((consistency_out / "preferences").glob("part-*.parquet"))
             for text in distinct_safety_texts(str(f))]
    expected = tokenise_safety(texts, settings.read_settings(), 0.5)
    assert len(expected) == len(texts) > 0
    dataset, _ = build_dataset(settings)
    assert _streamed(dataset)[0.5] == Counter(tuple(ids.tolist())
                                              for ids in expected.columns["input_ids"])
