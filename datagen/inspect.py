"""`datagen inspect DIR`: counts, per-environment stats and a few trajectories with their spans.

It reads the shards `manifest.json` lists (not whatever matches `part-*.parquet`: an unfinished
chunk's shard is not part of the dataset) after the cheap integrity check a resume makes, so a
damaged OUT gets a message naming the shard instead of a Parquet reader's traceback.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from datagen.shards import OutputUnreadable, manifest_shards, read_manifest, shard_problem

_SPAN_TEXT_LIMIT = 240


def _listed_shards(root: Path, manifest: dict) -> dict[str, list[Path]]:
    """Table -> shard paths from the manifest, each checked for size, footer and rows."""
    shards: dict[str, list[Path]] = {}
    for table, infos in manifest_shards(manifest).items():
        for info in infos:
            if problem := shard_problem(root, info):
                raise OutputUnreadable(f"{root / info.file} is damaged: {problem}; `datagen "
                                       f"verify {root}` lists every damaged shard")
            shards.setdefault(table, []).append(root / info.file)
    return shards


def _read(paths: list[Path], **kwargs) -> pl.DataFrame:
    try:
        return pl.read_parquet(paths, **kwargs)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise OutputUnreadable(f"cannot read {paths[0].parent}: {str(exc).splitlines()[0]}; "
                               f"run `datagen verify {paths[0].parent.parent}`") from None


def _per_env(df: pl.DataFrame) -> pl.DataFrame:
    return (df.group_by("env").agg(
        pl.len().alias("trajectories"),
        pl.col("success").mean().round(3).alias("success_rate"),
        pl.col("n_steps").mean().round(2).alias("mean_tool_calls"),
        pl.col("error").is_not_null().sum().alias("errors"),
        pl.col("text").str.len_chars().mean().round(0).alias("mean_chars"),
    ).sort("env"))


def _span_stats(df: pl.DataFrame) -> pl.DataFrame:
    spans = df.select(pl.col("spans").explode()).unnest("spans")
    return (spans.with_columns((pl.col("end") - pl.col("start")).alias("chars"))
            .group_by("kind").agg(pl.len().alias("spans"), pl.col("chars").mean().round(1)
                                  .alias("mean_chars"), pl.col("chars").max().alias("max_chars"))
            .sort("kind"))


def _clip(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= _SPAN_TEXT_LIMIT else text[:_SPAN_TEXT_LIMIT] + " ..."


def format_trajectory(row: dict) -> str:
    """A trajectory as its spans, one per line: `[KIND step] text`."""
    head = (f"--- {row['id']}  env={row['env']}  task={row['task_id']}  "
            f"success={row['success']}  tool calls={row['n_steps']}")
    lines = [head, f"task: {row['task']}"]
    if row["error"]:
        lines.append(f"error: {row['error']}")
    for span in row["spans"]:
        if span["kind"] == "PROMPT" and span["step"] < 0:
            lines.append(f"  [PROMPT] ({span['end'] - span['start']} chars of system + user turn)")
            continue
        text = row["text"][span["start"]:span["end"]]
        lines.append(f"  [{span['kind']:<6} {span['step']:>2}] {_clip(text)}")
    return "\n".join(lines)


def _negatives_section(shards: list[Path], manifest: dict) -> list[str]:
    if not shards:
        return []
    negatives = _read(shards)
    if negatives.height == 0:
        return ["", "negatives: none"]
    by_kind = (negatives.group_by("kind").agg(
        pl.len().alias("negatives"),
        pl.col("subkind").n_unique().alias("subkinds"),
        (~pl.col("schema_valid")).mean().round(3).alias("rejected_by_schema"),
        pl.col("outcome_changed").mean().round(3).alias("outcome_changed"),
    ).sort("kind"))
    impossible = manifest.get("stats", {}).get("negative_kinds", {})
    if impossible:
        rates = pl.DataFrame([{"kind": k, "impossible_rate": round(v["impossible_rate"], 3)}
                              for k, v in impossible.items()])
        by_kind = by_kind.join(rates, on="kind", how="left")
    subkinds = negatives.group_by("kind", "subkind").len().sort("kind", "len", descending=[False, True])
    with pl.Config(tbl_rows=60, tbl_hide_dataframe_shape=True):
        return ["", "negatives per kind:", str(by_kind), "", "subkinds:", str(subkinds)]


def _critics_section(shards: dict[str, list[Path]], samples: int, seed: int) -> list[str]:
    """Repairs per env and error kind, preference pairs per source and kind, sample repairs."""
    lines: list[str] = []
    with pl.Config(tbl_rows=40, tbl_hide_dataframe_shape=True):
        repair_shards = shards.get("repairs", [])
        repairs = _read(repair_shards) if repair_shards else None
        if repairs is not None and repairs.height:
            lines += ["", "repairs per env and error kind:",
                      str(repairs.group_by("env", "error_kind").len().sort("env", "error_kind"))]
        pref_shards = shards.get("preferences", [])
        if pref_shards:
            prefs = _read(pref_shards, columns=["source", "kind"])
            lines += ["", "preferences per source and kind:",
                      str(prefs.group_by("source", "kind").len().sort("source", "kind"))]
    if repairs is not None and repairs.height and samples > 0:
        lines += ["", "sampled repair (ERROR = the wrong call, excluded from the loss):"]
        for row in repairs.sample(n=1, seed=seed).iter_rows(named=True):
            lines += [f"critique: {row['critique']}", format_trajectory(row)]
    return lines


def inspect_dataset(out: str | Path, samples: int = 2, seed: int = 0) -> str:
    root = Path(out)
    manifest = read_manifest(root)
    status = "complete" if manifest["complete"] else "INCOMPLETE"
    lines = [f"{root}: {status}, {manifest['chunks']['complete']}/{manifest['chunks']['total']} "
             f"chunks, fingerprint {manifest['fingerprint']}"]
    lines += [f"  {name}: {rows:,} rows" for name, rows in manifest["counts"].items()]
    shards = _listed_shards(root, manifest)
    if not shards.get("trajectories"):
        return "\n".join(lines + ["(no trajectory shards yet)"])
    df = _read(shards["trajectories"])
    with pl.Config(tbl_rows=50, tbl_cols=20, tbl_hide_dataframe_shape=True):
        lines += ["", "per environment:", str(_per_env(df)), "", "spans:", str(_span_stats(df))]
    lines += _negatives_section(shards.get("negatives", []), manifest)
    lines += _critics_section(shards, samples, seed)
    if samples > 0:
        lines += ["", f"{samples} sampled trajectories:"]
        for row in df.sample(n=min(samples, df.height), seed=seed).iter_rows(named=True):
            lines += [format_trajectory(row), ""]
    return "\n".join(lines)
