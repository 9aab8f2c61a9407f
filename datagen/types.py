"""The data model: tasks, tool calls, steps, trajectories and spans.

Plain dataclasses with slots: they are built millions of times on the hot path, so they carry
no validation logic of their own (configs and parsers validate at the edges).
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field
from typing import Any

# ERROR (critics' repairs): the wrong call of a repaired trajectory, kept in the text for
# context and excluded from the loss like PROMPT/OBS (trainers train on REASON and ACT only).
SPAN_KINDS = ("PROMPT", "REASON", "ACT", "OBS", "ERROR")
SPAN_KIND_ID = {kind: i for i, kind in enumerate(SPAN_KINDS)}


def stable_hash(*parts: object, digest_size: int = 8) -> str:
    """Hex digest of the parts joined by '|': the same input gives the same id on any machine."""
    text = "|".join(str(part) for part in parts)
    return hashlib.blake2b(text.encode(), digest_size=digest_size).hexdigest()


def stable_seed(*parts: object) -> int:
    """A 63-bit integer seed derived from the parts (process-independent, unlike hash())."""
    return int(stable_hash(*parts, digest_size=8), 16) >> 1


@dataclass(slots=True)
class ToolCall:
    """One function call: `{"name": ..., "arguments": {...}}`."""

    name: str
    arguments: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass(slots=True)
class GoldStep:
    """One step of a task's reference solution.

    `purpose` says, in a few words, why the step is taken ("look up the id of customer Ada
    Park"); the oracle teacher weaves it into its reasoning text.
    """

    call: ToolCall
    purpose: str


@dataclass(slots=True)
class Task:
    """A task instance. `params` holds whatever the environment needs to rebuild the world
    (JSON-serialisable); `gold` is the reference solution and `answer` the expected final answer
    (None when success is judged on the final state alone)."""

    id: str
    env: str
    seed: int
    instruction: str
    gold: list[GoldStep]
    answer: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Observation:
    """What a tool returned. `error` is set when the call failed (bad arguments, unknown tool,
    a failing operation); `content` is always the text the agent sees."""

    content: str
    error: str | None = None


@dataclass(slots=True)
class Step:
    """One assistant turn: reasoning, then either a tool call (with its observation) or a final
    answer. `error` is set when the turn itself failed (the tool raised, the output was
    unparsable), as `kind: detail` with `error_kind` the kind; an error the tool reported back
    is on the observation."""

    reasoning: str
    call: ToolCall | None = None
    observation: Observation | None = None
    answer: str | None = None
    error: str | None = None
    error_kind: str | None = None
    # LLM teachers: the turn exactly as generated (without the closing <|im_end|>), so the row
    # shows what the model said, failed turns included. None for scripted teachers.
    raw: str | None = None


@dataclass(slots=True)
class Span:
    """A labelled region `text[start:end]` of a rendered trajectory; `step` is the index of the
    assistant turn it belongs to (-1 for the opening system/user prompt)."""

    kind: str
    start: int
    end: int
    step: int


@dataclass(slots=True)
class Trajectory:
    """A rolled-out task: the steps the teacher took, and the verdict of the environment.
    A failed one says why in `error` (text) and `error_kind` (a short name such as
    `tool_raised` or `wrong_answer`, so that a run counts its failures by kind)."""

    id: str
    task: Task
    tools: list[dict[str, Any]]
    steps: list[Step]
    success: bool
    reward: float
    teacher: str
    round: int = 0
    error: str | None = None
    error_kind: str | None = None
    # LLM teachers: model, sampling parameters, token counts, latency, cost (JSON-serialisable).
    meta: dict[str, Any] = field(default_factory=dict)
    # LLM teachers with token access: the exact token sequence the teacher saw and generated.
    tokens: TokenTrace | None = None


@dataclass(slots=True)
class TokenTrace:
    """The exact tokens of an LLM episode, aligned: template segments as tokenised for the
    model, generated turns as the ids the model produced (never re-tokenised). `span_ids` holds
    a SPAN_KIND_ID per token. The teacher's top-k is stored flat and compact (a chunk of 2,000
    long trajectories at k=20 would need gigabytes as nested Python lists): `topk_counts[i]`
    entries belong to token i - 0 for tokens the teacher did not generate (prompt,
    observations, template glue) - and follow token by token in `topk_ids` / `topk_logprobs`."""

    tokenizer: str
    ids: list[int] = field(default_factory=list)
    span_ids: list[int] = field(default_factory=list)
    topk_counts: array = field(default_factory=lambda: array("i"))
    topk_ids: array = field(default_factory=lambda: array("i"))
    topk_logprobs: array = field(default_factory=lambda: array("f"))

    def topk_lists(self) -> tuple[list[list[int]], list[list[float]]]:
        """Per-token top-k as nested lists, the shape of the `teacher_topk_*` columns."""
        ids, logprobs, at = [], [], 0
        for count in self.topk_counts:
            ids.append(self.topk_ids[at:at + count].tolist())
            logprobs.append(self.topk_logprobs[at:at + count].tolist())
            at += count
        return ids, logprobs


def trajectory_id(task_id: str, teacher: str, round_: int, sample: int = 0) -> str:
    """Deterministic trajectory id: the same task, teacher, round and sample give the same id."""
    return stable_hash(task_id, teacher, round_, sample, digest_size=8)
