"""trainer.shard_files' writes: whole or not at all, and nothing left behind."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.shard_files import write_bytes, write_parquet


def test_a_parquet_file_is_written_whole_with_zstd(tmp_path):
    table = pa.table({"id": ["a", "b"], "value": [1.5, 2.5]})
    write_parquet(table, tmp_path / "sub" / "t.parquet")
    assert pq.read_table(tmp_path / "sub" / "t.parquet").equals(table)
    metadata = pq.ParquetFile(tmp_path / "sub" / "t.parquet").metadata
    assert metadata.row_group(0).column(0).compression == "ZSTD"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["t.parquet"]


def test_a_failed_write_raises_and_leaves_no_temporary_file(tmp_path):
    (tmp_path / "taken").mkdir()  # a folder where the file should go: the rename fails
    with pytest.raises(OSError):
        write_bytes(tmp_path / "taken", b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_only_paths_s3_and_file_uris_without_credentials_are_read():
    from trainer.shard_files import location_problem, without_credentials

    for readable in ("/data/out", "relative/out", "s3://bucket/out", "file:///data/out",
                     "s3://bucket/a@b"):
        assert location_problem(readable) is None, readable
    assert "not read here" in location_problem("gs://bucket/out")
    assert "not read here" in location_problem("hdfs://host/out")
    secret = "s3://AKIAFAKE:S3cretKey@bucket/out"
    assert "credentials" in location_problem(secret) and "S3cret" not in location_problem(secret)
    assert without_credentials(secret) == "s3://bucket/out"
    assert without_credentials("/data/out") == "/data/out"
