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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from datagen.pipeline.shards import (OutputUnreadable, manifest_shards, manifest_stages,
                                     read_manifest, shard_problem)
from datagen.pipeline.stages.base import Stage, find_stage
from datagen.pipeline.storage import filesystem_of, is_uri, open_storage


@dataclass
class DatasetView:
    """What a stage's `inspect_lines` reads: the checked shards per table, the run's merged
    counts per stage, and how many rows to sample (with which seed)."""

    root: Path | str  # a URI for an object-store OUT
    manifest: dict[str, Any]
    shards: dict[str, list[Path]] | dict[str, list[str]]
    samples: int = 2
    seed: int = 0

    def read(self, table: str, columns: list[str] | None = None) -> pl.DataFrame | None:
        """The table's rows, or None when the run wrote no shard of it."""
        paths = self.shards.get(table)
        if not paths:
            return None
        try:
            if is_uri(self.root):
                return _read_from_store([str(p) for p in paths], columns)
            return pl.read_parquet(paths, columns=columns)
        except (pl.exceptions.PolarsError, OSError, pa.ArrowException) as exc:
            raise OutputUnreadable(f"cannot read {str(paths[0]).rpartition('/')[0]}: "
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
            df = self.read(table)
            if df is None:
                continue
            lines += ["", f"{table}: {df.height:,} rows; columns: {', '.join(df.columns)}"]
            if df.height and self.samples > 0:
                lines.append(self.frame(df.head(self.samples)))
        return lines


def _read_from_store(uris: list[str], columns: list[str] | None) -> pl.DataFrame:
    """Shards in an object store, read by pyarrow with OUT's filesystem (its endpoint and
    credentials from the environment, as the run wrote them)."""
    fs, _ = filesystem_of(uris[0])
    keys = [filesystem_of(uri)[1] for uri in uris]
    return pl.from_arrow(pq.read_table(keys, filesystem=fs, columns=columns))


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


def inspect_dataset(out: str | Path, samples: int = 2, seed: int = 0) -> str:
    root = out if is_uri(out) else Path(out)
    manifest = read_manifest(root)
    status = "complete" if manifest["complete"] else "INCOMPLETE"
    lines = [f"{root}: {status}, {manifest['chunks']['complete']}/{manifest['chunks']['total']} "
             f"chunks, fingerprint {manifest['fingerprint']}"]
    lines += [f"  {name}: {rows:,} rows" for name, rows in manifest["counts"].items()]
    view = DatasetView(root, manifest, _listed_shards(root, manifest), samples, seed)
    for stage, name, tables in _stage_views(manifest):
        if stage is not None:
            lines += stage.inspect_lines(view)
        else:
            lines += ["", f"stage {name} (not registered here: its tables only)"]
            lines += view.table_lines(tables)
    return "\n".join(lines)
