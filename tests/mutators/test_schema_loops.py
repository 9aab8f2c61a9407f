"""Schemas whose subschemas apply each other to the same value in a loop ($ref cycles through
allOf/anyOf/not/if, or $refs to $refs): a tool error naming the loop, found when the schema
is loaded (they were "value nested too deeply" on every call, or quietly accepted anything);
recursion that descends into a property or item is unchanged."""

from __future__ import annotations

import time

import pytest

from mutators import ALL_KINDS, KINDS, mutate_report, schema_warnings, validate
from mutators import node_graph
from mutators.compile import compile_schema
from mutators.validate import load_tool, validate_detailed


def tool(parameters: dict) -> dict:
    return {"name": "f", "description": "d", "parameters": parameters}


def under_x(defs: dict, first: str) -> dict:
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": f"#/$defs/{first}"}}}


LOOPS = {
    "two $refs": ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                   "$ref": "#/$defs/a"}, "#/$defs/a -> #/$defs/b -> #/$defs/a"),
    "$ref to itself": (under_x({"a": {"$ref": "#/$defs/a"}}, "a"), "#/$defs/a -> #/$defs/a"),
    "$ref with siblings": (under_x({"a": {"$ref": "#/$defs/b", "minimum": 1},
                                    "b": {"$ref": "#/$defs/a"}}, "a"),
                           "#/$defs/a -> #/$defs/b -> #/$defs/a"),
    "root allOf": ({"allOf": [{"$ref": "#"}]}, "# -> #"),
    "object root allOf": ({"type": "object", "properties": {"q": {"type": "integer"}},
                           "allOf": [{"$ref": "#"}]}, "# -> #"),
    "anyOf and allOf": (under_x({"A": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/B"}]},
                                 "B": {"allOf": [{"$ref": "#/$defs/A"}]}}, "A"),
                        "#/$defs/A -> #/$defs/B -> #/$defs/A"),
    "oneOf": (under_x({"O": {"oneOf": [{"type": "integer"}, {"$ref": "#/$defs/O"}]}}, "O"),
              "#/$defs/O -> #/$defs/O"),
    "not": (under_x({"N": {"not": {"$ref": "#/$defs/N"}}}, "N"), "#/$defs/N -> #/$defs/N"),
    "three refs": (under_x({"a": {"allOf": [{"$ref": "#/$defs/b"}]},
                            "b": {"anyOf": [{"$ref": "#/$defs/c"}]},
                            "c": {"not": {"not": {"$ref": "#/$defs/a"}}}}, "a"),
                   "#/$defs/a -> #/$defs/b -> #/$defs/c -> #/$defs/a"),
    "if": (under_x({"I": {"if": {"$ref": "#/$defs/I"}, "then": {"minimum": 1}}}, "I"),
           "#/$defs/I -> #/$defs/I"),
    "else": (under_x({"E": {"if": {"type": "string"}, "else": {"$ref": "#/$defs/E"}}}, "E"),
             "#/$defs/E -> #/$defs/E"),
    "dependentSchemas": (under_x({"D": {"dependentSchemas": {"k": {"$ref": "#/$defs/D"}}}}, "D"),
                         "#/$defs/D -> #/$defs/D"),
    "nullable $ref": (under_x({"a": {"anyOf": [{"$ref": "#/$defs/b", "nullable": True}]},
                               "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "a"),
                      "#/$defs/a -> #/$defs/b -> #/$defs/a"),
}


@pytest.mark.parametrize("name", list(LOOPS))
def test_an_in_place_loop_is_a_tool_error_naming_the_loop(name):
    parameters, loop = LOOPS[name]
    call = {"name": "f", "arguments": {"x": 5, "q": 1}}
    errors = validate_detailed(call, tool(parameters))
    assert [(e.path, e.reason) for e in errors] == [("tool.parameters", "malformed")]
    assert f"schema loops on the same value: {loop} (" in errors[0].message
    assert schema_warnings(tool(parameters)) == [errors[0].message]
    assert validate({"name": "f", "arguments": {}}, tool(parameters)) == [errors[0].message]
    report = mutate_report(call, tool(parameters), kinds=ALL_KINDS)
    assert not report.negatives
    assert {kind: rejected.kind for kind, rejected in report.impossible.items()} == {
        kind: "malformed_tool" for kind in ALL_KINDS}
    assert loop in report.impossible["type_error"].detail


def test_a_dict_that_contains_itself_in_place_is_named_without_refs():
    parameters: dict = {"type": "object"}
    parameters["allOf"] = [parameters]  # not JSON, but a Python spec can do it
    message, = schema_warnings(tool(parameters))
    assert message.startswith("tool.parameters: schema loops on the same value: "
                              "a subschema applies itself (")


def test_a_long_loop_is_shortened_in_the_message():
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{(i + 1) % 40}"}]} for i in range(40)}
    message, = schema_warnings(tool(under_x(defs, "d0")))
    assert "#/$defs/d0 -> #/$defs/d1 -> " in message and " -> #/$defs/d0 (" in message
    assert "(40 refs)" in message and len(message) < 600


TREE = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "size": {"type": "integer", "minimum": 0},
    "children": {"type": "array", "items": {"$ref": "#"}}}}


