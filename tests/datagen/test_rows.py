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


def test_shared_text_column_equals_arrow_conversion():
    import pyarrow as pa

    from datagen.rows import shared_text_column

    prompt, tools = "<|im_start|>system\nx" * 50, '[{"type": "function"}]'
    cases = [
        [prompt, prompt, prompt, tools, tools, "unique"],  # the same objects, repeated
        [prompt, None, "", None, "é — ünïcode ✓", prompt],  # nulls, empty, non-ASCII
        [None, None],
        [],
    ]
    for values in cases:
        built = shared_text_column(values)
        expected = pa.array(values, pa.string())
        built.validate(full=True)
        assert built.type == pa.string() and built.equals(expected)
        assert built.null_count == expected.null_count
        assert built.to_pylist() == values


def test_shared_text_column_fails_as_arrow_does():
    import pyarrow as pa
    import pytest

    from datagen.rows import shared_text_column

    for bad in (["ok", 3], ["ok", "\ud800"]):  # not a str; a lone surrogate
        with pytest.raises(Exception) as expected:
            pa.array(bad, pa.string())
        with pytest.raises(expected.type):
            shared_text_column(bad)
