"""Row conversion, Arrow schema and deterministic ids."""

from __future__ import annotations

from datagen.rows import render_row, rows_to_table, trajectory_from_row, trajectory_schema
from datagen.types import stable_seed, trajectory_id
from tests.datagen.helpers import oracle_trajectories


def test_rows_round_trip_through_arrow():
    trajectories = oracle_trajectories(30)
    rows = [render_row(traj)[0] for traj in trajectories]
    table = rows_to_table(rows, trajectory_schema(False))
    for row, traj in zip(table.to_pylist(), trajectories):
        again = trajectory_from_row(row)
        assert [s.call for s in again.steps] == [s.call for s in traj.steps]
        assert [s.answer for s in again.steps] == [s.answer for s in traj.steps]
        assert [s.reasoning for s in again.steps] == [s.reasoning for s in traj.steps]
        assert render_row(again)[0] == row  # rendering the rebuilt trajectory gives the same row


def test_ids_are_deterministic_and_distinct():
    assert trajectory_id("sql-0-1", "oracle", 0) == trajectory_id("sql-0-1", "oracle", 0)
    assert trajectory_id("sql-0-1", "oracle", 0) != trajectory_id("sql-0-1", "oracle", 1)
    assert stable_seed("a", 1) == stable_seed("a", 1) != stable_seed("a", 2)
    first = [(t.id, t.steps[0].reasoning) for t in oracle_trajectories(20, seed=3)]
    assert first == [(t.id, t.steps[0].reasoning) for t in oracle_trajectories(20, seed=3)]
    assert len({i for i, _ in first}) == 20


def test_columnar_table_equals_the_row_by_row_table():
    from datagen.rows import render, trajectory_table

    trajectories = oracle_trajectories(30)
    rows = [render_row(traj)[0] for traj in trajectories]
    expected = rows_to_table(rows, trajectory_schema(False))
    assert trajectory_table(trajectories, [render(t) for t in trajectories]).equals(expected)
    empty = trajectory_table([], [])
    assert empty.num_rows == 0 and empty.schema == trajectory_schema(False)


def test_rows_to_table_equals_from_pylist_for_every_table():
    """The columnar builder gives exactly pyarrow's row-by-row table: nested message lists,
    nulls, missing keys (null), extra keys (ignored), empty lists and an item that is not a
    complete dict (the slow path)."""
    import pyarrow as pa

    from datagen.rows import NEGATIVE_SCHEMA, PREFERENCE_SCHEMA, REPAIR_SCHEMA

    message = {"role": "assistant", "content": "x", "tool_calls": None, "name": None}
    pair = {"id": "p", "trajectory_id": "t", "env": "sql", "step": 2, "source": "negative",
            "kind": "type_error", "tools": "[]", "prompt": [message, {**message, "role": "user"}],
            "chosen": [message], "rejected": [], "prompt_text": "é", "chosen_text": None,
            "rejected_text": "r", "unknown": 1}
    rows = [pair, {**pair, "prompt": [{"role": "tool"}]}, {"id": "only-id"}]
    assert rows_to_table(rows, PREFERENCE_SCHEMA).equals(
        pa.Table.from_pylist(rows, schema=PREFERENCE_SCHEMA))
    assert rows_to_table(rows[:1], PREFERENCE_SCHEMA).column("prompt").to_pylist() == [
        pair["prompt"]]
    trajectories = oracle_trajectories(5)
    repairs = [{**render_row(t)[0], "source_id": "s", "error_step": 1, "critique": "c"}
               for t in trajectories]
    negative = {"trajectory_id": "t", "errors": ["a", "b"], "schema_valid": False, "step": 1}
    for schema, table_rows in ((REPAIR_SCHEMA, repairs), (NEGATIVE_SCHEMA, [negative] * 3),
                               (PREFERENCE_SCHEMA, [])):
        assert rows_to_table(table_rows, schema).equals(
            pa.Table.from_pylist(table_rows, schema=schema))
