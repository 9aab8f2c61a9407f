"""A real-world-like corpus of tool specs with gold calls, for measuring negatives.

The `specs_*.json` files are hand-written in the styles public function-calling data uses:
BFCL-like `"type": "dict"` roots, `float`/`tuple`/`any`/`List[str]`/`Optional[int]`/
`string?`/`Literal[...]` type names, defaults and allowed values stated in the description
("Defaults to 'cm'", "One of: 480p, 720p"), nested objects, arrays of objects, `$defs`,
numeric strings, dates in several formats, units. Each entry: `tool`, `calls` (gold
arguments) and `truth`, what a careful reader knows about the spec that the mutators must
find out for themselves:
- `defaults`: the default each description states in words, by schema path (`unit`,
  `items[].quantity`); "unknown" when the description names a default without a value
  ("defaults to the last trading day"). `default` keywords are read from the spec itself.
- `cosmetic`: arguments a task is indifferent to: display switches, optional extras,
  timeouts and retries.
- `symmetric`: argument pairs whose swap leaves the result as it was (gcd, distance).
- `enums`: the values a description lists as the allowed ones ("Either 'buy' or 'sell'"),
  by schema path; a logical error may only replace a listed value by another listed one.
- `same`: groups of values that name the same thing ("DE", "Germany"; "asc", "ascending";
  "Lakers", "Los Angeles Lakers"; "auto" with the values it would pick): a change within a
  group is no logical error.
- `no_default`: paths whose description says "default" without stating one (an enum member
  named 'default'), checked by hand.

`specs_wild.json` holds RapidAPI/ToolBench, MCP, Gorilla and Glaive styles. The rules were
first tuned on every file but `specs_untuned.json`, written after them and measured; that
set then became tuning data too, and `specs_heldout.json` (payments, calendars, maps,
messaging, devops in OpenAI-function, MCP `inputSchema`, ToolBench and BFCL styles) was
written before the next round of rule changes and measured, then tuned on once.
`specs_heldout2.json` (carts, HR/payroll, home automation, clinics, logistics, LMS, CI/CD,
analytics, banking, insurance, libraries, utilities, ...) was written after every rule change,
annotated from the specs alone and measured once; no rule is to be tuned on it.

`load_cases()` also derives two restyled variants of every spec, programmatically and
deterministically: (1) type names rewritten in other spellings (`int`, `Integer`,
`Optional[...]` for optional scalars) in an OpenAI `function` wrapper; (2) `default` and
`enum` keywords moved into the description in varied phrasings, in an Anthropic
`input_schema` wrapper. The truth moves with them.
"""

from __future__ import annotations

import copy
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
UNKNOWN = "unknown"  # a default named in words but without a readable value

_TYPE_SPELLINGS = {
    "string": ("str", "String", "string"), "integer": ("int", "Integer", "long"),
    "number": ("float", "double", "number"), "float": ("float", "double", "number"),
    "boolean": ("bool", "Boolean", "boolean"), "object": ("dict", "object"),
    "dict": ("dict", "object"), "array": ("list", "array"), "list": ("list", "array"),
}
_DEFAULT_PHRASES = ("Defaults to {q}.", "Default is {v}.", "The default is {q}.",
                    "default: {v}", "(default {v})", "If not specified, defaults to {q}.",
                    "Default value is {q}.")
_ENUM_PHRASES = ("One of {quoted}.", "Possible values: {bare}.", "Must be one of: {bare}.",
                 "Allowed values are {quoted}.", "Can be {quoted_or}.")


@dataclass(frozen=True)
class Truth:
    defaults: dict[str, Any] = field(default_factory=dict)
    cosmetic: frozenset[str] = frozenset()
    symmetric: tuple[frozenset[str], ...] = ()
    enums: dict[str, tuple] = field(default_factory=dict)
    same: tuple[tuple, ...] = ()


@dataclass(frozen=True)
class Case:
    """One gold call of one spec: `tool` as a mutator gets it, `parameters` its raw schema,
    `call` {"name", "arguments"}, `truth` as above, `origin` the file, index and variant."""

    tool: dict[str, Any]
    parameters: dict[str, Any]
    call: dict[str, Any]
    truth: Truth
    origin: str


def _truth(raw: dict[str, Any]) -> Truth:
    return Truth(dict(raw.get("defaults", {})), frozenset(raw.get("cosmetic", ())),
                 tuple(frozenset(pair) for pair in raw.get("symmetric", ())),
                 {path: tuple(members) for path, members in raw.get("enums", {}).items()},
                 tuple(tuple(group) for group in raw.get("same", ())))


def bare_spec(tool: dict[str, Any]) -> dict[str, Any]:
    """{name, description, parameters} from any of the three wrappers."""
    inner = tool.get("function", tool)
    parameters = next((inner[key] for key in ("parameters", "input_schema", "inputSchema")
                       if key in inner), None)
    return {"name": inner["name"], "description": inner.get("description", ""),
            "parameters": parameters}


