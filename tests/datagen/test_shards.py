"""Output directory ownership, atomic chunk writes and the manifest."""

from __future__ import annotations

import hashlib

import orjson

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.rows import SCHEMA_VERSION
from datagen.shards import OutputConflict, ShardStore


def _table(n: int) -> pa.Table:
    return pa.table({"id": [str(i) for i in range(n)]})


def test_chunk_write_is_complete_and_checksummed(tmp_path):
    store = ShardStore(tmp_path / "out")
    store.claim("fp1", {"seed": 0}, overwrite=False)
    assert not store.is_complete(3)
    record = store.write_chunk(3, {"trajectories": _table(5)}, {"rows": {"trajectories": 5}})
    assert store.is_complete(3)
    shard = tmp_path / "out" / record.shards["trajectories"].file
    assert pq.read_table(shard).num_rows == 5
    assert hashlib.sha256(shard.read_bytes()).hexdigest() == record.shards["trajectories"].sha256
    assert pq.read_metadata(shard).row_group(0).column(0).compression == "ZSTD"
    assert list((tmp_path / "out" / "_tmp").iterdir()) == []
    manifest = store.write_manifest("fp1", {"seed": 0}, 4, store.records())
    assert manifest["counts"] == {"trajectories": 5} and not manifest["complete"]


def test_other_config_is_refused_unless_overwrite(tmp_path):
    store = ShardStore(tmp_path / "out")
    store.claim("fp1", {}, overwrite=False)
    store.write_chunk(0, {"trajectories": _table(2)}, {})
    store.claim("fp1", {}, overwrite=False)  # same config: resume, data kept
    assert store.is_complete(0)
    with pytest.raises(OutputConflict, match="different config.*--overwrite"):
        store.claim("fp2", {}, overwrite=False)
    assert store.is_complete(0)
    store.claim("fp2", {}, overwrite=True)
    assert not store.is_complete(0) and not (tmp_path / "out" / "trajectories").exists()


def test_shards_of_another_schema_version_are_not_mixed_in(tmp_path):
    store = ShardStore(tmp_path / "out")
    store.claim("fp1", {}, overwrite=False)
    store.write_chunk(0, {"trajectories": _table(2)}, {})
    run_file = tmp_path / "out" / "_run.json"
    run = orjson.loads(run_file.read_bytes())
    run_file.write_bytes(orjson.dumps({**run, "schema_version": SCHEMA_VERSION - 1}))
    with pytest.raises(OutputConflict, match=f"schema version {SCHEMA_VERSION - 1}; this "
                                             f"datagen writes version {SCHEMA_VERSION}"):
        store.claim("fp1", {}, overwrite=False)  # same config, older code: still refused
    assert store.is_complete(0)
    store.claim("fp1", {}, overwrite=True)
    assert not store.is_complete(0)


def test_foreign_directory_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    with pytest.raises(OutputConflict, match="not written by datagen"):
        ShardStore(tmp_path / "out").claim("fp", {}, overwrite=False)
    assert (tmp_path / "out" / "precious.txt").exists()


def test_debris_of_a_killed_run_is_cleared(tmp_path):
    store = ShardStore(tmp_path / "out")
    store.claim("fp", {}, overwrite=False)
    (tmp_path / "out" / "_tmp" / "part-000001.parquet.deadbeef").write_bytes(b"half")
    store.claim("fp", {}, overwrite=False)
    assert list((tmp_path / "out" / "_tmp").iterdir()) == []
