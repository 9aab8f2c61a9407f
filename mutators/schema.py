"""Normalise a tool's JSON Schema (as found in the wild) into a graph of `Node`s.

Real specs mix drafts (`definitions` and `$defs`, boolean `exclusiveMinimum`, `required: true`
on a property, tuple-form `items`), OpenAPI (`nullable`) and plain mistakes (`"type": "int"`,
a bare `"string"` as a property schema, `properties` given as a list). `normalise` reads each
the way its author meant it, records what it had to guess in `warnings`, and never raises.
The validator (`compile.py`) and the mutators work on the resulting `Node`s only. `$ref`s are
resolved into shared `Node` objects, so recursive schemas become cyclic graphs.

A schema nested more than MAX_SCHEMA_DEPTH levels deep (subschema in subschema; a `$ref` and
its target count as two) is not read: `NormalisedSchema.error` says so, and the tool is
reported as unusable (`validate`: `tool.parameters: schema nested too deeply (over 100
levels)`). Compiling a level takes two to three times the Python stack that checking a value
level does, and values are checked to about 300 levels (Python's recursion limit; deeper:
"value nested too deeply"), so 100 keeps every readable schema compilable and its values
checkable. Real tool schemas nest fewer than 10 levels.

Subschemas that apply each other to the same value in a loop can never be checked (JSON
Schema leaves it undefined; a validator recurses until the stack runs out), so the tool is
refused with `loop_error`, naming the loop by its `$ref`s: `$ref`s that lead back to
themselves without reaching a schema are found here, loops through allOf/anyOf/not/if in the
`Node` graph (`node_graph.in_place_cycle`, called by `compile.py`).
"""

from __future__ import annotations

import math
from reprlib import recursive_repr
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from mutators.jsonvalues import render
from mutators.safe_regex import SafeRegex, compile_safe
from mutators.schema_keywords import keyword_warnings
from mutators.type_names import CANONICAL_TYPES, union_of, parse_type_name

MAX_SCHEMA_DEPTH = 100
_ANNOTATIONS = {"description", "title", "default", "examples", "$comment", "deprecated",
                "readOnly", "writeOnly", "$id", "$schema", "$anchor"}


@dataclass(eq=False, slots=True, repr=False)
class Node:
    """One normalised schema. A keyword that only applies to one JSON type (minLength,
    properties, ...) is checked only for values of that type, as in JSON Schema."""

    types: tuple[str, ...] | None = None        # canonical JSON types; None: any type
    properties: dict[str, Node] = field(default_factory=dict)
    has_properties: bool = False                # `properties`/`patternProperties` declared
    required: tuple[str, ...] = ()
    additional: bool | Node | None = None       # explicit additionalProperties; None: unstated
    pattern_properties: tuple[tuple[SafeRegex, Node], ...] = ()
    items: Node | None = None
    prefix_items: tuple[Node, ...] = ()
    enum: tuple | None = None
    const: tuple | None = None                  # (value,) when the schema has `const`
    any_of: tuple[Node, ...] = ()               # anyOf and oneOf (oneOf is read as anyOf)
    all_of: tuple[Node, ...] = ()
    not_: Node | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    multiple_of: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    min_properties: int | None = None
    max_properties: int | None = None
    unique_items: bool = False
    items_true: bool = False                    # `items: true`: every item is evaluated
    contains: Node | None = None
    min_contains: int | None = None             # applies with `contains` only (default 1)
    max_contains: int | None = None
    if_: Node | None = None                     # if/then/else (`if` alone still annotates)
    then: Node | None = None
    else_: Node | None = None
    dependent_required: tuple[tuple[str, tuple[str, ...]], ...] = ()
    dependent_schemas: tuple[tuple[str, Node], ...] = ()
    property_names: Node | None = None
    unevaluated_properties: Node | None = None  # `false` is a Node with never=True
    unevaluated_items: Node | None = None
    pattern: SafeRegex | None = None
    format: str | None = None
    default: tuple | None = None                # (value,) when the schema has `default`
    examples: tuple = ()
    never: bool = False                         # the `false` schema: no value is valid
    description: str = ""
    memo: dict[str, Any] = field(default_factory=dict)  # derived facts (introspect.py caches)


    @recursive_repr()
    def __repr__(self) -> str:
        """Only the keywords that differ from the defaults (the full repr is unreadable)."""
        blank = _BLANK
        shown = [f"{name}={getattr(self, name)!r}" for name in Node.__slots__
                 if name != "memo" and getattr(self, name) != getattr(blank, name)]
        return f"Node({', '.join(shown)})"


