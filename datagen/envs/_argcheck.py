"""A small argument checker for tool calls: the JSON Schema subset our tool specs use, compiled
once per schema into closures, returning the first problem as a sentence an agent can act on.

It exists for the environments' error observations (every `step` runs it, so it is compiled
and cheap: ~1 us per argument). It is not the project's strict validator: that one lives in
`mutators/`, and environments do not import it (stages stay apart). Supported keywords: type,
enum, properties, required, additionalProperties (false), minProperties, items, minItems,
maxItems, uniqueItems, minLength, maxLength, pattern, format (date, date-time, email),
minimum, maximum. Integers must be JSON integers (3.0 is refused for an integer argument).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Callable

import orjson

Check = Callable[[Any], "str | None"]
_JSON_TYPE_NAMES = {str: "string", bool: "boolean", int: "integer", float: "number",
                    list: "array", dict: "object", type(None): "null"}
_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) in (int, float),
    "boolean": lambda v: type(v) is bool,
    "array": lambda v: type(v) is list,
    "object": lambda v: type(v) is dict,
    "null": lambda v: v is None,
}
_EMAIL = re.compile(r"^[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?(Z|[+\-]\d{2}:\d{2})?$")
_COMPILED: dict[int, tuple[dict, Check]] = {}


def json_type_name(value: Any) -> str:
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def short_json(value: Any) -> str:
    text = orjson.dumps(value, default=str).decode()
    return text if len(text) <= 60 else text[:57] + "..."


def _date_ok(value: str) -> bool:
    try:
        return bool(_DATE.match(value)) and dt.date.fromisoformat(value) is not None
    except ValueError:
        return False


def _date_time_ok(value: str) -> bool:
    try:
        return bool(_DATE_TIME.match(value)) and \
            dt.datetime.fromisoformat(value.replace("Z", "+00:00")) is not None
    except ValueError:
        return False


_FORMATS: dict[str, tuple[Callable[[str], bool], str]] = {
    "email": (lambda v: _EMAIL.match(v) is not None, "a valid email address"),
    "date": (_date_ok, "a date in YYYY-MM-DD format"),
    "date-time": (_date_time_ok, "a date-time like 2026-03-04T14:00:00"),
}


def _label(where: str) -> str:
    return f"argument '{where}'" if where else "arguments"


def _string_checks(schema: dict[str, Any], label: str) -> list[Check]:
    checks: list[Check] = []
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    if low:
        checks.append(lambda v: f"{label} must be at least {low} characters long"
                      if len(v) < low else None)
    if high is not None:
        checks.append(lambda v: f"{label} must be at most {high} characters long"
                      if len(v) > high else None)
    if "pattern" in schema:
        pattern, text = re.compile(schema["pattern"]), schema["pattern"]
        checks.append(lambda v: None if pattern.search(v) else
                      f"{label} must match the pattern {text}, got {short_json(v)}")
    if schema.get("format") in _FORMATS:
        test, wanted = _FORMATS[schema["format"]]
        checks.append(lambda v: None if test(v) else
                      f"{label} must be {wanted}, got {short_json(v)}")
    return checks


def _number_checks(schema: dict[str, Any], label: str) -> list[Check]:
    checks: list[Check] = []
    if "minimum" in schema:
        low = schema["minimum"]
        checks.append(lambda v: f"{label} must be >= {low}, got {v}" if v < low else None)
    if "maximum" in schema:
        high = schema["maximum"]
        checks.append(lambda v: f"{label} must be <= {high}, got {v}" if v > high else None)
    return checks


def _array_checks(schema: dict[str, Any], label: str, where: str) -> list[Check]:
    checks: list[Check] = []
    low, high = schema.get("minItems", 0), schema.get("maxItems")
    if low:
        checks.append(lambda v: f"{label} must have at least {low} item(s)"
                      if len(v) < low else None)
    if high is not None:
        checks.append(lambda v: f"{label} must have at most {high} items"
                      if len(v) > high else None)
    if "items" in schema:
        item_checks = {}  # one compiled check per index label, made on demand

        def items_ok(v: list) -> str | None:
            for index, item in enumerate(v):
                check = item_checks.get(index)
                if check is None:
                    check = item_checks[index] = _compile(schema["items"], f"{where}[{index}]")
                error = check(item)
                if error:
                    return error
            return None
        checks.append(items_ok)
    if schema.get("uniqueItems"):
        checks.append(lambda v: f"{label} must not contain duplicates"
                      if len({orjson.dumps(i) for i in v}) != len(v) else None)
    return checks


def _object_check(schema: dict[str, Any], where: str) -> Check:
    prefix = f"{where}." if where else ""
    properties = {key: _compile(sub, prefix + key)
                  for key, sub in schema.get("properties", {}).items()}
    required = tuple(schema.get("required", ()))
    closed = schema.get("additionalProperties", True) is False
    allowed = ", ".join(properties) or "none"
    min_properties = schema.get("minProperties", 0)

    def object_ok(v: dict) -> str | None:
        for key in required:
            if key not in v:
                return f"missing required argument '{prefix}{key}'"
        for key, item in v.items():
            check = properties.get(key)
            if check is None:
                if closed:
                    return f"unknown argument '{prefix}{key}' (allowed: {allowed})"
                continue
            error = check(item)
            if error:
                return error
        if len(v) < min_properties:
            return f"argument '{where}' must set at least {min_properties} field(s)"
        return None
    return object_ok


def _compile(schema: dict[str, Any], where: str) -> Check:
    label, expected = _label(where), schema.get("type")
    type_ok = _TYPE_TESTS.get(expected, lambda v: True)
    enum = schema.get("enum")
    if expected == "object":
        checks = [_object_check(schema, where)]
    elif expected == "string":
        checks = _string_checks(schema, label)
    elif expected in ("integer", "number"):
        checks = _number_checks(schema, label)
    elif expected == "array":
        checks = _array_checks(schema, label, where)
    else:
        checks = []

    def check(v: Any) -> str | None:
        if not type_ok(v):
            return f"{label} must be of type {expected}, got {json_type_name(v)} {short_json(v)}"
        if enum is not None and v not in enum:
            return f"{label} must be one of {', '.join(map(str, enum))}; got {short_json(v)}"
        for sub_check in checks:
            error = sub_check(v)
            if error:
                return error
        return None
    return check


def compile_checker(schema: dict[str, Any]) -> Check:
    """The compiled checker of a tool's `parameters` schema (cached per schema object)."""
    cached = _COMPILED.get(id(schema))
    if cached is None or cached[0] is not schema:
        cached = _COMPILED[id(schema)] = (schema, _compile(schema, ""))
    return cached[1]


def argument_error(schema: dict[str, Any], value: Any) -> str | None:
    """The first way `value` violates `schema`, as a sentence for the agent, or None."""
    return compile_checker(schema)(value)
