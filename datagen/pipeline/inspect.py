"""`datagen inspect DIR`: counts, then each stage's view of its tables (per-environment and span
stats, negatives per kind, repairs, a few trajectories span by span ...).

It reads the shards `manifest.json` lists (not whatever matches `part-*.parquet`: an unfinished
chunk's shard is not part of the dataset) after the cheap integrity check a resume makes, so a
damaged OUT gets a message naming the shard instead of a Parquet reader's traceback. The
stages come from the manifest; a stage this process does not know (its module is not
imported) gets the default view: rows and columns of its tables. An object-store OUT
(s3://) is read through pyarrow.fs (storage.py).
"""

from __future__ import annotations

import bisect
import itertools
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from datagen.pipeline.live_manifest import EVERY_S
from datagen.pipeline.runlock import lock_holder
from datagen.pipeline.shards import (OutputUnreadable, manifest_shards, manifest_stages,
                                     read_manifest, shard_problem)
from datagen.pipeline.stages.base import Stage, find_stage
from datagen.pipeline.storage import filesystem_of, is_uri, open_storage
from datagen.provenance import written_by
from datagen.readers import check_schemas


@dataclass
class DatasetView:
    """What a stage's `inspect_lines` reads: the checked shards per table, the run's merged
    counts per stage, and how many rows to sample (with which seed).

    Tables are scanned lazily and queries stream (`collect`), so inspecting a 5M-trajectory
    OUT holds the aggregates and a few row groups, not the tables: reading them whole grew by
    ~18 KB of memory per trajectory of the demo config (~90 GB at 5M). Sampled rows are read
    from their own row groups only (`sample_rows`)."""

    root: Path | str  # a URI for an object-store OUT
    manifest: dict[str, Any]
    shards: dict[str, list[Path]] | dict[str, list[str]]
    samples: int = 2
    seed: int = 0

    def scan(self, table: str, columns: list[str] | None = None) -> pl.LazyFrame | None:
        """The table as a lazy frame, or None when the run wrote no shard of it."""
        paths = self.shards.get(table)
        if not paths:
            return None
        if is_uri(self.root):
            fs, _ = filesystem_of(str(paths[0]))
            keys = [filesystem_of(str(p))[1] for p in paths]
            with self._reading():  # the dataset reads the footers now, not at collect
                dataset = ds.dataset(keys, filesystem=fs, format="parquet")
            frame = pl.scan_pyarrow_dataset(dataset)
        else:
            frame = pl.scan_parquet(paths)
        return frame.select(columns) if columns else frame

    def collect(self, query: pl.LazyFrame) -> pl.DataFrame:
        """A query's result, streamed through the shards."""
        with self._reading():
            return query.collect(engine="streaming")

    def rows(self, table: str) -> int:
        """How many rows the table has (0 when it has no shard)."""
        frame = self.scan(table)
        return 0 if frame is None else int(self.collect(frame.select(pl.len())).item())

    def sample_rows(self, table: str, n: int) -> list[dict[str, Any]]:
        """Up to n rows drawn with the view's seed (in shard order), each read from its own
        row group: memory follows n, not the table (only footers are read to count rows)."""
        paths = self.shards.get(table) or []
        with self._reading():
            sizes = [self._parquet_file(path).metadata.num_rows for path in paths]
            starts = list(itertools.accumulate(sizes, initial=0))
            drawn = random.Random(self.seed).sample(range(starts[-1]), min(n, starts[-1]))
            rows = []
            for position in sorted(drawn):
                shard = bisect.bisect_right(starts, position) - 1
                rows.append(_row_at(self._parquet_file(paths[shard]), position - starts[shard]))
            return rows

    def _parquet_file(self, path: Path | str) -> pq.ParquetFile:
        if is_uri(self.root):
            fs, key = filesystem_of(str(path))
            return pq.ParquetFile(fs.open_input_file(key))
        return pq.ParquetFile(path)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A shard that cannot be read is OutputUnreadable pointing at `datagen verify`."""
        try:
            yield
        except (pl.exceptions.PolarsError, OSError, pa.ArrowException) as exc:
            raise OutputUnreadable(f"cannot read the shards of {self.root}: "
                                   f"{str(exc).splitlines()[0]}; run `datagen verify "
                                   f"{self.root}`") from None

    def stats(self, stage: str) -> dict[str, Any]:
        stats = self.manifest.get("stats", {}).get(stage, {})
        return stats if isinstance(stats, dict) else {}

    @staticmethod
    def frame(df: pl.DataFrame, rows: int = 50) -> str:
        with pl.Config(tbl_rows=rows, tbl_cols=20, tbl_hide_dataframe_shape=True):
            return str(df)

    def table_lines(self, tables: list[str]) -> list[str]:
        """The default view of tables: rows, columns and the first rows."""
        lines: list[str] = []
        for table in tables:
            frame = self.scan(table)
            if frame is None:
                continue
            with self._reading():
                columns = frame.collect_schema().names()
            lines += ["", f"{table}: {self.rows(table):,} rows; columns: {', '.join(columns)}"]
            head = self.collect(frame.head(self.samples)) if self.samples > 0 else None
            if head is not None and head.height:
                lines.append(self.frame(head))
        return lines


def _row_at(parquet: pq.ParquetFile, row: int) -> dict[str, Any]:
    """Row `row` of a Parquet file, reading only the row group that holds it."""
    for group in range(parquet.metadata.num_row_groups):
        size = parquet.metadata.row_group(group).num_rows
        if row < size:
            return parquet.read_row_group(group).slice(row, 1).to_pylist()[0]
        row -= size
    raise IndexError(f"row {row} past the end of {parquet}")


def _listed_shards(root: Path | str, manifest: dict) -> dict[str, list[Path]]:
    """Table -> shard paths (URIs for an object store) from the manifest, each checked for
    size, footer and rows."""
    storage = open_storage(root)
    shards: dict[str, list[Path]] = {}
    for table, infos in manifest_shards(manifest).items():
        for info in infos:
            if problem := shard_problem(storage, info):
                raise OutputUnreadable(f"{storage.full(info.file)} is damaged: {problem}; "
                                       f"`datagen verify {root}` lists every damaged shard")
            shards.setdefault(table, []).append(
                storage.full(info.file) if is_uri(root) else Path(root) / info.file)
    return shards


def _stage_views(manifest: dict[str, Any]) -> list[tuple[type[Stage] | None, str, list[str]]]:
    """(stage class or None, stage name, its tables) in run order, from the manifest (a
    manifest of a datagen before stages were recorded: the tables it lists)."""
    stages = manifest_stages(manifest)
    if not stages:
        return [(find_stage(table), table, [table]) for table in manifest["shards"]]
    return [(find_stage(stage["name"]), stage["name"], stage["tables"]) for stage in stages]


def _age(root: str | Path) -> str:
    """", 12 s ago": how old the manifest is (its file's modification time), or "" if unknown."""
    try:
        modified = open_storage(root).modified("manifest.json")
    except OSError:
        return ""
    return "" if modified is None else f", {max(0.0, time.time() - modified):.0f} s ago"


def inspect_dataset(out: str | Path, samples: int = 2, seed: int = 0) -> str:
    root = out if is_uri(out) else Path(out)
    manifest = read_manifest(root)
    status = "complete" if manifest["complete"] else "INCOMPLETE"
    lines = [f"{root}: {status}, {manifest['chunks']['complete']}/{manifest['chunks']['total']} "
             f"chunks, fingerprint {manifest['fingerprint']}"]
    if running := lock_holder(root):
        lines.append(f"  note: a run is writing here now ({running.describe()}); these are "
                     f"its chunks as of the manifest's last update{_age(root)} (at most every "
                     f"{EVERY_S:.0f} s while it runs; less often for an OUT of thousands of "
                     "chunks)")
    if code := written_by(manifest):
        lines.append(f"  {code}")
    lines += [f"  {name}: {rows:,} rows" for name, rows in manifest["counts"].items()]
    view = DatasetView(root, manifest, _listed_shards(root, manifest), samples, seed)
    for table, paths in view.shards.items():  # a retyped column fails a query, unnamed
        with view._reading():
            schemas = {str(path): view._parquet_file(path).schema_arrow for path in paths}
        check_schemas(root, table, schemas)
    for stage, name, tables in _stage_views(manifest):
        if stage is not None:
            lines += stage.inspect_lines(view)
        else:
            lines += ["", f"stage {name} (not registered here: its tables only)"]
            lines += view.table_lines(tables)
    return "\n".join(lines)
