"""`datagen verify OUT`: every shard checked against the manifest and the chunk markers.

Per shard: recorded by both `manifest.json` and its chunk's marker, with the same record in
both; present inside OUT with the recorded size, a Parquet footer and the recorded row count;
and, unless `--quick`, the recorded sha256. Also reported: unreadable markers, shard files that
no complete chunk records (a reader that globs `trajectories/*.parquet` would read them), counts
that do not add up, and a run that is not complete. `--repair` drops the damaged chunks and the
stray files, so that rerunning `datagen generate` with the same config regenerates them (a
resume notices size and footer damage by itself, but not a changed byte: that takes the sha256).
OUT may be an object-store URI (s3://): the same checks run through pyarrow.fs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datagen.pipeline.runlock import LockOwner, lock_holder
from datagen.pipeline.shards import (ShardInfo, ShardStore, foreign_marker, manifest_shards,
                                     manifest_tables, read_manifest, shard_problem)
from datagen.pipeline.storage import Storage, is_uri


@dataclass(frozen=True)
class Problem:
    file: str          # relative to OUT
    what: str
    chunk: int | None  # the chunk to regenerate, when the problem is one chunk's
    stray: bool = False  # a shard file no complete chunk records: delete it


@dataclass
class VerifyReport:
    root: Path | str  # a URI for an object-store OUT
    fingerprint: str
    shards: int
    chunks: tuple[int, int]  # complete, total (from the manifest)
    checksum: bool
    seconds: float
    problems: list[Problem]
    running: LockOwner | None
    tables: list[str]  # the run's tables (from its stages), where strays are looked for
    # while a run writes OUT: chunks completed since its manifest's last update (checked
    # against their markers) and shard files of chunks not complete yet (left alone)
    newer_chunks: int = 0
    unfinished_files: int = 0

    @property
    def damaged_chunks(self) -> list[int]:
        return sorted({p.chunk for p in self.problems if p.chunk is not None and not p.stray})

    @property
    def complete(self) -> bool:
        return self.chunks[0] == self.chunks[1]

    @property
    def ok(self) -> bool:
        return not self.problems and self.complete

    def format(self) -> str:
        checks = "exists, size, Parquet footer, rows" + (", sha256" if self.checksum else "")
        lines = [f"{self.root}: {self.shards:,} shards of {self.chunks[0]:,}/{self.chunks[1]:,} "
                 f"chunks checked ({checks}) in {self.seconds:.2f}s"]
        if self.running:
            lines.append(f"note: a run is writing here now ({self.running.describe()}): "
                         f"{self.newer_chunks:,} chunk(s) completed since manifest.json's last "
                         "update were checked against their markers; "
                         f"{self.unfinished_files:,} shard file(s) of chunks not complete yet "
                         "were left alone")
        lines += [f"  {'STRAY' if p.stray else 'DAMAGED'} {p.file}: {p.what}"
                  for p in self.problems]
        if self.problems:
            lines.append(f"result: {len(self.problems)} problem(s), {len(self.damaged_chunks)} "
                         f"damaged chunk(s); `datagen verify {self.root} --repair`, then "
                         "rerunning `datagen generate` with the same config, regenerates them")
        elif not self.complete and self.running:
            lines.append("result: intact so far, INCOMPLETE: the run above is still writing")
        elif not self.complete:
            lines.append("result: intact but INCOMPLETE; rerun `datagen generate` with the same "
                         "config to finish it")
        else:
            lines.append("result: intact and complete")
        return "\n".join(lines)


def _chunk_of(file: str) -> int | None:
    digits = Path(file).stem.removeprefix("part-")
    return int(digits) if digits.isdigit() else None


def _read_markers(store: ShardStore, planned: int) -> tuple[dict[str, tuple[int, ShardInfo]],
                                                            list[Problem]]:
    """Shard file -> (chunk, record) for every readable marker of its own chunk inside the
    run's plan of `planned` chunks; problems for the others (`--repair` drops them, and
    `drop_chunk` deletes only a chunk's own shards)."""
    recorded: dict[str, tuple[int, ShardInfo]] = {}
    problems = []
    for chunk in store.marked_chunks():
        try:
            record = store.read_record(chunk)
        except (OSError, ValueError) as exc:
            problems.append(Problem(store.marker_file(chunk), f"marker unreadable: {exc}",
                                    chunk))
            continue
        if foreign := foreign_marker(record, chunk, planned):
            problems.append(Problem(store.marker_file(chunk), foreign, chunk))
            continue
        for info in record.shards.values():
            recorded[info.file] = (chunk, info)
    return recorded, problems


