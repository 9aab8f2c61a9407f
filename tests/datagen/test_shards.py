"""Output directory ownership, atomic chunk writes and the manifest."""

from __future__ import annotations

import hashlib

import orjson

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.rows import SCHEMA_VERSION
from datagen.pipeline.shards import OutputConflict, ShardInfo, ShardStore, shard_problem


def _table(n: int) -> pa.Table:
    return pa.table({"id": [str(i) for i in range(n)]})


def test_chunk_write_is_complete_and_checksummed(tmp_path):
    store = ShardStore(tmp_path / "out", ["trajectories"])
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
    store = ShardStore(tmp_path / "out", ["trajectories"])
    store.claim("fp1", {}, overwrite=False)
    store.write_chunk(0, {"trajectories": _table(2)}, {})
    store.claim("fp1", {}, overwrite=False)  # same config: resume, data kept
    assert store.is_complete(0)
    with pytest.raises(OutputConflict, match="different config.*--overwrite"):
        store.claim("fp2", {}, overwrite=False)
    assert store.is_complete(0)
    store.claim("fp2", {}, overwrite=True)
    assert not store.is_complete(0) and not (tmp_path / "out" / "trajectories").exists()


def test_an_out_with_no_complete_chunk_is_taken_over_by_another_config(tmp_path):
    """A run that wrote no chunk (its endpoint was down: every chunk failed) left OUT with its
    record and perhaps unmarked shards; the corrected config takes it over, no --overwrite,
    and nothing of the old run stays."""
    out = tmp_path / "out"
    store = ShardStore(out, ["trajectories"])
    store.claim("fp1", {}, overwrite=False)
    (out / "trajectories").mkdir(exist_ok=True)
    (out / "trajectories" / "part-000000.parquet").write_bytes(b"unmarked")  # a failed write
    ShardStore(out, ["trajectories"]).claim("fp2", {"seed": 1}, overwrite=False)
    assert orjson.loads((out / "_run.json").read_bytes())["fingerprint"] == "fp2"
    assert not (out / "trajectories" / "part-000000.parquet").exists()


def test_overwrite_clears_the_tables_the_previous_run_recorded(tmp_path):
    out = tmp_path / "out"
    first = ShardStore(out, ["trajectories", "toy_rows"])
    first.claim("fp1", {}, overwrite=False)
    first.write_chunk(0, {"trajectories": _table(2), "toy_rows": _table(1)}, {})
    assert orjson.loads((out / "_run.json").read_bytes())["tables"] == ["trajectories",
                                                                       "toy_rows"]
    (out / "notes").mkdir()  # not a table of either run: kept
    ShardStore(out, ["trajectories"]).claim("fp2", {}, overwrite=True)
    assert not (out / "toy_rows").exists() and not (out / "trajectories").exists()
    assert (out / "notes").is_dir()


def test_a_run_record_without_tables_clears_the_builtin_tables(tmp_path):
    out = tmp_path / "out"
    store = ShardStore(out, ["trajectories"])
    store.claim("fp1", {}, overwrite=False)
    (out / "repairs").mkdir()
    run = orjson.loads((out / "_run.json").read_bytes())
    del run["tables"]  # as datagen wrote it before schema version 3
    (out / "_run.json").write_bytes(orjson.dumps(run))
    ShardStore(out, ["trajectories"]).claim("fp2", {}, overwrite=True)
    assert not (out / "repairs").exists()


def test_dropping_a_chunk_removes_the_shards_its_marker_lists(tmp_path):
    out = tmp_path / "out"
    ShardStore(out, ["trajectories", "toy_rows"]).write_chunk(
        0, {"trajectories": _table(2), "toy_rows": _table(1)}, {})
    store = ShardStore(out)  # knows no tables: the marker says which
    store.drop_chunk(0)
    assert not store.is_complete(0)
    assert list(out.glob("*/part-*.parquet")) == []


def test_shards_of_another_schema_version_are_not_mixed_in(tmp_path):
    store = ShardStore(tmp_path / "out", ["trajectories"])
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
        ShardStore(tmp_path / "out", ["trajectories"]).claim("fp", {}, overwrite=False)
    assert (tmp_path / "out" / "precious.txt").exists()


def test_debris_of_a_killed_run_is_cleared(tmp_path):
    store = ShardStore(tmp_path / "out", ["trajectories"])
    store.claim("fp", {}, overwrite=False)
    (tmp_path / "out" / "_tmp" / "part-000001.parquet.deadbeef").write_bytes(b"half")
    store.claim("fp", {}, overwrite=False)
    assert list((tmp_path / "out" / "_tmp").iterdir()) == []


