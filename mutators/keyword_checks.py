"""Closures for single JSON Schema keywords, assembled by `compile.py` into one check per node.

A check takes a value and returns None when it is valid, or a list of `Err`s. Paths are built
only when something fails: each error carries its path reversed, and every container the error
passes through on its way up appends its key (`under`). Valid values, the common case on the
hot path, allocate nothing.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable

from mutators.formats import FORMAT_CHECKERS, FORMAT_HINTS
from mutators.introspect import KeyPolicy
from mutators.jsonvalues import json_equal, json_type, non_json_reason, render, type_label
from mutators.safe_regex import UNDECIDED, SafeRegex
from mutators.schema import Node


class Err:
    """One validation failure: `reason` (type, unknown_key, required, enum, ...) and `detail`
    (the message without the path); `rev_path` lists the keys from the value up to the root."""

    __slots__ = ("rev_path", "reason", "detail")

    def __init__(self, reason: str, detail: str) -> None:
        self.rev_path: list[Any] = []
        self.reason = reason
        self.detail = detail


Check = Callable[[Any], "list[Err] | None"]


def under(errors: list[Err], key: Any) -> list[Err]:
    """Errors of a child value, now seen from its container (`key` joins their paths)."""
    for error in errors:
        error.rev_path.append(key)
    return errors


def json_check(value: Any) -> list[Err] | None:
    """The check of the empty schema: anything JSON can say is fine."""
    reason = non_json_reason(value)
    return None if reason is None else [Err("malformed", reason)]


def string_check(node: Node) -> Check | None:
    """minLength/maxLength (in code points), pattern (unanchored, as in JSON Schema), format."""
    low, high, pattern = node.min_length, node.max_length, node.pattern
    format_ok = FORMAT_CHECKERS.get(node.format or "")
    if low is None and high is None and pattern is None and format_ok is None:
        return None
    fmt = node.format
    hint = f" ({FORMAT_HINTS[fmt]})" if fmt in FORMAT_HINTS else ""

    def check(value: str) -> list[Err] | None:
        errors = None
        size = len(value)
        if low is not None and size < low:
            errors = [Err("length", f"string of length {size} is shorter than minLength {render(low)}")]
        if high is not None and size > high:
            errors = [Err("length", f"string of length {size} is longer than maxLength {render(high)}")]
        if pattern is not None and not (found := pattern.search(value)):
            errors = (errors or []) + [pattern_miss(pattern, value, found)]
        if format_ok is not None and not format_ok(value):
            errors = (errors or []) + [Err("format", f"{render(value)} is not a valid {fmt}"
                                                     f"{hint}")]
        return errors

    return check


def pattern_miss(pattern: SafeRegex, subject: str, found: Any) -> Err:
    """The error for a string the pattern did not match, or could not decide in time."""
    if found is UNDECIDED:
        return Err("pattern", f"{render(subject)} could not be checked against pattern "
                              f"{render(pattern.pattern)}: the pattern backtracks too much "
                              "to evaluate in time")
    return Err("pattern", f"{render(subject)} does not match pattern {render(pattern.pattern)}")


def number_check(node: Node) -> Check:
    """Finite floats only; minimum/maximum (inclusive and exclusive) and multipleOf."""
    low, high = node.minimum, node.maximum
    xlow, xhigh, step = node.exclusive_minimum, node.exclusive_maximum, node.multiple_of
    bounded = any(bound is not None for bound in (low, high, xlow, xhigh, step))

    def check(value: int | float) -> list[Err] | None:
        if type(value) is float and not math.isfinite(value):
            return [Err("malformed", f"non-finite number {value!r}")]
        if not bounded:
            return None
        if low is not None and value < low:
            return [Err("range", f"{render(value)} is less than the minimum {render(low)}")]
        if high is not None and value > high:
            return [Err("range", f"{render(value)} is greater than the maximum {render(high)}")]
        if xlow is not None and value <= xlow:
            return [Err("range", f"{render(value)} must be greater than {render(xlow)}")]
        if xhigh is not None and value >= xhigh:
            return [Err("range", f"{render(value)} must be less than {render(xhigh)}")]
        if step is not None and not is_multiple(value, step):
            return [Err("range", f"{render(value)} is not a multiple of {render(step)}")]
        return None

    return check


def is_multiple(value: int | float, step: int | float) -> bool:
    """multipleOf: within float rounding for floats; exact for ints beyond 2**53, whose
    division by a float would round (or overflow past 1e308)."""
    if not (type(value) is int and abs(value) > 2**53):
        try:
            quotient = value / step
            return abs(quotient - round(quotient)) <= 1e-9 * max(1.0, abs(quotient))
        except OverflowError:  # a huge int step
            pass
    if isinstance(step, float) and not math.isfinite(step):
        return value == 0
    return _exact(value) % _exact(step) == 0


def _exact(number: int | float) -> Fraction:
    """The number as its author wrote it (0.1 is 1/10, not the nearest binary fraction)."""
    return Fraction(number) if isinstance(number, int) else Fraction(repr(number))


def value_check(node: Node) -> Check | None:
    """enum and const, compared as JSON values (1 == 1.0, True != 1). A value whose JSON type
    no member has is reported as a type error, so an untyped enum still gets type errors.
    A null where the schema's own `type` lists null passes even if the enum forgot it."""
    members = node.enum if node.enum is not None else node.const
    if members is None:
        return None
    keyword = "enum" if node.enum is not None else "const"
    strings = frozenset(m for m in members if type(m) is str)
    member_types = frozenset(json_type(m) for m in members)
    numeric = bool(member_types & {"integer", "number"})
    null_ok = node.types is not None and "null" in node.types
    expected = ", ".join(render(m, 40) for m in members[:12])
    expected += ", ..." if len(members) > 12 else ""
    expected = f"expected one of {expected}; got "

    only_strings = len(strings) == len(members)

    def check(value: Any) -> list[Err] | None:
        if type(value) is str:
            if value in strings:
                return None
            if only_strings:
                return [Err(keyword, expected + render(value))
                        if keyword == "enum" else
                        Err("const", f"expected {render(members[0])}, got {render(value)}")]
        if any(json_equal(value, member) for member in members) or (value is None and null_ok):
            return None
        tag = json_type(value)
        if tag not in member_types and not (numeric and tag in ("integer", "number")):
            types = " or ".join(sorted(member_types))
            return [Err("type", f"expected {types}, got {type_label(value)}")]
        if keyword == "const":
            return [Err("const", f"expected {render(members[0])}, got {render(value)}")]
        return [Err("enum", expected + render(value))]

    return check


