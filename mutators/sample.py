"""Plausible values for a schema node, for mutators that must invent one (a borrowed key, an
argument of another tool, an optional key written under a hallucinated name).

The value should look like what a model would write: the schema's own const, enum, default or
example first, then a format sample, then a guess from the key's name (`*_id`, `email`,
`date`...), then a type-appropriate placeholder within the schema's bounds. Callers validate
whatever comes out; a value that misses a `pattern` is simply rejected there.
"""

from __future__ import annotations

import math
import random
from typing import Any

from mutators.formats import FORMAT_SAMPLES
from mutators.jsonvalues import copy_json
from mutators.schema import Node

# A schema may ask for a huge minLength/minItems; a sample stays small (callers validate it,
# and a value that misses the bound is simply rejected there).
MAX_SAMPLE_LENGTH = 1000
MAX_SAMPLE_ITEMS = 16
_KEY_HINTS: tuple[tuple[str, Any], ...] = (
    ("email", "alex.morgan@example.com"), ("date", "2024-03-15"),
    ("time", "2024-03-15T09:30:00Z"), ("url", "https://example.com/items/1"),
    ("uri", "https://example.com/items/1"), ("path", "/data/report.txt"),
    ("file", "/data/report.txt"), ("dir", "/data"), ("phone", "+1-555-0100"),
    ("name", "Alex Morgan"), ("query", "recent orders"), ("sql", "SELECT 1"),
    ("status", "active"), ("city", "Berlin"), ("country", "DE"), ("currency", "EUR"),
    ("id", "1001"),
)


def _string(node: Node, key: str) -> str:
    text = FORMAT_SAMPLES.get(node.format or "")
    if text is None:
        lower = key.lower()
        text = next((hint for word, hint in _KEY_HINTS if word in lower and isinstance(hint, str)),
                    "example")
    low, high = min(node.min_length or 0, MAX_SAMPLE_LENGTH), node.max_length
    if len(text) < low:
        text = text + "x" * (low - len(text))
    if high is not None and len(text) > high:
        text = text[:high]
    return text


def _finite(bound: int | float | None) -> int | float | None:
    """A numeric bound, or None for NaN and +-inf (1e400 is legal JSON and reads as inf): no
    value can be built from them, and ceil() would raise."""
    return None if isinstance(bound, float) and not math.isfinite(bound) else bound


def _past(bound: int | float, step: int | float) -> int | float:
    """`bound + step`, exact for an int past the float range (10**400 + 0.5 overflows)."""
    try:
        return bound + step
    except OverflowError:
        return bound + (1 if step > 0 else -1)


def _number(node: Node, integer: bool) -> int | float:
    step = 1 if integer else 0.5
    low, high = _finite(node.minimum), _finite(node.maximum)
    exclusive_low, exclusive_high = _finite(node.exclusive_minimum), _finite(node.exclusive_maximum)
    if low is None and exclusive_low is not None:
        low = _past(exclusive_low, step)
    if high is None and exclusive_high is not None:
        high = _past(exclusive_high, -step)
    value: float = 1 if low is None else low
    if high is not None and value > high:
        value = high
    if integer:
        return math.ceil(value)
    try:
        return float(value)
    except OverflowError:  # a bound past the float range (10**5000): the int is a number too
        return value


def _first_type(node: Node, key: str) -> str | None:
    if node.types:
        non_null = [t for t in node.types if t != "null"]
        return non_null[0] if non_null else "null"
    lower = key.lower()
    if lower.startswith(("is_", "has_", "include", "enable")):
        return "boolean"
    if lower in ("limit", "count", "page", "offset", "top_k", "n") or lower.endswith("_count"):
        return "integer"
    return "string"


def sample_value(node: Node, rng: random.Random, key: str = "", depth: int = 0) -> Any:
    """A plausible value for `node` (see the module docstring); `key` is the name it goes
    under. Deterministic given `rng`'s state."""
    if node.const is not None:
        return copy_json(node.const[0])
    if node.enum:
        return copy_json(rng.choice(node.enum))
    if node.default is not None:
        return copy_json(node.default[0])
    if node.examples:
        return copy_json(node.examples[0])
    branches = [b for b in node.any_of if b.types != ("null",)] or list(node.any_of)
    if branches and depth < 6:
        return sample_value(branches[0], rng, key, depth + 1)
    if node.all_of and node.types is None and depth < 6:
        return sample_value(node.all_of[0], rng, key, depth + 1)
    kind = _first_type(node, key)
    if kind == "string":
        return _string(node, key)
    if kind in ("integer", "number"):
        return _number(node, kind == "integer")
    if kind == "boolean":
        return True
    if kind == "array":
        item = node.items or (node.prefix_items[0] if node.prefix_items else Node())
        count = min(max(node.min_items or 0, 1), MAX_SAMPLE_ITEMS) if depth < 6 else 0
        return [sample_value(item, rng, key.rstrip("s"), depth + 1) for _ in range(count)]
    if kind == "object":
        if depth >= 6:
            return {}
        return {name: sample_value(node.properties.get(name, Node()), rng, name, depth + 1)
                for name in node.required}
    return None
