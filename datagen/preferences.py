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
import pyarrow as pa
import pyarrow.compute as pc

from datagen.chat import IM_START, act_text, message_index, render_trajectory, to_messages
from datagen.rows import PREFERENCE_SCHEMA, rows_to_table
from datagen.types import Span, Step, ToolCall, Trajectory, stable_hash


class TrajectoryView:
    """A trajectory rendered once, cut into prompt / turn pieces for many pairs (a call makes
    three: the turn bounds and message positions are found once per trajectory, not per pair)."""

    def __init__(self, traj: Trajectory,
                 rendered: tuple[str, list[Span]] | None = None) -> None:
        """`rendered`: `render_trajectory(traj)` when the caller has it already."""
        self.traj = traj
        self.text, self.spans = rendered if rendered is not None else render_trajectory(traj)
        self.messages = to_messages(traj)
        self.tools_json = orjson.dumps(traj.tools).decode()
        self._bounds: dict[int, tuple[int, int]] | None = None
        self._message_at: dict[int, int] = {}
        self._prompt_text: dict[int, str] = {}

    def turn_bounds(self, step: int) -> tuple[int, int]:
        """Start of the REASON and end of the ACT of assistant turn `step`."""
        if self._bounds is None:
            self._bounds = {}
            for span in self.spans:
                if span.kind in ("REASON", "ACT"):
                    start, _ = self._bounds.get(span.step, (span.start, 0))
                    self._bounds[span.step] = (start, span.end)
        if step not in self._bounds:
            raise IndexError(f"turn {step} has no REASON or ACT span")
        return self._bounds[step]

    def prompt_text(self, step: int) -> str:
        """The text before turn `step`: one string shared by the turn's pairs (Arrow copies it
        per row anyway; Python need not cut a ~4 KB prefix three times)."""
        text = self._prompt_text.get(step)
        if text is None:
            text = self._prompt_text[step] = self.text[:self.turn_bounds(step)[0]]
        return text

    def _message_index(self, step: int) -> int:
        index = self._message_at.get(step)
        if index is None:
            index = self._message_at[step] = message_index(self.traj.steps, step)
        return index

    def prompt_messages(self, step: int) -> list[dict[str, Any]]:
        return self.messages[:self._message_index(step)]

    def assistant_message(self, step: int) -> dict[str, Any]:
        return self.messages[self._message_index(step)]


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
        "prompt_text": view.prompt_text(step), "chosen_text": view.text[start:end],
        "rejected_text": rejected_text,
    }


def negative_preference(view: TrajectoryView, step: int, negative: Any) -> dict[str, Any]:
    """Chosen = the correct call; rejected = the same reasoning with the negative's call."""
    reasoning = view.traj.steps[step].reasoning
    call = negative.call
    wrong = Step(reasoning, ToolCall(call.get("name", ""), call.get("arguments", {})))
    return preference_row(view, step, call_message(reasoning, call),
                          reasoning + act_text(wrong), "negative", negative.kind)


def prompt_by_reference(row: dict[str, Any]) -> dict[str, Any]:
    """`row` in the compact layout: its prompt as a length of its trajectory's messages and
    text (the pair's prompt is exactly their beginning; `join_prompts` restores it)."""
    return {**row, "prompt": None, "prompt_text": None, "prompt_messages": len(row["prompt"]),
            "prompt_chars": len(row["prompt_text"])}


ASSISTANT_HEADER = f"{IM_START}assistant\n"


def prompt_cut_problem(chars: int, count: int, source: dict[str, Any]) -> str | None:
    """Why `chars` / `count` cannot be a pair's prompt in `source` (its trajectory's `id`,
    `text` and `messages`), or None. A prompt is a non-empty beginning that ends with an assistant
    header in the text and before an assistant message in the messages; a damaged reference
    cut anywhere else would load as a wrong prompt, silently."""
    text, messages, owner = source["text"] or "", source["messages"] or [], source["id"]
    if not 0 < chars <= len(text):
        return f"prompt_chars {chars} is outside trajectory {owner} ({len(text)} characters)"
    if not text[:chars].endswith(ASSISTANT_HEADER):
        return f"prompt_chars {chars} does not end at an assistant turn of trajectory {owner}"
    if not 0 < count < len(messages):
        return (f"prompt_messages {count} is outside trajectory {owner} "
                f"({len(messages)} messages)")
    if messages[count]["role"] != "assistant":
        return (f"prompt_messages {count} does not end before an assistant turn of "
                f"trajectory {owner}")
    return None


def join_prompts(pairs: pa.Table, trajectories: pa.Table, shard: str = "") -> pa.Table:
    """Preference rows of either layout -> the full layout (PREFERENCE_SCHEMA): a compact
    row's `prompt` / `prompt_text` cut from its trajectory in `trajectories` (rows with `id`,
    `text`, `messages`: the same chunk's trajectories shard, and its repairs shard for repair
    pairs; a pair's trajectory is always in its chunk). A trajectory that is not there, or a
    cut that does not fit it (`prompt_cut_problem`), is a ValueError naming the pair and
    its `shard` (the shards do not belong together, or one is damaged)."""
    if "prompt_chars" not in pairs.column_names:
        return pairs.select(PREFERENCE_SCHEMA.names)
    rows, where = pairs.to_pylist(), f" (in {shard})" if shard else ""
    wanted = pa.array(sorted({row["trajectory_id"] for row in rows
                              if row["prompt_chars"] is not None}), pa.string())
    found = trajectories.select(["id", "text", "messages"]).filter(
        pc.is_in(trajectories.column("id"), value_set=wanted))
    by_id = {row["id"]: row for row in found.to_pylist()}
    for row in rows:
        chars, count = row.pop("prompt_chars"), row.pop("prompt_messages")
        if chars is None:
            continue
        source = by_id.get(row["trajectory_id"])
        if source is None:
            raise ValueError(f"pair {row['id']} refers to trajectory {row['trajectory_id']}, "
                             f"which these trajectories do not hold{where}")
        if problem := prompt_cut_problem(chars, count, source):
            raise ValueError(f"pair {row['id']}: {problem}{where}")
        row["prompt_text"], row["prompt"] = source["text"][:chars], source["messages"][:count]
    return rows_to_table(rows, PREFERENCE_SCHEMA)
