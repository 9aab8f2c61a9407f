"""Validator: closed objects, combinators, $ref, tool spec shapes and structured errors."""

from __future__ import annotations

import json

from mutators import clear_cache, compile_schema, validate, validate_detailed


def tool(parameters: dict, name: str = "t", wrapped: bool = True) -> dict:
    function = {"name": name, "description": "test", "parameters": parameters}
    return {"type": "function", "function": function} if wrapped else function


def found(parameters: dict, arguments) -> list[tuple[str, str]]:
    return [(e.path, e.reason) for e in
            validate_detailed({"name": "t", "arguments": arguments}, tool(parameters))]


OBJ = {"type": "object", "properties": {"customer_id": {"type": "string"},
                                        "limit": {"type": "integer"}}, "required": ["customer_id"]}


def test_undeclared_key_is_an_error_by_default():
    assert found(OBJ, {"customer_id": "C-1", "user_id": "x"}) == [("arguments.user_id", "unknown_key")]
    message = validate({"name": "t", "arguments": {"customer_id": "C", "user_id": 1}}, tool(OBJ))
    assert message == ["arguments.user_id: unknown key (not in schema; allowed: customer_id, limit)"]


def test_required_reported_at_the_missing_key():
    assert found(OBJ, {}) == [("arguments.customer_id", "required")]


def test_draft3_required_on_property():
    schema = {"type": "object", "properties": {"a": {"type": "string", "required": True}}}
    assert found(schema, {}) == [("arguments.a", "required")]


def test_additional_properties_true_and_schema():
    assert found({**OBJ, "additionalProperties": True}, {"customer_id": "C", "extra": [1]}) == []
    typed = {**OBJ, "additionalProperties": {"type": "integer"}}
    assert found(typed, {"customer_id": "C", "extra": 1}) == []
    assert found(typed, {"customer_id": "C", "extra": "x"}) == [("arguments.extra", "type")]


def test_pattern_properties_declare_keys():
    schema = {"type": "object", "properties": {"a": {"type": "string"}},
              "patternProperties": {"^x-": {"type": "integer"}}}
    assert found(schema, {"a": "v", "x-trace": 3}) == []
    assert found(schema, {"x-trace": "3"}) == [("arguments.x-trace", "type")]
    assert found(schema, {"other": 1}) == [("arguments.other", "unknown_key")]


def test_object_without_properties_is_free_form():
    schema = {"type": "object", "properties": {"meta": {"type": "object"}}}
    assert found(schema, {"meta": {"anything": [1, 2]}}) == []
    assert found({"type": "object"}, {"any": 1}) == []
    assert found({"type": "object", "additionalProperties": False}, {"any": 1}) == [
        ("arguments.any", "unknown_key")]


def test_missing_type_with_properties_means_object():
    schema = {"properties": {"a": {"properties": {"b": {"type": "int"}}}}}
    assert found(schema, {"a": {"b": 1}}) == []
    assert found(schema, {"a": "x"}) == [("arguments.a", "type")]
    assert found(schema, {"a": {"c": 1}}) == [("arguments.a.c", "unknown_key")]


def test_nested_arrays_of_objects():
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {
        "type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
        "required": ["sku"]}}}}
    assert found(schema, {"items": [{"sku": "a", "qty": 1}]}) == []
    assert found(schema, {"items": [{"sku": "a"}, {"qty": "2", "color": "red"}]}) == [
        ("arguments.items[1].qty", "type"), ("arguments.items[1].color", "unknown_key"),
        ("arguments.items[1].sku", "required")]


def test_tuple_items_and_prefix_items():
    old = {"type": "object", "properties": {"p": {"type": "array", "items": [
        {"type": "number"}, {"type": "number"}], "additionalItems": False}}}
    assert found(old, {"p": [1, 2]}) == []
    assert found(old, {"p": [1, "2"]}) == [("arguments.p[1]", "type")]
    assert found(old, {"p": [1, 2, 3]}) == [("arguments.p", "length")]
    new = {"type": "object", "properties": {"p": {"prefixItems": [{"type": "string"}],
                                                  "items": {"type": "integer"}}}}
    assert found(new, {"p": ["a", 1, 2]}) == []
    assert found(new, {"p": [1]}) == [("arguments.p[0]", "type")]


