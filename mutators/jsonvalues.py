"""Small helpers for JSON-shaped Python values: type tags, equality, copies, paths, rendering.

Python values are not JSON values: `True == 1`, tuples look like lists, floats can be NaN. The
validator and the mutators both need one answer to "what JSON type is this?" and "are these two
values the same JSON value?", so they live here.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

import orjson

# The JSON type of a value, by its exact Python type (the fast path); subclasses go through
# `json_type`. A tuple counts as an array: calls built in Python code often carry tuples.
PY_TYPE_TAG: dict[type, str] = {
    str: "string", bool: "boolean", int: "integer", float: "number",
    dict: "object", list: "array", tuple: "array", type(None): "null",
}
NOT_JSON = "non-JSON"
# How many containers (objects, arrays) a call's arguments may nest, the arguments object
# included. The validator and the mutators walk values recursively (copy_json takes two
# frames a level, a recursive schema's checks about four), so past a few hundred levels they
# hit Python's recursion limit at a depth that depends on the caller's stack; a fixed bound
# gives one answer everywhere. 100 as for schemas (schema.MAX_SCHEMA_DEPTH): real tool calls
# nest under ten levels, and orjson cannot write a value past 254.
MAX_VALUE_DEPTH = 100
_CONTAINERS = (dict, list, tuple)

Path = tuple  # a path inside the arguments: keys (str) and list indices (int)


def json_type(value: Any) -> str:
    """'string' | 'integer' | 'number' | 'boolean' | 'object' | 'array' | 'null' | 'non-JSON'.

    Floats are 'number' even when integral; bool is never 'integer'."""
    tag = PY_TYPE_TAG.get(type(value))
    if tag is not None:
        return tag
    for py_type in (bool, int, float, str, dict, list, tuple):  # bool before int on purpose
        if isinstance(value, py_type):
            return PY_TYPE_TAG[py_type]
    return NOT_JSON


def type_label(value: Any) -> str:
    """The JSON type name used in error messages (`non-JSON set` for foreign objects)."""
    tag = json_type(value)
    return f"non-JSON {type(value).__name__}" if tag == NOT_JSON else tag


def non_json_reason(value: Any) -> str | None:
    """Why `value` (recursively) is not representable as JSON, or None when it is."""
    tag = json_type(value)
    if tag == NOT_JSON:
        return f"non-JSON value of type {type(value).__name__}"
    if tag == "number" and not math.isfinite(value):
        return f"non-finite number {value!r}"
    if tag == "object":
        for key, item in value.items():
            if not isinstance(key, str):
                return f"non-string key {render(key)}"
            reason = non_json_reason(item)
            if reason:
                return reason
    elif tag == "array":
        for item in value:
            reason = non_json_reason(item)
            if reason:
                return reason
    return None


def nested_deeper_than(value: Any, limit: int = MAX_VALUE_DEPTH) -> bool:
    """Whether `value` nests more than `limit` containers one inside the other (`{}` is one
    level, `{"a": []}` two). Iterative, and depth-first so that a value that contains itself
    is found too deep after `limit` steps instead of walked forever."""
    stack = [(value, 1)] if isinstance(value, _CONTAINERS) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, _CONTAINERS):  # a loop, not extend(genexpr): 2x faster here
                stack.append((child, depth + 1))
    return False


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True != 1; a tuple equals the list with the same items."""
    ta, tb = json_type(a), json_type(b)
    numeric = ("integer", "number")
    if ta in numeric and tb in numeric:
        return a == b
    if ta != tb:
        return False
    if ta == "object":
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if ta == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return a == b


def copy_json(value: Any) -> Any:
    """A deep copy of dicts/lists/tuples (tuples become lists); other values are shared."""
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [copy_json(item) for item in value]
    return value


def digits_to_int(digits: str) -> int | None:
    """int(digits), or None past Python's int-str conversion limit (4,300 digits)."""
    return int(digits) if len(digits) <= 4000 else None


def int_to_text(value: int) -> str | None:
    """str(value), or None past Python's int-str conversion limit (4,300 digits)."""
    return str(value) if value.bit_length() <= 13_000 else None


def render(value: Any, limit: int = 60) -> str:
    """A short JSON rendering of `value` for messages (falls back to repr)."""
    if type(value) is int and value.bit_length() * _LOG10_2 > limit:
        return _abbreviated_int(value)
    try:
        text = _json_text(value)
    except (TypeError, orjson.JSONEncodeError):
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001 - e.g. an int over 4,300 digits inside a list
            text = f"<{type_label(value)} that cannot be shown>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_LOG10_2 = math.log10(2)


def _json_text(value: Any) -> str:
    """orjson's text of `value`, with NaN and the infinities spelt `nan`, `inf`, `-inf`:
    orjson writes them as `null`, and "greater than the maximum null" reads as if the schema
    had no maximum. Only for messages: stored JSON keeps orjson's valid `null`."""
    text = orjson.dumps(value).decode()
    if "null" not in text:
        return text
    try:
        return orjson.dumps(_non_finite_spelt(value)).decode()
    except RecursionError:  # deep enough for two frames a level to run out: keep orjson's
        return text


def _non_finite_spelt(value: Any) -> Any:
    """`value` with every non-finite float replaced by its bare name (an orjson Fragment)."""
    if isinstance(value, float) and not math.isfinite(value):
        return orjson.Fragment(float.__repr__(value))
    if isinstance(value, dict):
        return {key: _non_finite_spelt(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_non_finite_spelt(item) for item in value]
    return value


def _abbreviated_int(value: int) -> str:
    """`-1.235e+4999 (integer)`: without `str()`, which refuses ints over 4,300 digits and
    is quadratic below that. `math.log10` takes ints of any size."""
    exponent = math.log10(abs(value))
    whole = math.floor(exponent)
    mantissa = 10 ** (exponent - whole)
    if mantissa >= 9.9995:
        mantissa, whole = mantissa / 10, whole + 1
    return f"{'-' if value < 0 else ''}{mantissa:.3f}e+{whole} (integer)"


_PLAIN_KEY = re.compile(r"[\w\-$@]+")


def _format_key(key: Any) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return f"[{key}]"
    text = key if isinstance(key, str) else repr(key)
    if _PLAIN_KEY.fullmatch(text):
        return "." + text
    return f"[{render(text, 1000)}]"


@lru_cache(maxsize=8192)
def _format_parts(parts: Path, root: str) -> str:
    return root + "".join(_format_key(part) for part in parts)


def format_path(parts: Path, root: str = "arguments") -> str:
    """`("filters", "status")` -> `arguments.filters.status`; indices as `[0]`; odd keys quoted."""
    try:
        return _format_parts(parts, root)
    except TypeError:  # an unhashable key (only in malformed input)
        return root + "".join(_format_key(part) for part in parts)


def get_at(value: Any, parts: Path) -> Any:
    """The value at `parts` inside `value` (KeyError/IndexError when absent)."""
    for part in parts:
        value = value[part]
    return value


def set_at(value: Any, parts: Path, new: Any) -> None:
    """Set the value at `parts` (the parent must exist); mutates `value` in place."""
    get_at(value, parts[:-1])[parts[-1]] = new


def delete_at(value: Any, parts: Path) -> None:
    """Delete the key or index at `parts`; mutates `value` in place."""
    del get_at(value, parts[:-1])[parts[-1]]


def rename_key(obj: dict, old: str, new: str) -> None:
    """Rename `old` to `new` in place, keeping the key's position (order matters to readers)."""
    items = [(new if key == old else key, item) for key, item in obj.items()]
    obj.clear()
    obj.update(items)
