"""Compile a normalised schema into a tree of closures, once per schema, and cache it.

Validation sits on the hot path (every teacher step, every candidate negative), so a schema is
turned once into nested closures that test exactly what the schema says, with fast paths for
the common leaves (`{"type": "string"}`, a string enum). The cache is keyed first by the
identity of the `parameters` dict (the dict is held, so its id cannot be reused), then by a
content fingerprint, so tools rebuilt per task still hit. Schemas are treated as immutable
once seen; a spec edited in place must be passed as a new dict.

A schema whose checks can multiply (its `$ref`s loop, or written out as a tree it would be
huge) is compiled with counted checks: one validation may run at most a budget of them
(`check_budget.py`). One whose subschemas apply each other to the same value in a loop
(`node_graph.in_place_cycle`) is not compiled: no check could finish, so it is an error.
"""

from __future__ import annotations

import pickle
import re
from dataclasses import dataclass
from typing import Any

import orjson

from mutators.applicator_checks import (conditional_check, contains_check, dependency_check,
                                        property_names_check, unevaluated_items_check,
                                        unevaluated_properties_check)
from mutators.check_budget import (UNFOLDED_LIMIT, SchemaTooComplex, counted,
                                   with_budget)
from mutators.evaluated import Evaluation
from mutators.introspect import (accepted_types, base_policy, describe_types, group_policy,
                                 merge_policies)
from mutators.jsonvalues import PY_TYPE_TAG, NOT_JSON, json_type, render, type_label
from mutators.keyword_checks import (Check, Err, json_check, key_errors, number_check,
                                     pattern_miss, string_check, under, unique_check,
                                     unknown_key_detail, value_check)
from mutators.late_memo import LateBoundMemo
from mutators.node_graph import in_place_cycle, unfolded_size
from mutators.safe_regex import UNDECIDED
from mutators.schema import Node, NormalisedSchema, loop_error, normalise

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "object": (dict,), "array": (list, tuple), "null": (type(None),),
}
_CANONICAL_PY = {"string": str, "integer": int, "number": float, "boolean": bool,
                 "object": dict, "array": list, "null": type(None)}


def _never(value: Any) -> list[Err]:
    return [Err("forbidden", "no value is allowed here (the schema is `false`)")]


