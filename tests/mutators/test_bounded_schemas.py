"""Schemas and calls whose shape or size made `mutators` exponential, quadratic or crash
(audit F4-F7): work is asserted as counts (fast to fail without the fix), times only with
wide margins."""

from __future__ import annotations

import time

import pytest

from mutators import ALL_KINDS, introspect, mutate_report, schema_warnings, validate
from mutators import certain, check_budget, logical_error
from mutators.check_budget import MAX_CHECKS, SchemaTooComplex
from mutators.compile import compile_schema
from mutators.introspect import accepted_types, group_policy
from mutators.mutate import _context
from mutators.schema import MAX_SCHEMA_DEPTH
from mutators.validate import load_tool, validate_detailed


def tool(parameters: dict) -> dict:
    return {"name": "f", "description": "d", "parameters": parameters}


def ladder(combinator: str, depth: int, leaf: dict) -> dict:
    """`L_i = {combinator: [L_i+1, L_i+1]}`: 2^depth paths through `depth` small defs."""
    defs = {f"L{i}": {combinator: [{"$ref": f"#/$defs/L{i + 1}"}] * 2} for i in range(depth)}
    defs[f"L{depth}"] = leaf
    return tool({"type": "object", "$defs": defs, "properties": {"a": {"$ref": "#/$defs/L0"}}})


def counting(monkeypatch, module, name: str) -> list[int]:
    calls = [0]
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


# F4: shared $ref branches

@pytest.mark.parametrize("combinator", ["anyOf", "allOf"])
def test_shared_ref_branches_are_introspected_once_per_node(monkeypatch, combinator):
    types = counting(monkeypatch, introspect, "_accepted_types")
    policies = counting(monkeypatch, introspect, "_group_policy")
    loaded = load_tool(ladder(combinator, 16, {"type": "integer"}))
    root = loaded.schema.root.properties["a"]
    assert accepted_types(root) == {"integer"}
    assert group_policy(root).declared == frozenset()
    # 17 defs, each asked once (the walk that follows every path asked 2^17 times)
    assert types[0] <= 2 * 17 and policies[0] <= 2 * 17, (types, policies)
    start = time.perf_counter()
    assert schema_warnings(ladder(combinator, 45, {"type": "integer"})) == []
    assert time.perf_counter() - start < 2  # 2^45 paths: compiles in ms


def test_recursive_refs_keep_their_answers_whichever_node_is_asked_first():
    tree = tool({"$defs": {"N": {"type": "object", "properties": {
        "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/N"}}}}},
        "$ref": "#/$defs/N"})
    deep = {"value": 1, "children": [{"value": 2, "children": [{"value": "3"}]}]}
    assert validate({"name": "f", "arguments": deep}, tree) == [
        "arguments.children[0].children[0].value: expected integer, got string"]
    # a loop through anyOf: A -> B -> A; each node's answer does not depend on the entry
    # (such a tool is refused when loaded, test_schema_loops.py, but its graph stays readable)
    loop = {"A": {"properties": {"a": {}}, "anyOf": [{"type": "string"}, {"$ref": "#/$defs/B"}]},
            "B": {"properties": {"b": {}}, "allOf": [{"$ref": "#/$defs/A"}]}}
    answers = []
    for first in ("A", "B"):
        parameters = {"$defs": loop, "type": "object", "properties": {
            "x": {"$ref": "#/$defs/A"}, "y": {"$ref": "#/$defs/B"}}}
        root = compile_schema({**parameters, "title": first}).root  # a fresh compile
        nodes = {"A": root.properties["x"], "B": root.properties["y"]}
        order = [first, "B" if first == "A" else "A"]
        answers.append({name: (accepted_types(nodes[name]), group_policy(nodes[name]).declared)
                        for name in order})
    assert answers[0] == answers[1]
    assert answers[0]["B"][1] == {"a", "b"}


def test_a_runaway_validation_stops_at_the_budget_with_a_schema_error():
    hostile = ladder("anyOf", 16, {"type": "integer"})  # 2^17 checks for a failing value
    errors = validate_detailed({"name": "f", "arguments": {"a": "x"}}, hostile)
    assert [(e.path, e.reason) for e in errors] == [("tool.parameters", "malformed")]
    assert "schema too complex to validate this value" in errors[0].message
    assert validate({"name": "f", "arguments": {"a": 3}}, hostile) == []  # one path: fine
    start = time.perf_counter()
    deeper = ladder("allOf", 40, {"type": "integer"})
    assert "too complex" in validate({"name": "f", "arguments": {"a": 1}}, deeper)[0]
    # valid along one path; every type_error candidate fails all 2^40 and stops at the budget
    report = mutate_report({"name": "f", "arguments": {"a": 3}},
                           ladder("anyOf", 40, {"type": "integer"}))
    assert time.perf_counter() - start < 10
    assert "hallucinated_key" in [n.kind for n in report.negatives]
    # callers that guard a check against runaway recursion (the environments) stop too
    with pytest.raises(RecursionError):
        compile_schema(deeper["parameters"]).check({"a": 1})
    assert issubclass(SchemaTooComplex, RecursionError)


def test_the_budget_grows_with_the_value_so_big_calls_still_validate():
    json_value = {"$defs": {"V": {"anyOf": [
        {"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"},
        {"type": "array", "items": {"$ref": "#/$defs/V"}},
        {"type": "object", "additionalProperties": {"$ref": "#/$defs/V"}}]}},
        "type": "object", "properties": {"data": {"$ref": "#/$defs/V"}}}
    data = [{"id": i, "tags": ["a", "b"], "ok": True} for i in range(3000)]  # ~15,000 values
    assert compile_schema(json_value).compiler.budgeted  # recursive: counted
    assert validate({"name": "f", "arguments": {"data": data}}, tool(json_value)) == []
    assert check_budget._budget.total > MAX_CHECKS  # it needed more than the fixed budget
    data[-1]["tags"].append(object())
    assert "non-JSON" in validate({"name": "f", "arguments": {"data": data}}, tool(json_value))[0]


