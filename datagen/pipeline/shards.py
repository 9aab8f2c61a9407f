"""The output directory: atomic Parquet shards, chunk markers, manifest, resume.

Layout under OUT/:
    trajectories/part-000000.parquet ...   one shard per chunk per table (zstd level 1); the
                                           tables are those the run's stages declare
    _chunks/chunk-000000.json              written last: the chunk is complete
    _run.json                              fingerprint + config of the run that owns OUT
                                           (every config written here has its credentials
                                           redacted: datagen/credentials.py)
    _run.lock                              while a run holds OUT: its owner (runlock.py)
    manifest.json, README.md               written at the end of every run

A shard is written under `_tmp/` and renamed into place; the chunk marker is renamed into place
only after all of the chunk's shards are. So a killed run leaves complete chunks plus debris in
`_tmp/` (cleared on the next start), and the rerun regenerates exactly the chunks without a
marker, overwriting any shard a half-finished chunk left behind.

Resume trusts a marker only after a cheap check of what it lists (each shard exists, has the
recorded size, a Parquet footer and the recorded row count): a chunk that fails it (a truncated
or deleted shard, an unreadable marker) loses its marker and shards and is generated again.
`datagen verify` adds the sha256 of every byte (datagen/pipeline/verify.py; the costs are in
README.md).
OUT is datagen's when it holds a readable `_run.json`; nothing else is ever deleted.

OUT may also be an object-store URI (`s3://bucket/prefix`, storage.py). There a shard is put
at its final key (an object store has no atomic rename; a PUT is atomic), and the marker,
put after all of the chunk's shards, is still what makes the chunk complete: a killed run
leaves unmarked shards, which resume ignores and the rerun of their chunk overwrites.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from datagen.credentials import redact_credentials
from datagen.pipeline.storage import (MAX_MANIFEST_BYTES, MAX_RUN_RECORD_BYTES, TMP_DIR,
                                      LocalStorage, Storage, is_uri, join, open_storage)
from datagen.provenance import code_counts
from datagen.rows import SCHEMA_VERSION

log = logging.getLogger(__name__)

ZSTD_LEVEL = 1
RUN_FILE = "_run.json"
LOCK_FILE = "_run.lock"  # datagen/pipeline/runlock.py; present only while a run holds OUT
# What clear() may delete in an OUT whose _run.json says datagen wrote it (with the table
# folders its stages wrote, recorded in _run.json); nothing else.
_DATAGEN_FILES = ("_run.json", "manifest.json", "README.md")
_DATAGEN_DIRS = (TMP_DIR, "_chunks")
# The tables of a run whose _run.json does not list them (schema versions 1 and 2 did not).
UNRECORDED_TABLES = ("trajectories", "negatives", "repairs", "preferences")
_MANIFEST_KEYS = {"schema_version", "fingerprint", "complete", "chunks", "counts", "shards"}
# The names the writer gives markers and shards: ASCII digits only (str.isdigit() also takes
# "²", which int() refuses), so that a name is parsed exactly as `marker_file`/`shard_file`
# spell it; anything else (chunk-1.json, part-².parquet) is not one, and verify lists it as
# a stray file.
_MARKER_NAME = re.compile(r"chunk-([0-9]+)\.json")
_SHARD_NAME = re.compile(r"part-([0-9]+)\.parquet")


class OutputConflict(RuntimeError):
    """OUT cannot be used for this run: another config's data, not datagen's, in use."""


class OutputUnreadable(RuntimeError):
    """OUT is not a readable datagen dataset: no or a corrupt manifest, damaged shards."""


_SHARD_FIELDS = {"file": str, "rows": int, "bytes": int, "sha256": str}


@dataclass
class ShardInfo:
    file: str
    rows: int
    bytes: int
    sha256: str

    @classmethod
    def parse(cls, item: Any) -> ShardInfo:
        """A shard as a marker or manifest.json records it; ValueError naming what is wrong
        (a hand-edited or damaged record must not reach the checks as a wrong type)."""
        if not isinstance(item, dict) or set(item) != set(_SHARD_FIELDS):
            raise ValueError(f"a shard record has exactly the fields {', '.join(_SHARD_FIELDS)}")
        for name, kind in _SHARD_FIELDS.items():
            value = item[name]
            if not isinstance(value, kind) or isinstance(value, bool) or \
                    (kind is int and value < 0):
                raise ValueError(f"shard {name} is {str(value)[:40]!r}, not a "
                                 f"{'count' if kind is int else 'string'}")
        return cls(**item)


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
        """Parse a marker; ValueError (with the reason) for anything that is not one, down to
        the shapes the run summary reads from `stats`."""
        try:
            raw = orjson.loads(data)
            chunk, shards, stats = raw["chunk"], raw["shards"], raw.get("stats", {})
            if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 0:
                raise ValueError(f"chunk is {str(chunk)[:40]!r}, not a chunk index")
            if not isinstance(shards, dict):
                raise ValueError("shards is not a mapping of table -> shard")
            _check_stats(stats)
            return cls(chunk=chunk, shards={str(name): ShardInfo.parse(info)
                                            for name, info in shards.items()}, stats=stats)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a chunk marker ({type(exc).__name__}: {exc})") from None


def _check_stats(stats: Any) -> None:
    """A marker's `stats`: a mapping whose `stages` maps stage names to their counts and whose
    `stage_seconds` maps stages to seconds (what the summary adds up)."""
    if not isinstance(stats, dict):
        raise ValueError("stats is not a mapping")
    stages, seconds = stats.get("stages", {}), stats.get("stage_seconds", {})
    if not isinstance(stages, dict) or not all(isinstance(v, dict) for v in stages.values()):
        raise ValueError("stats.stages is not a mapping of stage -> counts")
    if not isinstance(seconds, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in seconds.values()):
        raise ValueError("stats.stage_seconds is not a mapping of stage -> seconds")


def as_storage(root: str | Path | Storage) -> Storage:
    """A path or URI opened as storage; a storage as it is."""
    return open_storage(root) if isinstance(root, (str, Path)) else root


def outside(storage: Storage, file: str) -> bool:
    """Whether a recorded relative path would leave OUT (an absolute path, `..`, or on a
    filesystem a symlink out of it): never read or deleted."""
    parts = PurePosixPath(file).parts
    if not parts or PurePosixPath(file).is_absolute() or ".." in parts:
        return True
    if isinstance(storage, LocalStorage):
        return not (storage.root / file).resolve().is_relative_to(storage.root.resolve())
    return False


def shard_problem(root: str | Path | Storage, info: ShardInfo,
                  checksum: bool = False) -> str | None:
    """Why the shard `info` describes is not intact, or None. Without `checksum`: it exists
    inside `root`, has the recorded size, a Parquet footer and the recorded rows (a stat and
    a footer read, whatever the shard's size); with it, also the recorded sha256 (reads every
    byte). A truncated shard fails the size check, so resume needs no checksum to catch it."""
    storage = as_storage(root)
    if outside(storage, info.file):
        return f"recorded path {info.file!r} is outside the output directory"
    try:
        size = storage.size(info.file)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if size != info.bytes:
        return f"{size:,} bytes, recorded {info.bytes:,} (truncated or rewritten)"
    try:
        rows = storage.parquet_rows(info.file)
    except (OSError, pa.ArrowException) as exc:
        return f"not a readable Parquet file ({str(exc).splitlines()[0][:160]})"
    if rows != info.rows:
        return f"{rows:,} rows, recorded {info.rows:,}"
    if checksum and storage.sha256(info.file) != info.sha256:
        return "sha256 differs from the recorded one (bytes changed in place)"
    return None


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_manifest(root: str | Path | Storage) -> dict[str, Any]:
    """OUT/manifest.json, or OutputUnreadable saying why it is not a datagen dataset."""
    storage = as_storage(root)
    root, path = storage.location, storage.full("manifest.json")
    try:
        manifest = orjson.loads(storage.read("manifest.json", MAX_MANIFEST_BYTES))
    except (FileNotFoundError, NotADirectoryError):
        if storage.kind() == "file":
            raise OutputUnreadable(f"{root} is a file, not a datagen output directory") from None
        raise OutputUnreadable(f"{root} has no manifest.json: not a datagen output directory "
                               "(or its first run has not finished a chunk yet)") from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise OutputUnreadable(f"{path} is unreadable ({exc}); rerun `datagen generate` with "
                               "the same config to rewrite it") from None
    missing = _MANIFEST_KEYS - set(manifest) if isinstance(manifest, dict) else _MANIFEST_KEYS
    if missing:
        raise OutputUnreadable(f"{path} is not a datagen manifest (missing: "
                               f"{', '.join(sorted(missing))})")
    if malformed := _malformed_manifest(manifest):
        raise OutputUnreadable(f"{path} is not a datagen manifest ({malformed}); rerun "
                               "`datagen generate` with the same config to rewrite it")
    return manifest


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _malformed_manifest(manifest: dict[str, Any]) -> str | None:
    """Which field of a manifest with every key has the wrong shape, or None."""
    chunks, counts, shards = manifest["chunks"], manifest["counts"], manifest["shards"]
    if not isinstance(manifest["complete"], bool):
        return "complete is not true or false"
    if not (isinstance(chunks, dict) and _count(chunks.get("total"))
            and _count(chunks.get("complete"))):
        return "chunks is not {total, complete} counts"
    if not (isinstance(counts, dict) and all(_count(value) for value in counts.values())):
        return "counts is not a mapping of table -> rows"
    if not (isinstance(shards, dict) and all(isinstance(v, list) for v in shards.values())):
        return "shards is not a mapping of table -> list of shards"
    for table, items in shards.items():
        for i, item in enumerate(items):
            try:
                ShardInfo.parse(item)
            except ValueError as exc:
                return f"shards.{table}.{i}: {exc}"
    return None


def manifest_tables(manifest: dict[str, Any]) -> list[str]:
    """Every table a manifest knows: those its stages declare and those it lists shards of."""
    declared = [t for stage in manifest_stages(manifest) for t in stage["tables"]]
    return list(dict.fromkeys([*declared, *manifest.get("shards", {})]))


def manifest_stages(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's stages in run order, `{"name", "tables"}` each ([] for a manifest written
    before stages were recorded, or a malformed entry)."""
    stages = manifest.get("stages")
    if not isinstance(stages, list):
        return []
    return [{"name": str(s["name"]), "tables": [str(t) for t in s["tables"]]} for s in stages
            if isinstance(s, dict) and "name" in s and isinstance(s.get("tables"), list)]


