"""Preference rows cut from a rendered trajectory (datagen/preferences.py)."""

from __future__ import annotations

import pytest

from datagen.chat import message_index, render_trajectory, to_messages
from datagen.preferences import TrajectoryView
from tests.datagen.helpers import oracle_trajectories


def test_view_cuts_every_turn_as_the_rendered_spans_say():
    for traj in oracle_trajectories(12):
        view = TrajectoryView(traj)
        text, spans = render_trajectory(traj)
        messages = to_messages(traj)
        assert view.text == text
        for step in range(len(traj.steps)):
            turn = [s for s in spans if s.step == step and s.kind in ("REASON", "ACT")]
            assert view.turn_bounds(step) == (turn[0].start, turn[-1].end)
            assert text[:view.turn_bounds(step)[0]].endswith("<|im_start|>assistant\n")
            at = message_index(traj.steps, step)
            assert view.prompt_messages(step) == messages[:at]
            assert view.assistant_message(step) == messages[at]
        with pytest.raises(IndexError):
            view.turn_bounds(len(traj.steps))



def test_preference_table_with_shared_text_columns_equals_from_pylist():
    """The preferences table builds `prompt_text` and `tools` apart from the other columns
    (datagen.rows.shared_text_column): same columns, order, types and values as converting
    the rows whole, in both layouts (compact rows have null prompts)."""
    import pyarrow as pa

    from datagen.pipeline.stages.tables import preferences_table
    from datagen.preferences import TrajectoryView, negative_preference, prompt_by_reference
    from mutators import mutate_report
    from tests.datagen.helpers import oracle_trajectories

    rows = []
    for traj in oracle_trajectories(12):
        view = TrajectoryView(traj)
        for index, step in enumerate(traj.steps):
            if step.call is None:
                continue
            spec = next(t for t in traj.tools if t["function"]["name"] == step.call.name)
            report = mutate_report(step.call.as_dict(), spec, seed=index, other_tools=traj.tools)
            rows += [negative_preference(view, index, negative) for negative in report.negatives]
    assert len(rows) > 30 and len({id(row["prompt_text"]) for row in rows}) < len(rows)
    for layout, layout_rows in (("full", rows),
                                ("compact", [prompt_by_reference(r) for r in rows[::2]]
                                 + rows[1::2])):
        table = preferences_table(layout)
        assert table.shared_text == ("tools", "prompt_text")
        built = table.from_rows(layout_rows)
        expected = pa.Table.from_pylist(layout_rows, schema=table.schema)
        assert built.schema.equals(expected.schema, check_metadata=True)
        assert built.equals(expected)
    assert table.from_rows([]).schema.equals(table.schema)
