"""The output directory: atomic Parquet shards, chunk markers, manifest, resume.

Layout under OUT/:
    trajectories/part-000000.parquet ...   one shard per chunk per table (zstd level 1)
    _chunks/chunk-000000.json              written last: the chunk is complete
    _run.json                              fingerprint + config of the run that owns OUT
    manifest.json, README.md               written at the end of every run

A shard is written under `_tmp/` and renamed into place; the chunk marker is renamed into place
only after all of the chunk's shards are. So a killed run leaves complete chunks plus debris in
`_tmp/` (cleared on the next start), and the rerun regenerates exactly the chunks without a
marker, overwriting any shard a half-finished chunk left behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from datagen.rows import SCHEMA_VERSION

TABLES = ("trajectories", "negatives", "repairs", "preferences")
ZSTD_LEVEL = 1


class OutputConflict(RuntimeError):
    """OUT holds data from a different config and the user did not ask to overwrite it."""


@dataclass
class ShardInfo:
    file: str
    rows: int
    bytes: int
    sha256: str


@dataclass
class ChunkRecord:
    """What a completed chunk wrote, and the statistics the run summary adds up."""

    chunk: int
    shards: dict[str, ShardInfo]
    stats: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self), option=orjson.OPT_SORT_KEYS)

    @classmethod
    def from_json(cls, data: bytes) -> "ChunkRecord":
        raw = orjson.loads(data)
        shards = {name: ShardInfo(**info) for name, info in raw["shards"].items()}
        return cls(chunk=raw["chunk"], shards=shards, stats=raw.get("stats", {}))


def _write_atomic(path: Path, data: bytes, tmp_dir: Path) -> None:
    tmp = tmp_dir / f"{path.name}.{uuid.uuid4().hex}"
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", compression_level=ZSTD_LEVEL)
    return sink.getvalue().to_pybytes()


class ShardStore:
    """Reads and writes one output directory. Workers use `write_chunk`; the driver uses
    `claim` before the run and `write_manifest` after it."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.tmp = self.root / "_tmp"
        self.markers = self.root / "_chunks"

    def shard_path(self, table: str, chunk: int) -> Path:
        return self.root / table / f"part-{chunk:06d}.parquet"

    def marker_path(self, chunk: int) -> Path:
        return self.markers / f"chunk-{chunk:06d}.json"

    # driver side --------------------------------------------------------------------------

    def claim(self, fingerprint: str, config: dict[str, Any], overwrite: bool) -> None:
        """Make OUT ours: refuse data of another config unless `overwrite`, clear debris."""
        run_file = self.root / "_run.json"
        if run_file.exists():
            previous = orjson.loads(run_file.read_bytes())
            if previous.get("schema_version") != SCHEMA_VERSION:
                if not overwrite:
                    raise OutputConflict(
                        f"{self.root} holds shards of schema version "
                        f"{previous.get('schema_version')}; this datagen writes version "
                        f"{SCHEMA_VERSION} and will not mix them in one dataset. Use another "
                        "--out, or pass --overwrite to delete it and start again.")
                self.clear()
            elif previous.get("fingerprint") != fingerprint:
                if not overwrite:
                    raise OutputConflict(
                        f"{self.root} holds data generated with a different config "
                        f"(fingerprint {previous.get('fingerprint')}, this config {fingerprint}). "
                        "Use another --out, or pass --overwrite to delete it and start again.")
                self.clear()
        elif self.root.exists() and any(self.root.iterdir()) and not overwrite:
            raise OutputConflict(f"{self.root} is not empty and was not written by datagen; "
                                 "use another --out or pass --overwrite")
        elif overwrite:
            self.clear()
        for folder in (self.root, self.tmp, self.markers):
            folder.mkdir(parents=True, exist_ok=True)
        self.clear_tmp()
        payload = {"fingerprint": fingerprint, "schema_version": SCHEMA_VERSION, "config": config}
        _write_atomic(run_file, orjson.dumps(payload, option=orjson.OPT_INDENT_2), self.tmp)

    def clear(self) -> None:
        for name in (*TABLES, "_tmp", "_chunks"):
            shutil.rmtree(self.root / name, ignore_errors=True)
        for name in ("_run.json", "manifest.json", "README.md"):
            (self.root / name).unlink(missing_ok=True)

    def clear_tmp(self) -> None:
        for leftover in self.tmp.glob("*"):
            leftover.unlink(missing_ok=True)

    def is_complete(self, chunk: int) -> bool:
        return self.marker_path(chunk).exists()

    def records(self) -> list[ChunkRecord]:
        return [ChunkRecord.from_json(path.read_bytes())
                for path in sorted(self.markers.glob("chunk-*.json"))]

    # worker side --------------------------------------------------------------------------

    def write_chunk(self, chunk: int, tables: dict[str, pa.Table],
                    stats: dict[str, Any]) -> ChunkRecord:
        """Write every table of a chunk, then its marker. Returns the marker's record."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        shards: dict[str, ShardInfo] = {}
        for name, table in tables.items():
            data = parquet_bytes(table)
            path = self.shard_path(name, chunk)
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(path, data, self.tmp)
            shards[name] = ShardInfo(file=str(path.relative_to(self.root)), rows=table.num_rows,
                                     bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        record = ChunkRecord(chunk=chunk, shards=shards, stats=stats)
        self.markers.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.marker_path(chunk), record.to_json(), self.tmp)
        return record

    # manifest -----------------------------------------------------------------------------

    def write_manifest(self, fingerprint: str, config: dict[str, Any], total_chunks: int,
                       records: list[ChunkRecord],
                       stats: dict[str, Any] | None = None) -> dict[str, Any]:
        shards: dict[str, list[dict[str, Any]]] = {}
        for record in sorted(records, key=lambda r: r.chunk):
            for name, info in record.shards.items():
                shards.setdefault(name, []).append(asdict(info))
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "fingerprint": fingerprint,
            "config": config,
            "complete": len(records) == total_chunks,
            "chunks": {"total": total_chunks, "complete": len(records)},
            "counts": {name: sum(s["rows"] for s in items) for name, items in shards.items()},
            "shards": shards,
            "stats": stats or {},
        }
        _write_atomic(self.root / "manifest.json",
                      orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS),
                      self.tmp)
        return manifest
