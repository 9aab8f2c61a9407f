"""When does a change certainly alter a call's meaning? The rules the logical-error mutator
follows when no environment executes the mutated call (see `logical_error.py`'s docstring
for the list and the reasons). Each function answers for one candidate, from the schema and
what its description states (`prose.py`).
"""

from __future__ import annotations

import itertools
import re
from functools import lru_cache
from typing import Any, Iterable, Iterator

from mutators.compile import CompiledSchema
from mutators.entities import alias_of, siblings
from mutators.introspect import accepted_types, group_policy
from mutators.jsonvalues import json_type
from mutators.prose import (UNREADABLE, marked_cosmetic, meaning_key, prose_enum, same_meaning,
                            stated_default)
from mutators.schema import Node
from mutators.slots import Slot, effective_nodes, property_node
from mutators.validate import ToolInfo

MAX_ABSENT = 32  # absent optional arguments considered per call
# Values whose meaning depends on the context: a default of "today" or "auto" may pick exactly
# the value the call gives, so neither dropping that value nor moving away from it is certain.
_INDEFINITE = frozenset({
    "today", "now", "tomorrow", "yesterday", "current", "latest", "newest", "auto",
    "automatic", "auto detect", "autodetect", "auto detected", "detect", "detected",
    "default", "system", "local", "unspecified", "inherit", "inherited", "same"})
# Arguments that tune how a call runs, not what it asks: a timeout, retries, verbosity, a cap
# on generated tokens. Changing them rarely changes the answer, so they are left alone.
_TUNING_WORDS = frozenset({"timeout", "retries", "retry", "backoff", "poll", "polling",
                           "concurrency", "workers", "threads", "parallelism", "verbose",
                           "verbosity", "indent", "pretty", "debug", "cache", "tokens",
                           "refresh"})
# Arguments that only decide how the answer looks (markdown rendering, link previews, a
# theme): the same message or data either way, so they are left alone like the above.
_DISPLAY_WORDS = frozenset({"mrkdwn", "markdown", "unfurl", "preview", "previews", "theme",
                            "highlight", "colorize", "colourize"})
_KEY_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
MAX_TOOL_TEXT = 2000
_SYMMETRIC = re.compile(r"distance|similarity|gcd|lcm|greatest\s+common|least\s+common|"
                        r"hypot|overlap|intersection|equal(?:ity)?\b|compare", re.IGNORECASE)
# A tool that computes a quantity from its numbers (an area, a force, a final velocity) may
# multiply or add two of them, and then their swap changes nothing: base x height,
# mass x acceleration, acceleration x time. Numbers are not swapped in such a tool.
_COMPUTES = re.compile(r"calculat|comput|\bcalc|formula|equation|\bmath\b|\barea\b|volume|"
                       r"perimeter|product|multipl|\bsum\b|\badd\b|total|average|\bmean\b|"
                       r"force|velocity|speed|momentum|energy|physics", re.IGNORECASE)
_ROLE_INDEX = re.compile(r"(?:[_\-]?\d+|[_\-](?:[a-d]|one|two|first|second|left|right|lhs|rhs)"
                         r"|(?<=[a-z])[A-D])$|^(?:first|second|other)[_\-]?", re.IGNORECASE)


def indefinite(value: Any) -> bool:
    """Whether `value` names something only the context fixes ("today", "auto", "latest")."""
    return isinstance(value, str) and " ".join(
        value.replace("-", " ").replace("_", " ").split()).casefold() in _INDEFINITE


def readable_default(node: Node) -> tuple | None:
    """`(value,)` of the stated default when it can be read and means one definite value;
    None when none is stated, it cannot be read, or it is indefinite ("today", "auto")."""
    default = stated_default(node)
    if default is None or default is UNREADABLE or indefinite(default[0]):
        return None
    return default


def tunes_only(key: Any) -> bool:
    """Whether an argument's name says it tunes how the call runs (`timeout`, `max_retries`,
    `verbose`, `max_tokens`) or how its answer is displayed (`mrkdwn`, `unfurl_links`) rather
    than what it asks."""
    return type(key) is str and len(key) <= 200 and _tuning_name(key)


@lru_cache(maxsize=4096)
def _tuning_name(key: str) -> bool:
    return any(word.lower() in _TUNING_WORDS or word.lower() in _DISPLAY_WORDS
               for word in _KEY_WORDS.findall(key))


def drop_changes_meaning(slot: Slot) -> bool:
    """Dropping an optional argument changes the meaning only when the spec states a default
    and the value differs from it."""
    default = readable_default(slot.node)
    return default is not None and not same_meaning(default[0], slot.value)


def flip_changes_meaning(slot: Slot) -> bool:
    """A boolean flip changes the meaning unless the description marks the switch optional or
    cosmetic, or it is optional with no stated default (a task may take either value)."""
    if marked_cosmetic(slot.node):
        return False
    return slot.required or readable_default(slot.node) is not None