def _check_shards(root: Storage, listed: dict[str, ShardInfo],
                  recorded: dict[str, tuple[int, ShardInfo]], checksum: bool,
                  running: bool = False) -> list[Problem]:
    """Every shard the manifest or a marker records. While a run writes OUT (`running`) a
    complete chunk the manifest does not list yet is the run's progress, not damage."""
    problems = []
    for file in sorted(listed.keys() | recorded.keys()):
        chunk, marker_info = recorded.get(file, (_chunk_of(file), None))
        info = listed.get(file) or marker_info
        if marker_info is None:
            problems.append(Problem(file, "listed in manifest.json, but no chunk marker records "
                                    "it", chunk))
        elif file not in listed and not running:
            problems.append(Problem(file, "its chunk is complete but manifest.json does not "
                                    "list it (an interrupted run; rerun generate)", None))
        elif marker_info != info:
            problems.append(Problem(file, "manifest.json and the chunk marker record different "
                                    "rows, bytes or sha256", chunk))
        if problem := shard_problem(root, info, checksum=checksum):
            problems.append(Problem(file, problem, chunk))
    return problems


def _duplicate_ids(storage: Storage, listed: dict[str, ShardInfo],
                   damaged: set[str]) -> list[Problem]:
    """Ids that two trajectories (or repairs) shards hold, or one twice: a join by id (a
    compact pair's prompt, a repair's source) would take either row. Reads the `id` column
    (~17 bytes a row in memory: 85 MB at 5M trajectories); the later shard's chunk is the
    one to regenerate (a copied shard; a run's ids are distinct)."""
    problems = []
    for table in ("trajectories", "repairs"):
        files = [f for f in listed if f.startswith(f"{table}/") and f not in damaged]
        parts = [storage.parquet_file(file).read(["id"]).column("id") for file in files]
        for first, last, count, example in repeated_ids(parts):
            first, last = files[first], files[last]
            where = "twice" if first == last else f"also in {first}"
            problems.append(Problem(last, f"{count:,} id(s) {where} (e.g. {example}); joins "
                                    "by id would take either row", _chunk_of(last)))
    return problems


def repeated_ids(parts: list[pa.ChunkedArray]) -> list[tuple[int, int, int, str]]:
    """(first part, last part, how many ids, one of them) for each pair of parts (the same
    part twice for an id it holds twice) that share ids. A sort finds whether any id repeats
    (5M ids: ~3 s, +80 MB; a hash group-by of them all took +600 MB,
    `python -m benchmarks.bench_reader_checks`); only the repeated ones are grouped."""
    if not parts:
        return []
    ids = pa.chunked_array([chunk for part in parts for chunk in part.chunks], parts[0].type)
    ordered = ids.take(pc.sort_indices(ids))
    same = pc.equal(ordered[1:], ordered[:-1])
    if not pc.any(same).as_py():
        return []
    shard = pa.array(np.repeat(np.arange(len(parts), dtype=np.int32),
                               [len(part) for part in parts]))
    held = pa.table({"id": ids, "shard": shard}).filter(
        pc.is_in(ids, pc.unique(ordered[1:].filter(same))))
    counts = held.group_by("id").aggregate([("shard", "min"), ("shard", "max")])
    pairs = counts.group_by(["shard_min", "shard_max"]).aggregate([("id", "min"),
                                                                  ("id", "count")])
    return [(row["shard_min"], row["shard_max"], row["id_count"], row["id_min"])
            for row in pairs.to_pylist()]