def unique_check(array: list | tuple) -> list[Err] | None:
    """uniqueItems with JSON equality (1 and 1.0 are equal; true and 1 are not)."""
    seen: dict[Any, int] = {}
    for index, item in enumerate(array):
        key = _canonical(item)
        if key in seen:
            return [Err("unique", f"items {seen[key]} and {index} are equal ({render(item)})")]
        seen[key] = index
    return None


def _canonical(value: Any) -> Any:
    tag = json_type(value)
    if tag in ("integer", "number"):
        return ("n", float(value) if abs(value) < 2**53 else value)
    if tag == "object":
        return ("o", tuple(sorted((str(k), _canonical(v)) for k, v in value.items())))
    if tag == "array":
        return ("a", tuple(_canonical(v) for v in value))
    return (tag, value if tag != "non-JSON" else id(value))


def unknown_key_detail(policy: KeyPolicy) -> str:
    """'unknown key (not in schema; allowed: a, b, c)' (sorted, at most 15 names); built once
    per schema, not per error."""
    names = sorted(policy.declared)
    text = ", ".join(names[:15]) + (", ..." if len(names) > 15 else "")
    if policy.patterns:
        text += ("; " if text else "") + "or keys matching " + ", ".join(
            render(p.pattern) for p in policy.patterns)
    allowed = f"allowed: {text}" if text else "the object takes no keys"
    return f"unknown key (not in schema; {allowed})"


def key_errors(obj: dict, policy: KeyPolicy, extra: Check | None, unknown_detail: str,
               ) -> list[Err] | None:
    """Keys of `obj` that `policy` does not declare: validated against `extra` when the schema
    gives additionalProperties a schema, unknown-key errors when closed, else JSON-checked."""
    errors = None
    for key, value in obj.items():
        if type(key) is not str:
            errors = (errors or []) + [Err("malformed", f"non-string key {render(key)}")]
        elif policy.is_declared(key):
            continue
        elif extra is not None:
            found = extra(value)
            if found:
                errors = (errors or []) + under(found, key)
        elif policy.vote == "closed":
            errors = (errors or []) + under([Err("unknown_key", unknown_detail)], key)
        else:
            found = json_check(value)
            if found:
                errors = (errors or []) + under(found, key)
    return errors
