"""Reasoning text for scripted teachers: what was observed, and why the next action follows.

Wording is drawn from small template sets with a seeded `random.Random`, so the same task gives
the same text while 10,000 tasks do not all read alike. Sentences are built from the real
observation (row counts, ids, field values), so the reasoning refers to what the agent saw.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

from datagen.types import GoldStep, Observation, ToolCall

_FIRST = (
    "To start, I need to {purpose}. `{tool}` is the tool for that.",
    "Nothing is known yet, so the first thing to do is {purpose} with `{tool}`.",
    "Let me begin by trying to {purpose}; I'll call `{tool}`{args}.",
    "The task depends on details I don't have yet. First step: {purpose}, using `{tool}`.",
    "I'll {purpose} first, calling `{tool}`{args}.",
    "Before anything else I should {purpose}. Calling `{tool}`{args}.",
)
_NEXT = (
    "{obs}. Next I need to {purpose}, so I'll call `{tool}`{args}.",
    "From this I can see {obs_lower}. Now I should {purpose}.",
    "{obs}, which is what I needed. The next step is to {purpose} with `{tool}`.",
    "Good: {obs_lower}. With that in hand I can {purpose}, calling `{tool}`{args}.",
    "{obs}. Before going further I have to {purpose}; `{tool}` does that.",
    "So {obs_lower}. That means I can now {purpose} via `{tool}`{args}.",
    "{obs}. Building on that, I'll {purpose}.",
)
_RECOVER = (
    "{obs}. That did not work, so I'll {purpose} instead.",
    "{obs}. I need to correct course and {purpose}.",
)
_FINAL = (
    "{obs}. That is everything the task needs, so I can give the answer.",
    "{obs}. The task is complete.",
    "Now {obs_lower}; I have what I need to reply.",
    "{obs}. Everything checks out, so I'll wrap up.",
    "{obs}. Nothing else is required.",
)


def _brief(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _brief_list(values: list[Any], shown: int = 4) -> str:
    items = ", ".join(_brief(v, 30) for v in values[:shown])
    return items + (f" (+{len(values) - shown} more)" if len(values) > shown else "")


def _brief_record(record: dict[str, Any], fields: int = 3) -> str:
    parts = []
    for key, value in list(record.items())[:fields]:
        if isinstance(value, list) and value and not isinstance(value[0], (dict, list)):
            parts.append(f"{key}: {_brief_list(value)}")
        elif isinstance(value, list):
            parts.append(f"{len(value)} {key}")
        elif not isinstance(value, dict):
            parts.append(f"{key}={_brief(value, 40)}")
    return ", ".join(parts) or _brief(record)


def describe_observation(call: ToolCall, obs: Observation) -> str:
    """One clause about what a tool returned, e.g. "`run_query` returned 3 rows (first: id=4)"."""
    tool = f"`{call.name}`"
    if obs.error:
        return f"The call to {tool} failed: {_brief(obs.error, 120)}"
    try:
        payload = orjson.loads(obs.content)
    except orjson.JSONDecodeError:
        return f"{tool} answered {_brief(obs.content.strip(), 80)!r}"
    if isinstance(payload, list):
        if not payload:
            return f"{tool} returned nothing"
        noun = "result" if len(payload) == 1 else "results"
        first = payload[0]
        detail = _brief_record(first) if isinstance(first, dict) else _brief(first, 40)
        return f"{tool} returned {len(payload)} {noun} (first: {detail})"
    if isinstance(payload, dict):
        return f"{tool} returned {_brief_record(payload)}"
    return f"{tool} returned {_brief(payload, 80)}"


def _args_clause(call: ToolCall, rng: random.Random) -> str:
    scalars = [(k, v) for k, v in call.arguments.items() if isinstance(v, (str, int, float))]
    if not scalars or rng.random() < 0.4:
        return ""
    key, value = scalars[0]
    return f" with {key}={_brief(value, 40)}"


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:1].isupper() and text[1:2].islower() else text


def step_reasoning(rng: random.Random, gold: GoldStep,
                   previous: tuple[ToolCall, Observation] | None) -> str:
    """Reasoning before a gold step: the last observation (if any) and the purpose of the step."""
    fields = {"purpose": gold.purpose, "tool": gold.call.name,
              "args": _args_clause(gold.call, rng)}
    if previous is None:
        return rng.choice(_FIRST).format(**fields)
    obs = describe_observation(*previous)
    templates = _RECOVER if previous[1].error else _NEXT
    return rng.choice(templates).format(obs=obs, obs_lower=_lower_first(obs), **fields)


def final_reasoning(rng: random.Random, previous: tuple[ToolCall, Observation] | None) -> str:
    """Reasoning before the final answer."""
    if previous is None:
        return "No tool is needed for this; I can answer directly."
    obs = describe_observation(*previous)
    return rng.choice(_FINAL).format(obs=obs, obs_lower=_lower_first(obs))
