"""Arrow schemas of the output tables and conversion between trajectories and rows.

The trajectories table is the contract with trainers and analysts (see DESIGN.md): scalar
columns are typed, `messages` and `spans` are lists of structs, and JSON payloads (tool specs,
tool calls) are strings so that every environment's tools fit one schema.
"""

from __future__ import annotations

from itertools import accumulate
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from datagen.chat import ANSWER_PREFIX, render_trajectory, to_messages
from datagen.types import Observation, Span, Step, Task, ToolCall, Trajectory

# 2: rows with token ids always name their tokenizer (`tokenizer` column, oracle runs too)
# 3: `error_kind` next to `error` in trajectories (repairs had it: now in the same place)
SCHEMA_VERSION = 3

MESSAGE_TYPE = pa.struct([
    ("role", pa.string()), ("content", pa.string()),
    ("tool_calls", pa.string()), ("name", pa.string()),
])
SPAN_TYPE = pa.struct([
    ("kind", pa.string()), ("start", pa.int32()), ("end", pa.int32()), ("step", pa.int16()),
])

TRAJECTORY_SCHEMA = pa.schema([
    ("id", pa.string()), ("env", pa.string()), ("task_id", pa.string()),
    ("task_seed", pa.int64()), ("task", pa.string()), ("tools", pa.string()),
    ("messages", pa.list_(MESSAGE_TYPE)), ("text", pa.string()),
    ("spans", pa.list_(SPAN_TYPE)), ("success", pa.bool_()), ("reward", pa.float32()),
    ("error", pa.string()), ("error_kind", pa.string()), ("n_steps", pa.int16()),
    ("teacher", pa.string()), ("round", pa.int16()),
])
NEGATIVE_SCHEMA = pa.schema([
    ("trajectory_id", pa.string()), ("env", pa.string()), ("step", pa.int16()),
    ("kind", pa.string()), ("subkind", pa.string()), ("path", pa.string()),
    ("tool", pa.string()), ("original", pa.string()), ("mutated", pa.string()),
    ("original_value", pa.string()), ("mutated_value", pa.string()),
    ("errors", pa.list_(pa.string())), ("schema_valid", pa.bool_()),
    ("outcome_changed", pa.bool_()), ("description", pa.string()),
])
PREFERENCE_SCHEMA = pa.schema([
    ("id", pa.string()), ("trajectory_id", pa.string()), ("env", pa.string()),
    ("step", pa.int16()), ("source", pa.string()), ("kind", pa.string()),
    ("tools", pa.string()), ("prompt", pa.list_(MESSAGE_TYPE)),
    ("chosen", pa.list_(MESSAGE_TYPE)), ("rejected", pa.list_(MESSAGE_TYPE)),
    ("prompt_text", pa.string()), ("chosen_text", pa.string()),
    ("rejected_text", pa.string()),
])
# Repairs (critics): trajectory columns + where the fault was and the critique of it; their
# `error_kind` is the kind of the repaired fault (the trajectory itself succeeds). Span kind
# ERROR marks the wrong call (kept in the text for context, excluded from the loss).
REPAIR_SCHEMA = pa.schema(list(TRAJECTORY_SCHEMA) + [
    pa.field("source_id", pa.string()), pa.field("error_step", pa.int16()),
    pa.field("critique", pa.string()),
])
# Consistency filter (issue 18): one row per rollout, keyed by `trajectory_id`, in a side
# table rather than as columns of `trajectories` (why: datagen/pipeline/stages/consistency.py).
CONSISTENCY_SCHEMA = pa.schema([
    ("trajectory_id", pa.string()), ("task_id", pa.string()), ("env", pa.string()),
    ("sample", pa.int16()), ("k", pa.int16()), ("outcome", pa.string()),
    ("votes", pa.int16()), ("agreement", pa.float32()), ("in_majority", pa.bool_()),
    ("falsifier", pa.string()), ("falsified", pa.bool_()), ("falsify_step", pa.int16()),
    ("falsify_kind", pa.string()), ("falsify_reason", pa.string()),
    ("confidence", pa.float32()), ("kept", pa.bool_()), ("error", pa.string()),
])
TOKEN_FIELDS = [pa.field("input_ids", pa.list_(pa.int32())),
                pa.field("span_ids", pa.list_(pa.int8()))]
