"""Preference shards of `preferences.layout: compact` (datagen), read as the full layout.

A compact `negative` or `repair` pair stores no `prompt_text` but `prompt_chars`: its prompt
is the first `prompt_chars` characters of its conversation's `text`, in the same chunk's
trajectories/ shard (negative pairs) or repairs/ shard (repair pairs, whose `trajectory_id`
is the repair row's id). Safety pairs keep their prompt. The trainer reads only
`prompt_text` of a pair (never the `prompt` messages), so restoring that column is the whole
join: each block reads the `id` / `text` of just the conversations its pairs refer to.
`datagen.preferences.join_prompts` is the same join for whole rows (TRL's loaders).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trainer.shard_files import exists, full_uri, sibling

COMPACT_MARKER = "prompt_chars"
COMPACT_ONLY = ("prompt_chars", "prompt_messages")
CONVERSATION_TABLES = ("trajectories", "repairs")


def is_compact(preference_file: str | Path) -> bool:
    return COMPACT_MARKER in pq.read_schema(preference_file).names


def conversation_texts(preference_file: str | Path, ids: set[str]) -> dict[str, str]:
    """id -> `text` of the conversations `ids` in the chunk's trajectories/ and repairs/."""
    texts: dict[str, str] = {}
    for table in CONVERSATION_TABLES:
        shard = sibling(str(preference_file), table)
        if ids and exists(shard):
            found = pq.read_table(shard, columns=["id", "text"],
                                  filters=[("id", "in", sorted(ids))])
            texts.update(zip(found.column("id").to_pylist(), found.column("text").to_pylist()))
    return texts


def with_prompt_text(table: pa.Table, texts: dict[str, str], where: str) -> pa.Table:
    """`table`'s by-reference pairs with `prompt_text` cut from `texts`, without the compact
    columns. A pair whose conversation is not in `texts`, or whose `prompt_chars` does not
    fit it, is a ValueError naming it."""
    chars = table.column(COMPACT_MARKER).to_pylist()
    prompts = table.column("prompt_text").to_pylist()
    owners = table.column("trajectory_id").to_pylist()
    for i, count in enumerate(chars):
        if count is None:
            continue
        text = texts.get(owners[i])
        if text is None:
            raise ValueError(f"pair {table.column('id')[i].as_py()} refers to conversation "
                             f"{owners[i]}, which {where} does not hold (preferences.layout: "
                             "compact needs the chunk's trajectories/ and repairs/ shards)")
        if not 0 <= count <= len(text):  # a damaged reference: no prompt to cut
            raise ValueError(f"pair {table.column('id')[i].as_py()}: prompt_chars {count} is "
                             f"outside its conversation {owners[i]} ({len(text)} characters)")
        prompts[i] = text[:count]
    table = table.set_column(table.schema.get_field_index("prompt_text"), "prompt_text",
                             pa.array(prompts, pa.string()))
    return table.drop_columns([name for name in COMPACT_ONLY if name in table.column_names])


def joined_prompts(table: pa.Table, root: str) -> pa.Table:
    """Ray Data stage: a block of preference rows (with `path`) in the full layout's columns
    (without `prompt_chars` / `prompt_messages`). Rows of the full layout pass unchanged."""
    if COMPACT_MARKER not in table.column_names:
        return table
    paths = [full_uri(path, root) for path in table.column("path").to_pylist()]
    wanted: dict[str, set[str]] = {}
    for path, owner, count in zip(paths, table.column("trajectory_id").to_pylist(),
                                  table.column(COMPACT_MARKER).to_pylist()):
        if count is not None:
            wanted.setdefault(path, set()).add(owner)
    texts: dict[str, str] = {}
    for path, ids in wanted.items():
        texts.update(conversation_texts(path, ids))
    shards = sorted(wanted) or ["(none)"]  # a block of safety pairs refers to nothing
    where = (f"the chunk of {shards[0]}" if len(shards) == 1 else
             f"the chunks of {len(shards)} preference shards (e.g. {shards[0]})")
    return with_prompt_text(table, texts, where)


def join_stage(dataset: Any, root: str | Path) -> Any:
    """`dataset` (Ray Data, rows with `path`) with `joined_prompts` applied block by block."""
    return dataset.map_batches(joined_prompts, fn_kwargs={"root": str(root)},
                               batch_format="pyarrow", batch_size=None)
