"""Validator: JSON types, messy type names, scalar keywords and formats."""

from __future__ import annotations

import pytest

from mutators import validate, validate_detailed


def tool_with(schema: dict, name: str = "t") -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {"x": schema}}}}


def errors_for(schema: dict, value) -> list:
    return validate_detailed({"name": "t", "arguments": {"x": value}}, tool_with(schema))


def reasons(schema: dict, value) -> list[str]:
    return [e.reason for e in errors_for(schema, value)]


@pytest.mark.parametrize("type_name,good,bad", [
    ("int", 3, "3"), ("Integer", 3, 3.5), ("long", 2**40, "x"), ("str", "a", 1),
    ("String", "a", None), ("float", 1.5, "1.5"), ("double", 2, True), ("number", 1, "1"),
    ("bool", True, "true"), ("Boolean", False, 0), ("dict", {"k": 1}, [1]),
    ("object", {}, "x"), ("OBJECT", {}, 1), ("list", [1], "x"), ("tuple", [1, "a"], {}),
    ("array", [], "x"), ("null", None, 0), ("None", None, ""), ("List[int]", [1, 2], ["a"]),
    ("Optional[str]", None, 1), ("str | None", "x", 2), ("string?", None, 3),
    ("int[]", [1], [1.5]), ("dict[str, int]", {"a": 1}, {"a": "b"}), ("date", "2024-01-31", "2024-02-31"),
])
def test_messy_type_names_are_read_as_meant(type_name, good, bad):
    assert reasons({"type": type_name}, good) == []
    assert reasons({"type": type_name}, bad) != []


@pytest.mark.parametrize("type_name", ["any", "Any", "mixed", "json", "*"])
def test_any_type_names_accept_everything(type_name):
    for value in (1, "a", None, [1, {"b": 2}], {"k": [1]}):
        assert reasons({"type": type_name}, value) == []


def test_unknown_type_name_accepts_and_warns():
    from mutators import schema_warnings

    tool = tool_with({"type": "frobnicator"})
    assert validate({"name": "t", "arguments": {"x": 1}}, tool) == []
    assert any("frobnicator" in w for w in schema_warnings(tool))


def test_integer_semantics():
    assert reasons({"type": "integer"}, 3.0) == []          # JSON Schema: 3.0 is an integer
    assert reasons({"type": "integer"}, 3.5) == ["type"]
    assert reasons({"type": "integer"}, True) == ["type"]   # bool is never an integer
    assert reasons({"type": "number"}, False) == ["type"]
    assert reasons({"type": "number"}, float("nan")) == ["malformed"]
    assert reasons({"type": "integer", "minimum": 1}, 0.0) == ["range"]


def test_type_error_message_names_path_expected_and_got():
    tool = {"name": "t", "parameters": {"type": "object", "properties": {
        "filters": {"type": "object", "properties": {"status": {"type": "integer"}}}}}}
    errors = validate({"name": "t", "arguments": {"filters": {"status": "open"}}}, tool)
    assert errors == ["arguments.filters.status: expected integer, got string"]


def test_type_lists_and_nullable():
    assert reasons({"type": ["string", "null"]}, None) == []
    assert reasons({"type": ["string", "null"]}, 1) == ["type"]
    assert reasons({"type": "string", "nullable": True}, None) == []
    assert reasons({"type": "string", "nullable": True}, 1) == ["type"]
    assert reasons({"type": "string", "enum": ["a"], "nullable": True}, None) == []
    assert reasons({"type": ["integer", "string"]}, [1]) == ["type"]


def test_enum_and_const():
    assert reasons({"type": "string", "enum": ["open", "closed"]}, "open") == []
    assert reasons({"type": "string", "enum": ["open", "closed"]}, "pending") == ["enum"]
    assert reasons({"enum": [1, 2]}, 1.0) == []
    assert reasons({"enum": [1, 2]}, True) == ["type"]      # untyped enum: wrong type is a type error
    assert reasons({"enum": ["a", 1]}, "b") == ["enum"]
    assert reasons({"const": "fixed"}, "fixed") == []
    assert reasons({"const": "fixed"}, "other") == ["const"]
    assert reasons({"type": ["string", "null"], "enum": ["a"]}, None) == []  # enum forgot null


