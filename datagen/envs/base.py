"""The Environment interface every tool environment implements.

An environment is a family of tasks plus the world they act on. It is used in this order:

    env = SqlEnv()                        # cheap; one instance is reused for many tasks
    task = env.generate_task(seed, id)    # deterministic in `seed`
    env.reset(task)                       # build the world state for this task
    obs = env.step({"name": ..., "arguments": {...}})   # never raises for a bad call
    ok = env.check(task, final_answer)    # did the agent succeed?

`step` turns every bad call (unknown tool, missing or ill-typed argument, a failing operation)
into an `Observation` with `error` set, because agents make such calls and the data must show
what the environment says back. An exception escaping `step` or `generate_task` is a bug in the
environment; the rollout code records it on the row and moves on.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import orjson

from datagen.types import Observation, Task

# The longest observation text an agent is shown (~8k tokens): twice the sql env's
# MAX_RESULT_CHARS, so that no complete query result is cut here, and far below the 200,000
# the fuzz test allows. Tools bound their own output first (rows, lines, echoed values); this
# is the backstop for whatever they miss (a 20 MB file, a 5 MB argument name).
MAX_OBSERVATION_CHARS = 32_000


def shortened(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how many more there were (an echoed value or
    a line of a file; the sql env shows long values the same way)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... <{len(text) - limit} more characters>"


def bounded(observation: Observation) -> Observation:
    """`observation` with its text (and error) cut to MAX_OBSERVATION_CHARS, ending with a
    note of how much was cut; an observation within the limit is returned as it is."""
    content, error = observation.content, observation.error
    if len(content) <= MAX_OBSERVATION_CHARS and (error is None or
                                                   len(error) <= MAX_OBSERVATION_CHARS):
        return observation
    return Observation(content=_cut(content), error=None if error is None else _cut(error))


def _cut(text: str) -> str:
    if len(text) <= MAX_OBSERVATION_CHARS:
        return text
    return (f"{text[:MAX_OBSERVATION_CHARS]}... [observation cut: "
            f"{len(text) - MAX_OBSERVATION_CHARS} more characters]")


class Environment(ABC):
    """Base class for tool environments. Subclasses set `name` and implement the abstract
    methods; `tools()` must return the same specs for every task of the family."""

    name: ClassVar[str]

    @abstractmethod
    def tools(self) -> list[dict[str, Any]]:
        """OpenAI-style tool specs: `{"type": "function", "function": {name, description,
        parameters}}` with a JSON Schema under `parameters`."""

    @abstractmethod
    def generate_task(self, seed: int, task_id: str) -> Task:
        """A task (instruction, gold solution, expected answer) drawn deterministically from
        `seed`. The world the task acts on must be rebuildable by `reset` from the task."""

    @abstractmethod
    def reset(self, task: Task) -> None:
        """Build the world state for `task` (fresh: earlier steps leave no trace)."""

    @abstractmethod
    def step(self, call: dict[str, Any]) -> Observation:
        """Execute one call `{"name", "arguments"}` against the current state. The text is
        at most about MAX_OBSERVATION_CHARS long (`ToolEnvironment.step` passes every
        observation through `bounded`; a subclass with its own `step` should too)."""

    @abstractmethod
    def check(self, task: Task, answer: str | None) -> bool:
        """True when the current state and the final answer solve the task."""

    def alternatives(self, call: dict[str, Any], path: str) -> list[Any]:
        """Other values that exist in the current state for the argument at `path` (for
        example `arguments.customer_id` -> the other customer ids). Mutators use these to build
        plausible logical errors; the default knows none."""
        return []

    def read_only(self, call: dict[str, Any]) -> bool:
        """Whether `call` cannot change the state, whatever its arguments (a lookup, a
        search, a read). The mutators' outcome check then runs it, and its mutated versions,
        on the live state instead of from a snapshot, and a replay may skip it. A wrong True
        makes negatives unsound: declare only tools that never write. The default: none."""
        return False

    def snapshot(self) -> Any:
        """An opaque copy of the current state, restorable with `restore` (used to execute a
        mutated call without disturbing the rollout). The default deep-copies `self.state`."""
        return copy.deepcopy(getattr(self, "state", None))

    def restore(self, snapshot: Any) -> None:
        self.state = copy.deepcopy(snapshot)

    # Helpers for subclasses -------------------------------------------------------------

    @staticmethod
    def ok(payload: Any) -> Observation:
        """An observation holding `payload` as JSON text."""
        return Observation(content=orjson.dumps(payload, default=str).decode())

    @staticmethod
    def fail(message: str) -> Observation:
        """An error observation; the agent sees `Error: message`."""
        return Observation(content=f"Error: {message}", error=message)


def tool_spec(name: str, description: str, properties: dict[str, Any],
              required: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Build an OpenAI-style function spec with a closed JSON Schema object."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(required),
                "additionalProperties": False,
            },
        },
    }
