"""Preference rows (`preferences` table): the shape DPO trainers read.

`prompt` is the conversation up to the decision (system, user, earlier turns and their
observations), `chosen` and `rejected` are the competing assistant turns, all as message lists
(TRL's conversational format); `*_text` are the same rendered with the chat template, for
trainers that work on text (`prompt_text` ends with the assistant header, so
`prompt_text + chosen_text` is exactly the trajectory's text up to that turn). `source` says
where the pair comes from (negative | repair | safety) and `kind` the finer label.
"""

from __future__ import annotations

from typing import Any

import orjson

from datagen.chat import act_text, message_index, render_trajectory, to_messages
from datagen.types import Step, ToolCall, Trajectory, stable_hash


class TrajectoryView:
    """A trajectory rendered once, cut into prompt / turn pieces for many pairs."""

    def __init__(self, traj: Trajectory) -> None:
        self.traj = traj
        self.text, self.spans = render_trajectory(traj)
        self.messages = to_messages(traj)
        self.tools_json = orjson.dumps(traj.tools).decode()

    def turn_bounds(self, step: int) -> tuple[int, int]:
        turn = [s for s in self.spans if s.step == step and s.kind in ("REASON", "ACT")]
        return turn[0].start, turn[-1].end

    def prompt_messages(self, step: int) -> list[dict[str, Any]]:
        return self.messages[:message_index(self.traj.steps, step)]

    def assistant_message(self, step: int) -> dict[str, Any]:
        return self.messages[message_index(self.traj.steps, step)]


def call_message(reasoning: str, call: dict[str, Any]) -> dict[str, Any]:
    calls = orjson.dumps([{"type": "function", "function": call}]).decode()
    return {"role": "assistant", "content": reasoning, "tool_calls": calls, "name": None}


def text_message(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": None, "name": None}


def preference_row(view: TrajectoryView, step: int, rejected: dict[str, Any],
                   rejected_text: str, source: str, kind: str) -> dict[str, Any]:
    """A pair at assistant turn `step` of `view`: chosen = the trajectory's own turn."""
    start, end = view.turn_bounds(step)
    traj = view.traj
    return {
        "id": stable_hash(traj.id, step, source, kind, rejected_text),
        "trajectory_id": traj.id, "env": traj.task.env, "step": step, "source": source,
        "kind": kind, "tools": view.tools_json, "prompt": view.prompt_messages(step),
        "chosen": [view.assistant_message(step)], "rejected": [rejected],
        "prompt_text": view.text[:start], "chosen_text": view.text[start:end],
        "rejected_text": rejected_text,
    }


def negative_preference(view: TrajectoryView, step: int, negative: Any) -> dict[str, Any]:
    """Chosen = the correct call; rejected = the same reasoning with the negative's call."""
    reasoning = view.traj.steps[step].reasoning
    call = negative.call
    wrong = Step(reasoning, ToolCall(call.get("name", ""), call.get("arguments", {})))
    return preference_row(view, step, call_message(reasoning, call),
                          reasoning + act_text(wrong), "negative", negative.kind)