def manifest_shards(manifest: dict[str, Any]) -> dict[str, list[ShardInfo]]:
    """Table -> the shards a manifest (from `read_manifest`) lists."""
    try:
        return {table: [ShardInfo.parse(item) for item in items]
                for table, items in manifest["shards"].items()}
    except (TypeError, AttributeError, ValueError) as exc:
        raise OutputUnreadable(f"manifest.json lists a shard it does not describe ({exc})"
                               ) from None


@dataclass(frozen=True)
class DroppedChunk:
    """A chunk that was complete but failed its check on resume; it is generated again."""

    chunk: int
    reason: str


def _conflict(previous: dict[str, Any], fingerprint: str,
              config: dict[str, Any]) -> str | None:
    """Why OUT's previous run cannot be resumed by this config, or None."""
    if previous.get("schema_version") != SCHEMA_VERSION:
        return (f"holds shards of schema version {previous.get('schema_version')}; this "
                f"datagen writes version {SCHEMA_VERSION} and will not mix them in one dataset")
    if previous.get("fingerprint") != fingerprint and not _same_but_credentials(previous,
                                                                               config):
        return (f"holds data generated with a different config (fingerprint "
                f"{previous.get('fingerprint')}, this config {fingerprint})")
    return None


def _same_but_credentials(previous: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether `previous` is a _run.json written before fingerprints left credentials out
    (it stored the config as it was, credentials in it, and a hash of that) for this config
    but for its credentials: the same data, so OUT is resumed and its record rewritten."""
    stored = previous.get("config")
    redacted = redact_credentials(stored)
    return redacted != stored and redacted == redact_credentials(config)


def _recorded_tables(previous: dict[str, Any]) -> list[str]:
    """The table folders the previous run recorded in _run.json (names only)."""
    tables = previous.get("tables", UNRECORDED_TABLES)
    if not isinstance(tables, (list, tuple)):
        return list(UNRECORDED_TABLES)
    return [name for name in map(str, tables)
            if name and "/" not in name and name not in (".", "..")]


def _leftover(storage: Storage, name: str, is_dir: bool) -> bool:
    """What a directory may hold and still count as empty: the run lock, and datagen's
    bookkeeping folders when empty (a user's own `_tmp/` with files in it is not debris)."""
    if name == LOCK_FILE:
        return True
    return name in _DATAGEN_DIRS and is_dir and not storage.entries(name)


def foreign_marker(record: ChunkRecord, chunk: int, planned: int | None,
                   tables: Iterable[str] = ()) -> str | None:
    """Why the readable marker file of `chunk` does not describe that chunk of a run of
    `planned` chunks writing `tables` (a marker copied, renamed or edited by hand), or None.
    Every chunk writes a shard of each of the run's tables (an empty one too), so a marker
    that lacks one lost it: trusted, its chunk would count as complete with that table's rows
    missing, and `verify --repair` would delete the shard as a stray. (A table the run does
    not write is no loss, and a store may know only some of the run's tables.) With no
    `tables` (a store that does not know the run's stages) only the shards' names are checked:
    each table's own shard of this chunk."""
    if planned is not None and chunk >= planned:
        return f"marker outside the run's plan of {planned:,} chunks"
    if record.chunk != chunk:
        return f"marker records chunk {record.chunk}"
    if missing := sorted(set(tables) - set(record.shards)):
        return (f"marker names no shard of {', '.join(missing)} (it names "
                f"{', '.join(sorted(record.shards)) or 'none'}): the run writes one per chunk")
    strays = [info.file for table, info in record.shards.items()
              if info.file != ShardStore.shard_file(table, chunk)]
    return f"marker lists {strays[0]}, not its table's shard of chunk {chunk}" if strays else None


def marker_chunk(name: str) -> int | None:
    """The chunk whose marker the file `name` (in `_chunks/`) is, or None for any other name
    (only the writer's spelling counts: chunk-1.json is not chunk-000001.json)."""
    found = _MARKER_NAME.fullmatch(name)
    chunk = int(found.group(1)) if found else None
    return chunk if chunk is not None and name == f"chunk-{chunk:06d}.json" else None


def shard_chunk(file: str) -> int | None:
    """The chunk whose shard `file` (`<table>/part-NNNNNN.parquet`) is, or None for any other
    name (the same rule as `marker_chunk`)."""
    name = PurePosixPath(file).name
    found = _SHARD_NAME.fullmatch(name)
    chunk = int(found.group(1)) if found else None
    return chunk if chunk is not None and name == f"part-{chunk:06d}.parquet" else None


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", compression_level=ZSTD_LEVEL)
    return sink.getvalue().to_pybytes()


class ShardStore:
    """Reads and writes one output directory (a path, or an object-store URI: storage.py).
    Workers use `write_chunk`; the driver uses `claim` before the run (under the run lock)
    and `write_manifest` after it. `tables` are the table folders a run writes (its stages');
    dropping a chunk or clearing OUT deletes there (plus what a marker or the previous run's
    record lists). `root`, `tmp`, `markers` and the `*_path` methods give Paths for a
    directory and URI strings for an object store."""

    def __init__(self, root: str | Path, tables: Iterable[str] = ()) -> None:
        self.storage = open_storage(root)
        self.root: Path | str = str(root).rstrip("/") if is_uri(root) else Path(root)
        self.tables = list(dict.fromkeys(tables))
        # What every marker must name (`foreign_marker`): the tables as given (the run's
        # stages'), not those `claim` adds from the previous run's record (a table no stage
        # writes any more would make every new chunk look damaged). Empty: not checked.
        self.chunk_tables = list(self.tables)
        self.tmp = self._where(TMP_DIR)
        self.markers = self._where("_chunks")
        self.kept: list[ChunkRecord] = []  # complete chunks `claim` checked and kept
        # run before each shard and before the marker of a chunk: raises when this run may
        # no longer write OUT (its s3 lease was taken over: s3lease.LeaseFence)
        self.fence: Callable[[], None] | None = None

    def _where(self, relative: str) -> Path | str:
        return join(self.root, relative) if isinstance(self.root, str) else self.root / relative

    @staticmethod
    def shard_file(table: str, chunk: int) -> str:
        return f"{table}/part-{chunk:06d}.parquet"

    @staticmethod
    def marker_file(chunk: int) -> str:
        return f"_chunks/chunk-{chunk:06d}.json"

    def shard_path(self, table: str, chunk: int) -> Path | str:
        return self._where(self.shard_file(table, chunk))

    def marker_path(self, chunk: int) -> Path | str:
        return self._where(self.marker_file(chunk))

    # driver side --------------------------------------------------------------------------

    def claim(self, fingerprint: str, config: dict[str, Any], overwrite: bool,
              planned: int | None = None) -> list[DroppedChunk]:
        """Make OUT ours before a run: refuse a file, a directory datagen did not write (with
        `overwrite` too: it deletes only what datagen wrote) and data of another config or
        schema version unless `overwrite`; clear debris; drop damaged chunks so that the run
        regenerates them (with `planned`, the run's number of chunks, also markers outside the
        plan). Data of another config is replaced without `overwrite` when no chunk of it is
        complete. Returns the dropped chunks. Call it under the run lock
        (datagen/pipeline/runlock.py): two runs that pass these checks together would mix
        configs."""
        if self.storage.kind() == "file":
            raise OutputConflict(f"{self.root} is a file, not a directory; choose another --out")
        previous = self._previous_run()
        if previous is None:
            self._refuse_foreign()
        elif conflict := _conflict(previous, fingerprint, config):
            # An OUT without a complete chunk holds no data to protect: a run that wrote none
            # (its endpoint was down, a key wrong) is taken over by the corrected config.
            if not overwrite and self.complete_chunks():
                raise OutputConflict(f"{self.root} {conflict}. Use another --out, or pass "
                                     "--overwrite to delete it and start again.")
            self.clear(_recorded_tables(previous))
        else:  # the same config, so the same stages (an older record may list none)
            self.tables = list(dict.fromkeys([*self.tables, *_recorded_tables(previous)]))
        # _run.json before anything else: a directory with datagen's folders and no _run.json
        # is never one this code left behind (and is refused as not datagen's).
        if isinstance(self.storage, LocalStorage):
            Path(self.tmp).mkdir(parents=True, exist_ok=True)
        self.clear_tmp()
        payload = {"fingerprint": fingerprint, "schema_version": SCHEMA_VERSION,
                   "tables": self.tables, "config": redact_credentials(config)}
        self.storage.write(RUN_FILE, orjson.dumps(payload, option=orjson.OPT_INDENT_2))
        if isinstance(self.storage, LocalStorage):
            Path(self.markers).mkdir(exist_ok=True)
        return self.drop_damaged(planned)

    def _previous_run(self) -> dict[str, Any] | None:
        """The owner record of OUT, None when there is none. One that cannot be read is
        refused: datagen cannot tell which config (or whether datagen) wrote OUT."""
        run_file = self.storage.full(RUN_FILE)
        try:
            data = self.storage.read(RUN_FILE, MAX_RUN_RECORD_BYTES)
        except FileNotFoundError:
            return None
        try:
            previous = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            previous, reason = None, f"JSONDecodeError: {exc}"
        else:
            reason = "no fingerprint"
        if not isinstance(previous, dict) or "fingerprint" not in previous:
            raise OutputConflict(f"{run_file} is not a readable datagen run record ({reason}): "
                                 f"which config wrote {self.root} is unknown, so it is neither "
                                 "resumed nor overwritten; use another --out or delete it "
                                 "yourself")
        return previous

    def _refuse_foreign(self) -> None:
        foreign = sorted(entry.name for entry in self.storage.entries()
                         if not _leftover(self.storage, entry.name, entry.is_dir))
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more"
                                              if len(foreign) > 3 else "")
            raise OutputConflict(
                f"{self.root} is not empty ({shown}) and was not written by datagen (it has no "
                f"{RUN_FILE}); datagen deletes only what it wrote, with --overwrite too: use "
                "another --out, or empty it yourself")

    def clear(self, previous_tables: Iterable[str] = ()) -> None:
        """Delete what datagen writes in OUT: its files, bookkeeping and the table folders of
        this run and of the previous one (never called on a directory it did not write)."""
        for name in dict.fromkeys([*_DATAGEN_DIRS, *self.tables, *previous_tables]):
            self.storage.delete_tree(name)
        for name in _DATAGEN_FILES:
            self.storage.delete(name)

    def clear_tmp(self) -> None:
        for leftover in self.storage.entries(TMP_DIR):
            if not leftover.is_dir:
                self.storage.delete(f"{TMP_DIR}/{leftover.name}")

    def is_complete(self, chunk: int) -> bool:
        try:
            self.storage.size(self.marker_file(chunk))
        except FileNotFoundError:
            return False
        return True

    def complete_chunks(self) -> set[int]:
        """Indices of chunks with a marker, from one directory listing (a run of 10^6 chunks
        would otherwise stat 10^6 paths before it starts)."""
        return set(self.marked_chunks())

    def chunk_problem(self, chunk: int, planned: int | None = None) -> str | None:
        """Why the complete chunk `chunk` cannot be trusted (outside a plan of `planned`
        chunks, an unreadable marker or one for another chunk, a shard of another chunk or one
        that fails `shard_problem` without checksum), or None."""
        return self._checked(chunk, planned)[1]

    def _checked(self, chunk: int, planned: int | None) -> tuple[ChunkRecord | None, str | None]:
        """(its record, None) for a chunk that passes `chunk_problem`, else (None, why)."""
        try:
            record = self.read_record(chunk)
        except (OSError, ValueError) as exc:
            return None, f"marker unreadable: {exc}"
        if problem := foreign_marker(record, chunk, planned, self.chunk_tables):
            return None, problem
        for info in record.shards.values():
            if problem := shard_problem(self.storage, info):
                return None, f"{info.file}: {problem}"
        return record, None

    def read_record(self, chunk: int) -> ChunkRecord:
        """The marker of `chunk`; OSError or ValueError when it is missing or unreadable."""
        return ChunkRecord.from_json(self.storage.read(self.marker_file(chunk)))

    def drop_damaged(self, planned: int | None = None) -> list[DroppedChunk]:
        """Drop every complete chunk that fails `chunk_problem`: the run regenerates it (if
        it is one of the run's). The records of the chunks kept are left in `self.kept`."""
        dropped = []
        self.kept = []
        for chunk in self.marked_chunks():
            record, reason = self._checked(chunk, planned)
            if record is not None:
                self.kept.append(record)
            else:
                self.drop_chunk(chunk)
                fate = "dropped" if planned is not None and chunk >= planned else \
                    "damaged and will be generated again"
                log.warning("chunk %d is %s: %s", chunk, fate, reason)
                dropped.append(DroppedChunk(chunk, reason))
        return dropped

    def drop_chunk(self, chunk: int) -> None:
        """Forget a chunk: its marker first (a kill part way leaves an incomplete chunk, never
        a complete one with shards missing), then its shard in every table (the store's, and
        those its marker lists when it can be read). Only this chunk's own shard files: a
        marker copied from another chunk lists that chunk's, which stay."""
        listed: list[str] = []
        try:
            listed = [info.file for info in self.read_record(chunk).shards.values()]
        except (OSError, ValueError):
            pass
        self.storage.delete(self.marker_file(chunk))
        for file in [*listed, *(self.shard_file(table, chunk) for table in self.tables)]:
            if self.owns(chunk, file) and not outside(self.storage, file):
                self.storage.delete(file)

    @staticmethod
    def owns(chunk: int, file: str) -> bool:
        """Whether `file` is a shard of `chunk` (`<table>/part-<chunk>.parquet`, any table)."""
        path = PurePosixPath(file)
        return len(path.parts) == 2 and path.name == f"part-{chunk:06d}.parquet"


    def marked_chunks(self) -> list[int]:
        """Chunks with a marker under its canonical name (`marker_chunk`): a chunk is complete
        only by the file `marker_file` names, the one `drop_chunk` deletes."""
        found = (marker_chunk(entry.name) for entry in self.storage.entries("_chunks")
                 if not entry.is_dir)
        return sorted(chunk for chunk in found if chunk is not None)

    def records(self) -> list[ChunkRecord]:
        """Records of the complete chunks. An unreadable marker is skipped (its chunk counts
        as incomplete, and the next run's `claim` drops and redoes it)."""
        records = []
        for chunk in self.marked_chunks():
            try:
                records.append(self.read_record(chunk))
            except (OSError, ValueError) as exc:
                log.warning("chunk %d: marker unreadable, counted as incomplete: %s", chunk, exc)
        return records

    # worker side --------------------------------------------------------------------------

    def write_chunk(self, chunk: int, tables: dict[str, pa.Table],
                    stats: dict[str, Any]) -> ChunkRecord:
        """Write every table of a chunk, then its marker (last: the chunk is complete only
        once it exists, on a filesystem and on an object store alike). Returns its record."""
        started = time.process_time()
        shards: dict[str, ShardInfo] = {}
        for name, table in tables.items():
            data = parquet_bytes(table)
            file = self.shard_file(name, chunk)
            if self.fence is not None:
                self.fence()
            self.storage.write(file, data)
            shards[name] = ShardInfo(file=file, rows=table.num_rows, bytes=len(data),
                                     sha256=hashlib.sha256(data).hexdigest())
        if isinstance(stats.get("stage_seconds"), dict):
            stats["stage_seconds"]["write"] = time.process_time() - started
        record = ChunkRecord(chunk=chunk, shards=shards, stats=stats)
        if self.fence is not None:
            self.fence()
        self.storage.write(self.marker_file(chunk), record.to_json())
        return record

    # manifest -----------------------------------------------------------------------------

    def write_manifest(self, fingerprint: str, config: dict[str, Any], total_chunks: int,
                       records: list[ChunkRecord], stats: dict[str, Any] | None = None,
                       stages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """manifest.json: schema version, fingerprint, config, completeness, rows per table,
        every shard, the run's stages (`{"name", "tables"}` in run order), their merged
        counts (`stats`, per stage name) and the code that wrote the chunks (`code`,
        datagen/provenance.py)."""
        shards: dict[str, list[dict[str, Any]]] = {}
        for record in sorted(records, key=lambda r: r.chunk):
            for name, info in record.shards.items():
                shards.setdefault(name, []).append(asdict(info))
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "fingerprint": fingerprint,
            "config": redact_credentials(config),
            "complete": len(records) == total_chunks,
            "chunks": {"total": total_chunks, "complete": len(records)},
            "counts": {name: sum(s["rows"] for s in items) for name, items in shards.items()},
            "shards": shards,
            "stages": stages or [],
            "stats": stats or {},
            "code": code_counts(records),
        }
        self.storage.write("manifest.json", orjson.dumps(
            manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        return manifest
