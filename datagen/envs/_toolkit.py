"""Shared machinery for the built-in environments: schema-checked dispatch to tool methods,
`alternatives` lookup, the `Draft` a task template returns, and answer matching.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import orjson

from datagen.envs._arguments import (MAX_SHOWN_NAME, ArgumentCheck, Convert, argument_check,
                                     handler_arguments)
from datagen.envs.base import Environment, bounded, shortened
from datagen.envs._names import FIRST_NAMES
from datagen.types import GoldStep, Observation, Task, ToolCall
from mutators.jsonvalues import render


def parse_path(path: str) -> list[str | int]:
    """`arguments.items[0].sku` or `arguments.items.0.sku` -> ['items', 0, 'sku']."""
    parts: list[str | int] = []
    for token in path.replace("[", ".").replace("]", "").split("."):
        if token and token != "arguments":
            parts.append(int(token) if token.isdigit() else token)
    return parts


def schema_at(schema: dict[str, Any] | None, parts: list[str | int]) -> dict[str, Any] | None:
    """The sub-schema at `parts` (None when the path leaves the schema)."""
    for part in parts:
        if schema is None:
            return None
        schema = schema.get("items") if isinstance(part, int) else \
            schema.get("properties", {}).get(part)
    return schema


def value_at(arguments: Any, parts: list[str | int]) -> Any:
    """The argument value at `parts` (None when absent)."""
    for part in parts:
        try:
            arguments = arguments[part]
        except (KeyError, IndexError, TypeError):
            return None
    return arguments


@dataclass(slots=True)
class Draft:
    """What a task template produces; the environment wraps it into a `Task`."""

    template: str
    instruction: str
    gold: list[GoldStep]
    answer: str
    params: dict[str, Any]


_OPENERS = ("", "", "", "", "Hi! ", "Hello, {first} here. ", "{first} from {team} here: ",
             "Quick one: ", "Request from {first} ({team}): ", "Morning! ",
             "On behalf of {first} in {team}: ", "Small favour: ", "Hey! ",
             "Request {number}: ", "Following up on {first}'s note: ")
_CLOSERS = ("", "", "", "", " Thanks!", " Thank you.", " Cheers, {first}",
            " This is for the {weekday} review.", " It's a bit urgent.", " Much appreciated.",
            " Ping me if anything looks off.", " - {first}", " Thanks in advance, {first}.")
_TEAMS = ("finance", "ops", "support", "the data team", "sales", "IT", "marketing", "legal",
          "procurement", "customer success")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")


def dress(rng: random.Random, instruction: str, first_names: tuple[str, ...]) -> str:
    """Wrap an instruction the way people write requests (greeting, sign-off), so that tasks
    of one template and target differ in text as real requests do."""
    r = rng.random()
    fields = {"first": first_names[int(r * len(first_names))],
              "team": _TEAMS[int(r * 1000) % len(_TEAMS)],
              "weekday": _WEEKDAYS[int(r * 10000) % 5], "number": 1000 + int(r * 9e6) % 9000}
    opener = _OPENERS[int(rng.random() * len(_OPENERS))].format(**fields)
    closer = _CLOSERS[int(rng.random() * len(_CLOSERS))].format(**fields)
    return opener + instruction + closer


def gold_call(tool: str, purpose: str, **arguments: Any) -> GoldStep:
    return GoldStep(ToolCall(tool, arguments), purpose)


# A chunk's worlds per family kept at most (`WorldCache.hold`): 4x the default 512, up to
# ~120 MB for the largest family. Past it a stage's resets miss again (each stage resets the
# chunk's tasks in the order they were generated: least recently used first).
MAX_HELD_WORLDS = 2048


class WorldCache:
    """The worlds of the last `size` task seeds, so that `reset` need not rebuild the world
    `generate_task` just built. The pipeline generates a whole chunk of tasks before rolling
    them out, and every later stage resets the chunk's tasks again in the same order, so the
    cache must hold a chunk's share of one family (512 worlds are a few MB to ~30 MB depending
    on the family; `hold` raises the size for larger chunks). Worlds are never mutated after
    building."""

    def __init__(self, build: Callable[[random.Random], Any], size: int = 512) -> None:
        self._build, self._size = build, size
        self._worlds: dict[int, Any] = {}

    def hold(self, count: int) -> None:
        """Keep at least `count` worlds (never fewer than now), at most MAX_HELD_WORLDS."""
        self._size = max(self._size, min(count, MAX_HELD_WORLDS))

    def fresh(self, seed: int) -> tuple[Any, random.Random]:
        """Build the world of `seed`; also return the generator, positioned after it."""
        rng = random.Random(seed)
        world = self._worlds[seed] = self._build(rng)
        if len(self._worlds) > self._size:
            del self._worlds[next(iter(self._worlds))]
        return world, rng

    def get(self, seed: int) -> Any:
        world = self._worlds.pop(seed, None)
        if world is None:
            return self.fresh(seed)[0]
        self._worlds[seed] = world  # most recently used goes last
        return world


class ToolEnvironment(Environment):
    """An Environment whose tools are methods `tool_<name>(**arguments)`.

    `step` checks the call against the tool's schema before dispatch, so handlers receive
    well-typed arguments and only check what a schema cannot (ids exist, paths resolve).
    Subclasses set `TOOL_SPECS`, `TEMPLATES` and `FALLBACK`, create `self._worlds`, and
    implement `values_for` to feed `alternatives`.
    """

    # `step` answers with an error observation every call whose arguments the mutators'
    # validator refuses for `tools()`: a call that ran cleanly is a valid call
    validates_arguments: ClassVar[bool] = True
    TOOL_SPECS: ClassVar[list[dict[str, Any]]]
    # tools that never change the state, whatever their arguments (see `read_only`); the
    # outcome check runs them live, without a snapshot and restores (for `sql` each restore
    # also made SQLite re-read the schema)
    READ_ONLY_TOOLS: ClassVar[frozenset[str]] = frozenset()
    TEMPLATES: ClassVar[tuple[Callable[[Any, random.Random], Draft | None], ...]]
    FALLBACK: ClassVar[Any]  # staticmethod: a template that never returns None
    _worlds: WorldCache

    def generate_task(self, seed: int, task_id: str) -> Task:
        """Build the seed's world, draw templates until one fits it, dress the instruction."""
        world, rng = self._worlds.fresh(seed)
        draft: Draft | None = None
        for _ in range(16):
            draft = self.TEMPLATES[int(rng.random() * len(self.TEMPLATES))](world, rng)
            if draft is not None:
                break
        if draft is None:
            draft = self.FALLBACK(world, rng)
        params = {"template": draft.template, **self.world_params(world), **draft.params}
        return Task(id=task_id, env=self.name, seed=seed,
                    instruction=dress(rng, draft.instruction, FIRST_NAMES), gold=draft.gold,
                    answer=draft.answer, params=params)

    def world_params(self, world: Any) -> dict[str, Any]:
        """Small facts about the world worth recording in `Task.params` (e.g. the schema)."""
        return {}

    def hold_worlds(self, count: int) -> None:
        """Keep the worlds of the last `count` tasks (a chunk) for their resets."""
        self._worlds.hold(count)

    def tools(self) -> list[dict[str, Any]]:
        """The shared spec list of the family; callers must not mutate it."""
        return self.TOOL_SPECS

    @classmethod
    def _parameters(cls) -> dict[str, dict[str, Any]]:
        cached = cls.__dict__.get("_PARAMETERS")
        if cached is None:
            cached = {spec["function"]["name"]: spec["function"]["parameters"]
                      for spec in cls.TOOL_SPECS}
            cls._PARAMETERS = cached
        return cached

    @classmethod
    def _checkers(cls) -> dict[str, tuple[ArgumentCheck, Convert | None]]:
        """Per tool: its argument check and what turns valid arguments into handler ones."""
        cached = cls.__dict__.get("_CHECKERS")
        if cached is None:
            cached = {name: (argument_check(schema), handler_arguments(schema))
                      for name, schema in cls._parameters().items()}
            cls._CHECKERS = cached
        return cached

    def step(self, call: dict[str, Any]) -> Observation:
        """Check the call against the tool schema, then run the tool; never raises. Every
        observation, a tool's or an error, is cut to MAX_OBSERVATION_CHARS (`bounded`)."""
        return bounded(self._dispatch(call))

    def _dispatch(self, call: dict[str, Any]) -> Observation:
        name = call.get("name") if isinstance(call, dict) else None
        try:
            arguments = call.get("arguments", {}) if isinstance(call, dict) else None
            if isinstance(arguments, str):
                arguments = orjson.loads(arguments or "{}")
            checker, convert = self._checkers().get(name, (None, None)) \
                if isinstance(name, str) else (None, None)
            if checker is None:
                return self.fail(f"unknown tool {render(name)}; available tools: "
                                 f"{', '.join(self._parameters())}")
            if arguments is None:
                arguments = {}
            error = checker(arguments) or _not_unicode(arguments) or \
                _integer_out_of_range(arguments)
            if error:
                return self.fail(f"{name}: {error}")
            if not self.is_ready():
                return self.fail("the environment has not been reset with a task")
            if convert is not None:
                arguments = convert(arguments)
            return getattr(self, "tool_" + name)(**arguments)
        except orjson.JSONDecodeError:
            return self.fail(f"{name}: arguments are not valid JSON")
        except Exception as exc:  # a bug in a tool must not end the rollout
            shown = name[:100] if isinstance(name, str) else render(name)
            return self.fail(f"{shown} failed unexpectedly: {type(exc).__name__}: "
                             f"{str(exc)[:300]}")

    def is_ready(self) -> bool:
        return getattr(self, "state", None) is not None

    def read_only(self, call: dict[str, Any]) -> bool:
        """A call of one of `READ_ONLY_TOOLS` (by name; a call of an unknown tool or with
        invalid arguments changes nothing either, but is not declared)."""
        name = call.get("name") if isinstance(call, dict) else None
        return isinstance(name, str) and name in self.READ_ONLY_TOOLS

    def alternatives(self, call: dict[str, Any], path: str) -> list[Any]:
        """Other existing values for the argument at `path`: other enum members, or other ids
        / names / paths that exist in the current state (see `values_for`)."""
        try:
            parts = parse_path(path)
            schema = schema_at(self._parameters().get(call.get("name")), parts)
            current = value_at(call.get("arguments") or {}, parts)
            if schema is None or not parts:
                return []
            if "enum" in schema:
                values = list(schema["enum"])
            elif schema.get("type") == "boolean":
                values = [True, False]
            else:
                key = next(p for p in reversed(parts) if isinstance(p, str))
                values = self.values_for(call.get("name", ""), key, current)
            return [value for value in values if value != current]
        except Exception:  # alternatives are best effort; a bad path yields none
            return []

    def values_for(self, tool: str, key: str, current: Any) -> list[Any]:
        """Existing values that could stand in for argument `key` of `tool` (ids, names)."""
        return []


