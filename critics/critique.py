"""The critic interface: what a critic is told about a failed step, and what it returns.

A critic is any callable `(CritiqueRequest, random.Random) -> Critique`: the rule critic
(`rule_critic.rule_critic`) and the LLM critic (`llm_critic.LLMCritic`) are two such callables,
so a pipeline takes a critic as an injected policy and never branches on the backend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from datagen.types import Observation, Step, Task, ToolCall
from mutators import ValidationError, validate_detailed

_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(slots=True)
class CritiqueRequest:
    """A failed step in context. `errors` is the strict validator's verdict on `wrong_call`;
    `path`/`original`/`mutated` locate the fault when it is known (an injected negative), else
    they are derived from `reference_call` (the gold call: the rule critic may look at it, an
    LLM critic is not shown it). `error_kind` is the negative's kind or `failed_rollout`."""

    task: Task
    tools: list[dict[str, Any]]
    steps: list[Step]
    error_step: int
    wrong_call: ToolCall | None
    observation: Observation | None
    reference_call: ToolCall | None
    error_kind: str
    errors: list[ValidationError] = field(default_factory=list)
    path: str | None = None
    original: Any = None
    mutated: Any = None


@dataclass(slots=True)
class Critique:
    """What went wrong (REASON text) and the corrected call (None: the critic could not
    produce one; `error` then says why, and no repair is emitted)."""

    text: str
    call: ToolCall | None
    error: str | None = None


Critic = Callable[[CritiqueRequest, "random.Random"], Critique]  # noqa: F821 - doc alias


def tool_spec(tools: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((t for t in tools if t["function"]["name"] == name), None)


def value_at(arguments: Any, path: str) -> Any:
    """The value at `arguments.a.b[0]` of a call's arguments (None when absent)."""
    value: Any = {"arguments": arguments}
    for key, index in _PATH_PART.findall(path):
        if key and isinstance(value, dict):
            value = value.get(key)
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return None
    return value


def first_difference(wrong: Any, right: Any, path: str = "arguments") -> str | None:
    """The first path where two argument trees differ (keys in sorted order)."""
    if isinstance(wrong, dict) and isinstance(right, dict):
        for key in sorted(set(wrong) | set(right)):
            if key not in wrong or key not in right:
                return f"{path}.{key}"
            found = first_difference(wrong[key], right[key], f"{path}.{key}")
            if found:
                return found
        return None
    return None if wrong == right else path


def build_request(task: Task, tools: list[dict[str, Any]], steps: list[Step], error_step: int,
                  reference_call: ToolCall | None, error_kind: str, negative: Any = None
                  ) -> CritiqueRequest:
    """A request for the step `error_step` of `steps`, with validator errors and the fault's
    location filled in (from the negative when there is one, else by diffing with the gold)."""
    step = steps[error_step]
    call = step.call
    errors: list[ValidationError] = []
    spec = tool_spec(tools, call.name) if call is not None else None
    if call is not None and spec is not None:
        errors = validate_detailed(call.as_dict(), spec)
    request = CritiqueRequest(task, tools, steps, error_step, call, step.observation,
                              reference_call, error_kind, errors)
    if negative is not None:
        request.path, request.original, request.mutated = (negative.path, negative.original,
                                                           negative.mutated)
    elif call is not None and reference_call is not None:
        if call.name != reference_call.name:
            request.path, request.original, request.mutated = "name", reference_call.name, call.name
        else:
            request.path = first_difference(call.arguments, reference_call.arguments)
            if request.path:
                request.original = value_at(reference_call.arguments, request.path)
                request.mutated = value_at(call.arguments, request.path)
    if request.path is None and errors:
        request.path = errors[0].path
    return request


def brief(value: Any, limit: int = 80) -> str:
    """A short JSON rendering of a value for critique text."""
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return text if len(text) <= limit else text[: limit - 3] + "..."
