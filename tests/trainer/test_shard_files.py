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
