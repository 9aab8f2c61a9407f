"""Shard files of an OUT that is a directory or an object-store URI (`s3://bucket/prefix`).

The trainer lists and pairs shards by name (`trajectories/part-K` beside `preferences/part-K`);
for a URI it lists through `pyarrow.fs` (endpoint and credentials from the standard AWS
environment: `AWS_ENDPOINT_URL(_S3)`, `AWS_ACCESS_KEY_ID`, ...) and keeps full URIs, which
pyarrow and Ray Data open by themselves. Ray Data's `include_paths` gives an object's path
without its scheme; `full_uri` puts it back. (datagen has its own copy of this concern,
datagen/pipeline/storage.py: training never imports datagen.)
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs


def is_uri(location: str | Path) -> bool:
    return "://" in str(location)


def _fs(uri: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(uri)


def part_files(root: str | Path, table: str) -> list[str]:
    """OUT/<table>/part-*.parquet, sorted, as paths (a directory) or URIs (a store)."""
    if not is_uri(root):
        return sorted(str(p) for p in (Path(root) / table).glob("part-*.parquet"))
    folder = f"{str(root).rstrip('/')}/{table}"
    fs, path = _fs(folder)
    found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(f"{folder}/{info.base_name}" for info in found
                  if info.type == pafs.FileType.File and info.base_name.startswith("part-")
                  and info.base_name.endswith(".parquet"))


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
