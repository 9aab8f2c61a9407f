"""Column types of every table the trainer reads, checked on each local shard's footer before
any work (trainer.data_checks.CONTRACTS): a repairs, preferences (full or compact) or top-k
column of another type is one ValueError naming the shard, the column, its type and the
contract's, where it was a TypeError / ArrowInvalid in a Ray Data worker (or, for some,
wrong values trained silently). Schemas only: no Ray, no tokenizer."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.pipeline.stages.tables import PROMPT_REFERENCE_FIELDS
from datagen.rows import (PREFERENCE_SCHEMA, REPAIR_SCHEMA, TEACHER_FIELDS, TOKEN_FIELDS,
                          TRAJECTORY_SCHEMA)
from trainer.data import DataSettings, check_read_types, inspect_shards
from trainer.data_checks import CONTRACTS, TOPK_TYPES, check_column_types
from trainer.readers.preferences import preference_files

TOPK_FIELDS = [pa.field(name, TEACHER_FIELDS[name]) for name in TOPK_TYPES]
WRITTEN = {  # what datagen writes, every optional column included
    "trajectories": pa.schema(list(TRAJECTORY_SCHEMA) + TOKEN_FIELDS + TOPK_FIELDS
                              + [pa.field("tokenizer", pa.string())]),
    "repairs": pa.schema(list(REPAIR_SCHEMA) + TOKEN_FIELDS + TOPK_FIELDS),
    "preferences": pa.schema(list(PREFERENCE_SCHEMA) + list(PROMPT_REFERENCE_FIELDS)),
}


def _with(schema: pa.Schema, column: str, type_: pa.DataType) -> pa.Schema:
    return schema.set(schema.get_field_index(column), pa.field(column, type_))


@pytest.mark.parametrize("table", sorted(CONTRACTS))
def test_the_contract_accepts_what_datagen_writes_and_names_only_its_columns(table):
    schema = WRITTEN[table]
    check_column_types("f", schema, table, with_topk=True)
    assert set(CONTRACTS[table].types) | set(CONTRACTS[table].required) <= set(schema.names)


SPAN = pa.struct([("kind", pa.string()), ("start", pa.string()), ("end", pa.int32())])


@pytest.mark.parametrize("table, column, bad, shown", [
    ("preferences", "chosen_text", pa.list_(pa.string()), "list<item: string>, not string"),
    ("preferences", "prompt_chars", pa.string(), "string, not integer"),       # compact layout
    ("preferences", "prompt_messages", pa.float64(), "double, not integer"),   # compact layout
    ("preferences", "source", pa.int64(), "int64, not string"),
    ("repairs", "spans", pa.list_(SPAN),
     "list<item: struct<kind: string, start: string, end: int32>>, not "
     "list<struct<kind: string, start: integer, end: integer>>"),
    ("repairs", "source_id", pa.int64(), "int64, not string"),
    ("repairs", "success", pa.string(), "string, not bool"),
    ("repairs", "teacher_topk_logprobs", pa.list_(pa.list_(pa.string())),
     "list<item: list<item: string>>, not list<list<float>>"),
    ("trajectories", "teacher_topk_ids", pa.list_(pa.list_(pa.float32())),
     "list<item: list<item: float>>, not list<list<integer>>"),
    ("trajectories", "input_ids", pa.list_(pa.string()), "list<item: string>, not list<integer>"),
    ("trajectories", "tokenizer", pa.int32(), "int32, not string"),
])
def test_a_column_of_another_type_is_one_line_naming_it(table, column, bad, shown):
    with pytest.raises(ValueError) as raised:
        check_column_types("OUT/x/part-000003.parquet", _with(WRITTEN[table], column, bad), table,
                           with_topk=True)
    message = str(raised.value)
    assert message == ("OUT/x/part-000003.parquet: columns of another type than the data "
                       f"contract's: {column} is {shown}")


def test_topk_columns_are_checked_only_when_the_run_reads_them():
    schema = _with(WRITTEN["trajectories"], "teacher_topk_logprobs",
                   pa.list_(pa.list_(pa.string())))
    check_column_types("f", schema, "trajectories")  # loss.teacher != topk: never read
    with pytest.raises(ValueError, match="teacher_topk_logprobs is"):
        check_column_types("f", schema, "trajectories", with_topk=True)


def test_required_columns_are_named_per_table():
    with pytest.raises(ValueError, match=r"f lacks required columns \['source_id'\]"):
        check_column_types("f", WRITTEN["repairs"].remove(WRITTEN["repairs"].get_field_index(
            "source_id")), "repairs")
    with pytest.raises(ValueError, match=r"f lacks required columns \['rejected_text'\]"):
        check_column_types("f", WRITTEN["preferences"].remove(
            WRITTEN["preferences"].get_field_index("rejected_text")), "preferences")


# -- on shards: every local shard, not the first only ----------------------------------------

def _write(out: Path, table: str, part: int, schema: pa.Schema) -> Path:
    (out / table).mkdir(parents=True, exist_ok=True)
    path = out / table / f"part-{part:06d}.parquet"
    pq.write_table(schema.empty_table(), path)
    return path


def _out(tmp_path: Path, hostile: tuple[str, str, pa.DataType] | None = None,
         compact: bool = False) -> tuple[Path, Path | None]:
    """Two chunks of every table; `hostile` (table, column, type) in the second chunk."""
    out, bad = tmp_path / "out", None
    for part in (0, 1):
        for table in ("trajectories", "repairs", "preferences"):
            schema = WRITTEN[table]
            if table == "preferences" and not compact:
                schema = pa.schema(list(PREFERENCE_SCHEMA))
            if hostile and hostile[0] == table and part == 1:
                bad = _write(out, table, part, _with(schema, hostile[1], hostile[2]))
            else:
                _write(out, table, part, schema)
    return out, bad


def _sad(out: Path, **fields) -> DataSettings:
    return DataSettings(shards=str(out), tokenizer="t", **fields)


@pytest.mark.parametrize("hostile, settings, reads", [
    (("repairs", "spans", pa.list_(SPAN)), {"tables": ("trajectories", "repairs")}, True),
    (("repairs", "spans", pa.list_(SPAN)), {}, False),  # repairs not in data.tables
    (("preferences", "prompt_text", pa.list_(pa.string())), {"use_mch": True}, True),
    (("preferences", "prompt_text", pa.list_(pa.string())),
     {"tables": ("trajectories", "safety")}, True),
    (("preferences", "prompt_text", pa.list_(pa.string())), {}, False),  # MCH off, no safety
    (("trajectories", "teacher_topk_logprobs", pa.list_(pa.list_(pa.string()))),
     {"read_topk": True}, True),
    (("trajectories", "teacher_topk_logprobs", pa.list_(pa.list_(pa.string()))), {}, False),
])
def test_sad_checks_every_shard_of_the_tables_it_reads(tmp_path, hostile, settings, reads):
    out, bad = _out(tmp_path, hostile)
    layout = inspect_shards(out)
    if not reads:
        check_read_types(layout, _sad(out, **settings))
        return
    with pytest.raises(ValueError, match=f"^{bad}: columns of another type than the data "
                                         f"contract's: {hostile[1]} is "):
        check_read_types(layout, _sad(out, **settings))


@pytest.mark.parametrize("hostile", [
    ("preferences", "chosen_text", pa.list_(pa.string())),
    ("preferences", "prompt_chars", pa.string()),
    ("preferences", "step", pa.string()),
    ("trajectories", "text", pa.list_(pa.string())),  # a compact pair's prompt is cut from it
    ("repairs", "id", pa.int64()),                      # a compact repair pair's conversation
])
def test_dpo_checks_every_preference_shard_and_a_compact_pairs_conversations(tmp_path, hostile):
    out, bad = _out(tmp_path, hostile, compact=True)
    with pytest.raises(ValueError, match=f"^{bad}: columns of another type than the data "
                                         f"contract's: {hostile[1]} is "):
        preference_files(out)


def test_a_full_layout_dpo_run_does_not_read_the_conversations(tmp_path):
    out, _ = _out(tmp_path, ("trajectories", "text", pa.list_(pa.string())))
    assert len(preference_files(out)) == 2
