"""`datagen verify OUT`: every shard checked against the manifest and the chunk markers.

Per shard: recorded by both `manifest.json` and its chunk's marker, with the same record in
both; present inside OUT with the recorded size, a Parquet footer and the recorded row count;
and, unless `--quick`, the recorded sha256. Also reported: unreadable markers, shard files that
no complete chunk records (a reader that globs `trajectories/*.parquet` would read them), counts
that do not add up, and a run that is not complete. `--repair` drops the damaged chunks and the
stray files, so that rerunning `datagen generate` with the same config regenerates them (a
resume notices size and footer damage by itself, but not a changed byte: that takes the sha256).
manifest.json itself is checked against the markers and `_run.json` (each shard listed once,
under its own table; counts for every table; the fingerprint, schema version, config and
planned chunks of the run that owns OUT): a reader trusts it, and rerunning `datagen generate`
with the same config rewrites it from the markers.
OUT may be an object-store URI (s3://): the same checks run through pyarrow.fs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from datagen.pipeline.runlock import LockOwner, lock_holder
from datagen.pipeline.shards import (RUN_FILE, ShardInfo, ShardStore, foreign_marker,
                                     manifest_shards, manifest_stages, manifest_tables,
                                     marker_chunk, read_manifest, shard_chunk, shard_problem)
from datagen.pipeline.storage import MAX_RUN_RECORD_BYTES, Storage, is_uri

# How a problem with manifest.json alone (the shards are intact) is fixed.
_REWRITE = "rerun `datagen generate` with the same config to rewrite manifest.json"


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
    def repairable(self) -> bool:
        """Whether `--repair` has anything to do: damaged chunks to drop, strays to delete
        (a problem of manifest.json alone is fixed by rerunning generate, not by --repair)."""
        return bool(self.damaged_chunks) or any(p.stray for p in self.problems)

    def remedy(self) -> str:
        """What fixes the problems found, as the summary line says it."""
        if any(p.file == RUN_FILE for p in self.problems):
            return (f"{RUN_FILE} is needed to resume or rewrite OUT and no command restores "
                    "it: restore it from a copy, or generate into another --out")
        if self.damaged_chunks:  # generate rewrites manifest.json as it regenerates them
            return (f"`datagen verify {self.root} --repair`, then rerunning `datagen generate` "
                    "with the same config, regenerates them")
        if self.repairable:
            manifest_too = any(p.chunk is None and not p.stray for p in self.problems)
            then = f"; then {_REWRITE}" if manifest_too else ""
            return f"`datagen verify {self.root} --repair` deletes the stray file(s){then}"
        return f"{_REWRITE} (`--repair` has nothing to drop or delete)"

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
                         f"damaged chunk(s); {self.remedy()}")
        elif not self.complete and self.running:
            lines.append("result: intact so far, INCOMPLETE: the run above is still writing")
        elif not self.complete:
            lines.append("result: intact but INCOMPLETE; rerun `datagen generate` with the same "
                         "config to finish it")
        else:
            lines.append("result: intact and complete")
        return "\n".join(lines)


def _read_run(storage: Storage) -> tuple[dict[str, Any] | None, list[Problem]]:
    """`_run.json`, the record of the run that owns OUT (None and a problem when it cannot
    be read: `datagen generate` refuses such an OUT as not datagen's)."""
    try:
        run = orjson.loads(storage.read(RUN_FILE, MAX_RUN_RECORD_BYTES))
    except FileNotFoundError:
        return None, [Problem(RUN_FILE, "missing: which config wrote OUT is unknown", None)]
    except (OSError, orjson.JSONDecodeError) as exc:
        return None, [Problem(RUN_FILE, f"unreadable ({exc})", None)]
    if not isinstance(run, dict):
        return None, [Problem(RUN_FILE, "not a datagen run record", None)]
    return run, []


def _run_tables(run: dict[str, Any] | None, manifest: dict) -> list[str]:
    """The tables each chunk of the run writes: those `_run.json` records (its stages'), else
    those the manifest's stages declare, else those it lists shards of ([]: not checked)."""
    recorded = run.get("tables") if run is not None else None
    if isinstance(recorded, list) and recorded and all(isinstance(t, str) for t in recorded):
        return recorded
    declared = [table for stage in manifest_stages(manifest) for table in stage["tables"]]
    return declared or [table for table, items in manifest["shards"].items() if items]


def _read_markers(store: ShardStore, planned: int, tables: list[str]
                  ) -> tuple[dict[str, tuple[int, ShardInfo]], list[Problem]]:
    """Shard file -> (chunk, record) for every readable marker of its own chunk inside the
    run's plan of `planned` chunks, naming each of the run's `tables`; problems for the
    others (`--repair` drops them, and `drop_chunk` deletes only a chunk's own shards)."""
    recorded: dict[str, tuple[int, ShardInfo]] = {}
    problems = []
    for chunk in store.marked_chunks():
        try:
            record = store.read_record(chunk)
        except (OSError, ValueError) as exc:  # also a marker over MAX_MARKER_BYTES
            problems.append(Problem(store.marker_file(chunk), f"marker unreadable: {exc}",
                                    chunk))
            continue
        if foreign := foreign_marker(record, chunk, planned, tables):
            problems.append(Problem(store.marker_file(chunk), foreign, chunk))
            continue
        for info in record.shards.values():
            recorded[info.file] = (chunk, info)
    return recorded, problems


def _listed(manifest: dict) -> tuple[dict[str, ShardInfo], list[Problem]]:
    """Shard file -> record, for every shard manifest.json lists, walked per table key: a
    reader takes `shards[table]` as that table's files, so a file listed twice (its rows read
    twice) or under another table's key is wrong even when every record matches its file."""
    listed: dict[str, ShardInfo] = {}
    problems = []
    for table, infos in manifest_shards(manifest).items():
        for info in infos:
            folder = info.file.split("/")[0]
            if info.file in listed:
                problems.append(Problem(info.file, f"listed twice in manifest.json (readers "
                                        f"would read its rows twice); {_REWRITE}", None))
            elif folder != table:
                problems.append(Problem(info.file, f"listed under {table!r} in manifest.json, "
                                        f"but it is a shard of {folder!r}; {_REWRITE}", None))
            listed.setdefault(info.file, info)
    return listed, problems


def _check_shards(root: Storage, listed: dict[str, ShardInfo],
                  recorded: dict[str, tuple[int, ShardInfo]], checksum: bool,
                  running: bool = False) -> list[Problem]:
    """Every shard the manifest or a marker records. While a run writes OUT (`running`) a
    complete chunk the manifest does not list yet is the run's progress, not damage."""
    problems = []
    for file in sorted(listed.keys() | recorded.keys()):
        chunk, marker_info = recorded.get(file, (shard_chunk(file), None))
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
                                    "by id would take either row", shard_chunk(last)))
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
    return [Problem(file, problem, shard_chunk(file)) for table, found in schemas.items()
            for file, problem in schema_problems(table, found).items()]


