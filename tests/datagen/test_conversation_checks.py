"""datagen.conversation_checks on shards the loaders read: the first bad value in shard order
is named with its row id, whatever row group it sits in and however the column is encoded."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.conversation_checks import check_conversations, conversation_problem
from datagen.pipeline.shards import OutputUnreadable

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string()),
                     ("tool_calls", pa.string()), ("name", pa.string())])
CALL = '[{"type": "function", "function": {"name": "f", "arguments": {}}}]'


def _conversation(i: int, role: str = "assistant", calls: str | None = CALL) -> list[dict]:
    return [{"role": "user", "content": f"task {i}", "tool_calls": None, "name": None},
            {"role": role, "content": "", "tool_calls": calls, "name": None},
            {"role": "tool", "content": "ok", "tool_calls": None, "name": "f"}]


def _shard(path, rows: int, bad: dict[int, dict] | None = None, row_group_size: int = 3,
           dictionary: bool = True) -> str:
    """A trajectories-like shard of `rows` conversations; `bad`: row -> _conversation kwargs
    (or {"tools": text})."""
    bad = bad or {}
    messages = [_conversation(i, **{k: v for k, v in bad.get(i, {}).items() if k != "tools"})
                for i in range(rows)]
    tools = [bad.get(i, {}).get("tools", "[]") for i in range(rows)]
    table = pa.table({"id": [f"t{i}" for i in range(rows)], "tools": tools,
                      "messages": pa.array(messages, pa.list_(MESSAGE))})
    pq.write_table(table, path, row_group_size=row_group_size, use_dictionary=dictionary)
    return str(path)


@pytest.mark.parametrize("dictionary", [True, False])
@pytest.mark.parametrize("bad, problem", [
    ({"role": "robot"}, "row t7, column messages.role: 'robot' is not one of"),
    ({"role": None}, "row t7, column messages.role: None is not one of"),
    ({"calls": "{not json"}, "row t7, column messages.tool_calls: not JSON"),
    ({"calls": '{"a": 1}'}, "row t7, column messages.tool_calls: JSON but not a list"),
    ({"tools": "nope"}, "row t7, column tools: not JSON")])
def test_a_bad_value_in_a_later_row_group_names_its_row(tmp_path, dictionary, bad, problem):
    shard = _shard(tmp_path / "a.parquet", 10, {7: bad}, dictionary=dictionary)
    with pytest.raises(OutputUnreadable, match=f"^{shard}: {problem}"):
        check_conversations([shard], "trajectories")


def test_the_first_bad_shard_in_order_is_named(tmp_path):
    """Shards are checked on threads; the problem reported is the first in the list's order."""
    files = [_shard(tmp_path / f"{i}.parquet", 6, {4: {"role": "robot"}} if i in (5, 9) else
                    None) for i in range(12)]
    with pytest.raises(OutputUnreadable, match=f"^{files[5]}: row t4"):
        check_conversations(files, "trajectories")
    check_conversations(files[:5], "trajectories")  # the good ones pass


def test_the_same_value_in_many_rows_is_judged_once_and_named_at_its_first_row(tmp_path):
    bad = {i: {"calls": "{not json"} for i in range(3, 10)}
    table = pq.read_table(_shard(tmp_path / "a.parquet", 10, bad),
                          read_dictionary=["messages.list.element.tool_calls"])
    assert pa.types.is_dictionary(table.schema.field("messages").type.value_type
                                  .field("tool_calls").type)
    assert conversation_problem(table, ("messages",)).startswith(
        "row t3, column messages.tool_calls: not JSON")