def _resumable_out(tmp_path, chunks: int = 3) -> ShardStore:
    store = ShardStore(tmp_path / "out", ["trajectories"])
    store.claim("fp", {}, overwrite=False)
    for chunk in range(chunks):
        store.write_chunk(chunk, {"trajectories": _table(50), "negatives": _table(7)}, {})
    return store


def test_overwrite_never_deletes_a_directory_datagen_did_not_write(tmp_path):
    out = tmp_path / "out"
    (out / "trajectories").mkdir(parents=True)
    mine = {out / "README.md": "my notes", out / "manifest.json": "{}",
            out / "trajectories" / "part-000000.parquet": "my data"}
    for path, text in mine.items():
        path.write_text(text)
    with pytest.raises(OutputConflict, match=r"not empty \(README.md, manifest.json, "
                                             r"trajectories\).*with --overwrite too"):
        ShardStore(out).claim("fp", {}, overwrite=True)
    assert all(path.read_text() == text for path, text in mine.items())


def test_an_out_that_is_a_file_or_has_an_unreadable_run_record_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputConflict, match="is a file, not a directory"):
        ShardStore(tmp_path / "file").claim("fp", {}, overwrite=False)
    store = _resumable_out(tmp_path)
    (tmp_path / "out" / "_run.json").write_bytes(b'{"fingerprint": "fp", "sch')
    for overwrite in (False, True):
        with pytest.raises(OutputConflict, match="_run.json is not a readable datagen run record "
                                                 r"\(JSONDecodeError"):
            store.claim("fp", {}, overwrite=overwrite)
    assert store.is_complete(0)


def test_leftovers_of_a_lock_and_empty_bookkeeping_count_as_empty(tmp_path):
    out = tmp_path / "out"
    (out / "_tmp").mkdir(parents=True)
    (out / "_run.lock").write_text("")
    assert ShardStore(out).claim("fp", {}, overwrite=False) == []
    assert (out / "_run.json").exists()


