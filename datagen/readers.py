"""One-call loaders: an OUT's shards as a `datasets.Dataset` in TRL's conversational format.

    from datagen.readers import load_preferences, load_sft
    train = load_preferences("out/demo")                 # prompt / chosen / rejected / tools
    DPOTrainer(model=..., train_dataset=train, processing_class=tokenizer)
    sft = load_sft("out/demo")                           # messages / tools
    SFTTrainer(model=..., train_dataset=sft, args=SFTConfig(assistant_only_loss=True), ...)

Why a loader and not `load_dataset("parquet", ...)` as is: the shards store each message's
`tool_calls` and the row's `tools` as JSON text (every environment's tool schemas fit one
Arrow struct that way), while a chat template iterates `message.tool_calls` and renders
`arguments | tojson`: a string there fails in Jinja ("Undefined is not JSON serializable"), and
arguments left as a string would be double-encoded. The loaders give those columns the
`datasets.Json` feature type: the same JSON text in Arrow (a storage cast, no re-encoding, no
Python objects per row), decoded to lists and objects only when a row is read. Arguments of
different tools never meet in one Arrow struct, so no tool's call gains null keys from
another's. With the project's template (`datagen/templates/qwen2_5_tools.jinja`, which is
TRL's `qwen2_5.jinja`) a loaded pair renders exactly `prompt_text + chosen_text` (tested).

An OUT written with `preferences.layout: compact` (a negative's pair stores how much of its
trajectory's messages and text its prompt is, not the prompt) loads the same: the prompts are
joined back from the same chunk's trajectories shard, and the dataset is the one the full
layout gives (tested).

Only the shards `manifest.json` lists are read, after the cheap check a resume makes (size,
footer, row count), as `datagen inspect` does: an unfinished chunk is not part of the dataset.
The dataset is Arrow-backed: `datasets` copies the shards into its cache once (memory-mapped,
`cache_dir` chooses where) or, with `streaming=True`, reads them batch by batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from datagen.conversation_checks import MESSAGE_COLUMNS, check_conversations
from datagen.pipeline.shards import OutputUnreadable, manifest_shards, read_manifest, shard_problem
from datagen.rows import (CONSISTENCY_SCHEMA, NEGATIVE_SCHEMA, PREFERENCE_SCHEMA, REPAIR_SCHEMA,
                          TRAJECTORY_SCHEMA)

if TYPE_CHECKING:  # datasets is an optional dependency (the `interop` extra)
    from datasets import Dataset, Features, IterableDataset

PREFERENCE_SOURCES = ("negative", "repair", "safety")
SFT_TABLES = ("trajectories", "repairs")
CONTRACTS = {"trajectories": TRAJECTORY_SCHEMA, "repairs": REPAIR_SCHEMA,
             "negatives": NEGATIVE_SCHEMA, "preferences": PREFERENCE_SCHEMA,
             "consistency": CONSISTENCY_SCHEMA}  # the types of the contract's columns
def schema_problems(table: str, schemas: dict[str, pa.Schema]) -> dict[str, str]:
    """Shard -> how its schema (`schemas`: shard -> footer schema, in manifest order) departs
    from the table's: a column of the first shard missing or extra, or a column of another
    type than in the first shard or, for a contract column (CONTRACTS), the contract's. A
    reader would fail on the drift unnamed (`datasets`: "An error occurred while generating
    the dataset") or in a query (`mean` of a string column)."""
    if not schemas:
        return {}
    contract = {f.name: f.type for f in CONTRACTS.get(table, pa.schema([]))}
    expected = {f.name: contract.get(f.name, f.type) for f in next(iter(schemas.values()))}
    problems = {}
    for shard, schema in schemas.items():
        types = {f.name: f.type for f in schema}
        drift = ([f"no column {name} ({kind})" for name, kind in expected.items()
                  if name not in types] +
                 [f"column {name} is {types[name]}, not {kind}" for name, kind in
                  expected.items() if name in types and types[name] != kind] +
                 [f"column {name}, which the first shard has not" for name in types
                  if name not in expected])
        if drift:
            problems[shard] = f"not the {table} schema: " + "; ".join(drift)
    return problems


def check_schemas(out: str | Path, table: str, schemas: dict[str, pa.Schema]) -> None:
    """The first of `schema_problems` as `OutputUnreadable`, with the remedy."""
    for shard, problem in schema_problems(table, schemas).items():
        raise OutputUnreadable(f"{shard}: {problem}; `datagen verify {out}` lists it, and "
                               "`--repair` drops its chunk for `datagen generate` to redo")


def listed_shards(out: str | Path, table: str) -> list[str]:
    """The shards of `table` that OUT's manifest lists, each checked (size, footer, rows,
    `schema_problems`). `OutputUnreadable` names what is missing or damaged."""
    root = Path(out)
    manifest = read_manifest(root)
    infos = manifest_shards(manifest).get(table, [])
    if not infos:
        raise OutputUnreadable(f"{root} has no {table}/ shards (manifest counts: "
                               f"{manifest.get('counts', {})})")
    for info in infos:
        if problem := shard_problem(root, info):
            raise OutputUnreadable(f"{root / info.file} is damaged: {problem}; `datagen verify "
                                   f"{root}` lists every damaged shard")
    files = [str(root / info.file) for info in infos]
    check_schemas(root, table, {file: pq.read_schema(file) for file in files})
    return files


def conversational_features(features: "Features", table: str) -> "Features":
    """`features` with the JSON-text columns typed as `datasets.Json`: each message's
    `tool_calls` (a list of {type, function: {name, arguments}}) and the row's `tools`."""
    from datasets import Json, List, Value

    message = List({"role": Value("string"), "content": Value("string"),
                    "tool_calls": Json(), "name": Value("string")})
    typed = features.copy()
    for column in MESSAGE_COLUMNS[table]:
        typed[column] = message
    typed["tools"] = Json()
    return typed


def _load(files: list[str], table: str, filters: list[tuple[str, str, Any]] | None,
          streaming: bool, cache_dir: str | None) -> "Dataset | IterableDataset":
    from datasets import load_dataset

    check_conversations(files, table)
    dataset = load_dataset("parquet", data_files=files, split="train", streaming=streaming,
                           cache_dir=cache_dir, filters=filters or None)
    return dataset.cast(conversational_features(dataset.features, table))


def _check_names(given: Sequence[str], allowed: Sequence[str], what: str) -> tuple[str, ...]:
    if isinstance(given, str):
        given = (given,)
    unknown = sorted(set(given) - set(allowed))
    if unknown or not given:
        raise ValueError(f"{what}: {unknown or 'none given'}; allowed: {', '.join(allowed)}")
    return tuple(dict.fromkeys(given))


def load_preferences(out: str | Path, sources: Sequence[str] | None = None, *,
                     streaming: bool = False, cache_dir: str | None = None,
                     ) -> "Dataset | IterableDataset":
    """OUT/preferences as a TRL conversational preference dataset: `prompt`, `chosen`,
    `rejected` (message lists, tool calls as lists with arguments as objects), `tools` (a list
    of specs), and the contract's other columns (`source`, `kind`, `*_text`, ...), which TRL
    ignores. `sources` keeps only pairs of those sources (negative, repair, safety)."""
    wanted = None if sources is None else _check_names(sources, PREFERENCE_SOURCES,
                                                       "unknown preference sources")
    filters = None if wanted is None else [("source", "in", list(wanted))]
    files = listed_shards(out, "preferences")
    if "prompt_chars" in pq.read_schema(files[0]).names:  # preferences.layout: compact
        return _load_joined(out, files, filters, streaming, cache_dir)
    return _load(files, "preferences", filters, streaming, cache_dir)


def joined_preferences(out: str | Path, files: list[str],
                       filters: list[tuple[str, str, Any]] | None) -> Iterator[pa.Table]:
    """Compact preference shards with their prompts joined back from the same chunk's
    trajectories (negative pairs) and repairs (repair pairs) shards, one full-layout table
    per shard (datagen.preferences.join_prompts)."""
    from datagen.preferences import join_prompts

    listed = read_manifest(Path(out)).get("counts", {})
    sources = {table: {Path(file).name: file for file in listed_shards(out, table)}
               for table in ("trajectories", "repairs") if listed.get(table)}
    for file in files:
        name = Path(file).name
        if name not in sources.get("trajectories", {}):
            raise OutputUnreadable(f"{file} refers to prompts in trajectories/{name}, which "
                                   "the manifest does not list")
        used = [shards[name] for shards in sources.values() if name in shards]
        check_conversations([file], "preferences")
        check_conversations(used, "trajectories")  # repairs/ has the same message column
        conversations = pa.concat_tables(
            pq.read_table(used_file, columns=["id", "text", "messages"]) for used_file in used)
        yield join_prompts(pq.read_table(file, filters=filters or None), conversations, file)


def _load_joined(out: str | Path, files: list[str], filters: list[tuple[str, str, Any]] | None,
                 streaming: bool, cache_dir: str | None) -> "Dataset | IterableDataset":
    """The compact layout as the same dataset `_load` gives for the full layout: rows are
    joined shard by shard (the cache holds the full prompts; `streaming` joins on the fly)."""
    from datasets import Dataset, Features, IterableDataset
    from datasets.exceptions import DatasetGenerationError

    def rows(out: str, files: list[str], filters: Any, version: tuple[str, ...]
             ) -> Iterator[dict]:
        for table in joined_preferences(out, files, list(filters) if filters else None):
            yield from table.to_pylist()

    # `files` is the one list: `datasets` may split it between its workers. `version` (the
    # shards' checksums) changes the cache key when the shards change.
    kwargs = {"out": str(out), "files": files, "filters": tuple(filters or ()),
              "version": tuple(info.sha256 for info in
                               manifest_shards(read_manifest(Path(out)))["preferences"])}
    features = Features.from_arrow_schema(PREFERENCE_SCHEMA)
    try:
        dataset = (IterableDataset.from_generator(rows, features=features, gen_kwargs=kwargs)
                   if streaming else
                   Dataset.from_generator(rows, features=features, gen_kwargs=kwargs,
                                          cache_dir=cache_dir))
    except DatasetGenerationError as exc:  # "An error occurred while generating the
        # dataset" on top of the join's own error, which names the pair and the shard
        if isinstance(exc.__cause__, (ValueError, OutputUnreadable)):
            raise exc.__cause__ from None
        raise
    return dataset.cast(conversational_features(dataset.features, "preferences"))


def kept_trajectory_ids(out: str | Path) -> list[str]:
    """Ids of the rollouts the consistency filter kept (`consistency` table, `kept`); an OUT
    written without `consistency.enabled` has no such table (`OutputUnreadable`)."""
    files = listed_shards(out, "consistency")
    table = pa.concat_tables(pq.read_table(f, columns=["trajectory_id", "kept"]) for f in files)
    return table.filter(table.column("kept")).column("trajectory_id").to_pylist()


def load_sft(out: str | Path, tables: Sequence[str] = ("trajectories",), *,
             successful_only: bool = True, kept_only: bool = False, streaming: bool = False,
             cache_dir: str | None = None) -> "Dataset | IterableDataset":
    """OUT's trajectories (and/or repairs) as a TRL conversational language-modelling dataset:
    `messages` and `tools`, plus the contract's other columns. `successful_only` drops
    trajectories that failed (and rows whose task never generated: they have no messages).

    Loss masking: `SFTConfig(assistant_only_loss=True)` trains the assistant turns only (TRL
    swaps in its `qwen2_5_training.jinja`), as this project's losses train REASON + ACT and
    never OBS or PROMPT. A repair's wrong call is an assistant turn too, so TRL trains it,
    while the project's trainer keeps it as context without loss (span kind ERROR).

    `kept_only` (an OUT written with `consistency.enabled`): only the rollouts the
    consistency filter kept, and only repairs of kept rollouts."""
    tables = _check_names(tables, SFT_TABLES, "unknown SFT tables")
    filters = [("task", "!=", "")]  # a task that never generated has no messages
    if successful_only:
        filters.append(("success", "=", True))
    kept = kept_trajectory_ids(out) if kept_only else None
    parts = [_load(listed_shards(out, table), table, filters + (
        [("id" if table == "trajectories" else "source_id", "in", kept)] if kept_only else []),
        streaming, cache_dir) for table in tables]
    if len(parts) == 1:
        return parts[0]
    from datasets import concatenate_datasets

    common = [c for c in parts[0].column_names if all(c in p.column_names for p in parts)]
    return concatenate_datasets([part.select_columns(common) for part in parts])