def _marker_strays(storage: Storage) -> list[Problem]:
    """Files in `_chunks/` named like a marker but not as the writer names one (chunk-1.json,
    chunk-\u00b2.json): no run reads them as a chunk's marker, so `--repair` deletes them."""
    names = sorted(e.name for e in storage.entries("_chunks") if not e.is_dir and
                   e.name.startswith("chunk-") and e.name.endswith(".json"))
    return [Problem(f"_chunks/{name}", "not a chunk marker's name (the writer's is "
                    "chunk-NNNNNN.json); no run reads it", None, stray=True)
            for name in names if marker_chunk(name) is None]


def _strays(storage: Storage, known: set[str], tables: list[str]) -> list[Problem]:
    problems = _marker_strays(storage)
    for table in tables:
        names = sorted(e.name for e in storage.entries(table) if not e.is_dir and
                       e.name.startswith("part-") and e.name.endswith(".parquet"))
        for file in (f"{table}/{name}" for name in names):
            if file not in known:
                problems.append(Problem(file, "no complete chunk records it (left by an "
                                        "unfinished chunk?); readers that glob the folder "
                                        "would read it", shard_chunk(file), stray=True))
    return problems


def _count_problems(manifest: dict) -> list[Problem]:
    """`counts` against the rows the shards listed under each table key hold; every table
    with shards has a count (a reader sizes and reports a table by it)."""
    shards = manifest_shards(manifest)
    counts = manifest["counts"]
    problems = [Problem("manifest.json", f"counts has no {table!r}; {_REWRITE}", None)
                for table in shards if table not in counts]
    for table, count in counts.items():
        rows = sum(info.rows for info in shards.get(table, []))
        if rows != count:
            problems.append(Problem("manifest.json", f"counts {table}: {count:,} rows, its "
                                    f"shards hold {rows:,}; {_REWRITE}", None))
    return problems