@lru_cache(maxsize=4096)
def parallel_names(first: str, second: str) -> bool:
    """`num1`/`num2`, `a`/`b`, `x`/`y`, `point_a`/`point_b`: arguments in symmetric roles."""
    if len(first) == 1 and len(second) == 1:
        return True
    stem_first, stem_second = _ROLE_INDEX.sub("", first), _ROLE_INDEX.sub("", second)
    return bool(stem_first) and stem_first.lower() == stem_second.lower()


def _tool_text(tool: ToolInfo) -> str:
    description = tool.description if isinstance(tool.description, str) else ""
    return f"{tool.name} {description}"[:MAX_TOOL_TEXT]


@lru_cache(maxsize=1024)
def _says(pattern: re.Pattern, text: str) -> bool:
    return bool(pattern.search(text))


def symmetric_tool(tool: ToolInfo) -> bool:
    """Whether the tool's name or description says it computes a symmetric relation."""
    return _says(_SYMMETRIC, _tool_text(tool))


def computes_from_numbers(tool: ToolInfo) -> bool:
    """Whether the tool's name or description says it calculates a quantity (see
    `_COMPUTES`): two of its numbers may enter the result symmetrically."""
    return _says(_COMPUTES, _tool_text(tool))


def swap_changes_meaning(tool: ToolInfo, first_key: Any, second_key: Any, first: Any,
                         second: Any) -> bool:
    if same_meaning(first, second) or symmetric_tool(tool):
        return False
    if json_type(first) in ("integer", "number") and computes_from_numbers(tool):
        return False
    return not (isinstance(first_key, str) and isinstance(second_key, str)
                and len(first_key) + len(second_key) <= 400
                and parallel_names(first_key, second_key))


def other_members(enum: tuple, prose: tuple, value: Any) -> Iterator[Any]:
    """Members of the schema's enum, then of the description's list when `value` is on it,
    that do not mean what `value` means, in order and read lazily: a caller that takes the
    first few of a 100,000-member enum reads only as far as it takes."""
    if indefinite(value):
        return iter(())  # away from "auto": auto may have picked the new value
    members = itertools.chain(enum, prose) if any(
        same_meaning(member, value) for member in prose) else iter(enum)
    return _distinct(m for m in members if not same_meaning(m, value) and not indefinite(m)
                     and not _aliases(m, value))


def _aliases(first: Any, second: Any) -> bool:
    """Two spellings of one thing ("asc" / "ascending")."""
    return isinstance(first, str) and isinstance(second, str) and alias_of(first, second)


def _distinct(values: Iterable[Any]) -> Iterator[Any]:
    """Values without repeats of the same meaning, in order: scalars by their meaning key
    (linear), objects and arrays compared with those kept (rare in enums)."""
    keys: set = set()
    compound: list[Any] = []
    for value in values:
        key = meaning_key(value)
        if key is None:
            if any(same_meaning(value, seen) for seen in compound):
                continue
            compound.append(value)
        elif key in keys:
            continue
        else:
            keys.add(key)
        yield value


def listed_in_prose(slot: Slot) -> bool:
    """Whether the slot's value is one of the values its description lists: then the only
    certain change is another listed value (`other_members`); a shifted, cut or swapped-in
    value would leave the stated set ("pm25" -> "pm26") rather than name another choice."""
    return any(same_meaning(member, slot.value) for member in prose_enum(slot.node))


def has_duplicate(items: list | tuple, index: int) -> bool:
    """Whether the item at `index` occurs elsewhere in the array (dropping it changes no set)."""
    return any(same_meaning(items[index], other) for i, other in enumerate(items) if i != index)


def absent_optionals(schema: CompiledSchema, slots: list[Slot]) -> Iterator[tuple[Slot, str, Node]]:
    """(object slot, key, schema) of declared optional keys the call leaves out."""
    count = 0
    for slot in slots:
        if not isinstance(slot.value, dict):
            continue
        nodes = effective_nodes(schema, slot.node, slot.value)
        for key in sorted(group_policy(slot.node).declared):
            if key in slot.value:
                continue
            node, required = property_node(nodes, key)
            if required or tunes_only(key):
                continue
            yield slot, key, node
            count += 1
            if count >= MAX_ABSENT:
                return


def non_default_values(node: Node, key: str = "") -> list[Any]:
    """Values for an absent optional argument that differ from its stated default: other enum
    members (schema or prose), the other boolean, the default +-1, another entity of the
    default's class ("USD" -> "EUR" under `convert`); [] without a readable default (then
    setting it might restate the default)."""
    default = readable_default(node)
    if default is None:
        return []
    value = default[0]
    types = accepted_types(node) or frozenset()
    members = list(node.enum or ()) + list(prose_enum(node))
    if members:
        return list(itertools.islice(_distinct(
            m for m in members if not same_meaning(m, value) and not indefinite(m)
            and not _aliases(m, value)), 4))
    tag = json_type(value)
    if tag == "boolean" and not marked_cosmetic(node):
        return [not value]
    if tag in ("integer", "number") and types & {"integer", "number"}:
        return [value + 1, value - 1]
    if tag == "string" and not types - {"string", "null"}:
        return [s for s in siblings(value, key) if not indefinite(s)][:4]
    return []
