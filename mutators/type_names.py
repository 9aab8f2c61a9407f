"""Messy type names seen in real tool specs, mapped to JSON Schema.

Specs written by hand or generated from Python/TypeScript signatures say `int`, `float`,
`dict`, `List[str]`, `Optional[int]`, `string?`, `str | None`, `Integer`, `double`, `any`...
A strict validator that rejects such a spec is useless on real data, so each name is read the
way its author meant it and rewritten as a raw JSON Schema fragment, which `schema.normalise`
then treats like any other schema.
"""

from __future__ import annotations

from typing import Any

CANONICAL_TYPES = ("string", "integer", "number", "boolean", "object", "array", "null")

_ALIASES: dict[str, str] = {}
for _canonical, _names in {
    "string": "string str text char chars varchar character unicode bytes byte geopoint",
    "integer": "integer int long short bigint smallint tinyint int8 int16 int32 int64 uint "
               "uint8 uint16 uint32 uint64 i8 i16 i32 i64 u8 u16 u32 u64 usize isize",
    "number": "number float double decimal real numeric num float16 float32 float64 f32 f64",
    "boolean": "boolean bool",
    "object": "object dict dictionary map mapping hash hashmap record struct obj kwargs "
              "jsonobject json_object",
    "array": "array list tuple set frozenset sequence seq arr vector collection iterable",
    "null": "null none nonetype nil void",
}.items():
    for _name in _names.split():
        _ALIASES[_name] = _canonical

# Type names that are really a string with a format.
_FORMAT_TYPES = {"date": "date", "datetime": "date-time", "date-time": "date-time",
                 "time": "time", "email": "email", "uri": "uri", "url": "uri", "uuid": "uuid"}
# Type names that mean "anything" ("enum": the `enum` keyword next to it does the work).
_ANY_NAMES = {"any", "anything", "mixed", "*", "", "unknown", "json", "value", "typing.any",
              "enum"}
_OPTIONAL_GENERICS = {"optional", "nullable"}
_UNION_GENERICS = {"union", "oneof", "anyof"}
_LITERAL_GENERICS = {"literal", "enum"}


def _split_top_level(text: str, separator: str) -> list[str]:
    """Split on `separator` outside brackets: 'dict[str, int], str' -> ['dict[str, int]',
    ' str']."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in "[<(":
            depth += 1
        elif char in "]>)":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def union_of(fragments: list[dict[str, Any]]) -> dict[str, Any]:
    """One fragment accepting what any of `fragments` accepts (a type list when all are plain)."""
    if any(fragment == {} for fragment in fragments):
        return {}
    if len(fragments) == 1:
        return fragments[0]
    if all(set(fragment) == {"type"} for fragment in fragments):
        types: list[str] = []
        for fragment in fragments:
            names = fragment["type"]
            for name in names if isinstance(names, list) else [names]:
                if name not in types:
                    types.append(name)
        return {"type": types if len(types) > 1 else types[0]}
    return {"anyOf": fragments}


def _literal(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None, "null": None}.get(text.lower(), text)


def _generic(name: str, args: list[str]) -> dict[str, Any] | None:
    """`name[args]` or `name<args>` as a schema fragment."""
    if name in _LITERAL_GENERICS:
        return {"enum": [_literal(arg) for arg in args]}
    parsed = [parse_type_name(arg) for arg in args if arg.strip() not in ("...", "")]
    parsed = [fragment if fragment is not None else {} for fragment in parsed]
    if name in _OPTIONAL_GENERICS:
        return union_of([*parsed, {"type": "null"}])
    if name in _UNION_GENERICS:
        return union_of(parsed) if parsed else {}
    canonical = _ALIASES.get(name)
    if canonical == "array":
        items = union_of(parsed) if len(parsed) > 1 else (parsed[0] if parsed else {})
        return {"type": "array", "items": items} if items else {"type": "array"}
    if canonical == "object":
        value = parsed[-1] if len(parsed) == 2 else {}
        return {"type": "object", "additionalProperties": value if value else True}
    return None


def parse_type_name(name: Any) -> dict[str, Any] | None:
    """A raw JSON Schema fragment for a type name as written in a spec, or None when unknown.

    'int' -> {"type": "integer"}; 'Optional[str]' / 'string?' -> {"type": ["string", "null"]};
    'list[int]' / 'int[]' -> {"type": "array", "items": {"type": "integer"}}; 'any' -> {};
    'date' -> {"type": "string", "format": "date"}. Python classes (`int`) are read by name.
    """
    if isinstance(name, type):
        name = name.__name__
    if not isinstance(name, str):
        return None
    text = name.strip()
    lower = text.lower()
    if lower in _ANY_NAMES:
        return {}
    if lower in _ALIASES:
        return {"type": _ALIASES[lower]}
    if lower in _FORMAT_TYPES:
        return {"type": "string", "format": _FORMAT_TYPES[lower]}
    alternatives = _split_top_level(text, "|")
    if len(alternatives) > 1:
        parsed = [parse_type_name(alt) for alt in alternatives]
        return None if None in parsed else union_of(parsed)
    if lower.endswith("?"):
        inner = parse_type_name(text[:-1])
        return None if inner is None else union_of([inner, {"type": "null"}])
    if lower.endswith("[]"):
        inner = parse_type_name(text[:-2])
        return None if inner is None else {"type": "array", "items": inner}
    if lower.endswith(")") and " (" in lower:  # ToolBench: 'DATE (YYYY-MM-DD)', 'GEOPOINT (lat, lng)'
        head = parse_type_name(text[: text.index(" (")])
        if head is not None:
            return head
    for opener, closer in ("[]", "<>", "()"):
        if lower.endswith(closer) and opener in lower:
            head = lower[: lower.index(opener)].strip().rsplit(".", 1)[-1]
            body = text[text.index(opener) + 1: -1]
            return _generic(head, _split_top_level(body, ","))
    if "." in lower:  # typing.List, builtins.int, java.lang.String
        return parse_type_name(text.rsplit(".", 1)[-1])
    return None