def _schema_problems(storage: Storage, listed: dict[str, ShardInfo],
                     damaged: set[str]) -> list[Problem]:
    """Intact shards whose columns depart from their table's (`readers.schema_problems`):
    a reader would fail on them, so their chunk is regenerated (a footer read a shard)."""
    from datagen.readers import schema_problems

    schemas: dict[str, dict[str, pa.Schema]] = {}
    for file in (file for file in listed if file not in damaged):
        schemas.setdefault(file.split("/")[0], {})[file] = storage.parquet_file(file).schema_arrow
    return [Problem(file, problem, _chunk_of(file)) for table, found in schemas.items()
            for file, problem in schema_problems(table, found).items()]


def _strays(storage: Storage, known: set[str], tables: list[str]) -> list[Problem]:
    problems = []
    for table in tables:
        names = sorted(e.name for e in storage.entries(table) if not e.is_dir and
                       e.name.startswith("part-") and e.name.endswith(".parquet"))
        for file in (f"{table}/{name}" for name in names):
            if file not in known:
                problems.append(Problem(file, "no complete chunk records it (left by an "
                                        "unfinished chunk?); readers that glob the folder "
                                        "would read it", _chunk_of(file), stray=True))
    return problems


def _count_problems(manifest: dict, listed: dict[str, ShardInfo]) -> list[Problem]:
    problems = []
    for table, count in manifest["counts"].items():
        rows = sum(info.rows for file, info in listed.items() if file.startswith(f"{table}/"))
        if rows != count:
            problems.append(Problem("manifest.json", f"counts {table}: {count:,} rows, its "
                                    f"shards hold {rows:,}", None))
    return problems


def verify_output(out: str | Path, checksum: bool = True) -> VerifyReport:
    """Check OUT; raises OutputUnreadable when it has no readable manifest."""
    started = time.perf_counter()
    root = out if is_uri(out) else Path(out)
    store = ShardStore(root)
    running = lock_holder(root)  # a run writing OUT now: its progress is not damage
    manifest = read_manifest(store.storage)
    listed = {info.file: info for infos in manifest_shards(manifest).values() for info in infos}
    chunks = manifest["chunks"]
    recorded, problems = _read_markers(store, chunks["total"])
    problems += _check_shards(store.storage, listed, recorded, checksum, running is not None)
    problems += _schema_problems(store.storage, listed, {p.file for p in problems})
    if checksum:  # every shard is read anyway
        problems += _duplicate_ids(store.storage, listed, {p.file for p in problems})
    tables = manifest_tables(manifest)
    strays = _strays(store.storage, listed.keys() | recorded.keys(), tables)
    newer = {recorded[f][0] for f in recorded.keys() - listed.keys()} if running else set()
    if not running:  # with a run writing, an unmarked shard is a chunk it has not finished
        problems += strays
    problems += _count_problems(manifest, listed)
    return VerifyReport(root=root, fingerprint=str(manifest.get("fingerprint")),
                        shards=len(listed.keys() | recorded.keys()),
                        chunks=(chunks["complete"] + len(newer), chunks["total"]),
                        checksum=checksum, seconds=time.perf_counter() - started,
                        problems=problems, running=running, tables=tables,
                        newer_chunks=len(newer), unfinished_files=len(strays) if running else 0)


def repair(out: str | Path, report: VerifyReport) -> tuple[list[int], int]:
    """Drop the report's damaged chunks and delete its stray shard files (call under the run
    lock). Returns the dropped chunks and the number of stray files removed."""
    store = ShardStore(out, report.tables)
    for chunk in report.damaged_chunks:
        store.drop_chunk(chunk)
    strays = [p.file for p in report.problems if p.stray]
    for file in strays:
        store.storage.delete(file)
    return report.damaged_chunks, len(strays)