class Compiler:
    """Builds and memoises one check per (node, keyed). `keyed` checks enforce the object's
    key policy; branch checks (inside anyOf/allOf) leave keys to the object that owns them.
    `budgeted`: every check built spends from the validation's budget (`check_budget.py`)."""

    def __init__(self, budgeted: bool = False) -> None:
        self.budgeted = budgeted
        self.wrap = counted if budgeted else None
        self._checks = LateBoundMemo(self.wrap)  # a recursive $ref gets its check bound late
        self.evaluation = Evaluation(self)  # for unevaluatedProperties / unevaluatedItems

    def check(self, node: Node, keyed: bool = True) -> Check:
        return self._checks.get((id(node), keyed), lambda: self._build(node, keyed))

    def _build(self, node: Node, keyed: bool) -> Check:
        if node.never:
            return _never
        per_type = self._per_type(node, keyed)
        extras = [c for c in (value_check(node), self._all_of(node), self._any_of(node, keyed),
                              self._not(node), conditional_check(self, node)) if c is not None]
        accepted = None if node.types is None else frozenset(
            t for name in node.types for t in _PY_TYPES[name])
        integral_float = accepted is not None and int in accepted and float not in accepted
        label = describe_types(node.types)

        def check(value: Any) -> list[Err] | None:
            py_type = type(value)
            if py_type not in PY_TYPE_TAG:
                tag = json_type(value)
                if tag == NOT_JSON:
                    return [Err("malformed", f"non-JSON value of type {py_type.__name__}")]
                py_type = _CANONICAL_PY[tag]
            if accepted is not None and py_type not in accepted and not (
                    integral_float and py_type is float and value.is_integer()):
                return [Err("type", f"expected {label}, got {type_label(value)}")]
            sub = per_type.get(py_type)
            errors = sub(value) if sub is not None else None
            for extra in extras:
                found = extra(value)
                if found:
                    errors = found if errors is None else errors + found
            return errors

        return self._with_fast_path(node, check, per_type, extras, accepted)

    @staticmethod
    def _with_fast_path(node: Node, check: Check, per_type: dict, extras: list,
                        accepted: frozenset | None) -> Check:
        """Skip the general check for values that are obviously fine (a str for a plain
        string, a member of a string enum)."""
        if accepted is not None and not per_type and not extras:
            fast = accepted - {float}  # floats still need the finiteness check
            return lambda value: None if type(value) in fast else check(value)
        if accepted is not None and not extras and len(per_type) == 1:
            (only_type, only_check), = per_type.items()  # e.g. a string with a pattern
            if only_type in accepted and only_type is not float:
                return lambda value: only_check(value) if type(value) is only_type else check(value)
        only_enum = (node.enum is not None and len(extras) == 1 and str not in per_type
                     and node.const is None)
        if only_enum and (accepted is None or str in accepted):
            strings = frozenset(m for m in node.enum if type(m) is str)
            return lambda value: None if type(value) is str and value in strings else check(value)
        return check

    def _per_type(self, node: Node, keyed: bool) -> dict[type, Check]:
        types = node.types or ("string", "number", "object", "array")
        checks: dict[type, Check] = {}
        if "string" in types and (found := string_check(node)) is not None:
            checks[str] = found
        if "number" in types or "integer" in types or node.types is None:
            checks[float] = number_check(node)
            if any(b is not None for b in (node.minimum, node.maximum, node.exclusive_minimum,
                                           node.exclusive_maximum, node.multiple_of)):
                checks[int] = checks[float]
        # an untyped node whose anyOf branches or enum validate the value needs no JSON-only
        # pass (allOf does not count: the object's key policy is checked here, not there)
        delegated = node.types is None and bool(
            node.any_of or node.enum is not None or node.const is not None)
        has_array_keywords = (node.items is not None or node.prefix_items or node.unique_items
                              or node.min_items is not None or node.max_items is not None
                              or node.contains is not None or node.unevaluated_items is not None)
        if "array" in types and not (delegated and not has_array_keywords):
            checks[list] = checks[tuple] = _all_of_checks(
                self._array(node), contains_check(self, node), unevaluated_items_check(self, node))
        if "object" in types and not (delegated and not _has_object_keywords(node)):
            checks[dict] = _all_of_checks(
                self._object(node, keyed), dependency_check(self, node),
                property_names_check(self, node), unevaluated_properties_check(self, node))
        return checks

    def _array(self, node: Node) -> Check:
        items = self.check(node.items) if node.items is not None else json_check
        prefix = [self.check(p) for p in node.prefix_items]
        low, high, unique = node.min_items, node.max_items, node.unique_items

        def check(array: list) -> list[Err] | None:
            errors = None
            if low is not None and len(array) < low:
                errors = [Err("length", f"{len(array)} items, fewer than minItems {render(low)}")]
            if high is not None and len(array) > high:
                errors = [Err("length", f"{len(array)} items, more than maxItems {render(high)}")]
            for index, item in enumerate(array):
                found = (prefix[index] if index < len(prefix) else items)(item)
                if found:
                    errors = (errors or []) + under(found, index)
            if unique and (found := unique_check(array)):
                errors = (errors or []) + found
            return errors

        return check

    def _object(self, node: Node, keyed: bool) -> Check:
        """Own properties, required, patternProperties, min/maxProperties and (for a keyed
        check without anyOf) the key policy; with anyOf the policy is checked per branch."""
        properties = {key: self.check(sub) for key, sub in node.properties.items()}
        patterns = [(pattern, self.check(sub)) for pattern, sub in node.pattern_properties]
        required, low, high = node.required, node.min_properties, node.max_properties
        policy = base_policy(node) if keyed and not node.any_of and _own_key_policy(node) else None
        extra = self.check(policy.extra) if policy is not None and policy.extra else None
        unknown_detail = unknown_key_detail(policy) if policy is not None else ""
        closed = policy is not None and policy.vote == "closed"

        def check(obj: dict) -> list[Err] | None:
            errors = None
            for key, value in obj.items():
                sub = properties.get(key)
                if sub is not None:
                    found = sub(value)
                    if found:
                        errors = (errors or []) + under(found, key)
                    if not patterns:
                        continue
                matched = sub is not None  # a named key also meets the patterns it matches
                for pattern, sub in patterns:
                    hit = pattern.search(key) if type(key) is str else None
                    if hit:
                        matched = True
                        if found := sub(value):
                            errors = (errors or []) + under(found, key)
                    elif hit is UNDECIDED:
                        matched = True
                        errors = (errors or []) + under([pattern_miss(pattern, key, hit)], key)
                if matched or policy is None or (type(key) is str and key in policy.declared):
                    continue
                if closed and type(key) is str and not policy.patterns:  # the common case
                    found = under([Err("unknown_key", unknown_detail)], key)
                else:
                    found = key_errors({key: value}, policy, extra, unknown_detail)
                if found:
                    errors = (errors or []) + found
            for key in required:
                if key not in obj:
                    errors = (errors or []) + under([Err("required", "missing required key")], key)
            if low is not None and len(obj) < low:
                errors = (errors or []) + [Err("length", f"object has fewer than {render(low)} keys")]
            if high is not None and len(obj) > high:
                errors = (errors or []) + [Err("length", f"object has more than {render(high)} keys")]
            return errors

        if not closed and not properties and not patterns and not required and extra is None \
                and low is None and high is None:
            return json_check
        return check

    def _all_of(self, node: Node) -> Check | None:
        if not node.all_of:
            return None
        branches = [self.check(branch, keyed=False) for branch in node.all_of]

        def check(value: Any) -> list[Err] | None:
            errors = None
            for branch in branches:
                if found := branch(value):
                    errors = (errors or []) + found
            return errors

        return check

    def _any_of(self, node: Node, keyed: bool) -> Check | None:
        """anyOf/oneOf: valid when one branch accepts (oneOf overlap is tolerated). For an
        object at a keyed node, a branch accepts only if the keys fit base + that branch.
        When all fail, the errors of the most plausible branch are reported."""
        if not node.any_of:
            return None
        branches = [self.check(branch, keyed=False) for branch in node.any_of]
        branch_types = [accepted_types(branch) for branch in node.any_of]
        union = None if None in branch_types else frozenset().union(*branch_types)
        policies = [merge_policies(base_policy(node), group_policy(branch))
                    for branch in node.any_of] if keyed and _own_key_policy(node) else []
        extras = [self.check(p.extra) if p.extra else None for p in policies]
        unknown_details = [unknown_key_detail(p) for p in policies]

        def check(value: Any) -> list[Err] | None:
            failures = []
            for index, branch in enumerate(branches):
                errors = branch(value)
                if policies and type(value) is dict:
                    found = key_errors(value, policies[index], extras[index],
                                       unknown_details[index])
                    errors = (errors or []) + found if found else errors
                if not errors:
                    return None
                failures.append(errors)
            return _best_failure(value, failures, branch_types, union)

        return check

    def _not(self, node: Node) -> Check | None:
        if node.not_ is None:
            return None
        inner = self.check(node.not_, keyed=False)
        return lambda value: None if inner(value) else [
            Err("not", "value matches a schema it must not match (`not`)")]


