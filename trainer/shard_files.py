"""Shard files of an OUT that is a directory or an object-store URI (`s3://bucket/prefix`).

The trainer lists and pairs shards by name (`trajectories/part-K` beside `preferences/part-K`);
for a URI it lists through `pyarrow.fs` (endpoint and credentials from the standard AWS
environment: `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, both read by pyarrow 26 itself,
`AWS_ACCESS_KEY_ID`, ...; never from the config, never logged) and keeps full URIs, which
pyarrow and Ray Data open by themselves. Files the trainer writes beside the data (the DPO
reference log-probs) go through `write_bytes`: atomic on both (a rename on a filesystem, a
single PUT on a store, which has no rename). Ray Data's `include_paths` gives an object's path
without its scheme; `full_uri` puts it back. What is a URI is datagen's rule
(datagen/pipeline/storage.py `is_uri`), imported, so both sides read the same OUT the same way.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from datagen.pipeline.storage import (  # a scheme, then "://": /tmp/a://b is a path
    has_credentials, is_uri, uri_option_problem)
from trainer.contract import CHUNK_MARKERS, marker_of

log = logging.getLogger(__name__)


READ_SCHEMES = ("s3", "file")  # pyarrow knows more (gs:// retried for minutes offline)


def store_of(location: str | Path) -> str | None:
    """`scheme://bucket` of a URI (with any user info: what one connection reaches), None
    for a local path."""
    if not is_uri(location):
        return None
    scheme, _, rest = str(location).partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def without_credentials(location: str) -> str:
    """`location` with a URI's user info removed (a record written before it was refused)."""
    if not has_credentials(location):
        return location
    scheme, rest = location.split("://", 1)
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"


def location_problem(location: str | Path) -> str | None:
    """Why the trainer does not read an OUT at `location`, or None: a local path, `s3://` or
    `file://` without credentials, query or fragment (datagen's rule, `uri_option_problem`)
    is read; another scheme is refused before any request."""
    if has_credentials(location):  # before the scheme check, whose message shows the scheme
        return uri_option_problem(location)
    if not is_uri(location):
        return None
    scheme = str(location).split("://", 1)[0]
    if scheme not in READ_SCHEMES:
        return (f"{shown(scheme)[:40]}:// is not read here: an OUT is a local path, s3:// "
                f"or file://")
    return uri_option_problem(location)


def refuse_location(location: str | Path, label: str = "--shards") -> None:
    """ValueError `<label> <location>: <why>` when `location_problem` refuses it, the location
    shown without credentials: one wording for the eval config and the leak check."""
    if problem := location_problem(location):
        raise ValueError(f"{label} {shown(without_credentials(str(location)))}: {problem}")