PYDANTIC_OPTIONAL = {
    "type": "object",
    "properties": {"address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}],
                               "default": None}},
    "$defs": {"Address": {"type": "object", "title": "Address", "required": ["city"],
                          "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}}},
}


def test_optional_model_anyof_ref():
    assert found(PYDANTIC_OPTIONAL, {"address": None}) == []
    assert found(PYDANTIC_OPTIONAL, {"address": {"city": "Oslo"}}) == []
    assert found(PYDANTIC_OPTIONAL, {"address": {"city": 1}}) == [("arguments.address.city", "type")]
    assert found(PYDANTIC_OPTIONAL, {"address": {"city": "O", "zipcode": "1"}}) == [
        ("arguments.address.zipcode", "unknown_key")]
    assert found(PYDANTIC_OPTIONAL, {"address": 5}) == [("arguments.address", "type")]
    assert validate({"name": "t", "arguments": {"address": True}}, tool(PYDANTIC_OPTIONAL)) == [
        "arguments.address: expected object or null, got boolean"]


def test_discriminated_oneof_reports_the_matching_branch():
    schema = {"type": "object", "properties": {"shape": {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
         "required": ["kind", "r"]},
        {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number"}},
         "required": ["kind", "w"]}]}}}
    assert found(schema, {"shape": {"kind": "rect", "w": 2}}) == []
    assert found(schema, {"shape": {"kind": "rect", "w": "2"}}) == [("arguments.shape.w", "type")]
    assert found(schema, {"shape": {"kind": "rect", "w": 2, "r": 1}}) == [
        ("arguments.shape.r", "unknown_key")]


def test_oneof_overlap_is_tolerated():
    schema = {"type": "object", "properties": {"n": {"oneOf": [{"type": "number"}, {"type": "integer"}]}}}
    assert found(schema, {"n": 3}) == []