def test_resume_drops_a_truncated_shard_and_its_chunk(tmp_path):
    store = _resumable_out(tmp_path)
    shard = store.shard_path("trajectories", 1)
    size = shard.stat().st_size
    with open(shard, "r+b") as handle:  # truncate -s 50%
        handle.truncate(size // 2)
    dropped = store.claim("fp", {}, overwrite=False)
    assert [d.chunk for d in dropped] == [1]
    assert "trajectories/part-000001.parquet" in dropped[0].reason
    assert f"{size // 2:,} bytes, recorded {size:,} (truncated" in dropped[0].reason
    assert not store.is_complete(1) and not shard.exists()
    assert not store.shard_path("negatives", 1).exists()  # the whole chunk is redone
    assert store.is_complete(0) and store.is_complete(2)
    assert [r.chunk for r in store.records()] == [0, 2]


def _edit_marker(marker, edit) -> None:
    record = orjson.loads(marker.read_bytes())
    edit(record)
    marker.write_bytes(orjson.dumps(record))


@pytest.mark.parametrize("damage", ["delete", "rewrite_tail", "corrupt_marker", "foreign_marker",
                                    "marker_is_a_device", "stats_of_a_wrong_shape",
                                    "bytes_as_text", "file_as_number", "chunk_as_text"])
def test_resume_drops_every_kind_of_damaged_chunk(tmp_path, damage):
    store = _resumable_out(tmp_path)
    shard, marker = store.shard_path("negatives", 2), store.marker_path(2)
    if damage == "delete":
        shard.unlink()
    elif damage == "rewrite_tail":  # same size, footer gone
        data = shard.read_bytes()
        shard.write_bytes(data[:-8] + b"\0" * 8)
    elif damage == "corrupt_marker":
        marker.write_bytes(marker.read_bytes()[:20])
    elif damage == "marker_is_a_device":  # was read until memory ran out
        marker.unlink()
        marker.symlink_to("/dev/zero")
    elif damage == "stats_of_a_wrong_shape":  # crashed the run summary on every rerun
        _edit_marker(marker, lambda r: r.update(stats={"stages": 5}))
    elif damage == "bytes_as_text":
        _edit_marker(marker, lambda r: r["shards"]["negatives"].update(bytes="x"))
    elif damage == "file_as_number":
        _edit_marker(marker, lambda r: r["shards"]["negatives"].update(file=7))
    elif damage == "chunk_as_text":
        _edit_marker(marker, lambda r: r.update(chunk="2"))
    else:
        marker.write_bytes(store.marker_path(0).read_bytes())
    assert store.records() is not None  # never raises, whatever the markers hold
    dropped = store.claim("fp", {}, overwrite=False)
    assert [d.chunk for d in dropped] == [2], dropped
    assert not store.is_complete(2) and store.is_complete(0) and store.is_complete(1)
    # the chunks kept are whole: dropping a copied marker deleted the shards it listed,
    # those of chunk 0, which then counted as complete with its shards gone
    assert store.chunk_problem(0) is None and store.chunk_problem(1) is None


def test_resume_drops_a_marker_outside_the_plan_and_nothing_else(tmp_path):
    store = _resumable_out(tmp_path)
    store.marker_path(7).write_bytes(store.marker_path(1).read_bytes())
    dropped = store.claim("fp", {}, overwrite=False, planned=3)
    assert [(d.chunk, d.reason) for d in dropped] == [
        (7, "marker outside the run's plan of 3 chunks")]
    assert store.complete_chunks() == {0, 1, 2}
    assert all(store.chunk_problem(chunk) is None for chunk in range(3))


def test_a_recorded_path_outside_out_is_a_problem_not_a_read(tmp_path):
    store = _resumable_out(tmp_path, chunks=1)
    info = store.records()[0].shards["trajectories"]
    outside = ShardInfo(file="../../etc/hostname", rows=info.rows, bytes=info.bytes,
                        sha256=info.sha256)
    assert "outside the output directory" in shard_problem(store.root, outside)
    assert shard_problem(store.root, info, checksum=True) is None


def _two_table_out(tmp_path, chunks: int = 3) -> ShardStore:
    """An OUT of a run whose stages write two tables (the store knows both, as the driver's)."""
    store = ShardStore(tmp_path / "out", ["trajectories", "negatives"])
    store.claim("fp", {}, overwrite=False)
    for chunk in range(chunks):
        store.write_chunk(chunk, {"trajectories": _table(50), "negatives": _table(7)}, {})
    return store


@pytest.mark.parametrize("edit", [
    lambda r: r["shards"].pop("trajectories"),  # a hand edit / partial rewrite
    lambda r: r.update(shards={}),
    # each shard under the other table's key: every record still matches a file
    lambda r: r.update(shards={"trajectories": r["shards"]["negatives"],
                               "negatives": r["shards"]["trajectories"]}),
])
def test_resume_drops_a_marker_that_does_not_name_each_tables_own_shard(tmp_path, edit):
    # kept, the chunk counted as complete with a table's rows missing, and `verify --repair`
    # then deleted that table's shard as a stray: the rows were gone for good
    store = _two_table_out(tmp_path)
    _edit_marker(store.marker_path(1), edit)
    dropped = store.claim("fp", {}, overwrite=False, planned=3)
    assert [d.chunk for d in dropped] == [1], dropped
    assert store.complete_chunks() == {0, 2}
    assert not store.shard_path("trajectories", 1).exists()  # the chunk is generated again


def test_only_the_writers_marker_names_make_a_chunk_complete(tmp_path):
    # chunk-1.json used to count as chunk 1, which drop_chunk (deleting chunk-000001.json)
    # could never drop: the chunk was never regenerated; chunk-².json was a traceback
    store = _two_table_out(tmp_path)
    marker = store.marker_path(1)
    marker.rename(marker.with_name("chunk-1.json"))
    for name in ("chunk-\u00b2.json", "chunk-\u0661.json", "chunk-0000002.json", "chunk-+2.json"):
        (marker.parent / name).write_bytes(store.marker_path(2).read_bytes())
    assert store.marked_chunks() == [0, 2]
    assert store.claim("fp", {}, overwrite=False, planned=3) == []
    assert store.complete_chunks() == {0, 2}  # the run regenerates chunk 1


def test_an_oversized_marker_is_a_damaged_chunk_not_a_read(tmp_path):
    # one limit (2 GiB) for every record let one 200 MB marker take 2.9 GB to parse
    from datagen.pipeline.storage import MAX_MARKER_BYTES

    store = _two_table_out(tmp_path)
    marker = store.marker_path(1)
    marker.write_bytes(marker.read_bytes() + b" " * MAX_MARKER_BYTES)  # still valid JSON
    assert [r.chunk for r in store.records()] == [0, 2]
    dropped = store.claim("fp", {}, overwrite=False, planned=3)
    assert [d.chunk for d in dropped] == [1] and "over the 1,048,576" in dropped[0].reason