def _own_key_policy(node: Node) -> bool:
    """Whether the project's key policy (introspect.py) decides which keys `node` allows. Not
    where the schema says `unevaluatedProperties`: that is JSON Schema's own way to close an
    object across allOf/anyOf/$ref, and its check alone decides, exactly as the standard says
    (keys of every passing anyOf branch count, not of one)."""
    return node.unevaluated_properties is None


def _has_object_keywords(node: Node) -> bool:
    return bool(node.properties or node.pattern_properties or node.required
                or node.has_properties or node.additional is not None
                or node.min_properties is not None or node.max_properties is not None
                or node.dependent_required or node.dependent_schemas
                or node.property_names is not None or node.unevaluated_properties is not None)


def _all_of_checks(first: Check, *more: Check | None) -> Check:
    """One check running `first` and every other given check, errors concatenated (just
    `first` when the others are absent, as they are for almost every schema)."""
    rest = [check for check in more if check is not None]
    if not rest:
        return first
    checks = [first, *rest]

    def check(value: Any) -> list[Err] | None:
        errors = None
        for sub in checks:
            if found := sub(value):
                errors = found if errors is None else errors + found
        return errors

    return check


def _best_failure(value: Any, failures: list[list[Err]], branch_types: list,
                  union: frozenset | None) -> list[Err]:
    """Errors of the branch the value was most likely meant for: one that accepts its JSON
    type, with the fewest unknown keys, then the fewest errors. No such branch: a type error."""
    tag = json_type(value)
    integral = tag == "number" and value == value and float(value).is_integer()
    fits = [i for i, types in enumerate(branch_types)
            if types is None or tag in types or (integral and "integer" in types)]
    if not fits:
        return [Err("type", f"expected {describe_types(union)}, got {type_label(value)}")]
    best = min(fits, key=lambda i: (sum(e.reason == "unknown_key" for e in failures[i]),
                                    len(failures[i]), i))
    return failures[best]


