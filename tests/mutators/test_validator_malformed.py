"""Malformed calls, malformed specs and non-JSON values are reported, never raised."""

from __future__ import annotations

import datetime

import pytest

from mutators import (ALL_KINDS, KINDS, Candidate, coerce_call, mutate, mutate_report,
                      validate, validate_detailed)

GOOD_TOOL = {"name": "t", "parameters": {"type": "object", "properties": {
    "x": {"type": "string"}, "items": {"type": "array"}, "meta": {"type": "object"}}}}

BAD_CALLS = [None, "t(x=1)", 42, [], {"arguments": {}}, {"name": 3, "arguments": {}},
             {"name": "t", "arguments": "{\"x\": \"a\"}"}, {"name": "t", "arguments": "not json"},
             {"name": "t", "arguments": [1, 2]}, {"name": "t", "arguments": {"x": {1, 2}}},
             {"name": "t", "arguments": {"x": b"bytes"}}, {"name": "t", "arguments": {1: "a"}},
             {"name": "t", "arguments": {"meta": {"when": datetime.date(2024, 1, 1)}}},
             {"name": "t", "arguments": {"items": [float("inf")]}},
             {"name": "t", "arguments": {"meta": {2: "non-string key"}}}]

BAD_TOOLS = [None, "tool", 7, [], {}, {"name": ""}, {"function": "x"},
             {"name": "t", "parameters": "object"}, {"name": "t", "parameters": [1, 2]},
             {"name": "t", "parameters": {"type": 12, "properties": "nope", "required": 5}},
             {"name": "t", "parameters": {"properties": {"x": 5, "y": None, "z": [None]}}},
             {"name": "t", "parameters": {"type": "object", "properties": {"x": {
                 "type": "string", "minLength": "many", "pattern": "([", "enum": [],
                 "anyOf": "no", "allOf": [], "$ref": 3, "items": 5, "format": 1}}}},
             {"name": "t", "parameters": {"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}}},
             {"name": "t", "parameters": {"type": "object", "properties": {"x": {"type": {"type": "int"}}}}}]


@pytest.mark.parametrize("call", BAD_CALLS, ids=range(len(BAD_CALLS)))
def test_bad_calls_are_reported(call):
    errors = validate_detailed(call, GOOD_TOOL)
    assert errors and all(e.message for e in errors)
    report = mutate_report(call, GOOD_TOOL, kinds=ALL_KINDS)
    assert report.negatives == []
    assert set(report.impossible) == set(ALL_KINDS)


@pytest.mark.parametrize("tool", BAD_TOOLS, ids=range(len(BAD_TOOLS)))
def test_bad_tools_never_raise(tool):
    call = {"name": "t", "arguments": {"x": "a"}}
    assert isinstance(validate(call, tool), list)
    report = mutate_report(call, tool, kinds=ALL_KINDS, other_tools=BAD_TOOLS)
    assert len(report.negatives) + len(report.impossible) == len(ALL_KINDS)


def test_non_json_values_are_malformed_not_crashes():
    reasons = {e.reason for call in BAD_CALLS[9:] for e in validate_detailed(call, GOOD_TOOL)}
    assert "malformed" in reasons


def test_arguments_as_json_string_need_coercion():
    call = {"name": "t", "arguments": "{\"x\": \"a\"}"}
    [error] = validate_detailed(call, GOOD_TOOL)
    assert (error.path, error.reason) == ("arguments", "malformed")
    assert validate(coerce_call(call), GOOD_TOOL) == []
    assert coerce_call("garbage") == "garbage"


def test_self_referencing_ref_loop_is_a_tool_error_and_does_not_hang():
    # a $ref that leads back to itself never reaches a schema: the tool is unusable (it was
    # read as an unresolvable $ref that accepts anything; tests/mutators/test_schema_loops.py)
    tool = BAD_TOOLS[12]
    [error] = validate({"name": "t", "arguments": {"anything": 1}}, tool)
    assert error.startswith("tool.parameters: schema loops on the same value: "
                            "#/$defs/A -> #/$defs/A (")


def test_deeply_nested_values_do_not_crash():
    value: dict = {}
    for _ in range(5000):
        value = {"a": value}
    tool = {"name": "t", "parameters": {"$ref": "#/$defs/N", "$defs": {"N": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/N"}}}}}}
    assert isinstance(validate({"name": "t", "arguments": value}, tool), list)
    assert isinstance(mutate({"name": "t", "arguments": value}, tool), list)



TREE = {"name": "t", "parameters": {"$ref": "#/$defs/N", "$defs": {"N": {
    "type": "object", "properties": {"a": {"$ref": "#/$defs/N"}, "name": {"type": "string"}},
    "additionalProperties": False}}}}


def nested(depth: int, leaf: dict) -> dict:
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


def test_a_too_deep_original_is_invalid_and_a_too_deep_candidate_is_skipped():
    # mutate called validate_with, which lets RecursionError through (validate_detailed
    # catches it): every kind was `unreadable`, and one deep candidate failed its whole kind
    deep = {"name": "t", "arguments": nested(5000, {"name": "x"})}
    depth_error = "arguments: value nested too deeply to validate (over 100 levels)"
    assert validate(deep, TREE) == [depth_error]
    rejected = mutate_report(deep, TREE, kinds=ALL_KINDS).impossible.values()
    assert {r.kind for r in rejected} == {"invalid_original"}
    assert all(depth_error in r.detail for r in rejected)

    def too_deep(ctx):
        yield Candidate("too_deep", ("a",), None, "deep",
                        ctx.edited(lambda a: a.__setitem__("a", nested(5000, {}))))

    def name_as_number(ctx):
        yield Candidate("string_for_number", ("name",), "x", 5,
                        ctx.edited(lambda a: a.__setitem__("name", 5)))

    call = {"name": "t", "arguments": {"name": "x"}}
    alone = mutate_report(call, TREE, kinds=["type_error"], operators={"type_error": [too_deep]})
    assert alone.impossible["type_error"].kind == "none_accepted"
    for seed in range(4):
        report = mutate_report(call, TREE, seed, kinds=["type_error"],
                               operators={"type_error": [too_deep, name_as_number]})
        assert report.get("type_error").mutated == 5, report.impossible

def test_unknown_kind_is_reported():
    report = mutate_report({"name": "t", "arguments": {"x": "a"}}, GOOD_TOOL, kinds=["nonsense"])
    assert "unknown kind" in report.impossible["nonsense"]


# Random garbage built from schema keywords and arbitrary values: nothing may raise.
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

KEYWORDS = ["type", "properties", "required", "items", "anyOf", "oneOf", "allOf", "enum",
            "const", "$ref", "additionalProperties", "minimum", "maxLength", "pattern",
            "format", "nullable", "prefixItems", "patternProperties", "not", "$defs", "x"]
ATOMS = (st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True)
         | st.sampled_from(["int", "object", "List[str]", "#/$defs/a", "#", "(", "date", "a"]))
GARBAGE = st.recursive(ATOMS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.sampled_from(KEYWORDS + ["a", "b"]), inner, max_size=4),
                       max_leaves=12)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(GARBAGE, GARBAGE, st.integers(0, 5))
def test_garbage_schemas_and_arguments_never_raise(parameters, arguments, seed):
    tool = {"name": "t", "parameters": parameters}
    call = {"name": "t", "arguments": arguments}
    assert isinstance(validate(call, tool), list)
    report = mutate_report(call, tool, seed, kinds=ALL_KINDS, other_tools=[tool, GOOD_TOOL])
    assert len(report.negatives) + len(report.impossible) == len(ALL_KINDS)
    assert not any(reason.kind == "mutator_failed" and kind in KINDS
                   for kind, reason in report.impossible.items()), report.impossible
    if isinstance(arguments, dict) and validate(call, tool) == []:
        for negative in report.negatives:
            if negative.kind == "logical_error":
                assert validate(negative.call, tool) == []