def shown(text: str | Path) -> str:
    """A path as text that prints anywhere (a name that is not UTF-8 keeps its escapes)."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def _fs(uri: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(uri)


def _sizes(folder: str | Path) -> dict[str, int]:
    """Bytes of each file directly in a folder or under a prefix, by name (none when it is
    missing): one listing on a store, whose entries carry their sizes."""
    if is_uri(folder):
        fs, path = _fs(str(folder))
        found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return {info.base_name: info.size for info in found if info.type == pafs.FileType.File}
    sizes = {}
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    if entry.is_file():
                        sizes[entry.name] = entry.stat().st_size
                except FileNotFoundError:  # removed while listed
                    continue
    except (FileNotFoundError, NotADirectoryError, PermissionError):  # as Path.glob had it
        return {}
    return sizes


def _names(folder: str | Path) -> list[str]:
    """File names directly in a folder or under a prefix (none when it is missing)."""
    return list(_sizes(folder))


def _is_part(name: str) -> bool:
    return name.startswith("part-") and name.endswith(".parquet")


def part_names(folder: str | Path) -> list[str]:
    """The `part-*.parquet` names directly in a folder or under a prefix, sorted."""
    return sorted(n for n in _names(folder) if _is_part(n))


def part_files(root: str | Path, table: str) -> list[str]:
    """OUT/<table>/part-*.parquet of complete chunks, sorted, as paths (a directory) or URIs
    (a store). A shard whose chunk has no marker (a killed or running chunk's: on a store
    it is written at its final key) is left out; an OUT without `_chunks/` (written by hand,
    or copied without it) is read whole."""
    return [join(root, f"{table}/{n}") for n in complete_part_sizes(root, table)]


def complete_part_sizes(root: str | Path, table: str, warn: bool = True) -> dict[str, int]:
    """Name -> bytes of the shards `part_files` gives, in name order, from one listing of the
    table and one of the markers; a warning names shards left out unless `warn` is false."""
    sizes = {n: size for n, size in sorted(_sizes(join(root, table)).items()) if _is_part(n)}
    markers = set(_names(join(root, CHUNK_MARKERS)))
    if markers:
        unmarked = [n for n in sizes if marker_of(n) not in markers]
        if unmarked and warn:
            log.warning("%s: %d shard(s) of incomplete chunks left out (%s...)",
                        join(root, table), len(unmarked), unmarked[0])
        sizes = {n: size for n, size in sizes.items() if marker_of(n) in markers}
    return sizes


def check_footers(files: list[str], root: str | Path) -> None:
    """ValueError naming the shards of a local OUT whose Parquet footer cannot be read (a
    truncated copy, a damaged disk), before any training: Ray Data would otherwise fail in
    a worker minutes in. Objects of a store are left to the read (a footer each would be a
    request per shard). ~0.1 ms a shard here."""
    import pyarrow.parquet as pq

    damaged = []
    for file in files:
        if is_uri(file):
            continue
        try:
            pq.read_metadata(file)
        except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
            damaged.append(f"{file} ({str(exc).splitlines()[0][:160]})")
    if damaged:
        raise ValueError(f"{len(damaged)} unreadable shard(s) under {root}: {damaged[0]}"
                         f"{' ...' if len(damaged) > 1 else ''}; `datagen verify {root}` lists "
                         f"them, `datagen verify --repair` drops their chunks for a rerun")


def join(root: str | Path, relative: str) -> str:
    """`relative` under a directory or URI, as text (a Path would turn `s3://` into `s3:/`)."""
    return f"{str(root).rstrip('/')}/{relative}" if is_uri(root) else str(Path(root) / relative)


def stamps(files: list[str]) -> list[list[object]]:
    """Name, size and modification time of each file: a cheap identity of a shard's content
    (a rewritten shard has a new time), for keys of what is derived from it."""
    if not files:
        return []
    if not is_uri(files[0]):
        return [[Path(f).name, Path(f).stat().st_size, Path(f).stat().st_mtime_ns] for f in files]
    fs, _ = _fs(files[0])
    infos = fs.get_file_info([_fs(f)[1] for f in files])
    return [[info.base_name, info.size, info.mtime_ns] for info in infos]


def read_bytes(location: str | Path) -> bytes:
    """A file's bytes; FileNotFoundError when there is none."""
    if not is_uri(location):
        return Path(location).read_bytes()
    fs, path = _fs(str(location))
    with fs.open_input_stream(path) as stream:
        return stream.read()


def write_bytes(location: str | Path, data: bytes) -> None:
    """Write a file whole or not at all: a temporary name renamed into place on a
    filesystem; one PUT on a store (an object appears complete or not at all)."""
    if is_uri(location):
        fs, path = _fs(str(location))
        with fs.open_output_stream(path) as stream:
            stream.write(data)
        return
    path = Path(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:  # a failed write (disk full) leaves no temporary file behind
        temporary.unlink(missing_ok=True)


def write_parquet(table: pa.Table, location: str | Path) -> None:
    """`table` as one zstd Parquet file, written whole or not at all (`write_bytes`)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    write_bytes(location, sink.getvalue().to_pybytes())


def open_parquet(location: str | Path) -> pq.ParquetFile:
    """A shard's footer read, its columns read lazily, from a path or a URI."""
    if not is_uri(location):
        return pq.ParquetFile(location)
    fs, path = _fs(str(location))
    return pq.ParquetFile(fs.open_input_file(path))


def exists(location: str | Path) -> bool:
    if not is_uri(location):
        return Path(location).exists()
    fs, path = _fs(str(location))
    return fs.get_file_info(path).type == pafs.FileType.File


def sibling(shard: str, table: str) -> str | Path:
    """OUT/<table>/<name> beside OUT/<other table>/<name>: a Path for a path, text for a URI
    (a Path would turn `s3://` into `s3:/`)."""
    if not is_uri(shard):
        path = Path(shard)
        return path.parent.parent / table / path.name
    folder, _, name = shard.rpartition("/")
    return f"{folder.rpartition('/')[0]}/{table}/{name}"


def full_uri(path: str, root: str | Path) -> str:
    """A shard path as Ray Data reports it, made a URI again when OUT is one."""
    if is_uri(root) and not is_uri(path):
        return f"{str(root).split('://', 1)[0]}://{path}"
    return path