def _not_unicode(value: Any) -> str | None:
    """Strings with lone surrogates (from a JSON `\\ud800` escape) cannot be encoded into an
    observation: refuse them before the tool acts, not after."""
    if type(value) is str:
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "arguments contain text that is not valid Unicode (a lone surrogate)"
        return None
    if isinstance(value, (dict, list, tuple)):
        for item in value.values() if isinstance(value, dict) else value:
            if (type(item) is not str or not item.isascii()) and (found := _not_unicode(item)):
                return found
    return None


# orjson writes integers of at most 64 bits; it raises TypeError on a larger one, which a tool
# echoing the argument (`read_file`'s start_line, a record's `changes`) would hit after acting
_INT64 = 1 << 63


def _integer_out_of_range(arguments: Any) -> str | None:
    """An integer argument beyond 64 bits cannot be written into an observation, and no tool
    needs one: refuse it before the tool acts, naming the argument."""
    parts = _big_integer_at(arguments)
    if parts is None:
        return None
    name = "".join(f"[{part}]" if type(part) is int else f".{part}" for part in parts)
    return (f"argument '{shortened(name.lstrip('.'), MAX_SHOWN_NAME)}' is out of range: "
            f"integers must lie between {-_INT64} and {_INT64 - 1}")


def _big_integer_at(value: Any) -> list[str | int] | None:
    """The path (keys and indices) of the first integer beyond 64 bits in `value`, or None."""
    kind = type(value)
    if kind is int:
        return None if -_INT64 <= value < _INT64 else []
    if kind is dict or kind is list or kind is tuple:
        pairs = value.items() if kind is dict else enumerate(value)
        for key, item in pairs:
            if type(item) is not str and (found := _big_integer_at(item)) is not None:
                return [key, *found]
    return None