_BLANK = Node()


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


class _TooDeep(Exception):
    """The schema nests deeper than MAX_SCHEMA_DEPTH (caught in `normalise`)."""


class _RefLoop(Exception):
    """`$ref`s lead back to themselves without reaching a schema (caught in `normalise`)."""


def loop_error(refs: list[str]) -> str:
    """The tool error for subschemas that apply each other to the same value in a loop:
    `refs` names it ([a, b, a]); empty when no `$ref` is in it (a dict that contains
    itself)."""
    names = [ref if len(ref) <= 60 else ref[:57] + "..." for ref in refs]
    if len(names) > 8:
        names = [*names[:4], f"... ({len(refs) - 1} refs)", *names[-2:]]
    shown = " -> ".join(names) if names else "a subschema applies itself"
    return (f"schema loops on the same value: {shown} (through $ref/allOf/anyOf/oneOf/not/if/"
            "dependentSchemas without entering a property or item, so checking a value can "
            "recurse forever)")


def _count(value: Any) -> int | None:
    """A non-negative count (minLength, maxItems...); None when absent or not a finite number
    (`"inf"` would overflow `int()`). Ints of any size stay exact; messages abbreviate them."""
    number = _number(value)
    if number is None or (type(number) is float and not math.isfinite(number)) or number < 0:
        return None
    return int(number)