def test_recursion_that_descends_into_the_value_still_validates_and_mutates():
    tree = tool(TREE)
    value = {"name": "root", "size": 3, "children": [
        {"name": "a", "size": 1, "children": [{"name": "b", "size": 2}]}]}
    assert schema_warnings(tree) == []
    assert validate({"name": "f", "arguments": value}, tree) == []
    value["children"][0]["children"][0]["size"] = "2"
    assert validate({"name": "f", "arguments": value}, tree) == [
        "arguments.children[0].children[0].size: expected integer, got string"]
    value["children"][0]["children"][0]["size"] = 2
    report = mutate_report({"name": "f", "arguments": value}, tree, seed=3)
    assert sorted(n.kind for n in report.negatives) == sorted(KINDS), report.impossible


@pytest.mark.parametrize("parameters, valid, invalid", [
    # a loop through anyOf that enters an item before it comes back
    ({"$defs": {"L": {"anyOf": [{"type": "string"},
                                {"type": "array", "items": {"$ref": "#/$defs/L"}}]}},
      "type": "object", "properties": {"x": {"$ref": "#/$defs/L"}}},
     {"x": [["a", ["b"]], "c"]}, {"x": [["a", [1]]]}),
    # allOf beside a recursive property, additionalProperties and propertyNames back to #
    ({"type": "object", "allOf": [{"properties": {"id": {"type": "integer"}}}],
      "properties": {"id": {}, "next": {"$ref": "#"}}},
     {"id": 1, "next": {"id": 2, "next": {"id": 3}}}, {"id": 1, "next": {"id": "2"}}),
    ({"type": "object", "additionalProperties": {"$ref": "#"}}, {"a": {"b": {}}}, {"a": {"b": 1}}),
    ({"type": ["object", "string"], "propertyNames": {"$ref": "#"},
      "additionalProperties": {"type": "integer"}}, {"a": 1}, {"a": "x"}),
])
def test_loops_through_a_property_or_item_are_not_errors(parameters, valid, invalid):
    assert schema_warnings(tool(parameters)) == []
    assert validate({"name": "f", "arguments": valid}, tool(parameters)) == []
    assert validate({"name": "f", "arguments": invalid}, tool(parameters)) != []
    assert not validate({"name": "f", "arguments": invalid}, tool(parameters))[0].startswith(
        "tool.parameters")


def ladder(combinator: str, depth: int) -> dict:
    """24 levels of two $refs to the next level, the last one back to the first through an
    item: 2^depth paths, recursive, and legal."""
    defs = {f"L{i}": {combinator: [{"$ref": f"#/$defs/L{i + 1}"}] * 2} for i in range(depth)}
    defs[f"L{depth}"] = {"type": "array", "items": {"$ref": "#/$defs/L0"}}
    return tool({"type": "object", "$defs": defs, "properties": {"a": {"$ref": "#/$defs/L0"}}})


def count_in_place(monkeypatch) -> list[int]:
    """[how many times the loop search has asked a node for its in-place subschemas]"""
    visits = [0]
    original = node_graph.in_place

    def counted(node):
        visits[0] += 1
        return original(node)

    monkeypatch.setattr(node_graph, "in_place", counted)
    return visits


@pytest.mark.parametrize("combinator", ["anyOf", "allOf"])
def test_the_loop_search_visits_each_node_once(monkeypatch, combinator):
    visits = count_in_place(monkeypatch)
    start = time.perf_counter()
    loaded = load_tool(ladder(combinator, 24))
    assert time.perf_counter() - start < 2  # 2^24 paths; compiles in ms
    assert not isinstance(loaded, Exception) and loaded.schema.error is None
    assert 0 < visits[0] <= 30, visits  # 24 levels + leaf, item, root, property
    if combinator == "anyOf":  # (allOf tries all 2^24 paths: the check budget stops it)
        assert validate({"name": "f", "arguments": {"a": [[]]}}, ladder(combinator, 24)) == []


def test_a_large_schema_pays_one_pass_for_the_loop_search(monkeypatch):
    """2,000 properties, each an allOf of a $ref into a chain of 30 shared defs: the search
    asks each node once (~7 ms, a few % of the compile; timed with a wide margin)."""
    defs = {f"D{i}": {"type": "object", "properties": {"v": {"type": "integer"}},
                      **({"allOf": [{"$ref": f"#/$defs/D{i + 1}"}]} if i < 29 else {})}
            for i in range(30)}
    parameters = {"type": "object", "$defs": defs, "properties": {
        f"p{i}": {"allOf": [{"$ref": f"#/$defs/D{i % 30}"}], "description": str(i)}
        for i in range(2000)}}
    visits = count_in_place(monkeypatch)
    compiled = compile_schema(parameters)
    assert compiled.error is None
    assert visits[0] <= 1 + 2000 + 2 * 30, visits  # root, properties, defs and their `v`
    start = time.perf_counter()
    assert node_graph.in_place_cycle(compiled.root) is None
    assert time.perf_counter() - start < 1