_NUMBER = re.compile(r"(?<![\w.\-/:])-?\d[\d,]*(?:\.\d+)?(?![\w\-/:]|\.\d)")


def _numbers(text: str) -> list[float]:
    return [float(match.replace(",", "")) for match in _NUMBER.findall(text)]


def normalise(text: str) -> str:
    """Lower case, single spaces, no surrounding whitespace or final full stop."""
    return " ".join(text.strip().strip(".!").lower().split())


def contains_phrase(text: str, phrase: str) -> bool:
    """`phrase` occurs in `text` not glued to a longer word, id or path (no regex compile:
    answers are all different, so a compiled pattern would never be reused)."""
    start = text.find(phrase)
    while start >= 0:
        end = start + len(phrase)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before in "_@-/.") and \
                not (after.isalnum() or after in "_@-/" or
                     (after == "." and end + 1 < len(text) and text[end + 1].isalnum())):
            return True
        start = text.find(phrase, start + 1)
    return False


def answer_matches(expected: str, answer: str | None) -> bool:
    """Does a free-text final answer state the expected short answer?

    Numbers compare by value (1,234.5 == 1234.50) and must be among at most three numbers the
    answer states, so listing many candidates does not pass; other answers must appear as a
    whole phrase (case-insensitive).
    """
    if not answer:
        return False
    want, got = normalise(expected), normalise(answer)
    if want == got:
        return True
    try:
        target = float(want.replace(",", ""))
    except ValueError:
        return contains_phrase(got, want)
    values = _numbers(got.replace("$", " ").replace("€", " "))
    return 0 < len(dict.fromkeys(values)) <= 3 and \
        any(abs(v - target) <= 0.0051 for v in values)
