"""Property-based tests over random schemas (messy type names included) and valid calls drawn
from them: the original validates; every negative fails or passes exactly as its kind says;
mutation is deterministic and leaves the input alone; our verdicts agree with jsonschema on
the strict reading of standard schemas."""

from __future__ import annotations

import copy
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mutators import KINDS, Rejected, mutate_report, validate, validate_detailed
from mutators.jsonvalues import json_equal

KEYS = ["customer_id", "user_id", "start_time", "end_time", "limit", "status", "query", "name",
        "path", "email", "priority", "tags", "amount", "title", "count", "date", "page",
        "description", "type", "items"]
MESSY = {"string": ["string", "str", "String", "text"], "integer": ["integer", "int", "Integer", "long"],
         "number": ["number", "float", "double"], "boolean": ["boolean", "bool"],
         "array": ["array", "list", "List"], "object": ["object", "dict", "Object"]}
# MUTATORS_EXAMPLES=5000 for a longer hunt; 200 keeps the suite fast.
EXAMPLES = int(os.environ.get("MUTATORS_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def type_name(draw, canonical: str, messy: bool) -> str:
    return draw(st.sampled_from(MESSY[canonical])) if messy else canonical


@st.composite
def scalar(draw, messy: bool):
    """(schema, strategy of valid values) for a leaf."""
    kind = draw(st.sampled_from(["string", "pattern", "date", "email", "enum", "integer",
                                 "number", "boolean", "nullable", "untyped_enum"]))
    if kind == "string":
        low = draw(st.integers(0, 3))
        schema = {"type": type_name(draw, "string", messy), "minLength": low, "maxLength": low + 8}
        return schema, st.text("abcxyz -_", min_size=low, max_size=low + 8)
    if kind == "pattern":
        return ({"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                st.from_regex(r"[A-Z]{2}-[0-9]{3}", fullmatch=True))
    if kind == "date":
        return {"type": "string", "format": "date"}, st.dates().map(lambda d: d.isoformat())
    if kind == "email":
        return ({"type": "string", "format": "email"},
                st.from_regex(r"[a-z]{1,6}@[a-z]{1,6}\.com", fullmatch=True))
    if kind in ("enum", "untyped_enum"):
        members = draw(st.lists(st.sampled_from(["open", "closed", "pending", "low", "high"]),
                                min_size=1, max_size=4, unique=True))
        schema = {"enum": members} if kind == "untyped_enum" else {"type": "string", "enum": members}
        return schema, st.sampled_from(members)
    if kind == "integer":
        low = draw(st.integers(-5, 5))
        schema = {"type": type_name(draw, "integer", messy), "minimum": low, "maximum": low + 100}
        return schema, st.integers(low, low + 100)
    if kind == "number":
        schema = {"type": type_name(draw, "number", messy), "exclusiveMinimum": 0}
        return schema, st.floats(0.01, 1e6) | st.integers(1, 10**6)
    if kind == "boolean":
        return {"type": type_name(draw, "boolean", messy)}, st.booleans()
    schema = {"type": ["string", "null"]} if not messy else {"type": "string", "nullable": True}
    return schema, st.none() | st.text("ab", max_size=3)


@st.composite
def field(draw, depth: int, messy: bool, defs: dict):
    """(schema, strategy) for any argument: leaves, arrays, objects, Optional[...], $refs."""
    choices = ["scalar"] * 4 + (["array", "object", "optional", "ref"] if depth < 2 else [])
    kind = draw(st.sampled_from(choices))
    if kind == "scalar":
        return draw(scalar(messy))
    if kind == "array":
        item_schema, items = draw(field(depth + 1, messy, defs))
        low = draw(st.integers(0, 2))
        schema = {"type": type_name(draw, "array", messy), "items": item_schema, "minItems": low}
        return schema, st.lists(items, min_size=low, max_size=3)
    if kind == "optional":
        inner, values = draw(field(depth + 1, messy, defs))
        return {"anyOf": [inner, {"type": "null"}]}, st.none() | values
    schema, values = draw(obj(depth + 1, messy, defs))
    if kind == "ref":
        name = f"Def{len(defs)}"
        defs[name] = schema
        return {"$ref": f"#/$defs/{name}"}, values
    return schema, values


@st.composite
def obj(draw, depth: int, messy: bool, defs: dict):
    """(object schema, strategy): 1-6 keys from a vocabulary with near-synonyms in it."""
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=6, unique=True))
    required = draw(st.lists(st.sampled_from(keys), unique=True))
    properties, strategies = {}, {}
    for key in keys:
        properties[key], strategies[key] = draw(field(depth, messy, defs))
    schema = {"type": type_name(draw, "object", messy), "properties": properties,
              "required": required}
    closedness = draw(st.sampled_from(["absent", "false", "true"] if depth > 0 else ["absent", "false"]))
    if closedness != "absent":
        schema["additionalProperties"] = closedness == "false"
    values = st.fixed_dictionaries({k: strategies[k] for k in keys if k in required},
                                   optional={k: strategies[k] for k in keys if k not in required})
    return schema, values


@st.composite
def tool_and_call(draw, messy: bool = True):
    defs: dict = {}
    parameters, values = draw(obj(0, messy, defs))
    arguments = draw(values)
    if defs:
        parameters["$defs"] = defs
    tool = {"type": "function", "function": {"name": "tool_x", "description": "random",
                                             "parameters": parameters}}
    return tool, {"name": "tool_x", "arguments": arguments}


def check_negative(negative, call, tool):
    errors = validate_detailed(negative.call, tool)
    assert not json_equal(negative.call, call)
    assert negative.errors == [e.message for e in errors]
    assert negative.schema_valid == (not errors)
    if negative.kind == "type_error":
        assert any(e.reason == "type" and e.path == negative.path for e in errors), errors
    elif negative.kind == "hallucinated_key":
        assert any(e.reason == "unknown_key" and e.path == negative.path for e in errors), errors
    else:
        assert errors == [], errors


@SETTINGS
@given(tool_and_call(), st.integers(0, 2**32))
def test_negatives_fail_or_pass_as_their_kind_says(tool_call, seed):
    tool, call = tool_call
    assert validate(call, tool) == []
    before = copy.deepcopy(call)
    report = mutate_report(call, tool, seed)
    assert call == before                                   # the input is never modified
    assert sorted(n.kind for n in report.negatives) + sorted(report.impossible) != []
    assert {n.kind for n in report.negatives} | set(report.impossible) == set(KINDS)
    assert all(isinstance(r, Rejected) and r.kind and r.detail for r in report.impossible.values())
    for negative in report.negatives:
        check_negative(negative, call, tool)
    again = mutate_report(copy.deepcopy(call), copy.deepcopy(tool), seed)
    assert [n.to_dict() for n in again.negatives] == [n.to_dict() for n in report.negatives]
    assert again.impossible == report.impossible
    assert_possible_kinds_are_produced(tool, call, report)


def assert_possible_kinds_are_produced(tool, call, report):
    """A kind may only be impossible for the reasons the call gives (no closed object, no
    typed value): the generated schemas always allow a type error and a hallucinated key."""
    if tool["function"]["parameters"].get("additionalProperties") is not True:
        assert "hallucinated_key" not in report.impossible, report.impossible
    if any(not isinstance(v, dict) or v for v in call["arguments"].values()):
        assert "type_error" not in report.impossible, report.impossible


def strict(schema):
    """The strict reading as plain JSON Schema: objects with properties are closed."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@settings(max_examples=max(EXAMPLES * 3 // 4, 1), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(tool_and_call(messy=False), st.integers(0, 1000))
def test_verdicts_agree_with_jsonschema(tool_call, seed):
    jsonschema = pytest.importorskip("jsonschema")
    tool, call = tool_call
    parameters = strict(tool["function"]["parameters"])
    reference = jsonschema.Draft202012Validator(parameters)
    for negative in mutate_report(call, tool, seed).negatives:
        candidates = [call["arguments"], negative.call["arguments"]]
        for arguments in candidates:
            ours = validate({"name": "tool_x", "arguments": arguments}, tool) == []
            assert ours == reference.is_valid(arguments), (arguments, parameters)