# LLM teachers (datagen/teachers/trace.py): per-token top-k aligned with input_ids (an empty
# list where the teacher did not generate), the tokenizer the ids are in, and a JSON of the
# sampling parameters, token counts, latency and cost of the episode.
TEACHER_FIELDS = {"teacher_topk_ids": pa.list_(pa.list_(pa.int32())),
                  "teacher_topk_logprobs": pa.list_(pa.list_(pa.float32())),
                  "tokenizer": pa.string(), "teacher_meta": pa.string()}


def trajectory_schema(with_tokens: bool) -> pa.Schema:
    schema = TRAJECTORY_SCHEMA
    for field in TOKEN_FIELDS if with_tokens else ():
        schema = schema.append(field)
    return schema


def n_tool_steps(traj: Trajectory) -> int:
    return sum(1 for step in traj.steps if step.call is not None)


def trajectory_row(traj: Trajectory, text: str, spans: list[Span],
                   tools_json: str) -> dict[str, Any]:
    """One row of the trajectories table (without token columns)."""
    return {
        "id": traj.id, "env": traj.task.env, "task_id": traj.task.id,
        "task_seed": traj.task.seed, "task": traj.task.instruction, "tools": tools_json,
        "messages": to_messages(traj) if traj.task.instruction else [], "text": text,
        "spans": [{"kind": s.kind, "start": s.start, "end": s.end, "step": s.step} for s in spans],
        "success": traj.success, "reward": traj.reward, "error": traj.error,
        "error_kind": traj.error_kind, "n_steps": n_tool_steps(traj), "teacher": traj.teacher,
        "round": traj.round,
    }


def render(traj: Trajectory) -> tuple[str, list[Span]]:
    """Text and spans of a trajectory; a task that never got an instruction renders empty."""
    return render_trajectory(traj) if traj.task.instruction else ("", [])


def render_row(traj: Trajectory) -> tuple[dict[str, Any], list[Span]]:
    """Render `traj` and build its row; the spans are returned too for token labelling."""
    text, spans = render(traj)
    return trajectory_row(traj, text, spans, orjson.dumps(traj.tools).decode()), spans


def _step_from_assistant(message: dict[str, Any]) -> Step:
    if message["tool_calls"]:
        function = orjson.loads(message["tool_calls"])[0]["function"]
        return Step(reasoning=message["content"] or "",
                    call=ToolCall(function["name"], function["arguments"]))
    content = message["content"] or ""
    reasoning, marker, answer = content.rpartition(ANSWER_PREFIX)
    if not marker:
        return Step(reasoning="", answer=content)
    return Step(reasoning=reasoning.removesuffix("\n\n"), answer=answer)


def trajectory_from_row(row: dict[str, Any]) -> Trajectory:
    """Rebuild a Trajectory from a row (the gold solution is not stored: regenerate the task
    from `env` and `task_seed` when it is needed)."""
    steps: list[Step] = []
    for message in row["messages"]:
        if message["role"] == "assistant":
            steps.append(_step_from_assistant(message))
        elif message["role"] == "tool" and steps:
            content = message["content"] or ""
            error = content[len("Error: "):] if content.startswith("Error: ") else None
            steps[-1].observation = Observation(content=content, error=error)
    task = Task(id=row["task_id"], env=row["env"], seed=row["task_seed"],
                instruction=row["task"], gold=[])
    return Trajectory(id=row["id"], task=task, tools=orjson.loads(row["tools"]), steps=steps,
                      success=row["success"], reward=row["reward"], teacher=row["teacher"],
                      round=row["round"], error=row["error"],
                      error_kind=row.get("error_kind"))


def rows_to_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


_MAX_STRING_BYTES = 2**31 - 1  # int32 offsets of pa.string()