@pytest.mark.parametrize("schema,good,bad", [
    ({"type": "integer", "minimum": 1, "maximum": 3}, 3, 4),
    ({"type": "integer", "exclusiveMinimum": 1}, 2, 1),
    ({"type": "number", "exclusiveMaximum": 1.5}, 1.4, 1.5),
    ({"type": "number", "minimum": 1, "exclusiveMinimum": True}, 1.1, 1),  # draft-4 form
    ({"type": "integer", "multipleOf": 5}, 10, 12),
    ({"type": "number", "multipleOf": 0.1}, 0.3, 0.35),
    ({"type": "integer", "minimum": "2"}, 2, 1),                          # numeric string bound
])
def test_numeric_ranges(schema, good, bad):
    assert reasons(schema, good) == []
    assert reasons(schema, bad) == ["range"]


def test_lengths_and_patterns():
    assert reasons({"type": "string", "minLength": 2, "maxLength": 3}, "ab") == []
    assert reasons({"type": "string", "minLength": 2}, "a") == ["length"]
    assert reasons({"type": "string", "maxLength": 3}, "abcd") == ["length"]
    assert reasons({"type": "string", "maxLength": 1}, "é") == []          # code points
    assert reasons({"type": "array", "minItems": 1}, []) == ["length"]
    assert reasons({"type": "array", "maxItems": 1}, [1, 2]) == ["length"]
    assert reasons({"type": "array", "uniqueItems": True}, [1, 1.0]) == ["unique"]
    assert reasons({"type": "array", "uniqueItems": True}, [1, True, {"a": 1}, {"a": 2}]) == []
    assert reasons({"type": "string", "pattern": "^C-\\d+$"}, "C-12") == []
    assert reasons({"type": "string", "pattern": "^C-\\d+$"}, "X-12") == ["pattern"]
    assert reasons({"type": "string", "pattern": "\\d"}, "ab1") == []      # unanchored
    assert reasons({"type": "string", "pattern": "(?<year>\\d{4})"}, "2024") == []


def test_invalid_pattern_is_ignored_with_a_warning():
    from mutators import schema_warnings

    tool = tool_with({"type": "string", "pattern": "(unclosed"})
    assert validate({"name": "t", "arguments": {"x": "anything"}}, tool) == []
    assert schema_warnings(tool)


@pytest.mark.parametrize("fmt,good,bad", [
    ("date", "2024-02-29", "2023-02-29"),
    ("date-time", "2024-03-15T09:30:00Z", "2024-03-15T25:00:00Z"),
    ("date-time", "2024-03-15 09:30", "15/03/2024 09:30"),
    ("time", "09:30:00", "9h30"),
    ("email", "ada@example.com", "ada.example.com"),
    ("uri", "https://example.com/a?b=1", "not a uri"),
    ("uuid", "123e4567-e89b-42d3-a456-426614174000", "123"),
    ("ipv4", "10.0.0.1", "10.0.0.256"),
])
def test_formats(fmt, good, bad):
    assert reasons({"type": "string", "format": fmt}, good) == []
    assert reasons({"type": "string", "format": fmt}, bad) == ["format"]


def test_unknown_format_is_an_annotation():
    assert reasons({"type": "string", "format": "color"}, "#fff") == []


def test_keywords_apply_only_to_their_type():
    # minLength says nothing about numbers; minimum nothing about strings
    assert reasons({"type": ["string", "integer"], "minLength": 3, "minimum": 10}, 11) == []
    assert reasons({"type": ["string", "integer"], "minLength": 3, "minimum": 10}, "abc") == []


def test_defaults_do_not_affect_validation():
    assert reasons({"type": "integer", "default": 10}, 5) == []
    assert reasons({"type": "integer", "default": "not even valid"}, 5) == []


def test_type_given_as_a_schema_or_as_enum():
    assert reasons({"type": {"type": "int"}}, 1) == []
    assert reasons({"type": {"type": "int"}}, "1") == ["type"]
    assert reasons({"type": "enum", "enum": ["a", "b"]}, "a") == []
    assert reasons({"type": "enum", "enum": ["a", "b"]}, "c") == ["enum"]