def _properties(schema: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, dict, bool]]:
    """(schema path, property schema, required) of every property, nested ones included."""
    required = set(schema.get("required") or ())
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}{key}"
        yield path, sub, key in required
        yield from _nested(sub, path, schema)


def _nested(sub: dict[str, Any], path: str, root: dict[str, Any]) -> Iterator[tuple[str, dict, bool]]:
    if "properties" in sub:
        yield from _properties(sub, path + ".")
    items = sub.get("items")
    if isinstance(items, dict) and "properties" in items:
        yield from _properties(items, path + "[].")


def _restyle_types(parameters: dict[str, Any], rng: random.Random) -> None:
    """Type names in other spellings; optional scalars as Optional[...] now and then."""
    def respell(schema: dict[str, Any], optional: bool) -> None:
        kind = schema.get("type")
        if isinstance(kind, str) and kind in _TYPE_SPELLINGS:
            name = rng.choice(_TYPE_SPELLINGS[kind])
            scalar = kind not in ("object", "dict", "array", "list")
            if optional and scalar and "enum" not in schema and rng.random() < 0.4:
                name = f"Optional[{name}]"
            schema["type"] = name

    for _, sub, required in list(_properties(parameters)):
        respell(sub, not required)
        if isinstance(sub.get("items"), dict):
            respell(sub["items"], False)


def _render(value: Any, quoted: bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'" if quoted else value
    return json.dumps(value)


def _into_prose(parameters: dict[str, Any], defaults: dict[str, Any],
                enums: dict[str, tuple], rng: random.Random) -> None:
    """`default` and string `enum` keywords moved into the description (recorded in
    `defaults` / `enums`)."""
    for path, sub, _ in list(_properties(parameters)):
        text = sub.get("description", "").rstrip()
        if isinstance(sub.get("enum"), list) and all(isinstance(m, str) for m in sub["enum"]):
            members = sub.pop("enum")
            enums[path] = tuple(members)
            quoted = [f"'{m}'" for m in members]
            text += " " + rng.choice(_ENUM_PHRASES).format(
                quoted=", ".join(quoted), bare=", ".join(members),
                quoted_or=", ".join(quoted[:-1]) + " or " + quoted[-1])
        if "default" in sub:
            value = sub.pop("default")
            defaults[path] = value
            phrase = rng.choice(_DEFAULT_PHRASES)
            text += " " + phrase.format(q=_render(value, True), v=_render(value, False))
        if text.strip():
            sub["description"] = text.strip()


def _variants(entry: dict[str, Any], index: int) -> Iterator[tuple[str, dict, Truth]]:
    truth = _truth(entry.get("truth", {}))
    yield "as-written", entry["tool"], truth
    spec = bare_spec(entry["tool"])
    rng = random.Random(f"variant:{index}:{spec['name']}")
    typed = copy.deepcopy(spec)
    _restyle_types(typed["parameters"], rng)
    yield "respelled-types", {"type": "function", "function": typed}, truth
    prose = copy.deepcopy(spec)
    defaults, enums = dict(truth.defaults), dict(truth.enums)
    _into_prose(prose["parameters"], defaults, enums, rng)
    yield "prose-defaults", {"name": prose["name"], "description": prose["description"],
                             "input_schema": prose["parameters"]}, Truth(
        defaults, truth.cosmetic, truth.symmetric, enums, truth.same)


def load_entries() -> list[tuple[str, dict[str, Any]]]:
    entries = []
    for path in sorted(HERE.glob("specs_*.json")):
        entries += [(f"{path.stem}[{i}]", entry)
                    for i, entry in enumerate(json.loads(path.read_text()))]
    return entries


def load_cases(variants: bool = True) -> list[Case]:
    """Every gold call of every spec (and, with `variants`, of its two restyled variants)."""
    cases = []
    for index, (where, entry) in enumerate(load_entries()):
        for variant, tool, truth in _variants(entry, index):
            if not variants and variant != "as-written":
                continue
            spec = bare_spec(tool)
            for number, arguments in enumerate(entry["calls"]):
                cases.append(Case(tool, spec["parameters"],
                                  {"name": spec["name"], "arguments": copy.deepcopy(arguments)},
                                  truth, f"{where} call {number} ({variant})"))
    return cases


_MENTIONS_DEFAULT = re.compile(r"default|if (?:not|omitted)|is used by", re.IGNORECASE)


def unannotated_defaults(entry: dict[str, Any]) -> list[str]:
    """Paths whose description speaks of a default that `truth.defaults` does not record
    (a check on the corpus itself: a forgotten annotation would skew the checker)."""
    truth = entry.get("truth", {}).get("defaults", {})
    checked = set(entry.get("truth", {}).get("no_default", ()))
    spec = bare_spec(entry["tool"])
    missing = []
    for path, sub, _ in _properties(spec["parameters"]):
        text = sub.get("description", "")
        if _MENTIONS_DEFAULT.search(text) and path not in truth and "default" not in sub \
                and path not in checked:
            missing.append(path)
    return missing
