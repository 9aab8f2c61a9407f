"""Reading a small file whole without trusting what the path names.

The files datagen reads whole (a config, OUT's manifest, run record and chunk markers) are
named by users or sit in directories anyone may have edited. A path can be a FIFO (`open`
would wait for a writer forever), a character device such as /dev/zero (`read()` never ends
and takes all memory), or a regular file of terabytes. `read_bounded` opens without blocking,
accepts only a regular file and reads at most `limit` bytes, so each of those is one OSError
that names the path, found in microseconds.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class FileTooLarge(OSError):
    """A file over the bytes its kind may have."""


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def irregular_kind(path: str | Path, mode: int | None = None) -> str | None:
    """What `path` is when it is not a regular file ("a FIFO", "a directory", ...), None when
    it is one: a reader of a FIFO waits for a writer forever, of a device never ends. `mode`
    is the st_mode of a file already opened (fstat); without it `path` is stat'ed, following
    links (FileNotFoundError as `os.stat` raises it)."""
    mode = os.stat(path).st_mode if mode is None else mode
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "an unknown kind")


def read_bounded(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them; OSError otherwise
    (FileNotFoundError and IsADirectoryError as `open` raises them, FileTooLarge when the
    file is, or grows while read, over `limit`)."""
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of blocking, and the
    # regular-file check below refuses it; for regular files the flag changes nothing.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)  # of what was opened: a path swapped since cannot slip through
        kind = irregular_kind(path, info.st_mode)
        if kind == "a directory":
            raise IsADirectoryError(21, "Is a directory", str(path))
        if kind is not None:
            raise OSError(f"{path} is not a regular file ({kind})")
        if info.st_size > limit:
            raise FileTooLarge(f"{path} is {info.st_size:,} bytes, over the {limit:,} "
                               "such a file may have")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(f"{path} grew past {limit:,} bytes while it was read")
    return data


__all__ = ["FileTooLarge", "irregular_kind", "read_bounded"]
