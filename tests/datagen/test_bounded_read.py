"""`read_bounded`: the whole-file reads of configs and OUT's records end, in bounded memory,
whatever the path names."""

from __future__ import annotations

import os
import threading

import pytest

from datagen.bounded_read import FileTooLarge, read_bounded


def test_a_regular_file_is_read_whole(tmp_path):
    path = tmp_path / "f.json"
    path.write_bytes(b'{"a": 1}')
    assert read_bounded(path, limit=8) == b'{"a": 1}'


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big"
    with open(path, "wb") as handle:  # sparse: 1 TB on no disk, never read
        handle.truncate(1 << 40)
    with pytest.raises(FileTooLarge, match="1,099,511,627,776 bytes, over the 1,024"):
        read_bounded(path, limit=1024)


def test_a_fifo_without_a_writer_is_refused_instead_of_waited_on(tmp_path):
    fifo = tmp_path / "manifest.json"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_bounded(fifo, limit=1024)
        except OSError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # the old `open(path, "rb")` blocks here until a writer comes
        with open(fifo, "wb"):
            pass
        pytest.fail("read_bounded waited for a writer on a FIFO")
    assert "not a regular file" in str(outcome[0])


def test_a_device_is_refused_not_read_forever():
    with pytest.raises(OSError, match="/dev/zero is not a regular file"):
        read_bounded("/dev/zero", limit=1024)


def test_missing_paths_and_directories_raise_what_open_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "absent", limit=10)
    with pytest.raises(IsADirectoryError):
        read_bounded(tmp_path, limit=10)
