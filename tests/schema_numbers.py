"""The number fields of a config model, for the tests that require each to be bounded
(tests/datagen/test_config_bounds.py, tests/trainer/test_config.py)."""

from __future__ import annotations

from typing import Any, Iterator


def schema_numbers(model: Any, types: tuple[str, ...] = ("integer", "number")
                   ) -> dict[str, dict]:
    """Dotted path -> JSON schema of every field of `model` (a pydantic model class) whose
    type is one of `types`, through $refs, unions, tuples, lists and dict keys and values."""
    schema = model.model_json_schema()
    return dict(_walk(schema, schema.get("$defs", {}), types, ""))


def _walk(schema: dict, defs: dict, types: tuple[str, ...], path: str
          ) -> Iterator[tuple[str, dict]]:
    if "$ref" in schema:
        yield from _walk(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, types, path)
    if schema.get("type") in types:
        yield path, schema
    for key, child in schema.get("properties", {}).items():
        yield from _walk(child, defs, types, f"{path}.{key}".lstrip("."))
    for child in [*schema.get("anyOf", ()), *schema.get("prefixItems", ()),
                  *[schema[key] for key in ("items", "additionalProperties", "propertyNames")
                    if isinstance(schema.get(key), dict)]]:
        yield from _walk(child, defs, types, path)