class _Normaliser:
    """Walks a raw schema once; memoised by object identity so `$ref` cycles terminate."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.memo: dict[int, Node] = {}
        self.keepalive: list[Any] = [root]  # ids in `memo` must not be reused by temporaries
        self.warnings: list[str] = []
        self.time_budgeted = False  # a pattern runs on the time-budgeted fallback engine
        self.resolving: list[tuple[int, str]] = []  # ($ref target's id, the $ref) being read
        self.ref_names: dict[int, str] = {}  # node id -> the first $ref to it (to name a loop)
        self.depth = 0  # subschemas being read, one inside the other

    def warn(self, where: str, message: str) -> None:
        self.warnings.append(f"{where}: {message}")

    def node(self, raw: Any, where: str) -> Node:
        if raw is True or raw is None:
            return Node()
        if raw is False:
            return Node(never=True)
        if isinstance(raw, (str, type, list)):
            fragment = self.type_fragment(raw, where)
            self.keepalive.append(fragment)
            return self.node(fragment, where)
        if not isinstance(raw, dict):
            self.warn(where, f"schema is a {type(raw).__name__}, not an object; accepting any")
            return Node()
        known = self.memo.get(id(raw))
        if known is not None:
            return known
        if self.depth >= MAX_SCHEMA_DEPTH:
            raise _TooDeep(where)
        self.depth += 1
        try:
            if "$ref" in raw:
                return self.ref_node(raw, where)
            node = Node()
            self.memo[id(raw)] = node
            self.fill(node, raw, where)
            return node
        finally:
            self.depth -= 1

    def type_fragment(self, type_value: Any, where: str) -> dict[str, Any]:
        """The schema fragment for a `type` value: a name, a class, or a list of names."""
        names = type_value if isinstance(type_value, list) else [type_value]
        fragments = []
        for name in names:
            fragment = parse_type_name(name)
            if fragment is None:
                self.warn(where, f"unknown type name {render(name)}; accepting any value")
                fragment = {}
            fragments.append(fragment)
        return union_of(fragments) if fragments else {}

    def ref_node(self, raw: dict[str, Any], where: str) -> Node:
        ref = raw["$ref"]
        target = self.resolve(ref)
        if target is None:
            self.warn(where, f"cannot resolve $ref {render(ref)}; accepting any value")
            target = {}
            self.keepalive.append(target)
        elif id(target) not in self.memo:  # a schema being read is memoised, a $ref is not
            self.check_ref_loop(id(target), ref)
        self.resolving.append((id(target), ref))
        try:
            target_node = self.node(target, f"{where}.$ref")  # memo: recursion ends here
        finally:
            self.resolving.pop()
        self.ref_names.setdefault(id(target_node), ref)
        nullable = raw.get("nullable") is True or raw.get("x-nullable") is True
        siblings = {k: v for k, v in raw.items()
                    if k not in ("$ref", "nullable", "x-nullable") and k not in _ANNOTATIONS}
        node = target_node
        if siblings:  # the target applies in place, beside the siblings (as in 2020-12):
            self.keepalive.append(siblings)  # unevaluatedProperties there sees its keys
            node = self.node(siblings, where)
            node.all_of = (target_node, *node.all_of)
        if nullable:
            node = Node(any_of=(node, Node(types=("null",))))
        return node

    def check_ref_loop(self, target: int, ref: str) -> None:
        """Raise `_RefLoop` when the `$ref` being read is already being resolved: `$ref`s
        back to it without a schema in between."""
        for index, (resolving, _) in enumerate(self.resolving):
            if resolving == target:
                raise _RefLoop(loop_error([name for _, name in self.resolving[index:]] + [ref]))

    def resolve(self, ref: Any) -> Any:
        """A local `$ref` (`#`, `#/$defs/X`, `#/definitions/X`, any JSON pointer); a bare or
        remote name falls back to `$defs`/`definitions` of the root, as its author meant."""
        if not isinstance(ref, str):
            return None
        base, _, fragment = ref.partition("#")
        if fragment.startswith("/") or (fragment == "" and base == ""):
            target = self.root
            for token in fragment.split("/")[1:]:
                token = unquote(token).replace("~1", "/").replace("~0", "~")
                if isinstance(target, dict) and token in target:
                    target = target[token]
                elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                    target = target[int(token)]
                else:
                    return None
            return target
        name = (fragment or base).rstrip("/").rsplit("/", 1)[-1].removesuffix(".json")
        for defs_key in ("$defs", "definitions"):
            defs = self.root.get(defs_key) if isinstance(self.root, dict) else None
            if isinstance(defs, dict) and name in defs:
                return defs[name]
        return None

    def fill(self, node: Node, raw: dict[str, Any], where: str) -> None:
        for warning in keyword_warnings(raw):
            self.warn(where, warning)
        raw = self.apply_type(node, raw, where)
        self.fill_object(node, raw, where)
        self.fill_array(node, raw, where)
        self.fill_values(node, raw, where)
        self.fill_combinators(node, raw, where)
        self.fill_conditionals(node, raw, where)
        self.fill_scalars(node, raw, where)
        if node.types is None and (node.has_properties or isinstance(node.additional, Node)):
            node.types = ("object",)  # properties without a type: the author meant an object
        elif node.types is None and (node.items is not None or node.prefix_items):
            node.types = ("array",)
        if raw.get("nullable") is True or raw.get("x-nullable") is True:
            self.make_nullable(node)

    def apply_type(self, node: Node, raw: dict[str, Any], where: str) -> dict[str, Any]:
        """Set `node.types`; a compound type name (`List[int]`) adds its keywords to `raw`."""
        if "type" not in raw or raw["type"] is None:
            return raw
        type_value = raw["type"]
        merged = {k: v for k, v in raw.items() if k != "type"}
        self.keepalive.append(merged)
        if isinstance(type_value, dict):
            self.warn(where, "`type` is an object; reading it as a nested schema")
            node.all_of += (self.node(type_value, f"{where}.type"),)
            return merged
        fragment = self.type_fragment(type_value, where)
        if "type" in fragment:
            names = fragment["type"] if isinstance(fragment["type"], list) else [fragment["type"]]
            node.types = tuple(n for n in CANONICAL_TYPES if n in names) or None
        extra = {k: v for k, v in fragment.items() if k != "type"}
        if any(key in merged for key in extra):  # the spec also says it: check both
            self.keepalive.append(extra)
            node.all_of += (self.node(extra, where),)
        else:
            merged.update(extra)
        return merged

    def fill_object(self, node: Node, raw: dict[str, Any], where: str) -> None:
        properties = raw.get("properties")
        required: list[str] = []
        if isinstance(properties, list):  # [{"name": "x", "type": ...}, ...]
            self.warn(where, "`properties` is a list; reading items by their `name`")
            properties = {p["name"]: {k: v for k, v in p.items() if k != "name"}
                          for p in properties
                          if isinstance(p, dict) and isinstance(p.get("name"), str)}
            self.keepalive.append(properties)
        if isinstance(properties, dict):
            node.has_properties = True
            for key, sub in properties.items():
                node.properties[str(key)] = self.node(sub, f"{where}.properties.{key}")
                if isinstance(sub, dict) and sub.get("required") is True:  # draft-3 style
                    required.append(str(key))
        elif properties is not None:
            self.warn(where, "`properties` is not an object; ignored")
        raw_required = raw.get("required")
        if isinstance(raw_required, str):
            raw_required = [raw_required]
        if isinstance(raw_required, list):
            required.extend(r for r in raw_required if isinstance(r, str))
        node.required = tuple(dict.fromkeys(required))
        additional = raw.get("additionalProperties")
        if isinstance(additional, bool):
            node.additional = additional
        elif additional is not None:
            node.additional = self.node(additional, f"{where}.additionalProperties")
        patterns = raw.get("patternProperties")
        if isinstance(patterns, dict):
            node.has_properties = True
            for pattern, sub in patterns.items():
                compiled = self.pattern(str(pattern), where, "patternProperties regex")
                if compiled is None:
                    continue
                sub_node = self.node(sub, f"{where}.patternProperties")
                node.pattern_properties += ((compiled, sub_node),)
        node.min_properties = _count(raw.get("minProperties"))
        node.max_properties = _count(raw.get("maxProperties"))

    def fill_array(self, node: Node, raw: dict[str, Any], where: str) -> None:
        items, prefix = raw.get("items"), raw.get("prefixItems")
        if isinstance(items, list):  # draft-4 tuple form
            prefix, items = items, raw.get("additionalItems")
        if isinstance(prefix, list):
            node.prefix_items = tuple(self.node(s, f"{where}.prefixItems") for s in prefix)
        stated_max = _count(raw.get("maxItems"))
        if items is False:  # nothing past the prefix: a bound, kept with any smaller maxItems
            node.max_items = min(len(node.prefix_items), stated_max if stated_max is not None
                                 else len(node.prefix_items))
        else:
            node.max_items = stated_max
            node.items_true = items is True
            if items is not None and items is not True:
                node.items = self.node(items, f"{where}.items")
        node.min_items = _count(raw.get("minItems"))
        node.unique_items = raw.get("uniqueItems") is True
        if "contains" in raw:
            node.contains = self.node(raw["contains"], f"{where}.contains")
            node.min_contains = _count(raw.get("minContains"))
            node.max_contains = _count(raw.get("maxContains"))
        if "unevaluatedItems" in raw:
            node.unevaluated_items = self.node(raw["unevaluatedItems"],
                                               f"{where}.unevaluatedItems")

    def fill_values(self, node: Node, raw: dict[str, Any], where: str) -> None:
        enum = raw.get("enum")
        if isinstance(enum, (list, tuple)) and enum:
            node.enum = tuple(enum)
        elif enum is not None and not isinstance(enum, (list, tuple, dict)):
            node.enum = (enum,)
        elif enum is not None:
            self.warn(where, "empty or malformed `enum`; ignored")
        if "const" in raw:
            node.const = (raw["const"],)
        if "default" in raw:
            node.default = (raw["default"],)
        examples = raw.get("examples")
        if isinstance(examples, list):
            node.examples = tuple(examples)
        elif "example" in raw:
            node.examples = (raw["example"],)
        if isinstance(raw.get("description"), str):
            node.description = raw["description"]

    def fill_combinators(self, node: Node, raw: dict[str, Any], where: str) -> None:
        def branches(key: str) -> tuple[Node, ...]:
            value = raw.get(key)
            if value is None:
                return ()
            if not isinstance(value, list) or not value:
                self.warn(where, f"`{key}` is not a non-empty list; ignored")
                return ()
            return tuple(self.node(s, f"{where}.{key}[{i}]") for i, s in enumerate(value))

        any_of, one_of = branches("anyOf"), branches("oneOf")
        node.all_of += branches("allOf")
        if any_of and one_of:
            node.all_of += (Node(any_of=one_of),)
        node.any_of = any_of or one_of
        if "not" in raw:
            node.not_ = self.node(raw["not"], f"{where}.not")

    def fill_conditionals(self, node: Node, raw: dict[str, Any], where: str) -> None:
        """if/then/else, dependentRequired/dependentSchemas (and draft-7 `dependencies`),
        propertyNames, unevaluatedProperties."""
        if "if" in raw:
            node.if_ = self.node(raw["if"], f"{where}.if")
            if "then" in raw:
                node.then = self.node(raw["then"], f"{where}.then")
            if "else" in raw:
                node.else_ = self.node(raw["else"], f"{where}.else")
        required, schemas = [], []
        for keyword in ("dependencies", "dependentRequired", "dependentSchemas"):
            value = raw.get(keyword)
            if value is not None and not isinstance(value, dict):
                self.warn(where, f"`{keyword}` is not an object; ignored")
                continue
            for key, dependency in (value or {}).items():
                names = keyword == "dependentRequired" or (
                    keyword == "dependencies" and isinstance(dependency, list))
                if names and isinstance(dependency, list):
                    required.append((str(key), tuple(str(d) for d in dependency)))
                elif names:
                    self.warn(where, f"`{keyword}.{key}` is not a list of names; ignored")
                else:
                    schemas.append((str(key), self.node(dependency, f"{where}.{keyword}.{key}")))
        node.dependent_required, node.dependent_schemas = tuple(required), tuple(schemas)
        if "propertyNames" in raw:
            node.property_names = self.node(raw["propertyNames"], f"{where}.propertyNames")
        if "unevaluatedProperties" in raw:
            node.unevaluated_properties = self.node(raw["unevaluatedProperties"],
                                                    f"{where}.unevaluatedProperties")

    def fill_scalars(self, node: Node, raw: dict[str, Any], where: str) -> None:
        node.minimum, node.maximum = _number(raw.get("minimum")), _number(raw.get("maximum"))
        low, high = raw.get("exclusiveMinimum"), raw.get("exclusiveMaximum")
        if low is True:  # draft-4: a boolean that makes `minimum` exclusive
            node.exclusive_minimum, node.minimum = node.minimum, None
        else:
            node.exclusive_minimum = _number(low)
        if high is True:
            node.exclusive_maximum, node.maximum = node.maximum, None
        else:
            node.exclusive_maximum = _number(high)
        multiple = _number(raw.get("multipleOf"))
        node.multiple_of = multiple if multiple and multiple > 0 else None
        if "multipleOf" in raw and node.multiple_of is None:
            self.warn(where, f"`multipleOf` {render(raw['multipleOf'])} is not a number above 0; "
                             "ignored")
        node.min_length = _count(raw.get("minLength"))
        node.max_length = _count(raw.get("maxLength"))
        pattern = raw.get("pattern")
        if isinstance(pattern, str):
            node.pattern = self.pattern(pattern, where, "pattern")
        if isinstance(raw.get("format"), str):
            node.format = raw["format"].strip().lower()

    def pattern(self, pattern: str, where: str, keyword: str) -> SafeRegex | None:
        """The compiled pattern, or None with a warning saying why it is ignored."""
        compiled = compile_safe(pattern)
        if isinstance(compiled, str):
            self.warn(where, f"{keyword} {render(pattern)} ignored: {compiled}")
            return None
        self.time_budgeted |= compiled.engine == "regex"
        return compiled

    @staticmethod
    def make_nullable(node: Node) -> None:
        """OpenAPI `nullable: true`: null is accepted whatever else the schema says."""
        if node.all_of or node.not_ is not None or node.const is not None:
            inner = Node()  # too constrained to patch: `node` becomes anyOf(inner, null)
            for name in Node.__slots__:
                if name == "memo":
                    continue
                setattr(inner, name, getattr(node, name))
                setattr(node, name, getattr(_BLANK, name) if name != "properties" else {})
            node.any_of, node.description = (inner, Node(types=("null",))), inner.description
            return
        if node.types is not None and "null" not in node.types:
            node.types += ("null",)
        if node.enum is not None and None not in node.enum:
            node.enum += (None,)
        if node.any_of:
            node.any_of += (Node(types=("null",)),)


@dataclass(slots=True)
class NormalisedSchema:
    root: Node
    warnings: tuple[str, ...]
    time_budgeted: bool = False  # some pattern needs `safe_regex.new_call()` per validation
    error: str | None = None     # why the schema cannot be used at all (then `root` is empty)
    ref_names: dict[int, str] = field(default_factory=dict)  # see _Normaliser.ref_names


def normalise(parameters: Any, where: str = "parameters") -> NormalisedSchema:
    """The `Node` graph of a tool's `parameters` schema plus what had to be guessed. A missing
    schema (None) means "no parameters": a closed, empty object."""
    if parameters is None:
        return NormalisedSchema(Node(types=("object",), has_properties=True), ())
    normaliser = _Normaliser(parameters)
    try:
        root = normaliser.node(parameters, where)
    except _TooDeep:
        return NormalisedSchema(Node(), tuple(normaliser.warnings),
                                error=f"schema nested too deeply (over {MAX_SCHEMA_DEPTH} levels)")
    except _RefLoop as loop:
        return NormalisedSchema(Node(), tuple(normaliser.warnings), error=str(loop))
    return NormalisedSchema(root, tuple(normaliser.warnings), normaliser.time_budgeted,
                            ref_names=normaliser.ref_names)