def shared_text_column(values: list[str | None]) -> pa.Array:
    """A pa.string() column of long texts that many rows share (the same str object): each
    distinct object is encoded once and all rows are copied into one buffer of the final size.

    Why: a preference pair repeats its prompt text and its tools JSON (~88% of the 100 MB the
    preferences table of a 500-trajectory demo chunk holds); `from_pylist` copies them value
    by value into builders that grow as they go: the two columns measured 370-550 us per
    trajectory in the pipeline, ~80 built this way (load 12-13; benchmarks/PROFILE.md, d16h).
    The array equals `pa.array(values, pa.string())`; a value that is not a str, cannot be
    encoded (lone surrogates) or a column over 2 GiB take that path, so errors stay Arrow's."""
    encoded: dict[int, bytes] = {}  # by id: every value is alive in `values` meanwhile
    parts: list[bytes] = []
    try:
        for value in values:
            if value is None:
                parts.append(b"")
                continue
            data = encoded.get(id(value))
            if data is None:
                data = encoded[id(value)] = value.encode()
            parts.append(data)
    except (AttributeError, UnicodeEncodeError):
        return pa.array(values, pa.string())
    ends = list(accumulate(map(len, parts)))
    if ends and ends[-1] > _MAX_STRING_BYTES:
        return pa.array(values, pa.string())
    offsets = pa.array([0, *ends], pa.int32()).buffers()[1]
    nulls = values.count(None)
    validity = (pa.array([value is not None for value in values], pa.bool_()).buffers()[1]
                if nulls else None)
    # the bytes go into a buffer of Arrow's pool, as the rest of the table's: one of Python's
    # (b"".join) measured the same CPU but twice the page faults, fresh memory every chunk
    buffer = pa.allocate_buffer(ends[-1] if ends else 0)
    view, start = memoryview(buffer).cast("B"), 0
    for part, end in zip(parts, ends):
        view[start:end] = part
        start = end
    return pa.StringArray.from_buffers(len(parts), offsets, buffer, validity, nulls)


def _list_of_structs(items: list[list[Any]], struct: pa.StructType, by_key: bool) -> pa.ListArray:
    """A list<struct> column built from flat child arrays: several times faster than
    from_pylist on nested dicts, which matters at a thousand rows per second per core."""
    flat = [item for row_items in items for item in row_items]
    offsets = np.zeros(len(items) + 1, dtype=np.int32)
    np.cumsum([len(row_items) for row_items in items], out=offsets[1:])
    names = [f.name for f in struct]
    # One C-level getter call per item, then a transpose: 5x faster than a comprehension
    # per field with getattr/[] on every item.
    fields = (itemgetter if by_key else attrgetter)(*names)
    per_item = map(fields, flat) if len(names) > 1 else ((fields(item),) for item in flat)
    children = list(zip(*per_item)) or [()] * len(names)
    arrays = [pa.array(child, type=f.type) for child, f in zip(children, struct)]
    values = pa.StructArray.from_arrays(arrays, fields=list(struct))
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def trajectory_table(trajectories: list[Trajectory], rendered: list[tuple[str, list[Span]]],
                     tokens: tuple[list[list[int]], list[Any]] | None = None,
                     teacher: dict[str, list] | None = None) -> pa.Table:
    """The trajectories table for a batch, built column by column (`teacher`: optional
    TEACHER_FIELDS columns of LLM teachers)."""
    tools_json: dict[int, str] = {}  # tool lists are shared per environment: encode each once
    tools = [tools_json.get(id(t.tools)) or tools_json.setdefault(id(t.tools),
             orjson.dumps(t.tools).decode()) for t in trajectories]
    messages = [to_messages(t) if t.task.instruction else [] for t in trajectories]
    columns = {
        "id": [t.id for t in trajectories], "env": [t.task.env for t in trajectories],
        "task_id": [t.task.id for t in trajectories],
        "task_seed": [t.task.seed for t in trajectories],
        "task": [t.task.instruction for t in trajectories], "tools": tools,
        "messages": _list_of_structs(messages, MESSAGE_TYPE, by_key=True),
        "text": [text for text, _ in rendered],
        "spans": _list_of_structs([spans for _, spans in rendered], SPAN_TYPE, by_key=False),
        "success": [t.success for t in trajectories],
        "reward": [t.reward for t in trajectories], "error": [t.error for t in trajectories],
        "error_kind": [t.error_kind for t in trajectories],
        "n_steps": [n_tool_steps(t) for t in trajectories],
        "teacher": [t.teacher for t in trajectories], "round": [t.round for t in trajectories],
    }
    if tokens is not None:
        columns["input_ids"] = tokens[0]
        columns["span_ids"] = [labels.tolist() for labels in tokens[1]]
    schema = trajectory_schema(tokens is not None)
    for name, values in (teacher or {}).items():
        columns[name] = values
        schema = schema.append(pa.field(name, TEACHER_FIELDS[name]))
    arrays = [col if isinstance(col, pa.Array) else pa.array(col, type=schema.field(name).type)
              for name, col in columns.items()]
    return pa.Table.from_arrays(arrays, schema=schema)
