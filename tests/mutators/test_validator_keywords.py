"""The conditional and applicator keywords (if/then/else, dependentRequired/dependentSchemas
and draft-7 `dependencies`, contains/minContains/maxContains, propertyNames,
unevaluatedProperties/unevaluatedItems): errors at the right path with the right reason, and
warnings, never silence, for keywords that would change validation but are not read."""

from __future__ import annotations

from mutators import schema_warnings, validate, validate_detailed


def tool(parameters: dict) -> dict:
    return {"name": "t", "parameters": parameters}


def problems(parameters: dict, arguments) -> list[tuple[str, str]]:
    return [(e.path, e.reason) for e in validate_detailed({"name": "t", "arguments": arguments},
                                                         tool(parameters))]


DELIVERY = {"type": "object", "properties": {
    "method": {"enum": ["pickup", "courier"]}, "address": {"type": "string"},
    "store_id": {"type": "string"}},
    "required": ["method"],
    "if": {"properties": {"method": {"const": "courier"}}},
    "then": {"required": ["address"]}, "else": {"required": ["store_id"]},
    "additionalProperties": False}


def test_if_then_else_picks_the_branch_by_the_condition():
    assert problems(DELIVERY, {"method": "courier", "address": "1 Main St"}) == []
    assert problems(DELIVERY, {"method": "courier"}) == [("arguments.address", "required")]
    assert problems(DELIVERY, {"method": "pickup"}) == [("arguments.store_id", "required")]
    assert problems(DELIVERY, {"method": "pickup", "store_id": "S-1"}) == []


def test_dependencies_require_keys_or_schemas_when_a_key_is_present():
    schema = {"type": "object", "properties": {"card": {"type": "string"},
                                               "billing": {"type": "string"},
                                               "cvv": {"type": "integer"}},
              "dependentRequired": {"card": ["billing"]},
              "dependentSchemas": {"cvv": {"required": ["card"]}},
              "additionalProperties": False}
    assert problems(schema, {"billing": "x"}) == []
    errors = validate({"name": "t", "arguments": {"card": "4111"}}, tool(schema))
    assert errors == ['arguments.billing: missing key, required when "card" is present']
    assert problems(schema, {"cvv": 123, "billing": "x"}) == [("arguments.card", "required")]
    draft7 = {**schema, "dependencies": schema["dependentRequired"]}
    del draft7["dependentRequired"]
    assert problems(draft7, {"card": "4111"}) == [("arguments.billing", "required")]


def test_contains_counts_matching_items():
    schema = {"type": "object", "properties": {"tags": {
        "type": "array", "contains": {"const": "urgent"}, "minContains": 1, "maxContains": 2}}}
    assert problems(schema, {"tags": ["urgent", "x"]}) == []
    assert problems(schema, {"tags": ["x"]}) == [("arguments.tags", "contains")]
    assert problems(schema, {"tags": ["urgent"] * 3}) == [("arguments.tags", "contains")]
    assert problems({**schema, "properties": {"tags": {
        "type": "array", "contains": {"const": "urgent"}, "minContains": 0}}}, {"tags": []}) == []


def test_property_names_are_checked_as_strings():
    schema = {"type": "object", "propertyNames": {"pattern": "^[a-z_]+$"},
              "additionalProperties": {"type": "integer"}}
    assert problems(schema, {"retry_count": 3}) == []
    assert problems(schema, {"Retry-Count": 3}) == [("arguments.Retry-Count", "property_name")]


def test_unevaluated_properties_see_the_keys_of_passing_branches_only():
    schema = {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}},
              "anyOf": [{"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}},
                        {"properties": {"kind": {"const": "b"}, "y": {"type": "integer"}}}],
              "unevaluatedProperties": False}
    assert problems(schema, {"kind": "a", "x": 1}) == []
    assert problems(schema, {"kind": "a", "y": 1}) == [("arguments.y", "unknown_key")]
    items = {"type": "object", "properties": {"pair": {
        "type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
        "unevaluatedItems": False}}}
    assert problems(items, {"pair": ["a", 1]}) == []
    assert problems(items, {"pair": ["a", 1, 2]}) == [("arguments.pair[2]", "forbidden")]


def test_keywords_that_would_change_validation_but_are_not_read_are_warned_about():
    warnings = schema_warnings(tool({"type": "object", "properties": {
        "a": {"type": "string", "maxlength": 3},
        "b": {"$dynamicRef": "#node"},
        "c": {"type": "integer", "then": {"minimum": 1}}},
        "additional_properties": False}))
    assert any("`maxlength`" in w and "`maxLength`" in w for w in warnings), warnings
    assert any("`additional_properties`" in w for w in warnings), warnings
    assert any("`$dynamicRef` is not supported" in w for w in warnings), warnings
    assert any("without `if`" in w for w in warnings), warnings
    assert schema_warnings(tool(DELIVERY)) == []
    assert schema_warnings(tool({"type": "object", "x-order": 1, "example": {}})) == []
