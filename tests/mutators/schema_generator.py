"""Random JSON Schemas (Draft 2020-12) and random instances for the differential test.

The schemas use every keyword the validator implements, combinators and conditionals
included, but stay inside the reading where this project means what JSON Schema means. The
intentional deviations (README "Validation rules") are left out:
- closed objects: an object schema with `properties` always states additionalProperties or
  unevaluatedProperties (this project closes such an object by default);
- the generous key policy: a schema that combines subschemas in place (allOf, anyOf, oneOf,
  if/then/else, dependentSchemas) closes itself only with `unevaluatedProperties`, and its
  branches say `additionalProperties: true` when they declare properties, unless the owner has
  unevaluatedProperties (this project merges the branches' keys into the owner's policy);
  subschemas of `not` never close (their key policy is not checked);
- `oneOf` is read as anyOf: its branches here have disjoint types;
- `properties`/`items` without a `type` mean an object/array: a type is always given;
- a null passes an enum that forgot it when the type lists null: no such schema;
- formats: only `date` and `ipv4` (jsonschema's checker, without optional packages, asserts
  date, email (an "@" anywhere), ipv4, ipv6, uuid; this project also checks date-time, time,
  uri, hostname and reads some leniently);
- multipleOf: dyadic steps only (jsonschema divides binary floats: 0.3 is not a multiple of
  0.1 there, it is here; 2**70 is a multiple of 1.5 there, exact arithmetic says no);
- patterns: ECMA-262 semantics here, Python's `re` there; the patterns and strings drawn
  agree under both (no `\\d`, `\\w`, no newlines in strings).

`Draws` hides where the randomness comes from: hypothesis (shrinkable) or `random.Random`.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from hypothesis import strategies as st

KEYS = ("a", "b", "c", "d")
STRINGS = ("", "a", "ab", "abc", "b", "ba", "c", "xy", "x1y", "é", "ab12", "2024-02-29",
           "2023-02-29", "２０２４-01-01", "2024-1-01", "10.0.0.1", "256.1.1.1", "01.2.3.4",
           "1.2.3.4 ")
NUMBERS = (0, 1, 2, 3, -1, 4.5, 1.5, 3.0, 0.25, 10, -2.5, 6, 2**70, 1e300)
PATTERNS = ("^a", "b$", "^[a-c]+$", "[0-9]", "^x.*y$", "^$", "c", "^(ab|ba)")
FORMATS = ("date", "ipv4")
MULTIPLES = (2, 3, 0.5, 0.25)
SCALAR_TYPES = ("string", "integer", "number", "boolean", "null")
ONE_OF_TYPES = ("string", "integer", "boolean", "null", "object", "array")
NAME_SCHEMAS = ({"enum": ["a", "b", "c"]}, {"pattern": "^[a-c]$"}, {"maxLength": 0},
                {"not": {"const": "d"}})
MAX_DEPTH = 3


class Draws:
    """Random choices from a hypothesis `data` object or a `random.Random`."""

    def __init__(self, data: Any = None, rng: random.Random | None = None) -> None:
        self.data, self.rng = data, rng

    def pick(self, options: Sequence[Any]) -> Any:
        if self.data is not None:
            return self.data.draw(st.sampled_from(options))
        return self.rng.choice(options)

    def count(self, low: int, high: int) -> int:
        if self.data is not None:
            return self.data.draw(st.integers(low, high))
        return self.rng.randint(low, high)

    def chance(self, percent: int) -> bool:
        return self.count(0, 99) < percent

    def subset(self, options: Sequence[Any], most: int) -> list[Any]:
        chosen = [option for option in options if self.chance(40)]
        return chosen[:most]


# Instances ---------------------------------------------------------------------------------

def random_value(d: Draws, depth: int = 0) -> Any:
    kind = d.pick(("string", "number", "scalar", "array", "object") if depth < 2 else
                  ("string", "number", "scalar"))
    if kind == "string":
        return d.pick(STRINGS)
    if kind == "number":
        return d.pick(NUMBERS)
    if kind == "scalar":
        return d.pick((True, False, None, 0, "a"))
    if kind == "array":
        return [random_value(d, depth + 1) for _ in range(d.count(0, 3))]
    return {key: random_value(d, depth + 1) for key in d.subset(KEYS, 3)}


def instance(d: Draws, schema: Any, depth: int = 0) -> Any:
    """A value shaped after `schema` half the time (so that many are valid), else random."""
    if not isinstance(schema, dict) or depth > 4 or d.chance(25):
        return random_value(d, depth)
    if "const" in schema and d.chance(70):
        return schema["const"]
    if "enum" in schema and d.chance(70):
        return d.pick(schema["enum"])
    branches = [*schema.get("allOf", ()), *schema.get("anyOf", ()), *schema.get("oneOf", ()),
                *[schema[k] for k in ("then", "else") if k in schema]]
    types = schema.get("type")
    if branches and (types is None or d.chance(50)):
        # objects made of several branches' instances: what unevaluatedProperties must count
        parts = [instance(d, branch, depth + 1) for branch in d.subset(branches, 3)
                 or [d.pick(branches)]]
        if types in (None, "object") and all(type(part) is dict for part in parts):
            merged = {}
            for part in parts:
                merged.update(part)
            return merged
        return parts[0]
    kind = d.pick(types) if isinstance(types, list) else types
    if kind == "object":
        properties = schema.get("properties", {})
        keys = [*schema.get("required", ()), *d.subset(list(properties) + list(KEYS), 3)]
        return {key: instance(d, properties.get(key, {}), depth + 1) for key in keys}
    if kind == "array":
        prefix = schema.get("prefixItems", [])
        size = d.count(0, 3)
        items = [instance(d, prefix[i] if i < len(prefix) else schema.get("items", {}),
                          depth + 1) for i in range(size)]
        if "contains" in schema and d.chance(50):  # what min/maxContains count
            items += [instance(d, schema["contains"], depth + 1) for _ in range(d.count(1, 3))]
        if items and d.chance(25):  # a repeated item: what uniqueItems forbids
            items.append(items[0])
        return items
    if kind == "string":
        return d.pick(STRINGS)
    if kind in ("integer", "number"):
        return d.pick(NUMBERS)
    if kind == "boolean":
        return d.pick((True, False))
    if kind == "null":
        return None
    return random_value(d, depth)


# Schemas -----------------------------------------------------------------------------------

def leaf(d: Draws) -> Any:
    kind = d.pick(("string", "number", "typed", "union", "enum", "const", "empty", "bool"))
    if kind == "string":
        out: dict[str, Any] = {"type": "string"}
        if d.chance(30):
            out["minLength"] = d.count(0, 2)
        if d.chance(30):
            out["maxLength"] = d.count(0, 3)
        if d.chance(40):
            out["pattern"] = d.pick(PATTERNS)
        if d.chance(30):
            out["format"] = d.pick(FORMATS)
        return out
    if kind == "number":
        out = {"type": d.pick(("integer", "number"))}
        for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if d.chance(25):
                out[keyword] = d.pick((-1, 0, 1, 1.5, 3, 10))
        if d.chance(40):
            out["multipleOf"] = d.pick(MULTIPLES)
        return out
    if kind == "typed":
        return {"type": d.pick(SCALAR_TYPES)}
    if kind == "union":
        return {"type": sorted({d.pick(SCALAR_TYPES), d.pick(("string", "integer", "array"))})}
    if kind == "enum":
        members = [d.pick((*STRINGS[:6], 1, 1.5, 3.0, True, None, [1], {"a": 1}))
                   for _ in range(d.count(1, 3))]
        if d.chance(30):
            return {"type": "string", "enum": members + ["a"]}
        return {"enum": members}
    if kind == "const":
        return {"const": d.pick(("a", 1, 1.0, 0, False, None, [1, "a"], {"a": 1}, []))}
    if kind == "empty":
        return {}
    return d.pick((True, False))


def schema(d: Draws, depth: int = 0, context: str = "standalone") -> Any:
    """A schema for a position: "standalone" (its own key policy applies: the root, property
    values, items...), "branch" (in place, its keys merged into the owner's policy) or "free"
    (in place, no key policy: under `not` or under an owner with unevaluatedProperties)."""
    if depth >= MAX_DEPTH or d.chance(25 + 20 * depth):  # shallow schemas: valid values exist
        return leaf(d)
    kind = d.pick(("object", "object", "array", "none", "scalar"))
    out: dict[str, Any] = leaf(d) if kind == "scalar" else {}
    if not isinstance(out, dict):
        return out
    if kind in ("object", "array"):
        out["type"] = kind
    closes = kind in ("object", "none") and context != "branch" and d.chance(35)
    inner = "free" if closes or context == "free" else "branch"
    add_applicators(d, out, depth, inner, objects=kind in ("object", "none"))
    if kind == "object":
        add_object_keywords(d, out, depth, context, closes)
    elif kind == "array":
        add_array_keywords(d, out, depth)
    if closes:
        out["unevaluatedProperties"] = False if d.chance(60) else leaf(d)
    elif kind == "none" and context == "branch" and d.chance(20):
        out["unevaluatedProperties"] = {"type": "integer"}  # opens: fine in a branch
    return out


def object_branch(d: Draws, context: str) -> dict:
    """A small object schema for an in-place branch: the shape that splits an object's keys
    over allOf/anyOf/if branches (what unevaluatedProperties and the key policy read)."""
    simple = ({}, {"type": "integer"}, {"type": "string"}, {"type": ["integer", "null"]})
    out: dict[str, Any] = {"type": "object", "properties": {
        key: d.pick(simple) if d.chance(70) else leaf(d) for key in d.subset(KEYS, 2) or ["a"]}}
    if d.chance(40):
        out["required"] = d.subset(list(out["properties"]), 1)
    if context == "branch" or d.chance(20):
        out["additionalProperties"] = True
    return out


def add_applicators(d: Draws, out: dict, depth: int, inner: str, objects: bool) -> None:
    if depth and d.chance(50):  # nested combinators are rarer than top-level ones
        return

    def branch() -> Any:
        if objects and d.chance(50):
            return object_branch(d, inner)
        return schema(d, depth + 1, inner)

    if d.chance(25):
        out["allOf"] = [branch() for _ in range(d.count(1, 2))]
    if d.chance(25):
        out["anyOf"] = [branch() for _ in range(d.count(1, 3))]
    if d.chance(15):
        types = []
        for _ in range(d.count(2, 3)):
            kind = d.pick(ONE_OF_TYPES)
            if kind not in types:
                types.append(kind)
        branches = [schema(d, depth + 1, inner) for _ in types]
        out["oneOf"] = [{**branch, "type": kind} if isinstance(branch, dict) and kind != "null"
                        else {"type": kind} for kind, branch in zip(types, branches)]
    if d.chance(15):
        out["not"] = schema(d, depth + 1, "free")
    if d.chance(25):
        out["if"] = branch()
        if d.chance(80):
            out["then"] = branch()
        if d.chance(60):
            out["else"] = branch()
    if objects and d.chance(20):
        out["dependentSchemas"] = {d.pick(KEYS): branch()}


def has_applicators(out: dict) -> bool:
    return any(key in out for key in ("allOf", "anyOf", "oneOf", "if", "dependentSchemas"))


def add_object_keywords(d: Draws, out: dict, depth: int, context: str, closes: bool) -> None:
    names = d.subset(KEYS, 3)
    if names:
        out["properties"] = {key: schema(d, depth + 1) for key in names}
    if d.chance(20):
        out["patternProperties"] = {"^[cd]$": schema(d, depth + 1)}
    if d.chance(50):
        out["required"] = d.subset(KEYS, 2)
    if d.chance(20):
        out["minProperties"] = d.count(0, 2)
    if d.chance(20):
        out["maxProperties"] = d.count(0, 3)
    if d.chance(15):
        out["propertyNames"] = d.pick(NAME_SCHEMAS)
    if d.chance(20):
        out["dependentRequired"] = {d.pick(KEYS): d.subset(KEYS, 2)}
    declares = "properties" in out or "patternProperties" in out
    if context == "standalone" and not closes and not has_applicators(out):
        if declares or d.chance(50):
            out["additionalProperties"] = d.pick((True, False, False, leaf(d)))
        if out.get("additionalProperties") is not True and "required" in out:
            # a required key is declared here, JSON Schema leaves it to additionalProperties
            out["required"] = [key for key in out["required"] if key in out.get("properties", {})]
    elif context == "standalone" and not closes:
        if declares or d.chance(30):
            out["additionalProperties"] = True
    elif context == "branch" and declares:
        out["additionalProperties"] = True
    elif d.chance(30):  # free, or closed by unevaluatedProperties: stating true is harmless
        out["additionalProperties"] = True


def add_array_keywords(d: Draws, out: dict, depth: int) -> None:
    if d.chance(40):
        out["prefixItems"] = [schema(d, depth + 1) for _ in range(d.count(1, 2))]
    if d.chance(50):
        out["items"] = schema(d, depth + 1) if d.chance(80) else d.pick((True, False))
    if d.chance(25):
        out["minItems"] = d.count(0, 2)
    if d.chance(25):
        out["maxItems"] = d.count(0, 3)
    if d.chance(25):
        out["uniqueItems"] = d.pick((True, False))
    if d.chance(30):
        out["contains"] = schema(d, depth + 1)
        if d.chance(50):
            out["minContains"] = d.pick((0, 2, 3))  # 1 is the default
        if d.chance(30):
            out["maxContains"] = d.count(0, 2)
    if d.chance(25):
        out["unevaluatedItems"] = False if d.chance(60) else leaf(d)