@dataclass(slots=True)
class CompiledSchema:
    """A tool's parameters schema, normalised and compiled; `check(arguments)` validates."""

    root: Node
    check: Check
    warnings: tuple[str, ...]
    compiler: Compiler
    time_budgeted: bool = False  # see NormalisedSchema
    error: str | None = None  # the schema cannot be used (then `check` reports this)

    def accepts(self, node: Node, value: Any, keyed: bool = True) -> bool:
        """Whether `value` is valid at `node` (a node of this schema's graph); False when
        the budget of a counted schema runs out before that is known."""
        check = self.compiler.check(node, keyed)
        if not self.compiler.budgeted:
            return not check(value)
        try:
            return not with_budget(check)(value)
        except SchemaTooComplex:
            return False


def _build(parameters: Any) -> CompiledSchema:
    normalised = normalise(parameters)
    error = normalised.error or _in_place_loop(normalised)
    if error is not None:
        return CompiledSchema(normalised.root, lambda value: [Err("malformed", error)],
                              normalised.warnings, Compiler(), error=error)
    size = unfolded_size(normalised.root, UNFOLDED_LIMIT + 1)
    compiler = Compiler(budgeted=size is None or size > UNFOLDED_LIMIT)
    check = compiler.check(normalised.root)
    return CompiledSchema(normalised.root, with_budget(check) if compiler.budgeted else check,
                          normalised.warnings, compiler, normalised.time_budgeted)


def _in_place_loop(normalised: NormalisedSchema) -> str | None:
    """Why the schema cannot be checked when its subschemas apply each other to the same
    value in a loop (named by the `$ref`s in it), or None. One pass over the graph: ~17 ms
    of the 150-360 ms that compiling 5,000 properties takes (0.1 ms of a 24-level ladder)."""
    cycle = in_place_cycle(normalised.root)
    if cycle is None:
        return None
    names = [normalised.ref_names[id(node)] for node in cycle[:-1]
             if id(node) in normalised.ref_names]
    return loop_error(names + names[:1])


# orjson writes NaN, Infinity and -Infinity all as `null`, so `"maximum": 1e400` and
# `"maximum": -1e400` (read as +-inf) gave one fingerprint and shared a compiled schema. A
# schema whose bytes hold a bare null (a real one too, e.g. `"default": null`, which then only
# costs a slower fingerprint) is fingerprinted by its repr: nan, inf, -inf, None all differ.
# The literal comes first so that re scans for it at `bytes.find` speed (5 us per 4.5 KB;
# `(?:^|[:,\[])null` tried every position: 180 us, 12x the orjson dump itself).
_BARE_NULL = re.compile(rb"null(?<=[:,\[]null)(?=[,\]}])")


def _fingerprint(parameters: Any) -> bytes | None:
    """The schema's content as bytes, or None when it has none that can be computed (then it
    is compiled but not cached by content)."""
    try:
        dumped = orjson.dumps(parameters, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
                              default=repr)
        if dumped != b"null" and _BARE_NULL.search(dumped) is None:
            return dumped
    except (TypeError, orjson.JSONEncodeError):  # e.g. an int beyond 64 bits
        pass
    try:
        return b"repr:" + repr(parameters).encode("utf-8", "surrogatepass")
    except Exception:  # noqa: BLE001 - an int past 4,300 digits, a hostile __repr__
        pass
    try:
        return b"pickle:" + pickle.dumps(parameters, protocol=5)
    except Exception:  # noqa: BLE001
        return None


_MAX_CACHED = 4096
_by_id: dict[int, tuple[Any, CompiledSchema]] = {}
_by_fingerprint: dict[bytes, CompiledSchema] = {}


def compile_schema(parameters: Any) -> CompiledSchema:
    """The compiled validator for a `parameters` schema (cached; never raises)."""
    entry = _by_id.get(id(parameters))
    if entry is not None and entry[0] is parameters:
        return entry[1]
    fingerprint = _fingerprint(parameters)
    compiled = _by_fingerprint.get(fingerprint) if fingerprint is not None else None
    if compiled is None:
        compiled = _build(parameters)
        if fingerprint is not None:
            _evict(_by_fingerprint)
            _by_fingerprint[fingerprint] = compiled
    _evict(_by_id)
    _by_id[id(parameters)] = (parameters, compiled)
    return compiled


def _evict(cache: dict) -> None:
    """Drop the oldest quarter when full (insertion order; hits do not reorder: cheap)."""
    if len(cache) >= _MAX_CACHED:
        for key in list(cache)[: _MAX_CACHED // 4]:
            cache.pop(key, None)


def clear_cache() -> None:
    """Forget every compiled schema (tests, or after editing specs in place)."""
    _by_id.clear()
    _by_fingerprint.clear()
