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