def test_anyof_with_shared_base_properties():
    schema = {"type": "object", "properties": {"mode": {"type": "string"}},
              "anyOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                        {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]}
    assert found(schema, {"mode": "x", "a": 1}) == []
    assert found(schema, {"mode": "x", "b": 1}) == []
    assert ("arguments.c", "unknown_key") in found(schema, {"mode": "x", "a": 1, "c": 1})


def test_allof_merges_declared_keys():
    schema = {"allOf": [{"$ref": "#/definitions/Base"},
                        {"properties": {"extra": {"type": "boolean"}}}],
              "definitions": {"Base": {"type": "object", "properties": {"id": {"type": "string"}},
                                       "required": ["id"]}}}
    assert found(schema, {"id": "1", "extra": True}) == []
    assert found(schema, {"id": "1", "other": True}) == [("arguments.other", "unknown_key")]
    assert found(schema, {"extra": True}) == [("arguments.id", "required")]


def test_recursive_ref():
    schema = {"type": "object", "properties": {"tree": {"$ref": "#/$defs/Node"}},
              "$defs": {"Node": {"type": "object", "properties": {
                  "value": {"type": "integer"},
                  "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}}
    deep = {"value": 1, "children": [{"value": 2, "children": [{"value": "3"}]}]}
    assert found(schema, {"tree": deep}) == [("arguments.tree.children[0].children[0].value", "type")]


def test_recursive_ref_under_unevaluated_properties():
    # both the checks and the evaluated-keys functions of a recursive $ref bind late
    schema = {"type": "object", "properties": {"tree": {"$ref": "#/$defs/Node"}},
              "$defs": {"Node": {"type": "object", "unevaluatedProperties": False,
                                 "properties": {"value": {"type": "integer"}},
                                 "allOf": [{"properties": {"children": {
                                     "type": "array", "items": {"$ref": "#/$defs/Node"}}}}]}}}
    deep = {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}
    assert found(schema, {"tree": deep}) == []
    deep["children"][0]["children"][0]["extra"] = True
    assert found(schema, {"tree": deep}) == [
        ("arguments.tree.children[0].children[0].extra", "unknown_key")]


def test_ref_with_nullable_and_unresolvable_ref():
    schema = {"type": "object", "properties": {
        "a": {"$ref": "#/$defs/A", "nullable": True}, "b": {"$ref": "#/nowhere"}},
        "$defs": {"A": {"type": "string"}}}
    assert found(schema, {"a": None, "b": {"anything": 1}}) == []
    assert found(schema, {"a": 1}) == [("arguments.a", "type")]


def test_properties_given_as_a_list_and_string_shorthand():
    schema = {"type": "object", "properties": [{"name": "q", "type": "str", "required": True}]}
    assert found(schema, {"q": "x"}) == []
    assert found(schema, {}) == [("arguments.q", "required")]
    assert found({"type": "object", "properties": {"n": "int"}}, {"n": "1"}) == [("arguments.n", "type")]


def test_tool_shapes_and_name():
    params = {"type": "object", "properties": {"q": {"type": "string"}}}
    call = {"name": "search", "arguments": {"q": "x"}}
    assert validate(call, tool(params, "search")) == []
    assert validate(call, tool(params, "search", wrapped=False)) == []
    assert validate(call, {"name": "search", "input_schema": params}) == []
    assert validate(call, {"name": "search", "inputSchema": params}) == []  # MCP
    assert validate({"name": "search", "arguments": {"q": 1}},
                    {"name": "search", "inputSchema": params}) == [
        "arguments.q: expected string, got integer"]
    assert validate(call, tool(params, "find")) == ['name: expected "find", got "search"']
    assert [e.reason for e in validate_detailed(call, tool(params, "find"))] == ["name"]


def test_toolbench_type_names_with_an_annotation_are_their_type():
    schema = {"type": "object", "properties": {"day": {"type": "DATE (YYYY-MM-DD)"},
                                               "at": {"type": "GEOPOINT (latitude, longitude)"},
                                               "n": {"type": "NUMBER"}}}
    assert found(schema, {"day": "2024-01-31", "at": "48.85,2.35", "n": 2.5}) == []
    assert sorted(found(schema, {"day": 20240131, "at": [48.85, 2.35], "n": "2"})) == [
        ("arguments.at", "type"), ("arguments.day", "type"), ("arguments.n", "type")]


def test_no_parameters_means_no_arguments():
    assert validate({"name": "ping"}, {"name": "ping"}) == []
    assert validate({"name": "ping", "arguments": None}, {"name": "ping"}) == []
    assert [e.reason for e in validate_detailed({"name": "ping", "arguments": {"x": 1}},
                                                {"name": "ping"})] == ["unknown_key"]


def test_validation_error_fields():
    [error] = validate_detailed({"name": "t", "arguments": {"customer_id": 5}}, tool(OBJ))
    assert (error.path, error.reason) == ("arguments.customer_id", "type")
    assert error.message == "arguments.customer_id: expected string, got integer" == str(error)


def test_compiled_once_per_schema_identity_and_content():
    params = {"type": "object", "properties": {"a": {"type": "string"}}}
    same_content = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert compile_schema(params) is compile_schema(params)
    assert compile_schema(params) is compile_schema(same_content)



def test_schemas_differing_only_in_an_infinite_bound_are_compiled_apart():
    # orjson writes inf, -inf and nan all as null: whichever was compiled first served both
    def bounded(maximum: str) -> dict:
        text = '{"type": "object", "properties": {"n": {"type": "number", "maximum": M}}}'
        return json.loads(text.replace("M", maximum))  # 1e400 is legal JSON, read as inf

    high, low = bounded("1e400"), bounded("-1e400")
    for first in (high, low):
        clear_cache()
        compile_schema(first)
        assert found(high, {"n": 3}) == []
        assert found(low, {"n": 3}) == [("arguments.n", "range")]
    assert compile_schema(high) is compile_schema(bounded("1e400"))  # still cached by content

def test_odd_keys_are_quoted_in_paths():
    schema = {"type": "object", "properties": {"a.b": {"type": "string"}}}
    assert found(schema, {"a.b": 1}) == [('arguments["a.b"]', "type")]