def test_ordinary_schemas_are_not_counted():
    plain = {"type": "object", "$defs": {"Id": {"type": "string"}},
             "properties": {"a": {"$ref": "#/$defs/Id"}, "b": {"$ref": "#/$defs/Id"},
                            "c": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    assert not compile_schema(plain).compiler.budgeted


# F5: large enums

def _distinct_by_comparison(values):
    kept = []
    for value in values:
        if not any(certain.same_meaning(value, seen) for seen in kept):
            kept.append(value)
    return kept


def test_enum_members_are_deduplicated_in_linear_time(monkeypatch):
    members = tuple(f"v{i}" for i in range(1000))
    compared = counting(monkeypatch, certain, "same_meaning")
    found = list(certain.other_members(members, (), "v5"))
    assert found == [m for m in members if m != "v5"]
    assert compared[0] <= 3 * len(members)  # pairwise: ~500,000
    start = time.perf_counter()
    huge = tool({"type": "object", "required": ["a"], "properties": {
        "a": {"type": "string", "enum": [f"v{i}" for i in range(100_000)]}}})
    report = mutate_report({"name": "f", "arguments": {"a": "v5"}}, huge, kinds=ALL_KINDS)
    assert time.perf_counter() - start < 10  # was 48 s for 10,000 members
    assert len(report.negatives) == 4


def test_ordinary_enums_keep_the_same_other_members():
    enum = ("asc", "ASC", "descending", "Descending", 1, "1", 1.0, 2, True, "true", None,
            {"a": 1}, {"a": 1.0}, [1], [1], "x-y", "x_y", "auto", "z")
    prose = ("metric", "imperial", "asc")
    for value in ("asc", "z", 2, "metric"):
        listed = prose if any(certain.same_meaning(p, value) for p in prose) else ()
        expected = _distinct_by_comparison(
            m for m in enum + listed if not certain.same_meaning(m, value)
            and not certain.indefinite(m) and not certain._aliases(m, value))
        assert list(certain.other_members(enum, prose, value)) == expected, value


# F6: many arguments in one object

def test_swapped_arguments_examines_a_bounded_number_of_pairs(monkeypatch):
    arguments = {f"p{i}": i for i in range(400)}  # 79,800 pairs, none swappable (p1/p2)
    wide = tool({"type": "object", "properties": {k: {"type": "integer"} for k in arguments}})
    examined = counting(monkeypatch, certain, "swap_changes_meaning")
    mutate_report({"name": "f", "arguments": arguments}, wide, kinds=["logical_error"])
    assert examined[0] <= logical_error.MAX_SWAP_PAIRS


def test_swapped_arguments_still_proposes_every_pair_of_an_ordinary_call():
    names = ["origin", "destination", "carrier", "via", "currency", "gate", "terminal", "seat"]
    arguments = {name: f"{name} value" for name in names}
    spec = tool({"type": "object", "properties": {k: {"type": "string"} for k in names}})
    ctx = _context({"name": "f", "arguments": arguments}, spec, None, None)
    proposals = list(logical_error.swapped_arguments(ctx))
    assert len(proposals) == len(names) * (len(names) - 1) // 2


# F7: deep schemas

def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def nested_value(depth: int):
    value = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def test_a_schema_too_deep_is_a_tool_problem_and_schema_warnings_never_raises():
    deep = tool({"type": "object", "properties": {"deep": nested(150)}})
    call = {"name": "f", "arguments": {"deep": nested_value(150)}}
    message = f"tool.parameters: schema nested too deeply (over {MAX_SCHEMA_DEPTH} levels)"
    assert validate(call, deep) == [message]
    assert schema_warnings(deep) == [message]
    assert mutate_report(call, deep).impossible["type_error"].kind == "malformed_tool"
    # a graph shallow to read but whose checks nest 2,000 deep (allOf chains)
    defs = {"A0": {"type": "string"}} | {
        f"A{i}": {"allOf": [{"$ref": f"#/$defs/A{i - 1}"}]} for i in range(1, 2000)}
    chain = tool({"$defs": defs, "type": "object", "properties": {"x": {
        "anyOf": [{"$ref": f"#/$defs/A{i}"} for i in range(2000)],
        "allOf": [{"$ref": "#/$defs/A1999"}]}}})
    assert schema_warnings(chain) == ["tool.parameters: schema nested too deeply to compile"]


def test_a_schema_within_the_depth_limit_compiles_and_validates_from_a_deep_stack():
    within = tool({"type": "object", "properties": {"deep": nested(MAX_SCHEMA_DEPTH - 2)}})
    call = {"name": "f", "arguments": {"deep": nested_value(MAX_SCHEMA_DEPTH - 2)}}

    def from_depth(frames: int):
        return from_depth(frames - 1) if frames else (validate(call, within),
                                                      schema_warnings(within))

    assert from_depth(150) == ([], [])


def test_multiple_of_zero_or_negative_is_warned_and_ignored():
    for bad in (0, -2, "x"):
        spec = tool({"type": "object", "properties": {"n": {"type": "number", "multipleOf": bad}}})
        assert any("`multipleOf`" in w and "ignored" in w for w in schema_warnings(spec)), bad
        assert validate({"name": "f", "arguments": {"n": 3.7}}, spec) == []
    fine = tool({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 2}}})
    assert schema_warnings(fine) == []
