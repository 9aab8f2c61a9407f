"""`DatasetView`, what `datagen inspect` reads through: lazy scans, streamed aggregates, and
samples read from their own row groups, so inspecting a 5M-trajectory OUT is bounded."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.pipeline.inspect import DatasetView
from datagen.pipeline.shards import OutputUnreadable


def _shards(tmp_path, n_shards: int = 4, rows: int = 100, group: int = 25) -> list:
    paths = []
    for shard in range(n_shards):
        ids = [f"t{shard}-{i}" for i in range(rows)]
        table = pa.table({"id": ids, "env": ["sql" if i % 3 else "fs" for i in range(rows)],
                          "text": ["x" * (i + 1) for i in range(rows)]})
        path = tmp_path / f"part-{shard:06d}.parquet"
        pq.write_table(table, path, row_group_size=group)
        paths.append(path)
    return paths


def test_streamed_aggregates_equal_the_eager_ones(tmp_path):
    paths = _shards(tmp_path)
    view = DatasetView(tmp_path, {}, {"trajectories": paths})
    query = lambda df: df.group_by("env").agg(pl.len(), pl.col("text").str.len_chars().mean())
    eager = query(pl.read_parquet(paths)).sort("env")
    assert view.collect(query(view.scan("trajectories")).sort("env")).equals(eager)
    assert view.rows("trajectories") == 400 and view.rows("negatives") == 0
    assert view.scan("negatives") is None and view.sample_rows("negatives", 3) == []


def test_samples_come_from_their_own_row_groups_only(tmp_path, monkeypatch):
    paths = _shards(tmp_path)
    view = DatasetView(tmp_path, {}, {"trajectories": paths}, seed=7)
    groups_read = []
    read_row_group = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda self, i, *a, **k: (
        groups_read.append(i), read_row_group(self, i, *a, **k))[1])
    rows = view.sample_rows("trajectories", 3)
    assert len(rows) == 3 and len(groups_read) == 3  # of 16 row groups
    every = pl.read_parquet(paths).rows(named=True)
    assert all(row in every for row in rows)
    assert view.sample_rows("trajectories", 3) == rows  # the seed decides
    assert DatasetView(tmp_path, {}, {"trajectories": paths}, seed=8).sample_rows(
        "trajectories", 3) != rows
    assert len(view.sample_rows("trajectories", 10_000)) == 400  # capped by the table


def test_a_damaged_shard_is_one_error_pointing_at_verify(tmp_path):
    paths = _shards(tmp_path, n_shards=2)
    paths[1].write_bytes(paths[1].read_bytes()[:50])
    view = DatasetView(tmp_path, {}, {"trajectories": paths})
    with pytest.raises(OutputUnreadable, match="datagen verify"):
        view.rows("trajectories")
    with pytest.raises(OutputUnreadable, match="datagen verify"):
        view.sample_rows("trajectories", 1)


@pytest.mark.parametrize("n_steps, named", [
    (pa.array(["1"] * 100), "part-000001.parquet: not the trajectories schema: column n_steps "
                            "is string, not int16"),
    (None, "part-000001.parquet: not the trajectories schema: no column n_steps")])
def test_a_shard_off_its_tables_schema_is_named_before_any_query(tmp_path, n_steps, named):
    """Before, a query failed: "`mean` operation not supported for dtype `str`", no shard."""
    from datagen.pipeline.inspect import inspect_dataset
    from datagen.pipeline.shards import ShardStore

    store = ShardStore(tmp_path / "out")
    store.claim("fp", {}, overwrite=False)
    for chunk in range(2):
        table = pa.table({"id": [f"{chunk}-{i}" for i in range(100)],
                          "n_steps": pa.array([3] * 100, pa.int16())})
        if chunk == 1:
            table = (table.drop_columns(["n_steps"]) if n_steps is None else
                     table.set_column(1, "n_steps", n_steps))
        store.write_chunk(chunk, {"trajectories": table}, {})
    store.write_manifest("fp", {}, 2, store.records())
    with pytest.raises(OutputUnreadable, match=f"{named}.*`--repair` drops its chunk"):
        inspect_dataset(store.root)