def _planned_chunks(config: Any) -> int | None:
    """The number of chunks `datagen generate` plans for a recorded config (None when the
    record has no plan to check, as a test's bare store)."""
    from datagen.pipeline.chunk import ChunkPlan  # what plan_chunks builds from a config

    try:
        return len(ChunkPlan(config["num_trajectories"], config["chunk_size"]))
    except (KeyError, TypeError, ValueError):
        return None


def _header_problems(manifest: dict, run: dict[str, Any], listed: dict[str, ShardInfo]
                     ) -> list[Problem]:
    """manifest.json's header against `_run.json` and its own shard list: the run that owns
    OUT wrote both, so an edited fingerprint, schema version, config, stage list or chunk
    count shows (a reader trusts the header: `complete`, the config on the dataset card)."""
    found = _run_record_problems(manifest, run) + _chunk_count_problems(manifest, run, listed)
    return [Problem("manifest.json", f"{what}; {_REWRITE}", None) for what in found]


def _run_record_problems(manifest: dict, run: dict[str, Any]) -> list[str]:
    problems = [f"{key} is {manifest.get(key)!r}, _run.json's {run.get(key)!r}"
                for key in ("fingerprint", "schema_version") if manifest.get(key) != run.get(key)]
    if "config" in manifest and manifest["config"] != run.get("config"):
        problems.append("config differs from the one in _run.json")
    # a manifest written before stages were recorded has no "stages": nothing to compare
    declared = {table for stage in manifest_stages(manifest) for table in stage["tables"]}
    tables = run.get("tables")
    if "stages" in manifest and tables and isinstance(tables, list) and declared != set(tables):
        problems.append(f"its stages declare the tables {', '.join(sorted(declared)) or '(none)'}"
                        f"; _run.json's run writes {', '.join(sorted(map(str, tables)))}")
    return problems


def _chunk_count_problems(manifest: dict, run: dict[str, Any],
                          listed: dict[str, ShardInfo]) -> list[str]:
    chunks, problems = manifest["chunks"], []
    planned = _planned_chunks(run.get("config"))
    if planned is not None and chunks["total"] != planned:
        problems.append(f"chunks.total is {chunks['total']:,}; _run.json's config plans "
                        f"{planned:,}")
    # every complete chunk writes a shard of each table, so the listed shards name them all
    listed_chunks = {chunk for chunk in map(shard_chunk, listed) if chunk is not None}
    if listed and chunks["complete"] != len(listed_chunks):
        problems.append(f"chunks.complete is {chunks['complete']:,}; its shards are of "
                        f"{len(listed_chunks):,} chunk(s)")
    if manifest["complete"] != (chunks["complete"] == chunks["total"]):
        problems.append(f"complete is {manifest['complete']}, with {chunks['complete']:,} of "
                        f"{chunks['total']:,} chunks")
    return problems


def verify_output(out: str | Path, checksum: bool = True) -> VerifyReport:
    """Check OUT; raises OutputUnreadable when it has no readable manifest."""
    started = time.perf_counter()
    root = out if is_uri(out) else Path(out)
    store = ShardStore(root)
    running = lock_holder(root)  # a run writing OUT now: its progress is not damage
    manifest = read_manifest(store.storage)
    run, problems = _read_run(store.storage)
    listed, listing_problems = _listed(manifest)
    problems += listing_problems
    if run is not None and running is None:  # a run writing OUT may not have updated it yet
        problems += _header_problems(manifest, run, listed)
    chunks = manifest["chunks"]
    run_tables = _run_tables(run, manifest)
    recorded, marker_problems = _read_markers(store, chunks["total"], run_tables)
    problems += marker_problems
    problems += _check_shards(store.storage, listed, recorded, checksum, running is not None)
    problems += _schema_problems(store.storage, listed, {p.file for p in problems})
    if checksum:  # every shard is read anyway
        problems += _duplicate_ids(store.storage, listed, {p.file for p in problems})
    tables = list(dict.fromkeys([*manifest_tables(manifest), *run_tables]))
    strays = _strays(store.storage, listed.keys() | recorded.keys(), tables)
    newer = {recorded[f][0] for f in recorded.keys() - listed.keys()} if running else set()
    if not running:  # with a run writing, an unmarked shard is a chunk it has not finished
        problems += strays
    problems += _count_problems(manifest)
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
