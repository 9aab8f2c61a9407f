"""Checks for the keywords that apply a subschema under a condition or to a part of a value:
if/then/else, dependentRequired/dependentSchemas, propertyNames, contains (with
minContains/maxContains), unevaluatedProperties and unevaluatedItems.

Each builder takes the `Compiler` (for subschema checks) and a node, and returns a check, or
None when the node does not use the keyword (the common case costs nothing). Like the other
keywords, none of these applies to a value of another JSON type: `compile.py` calls the object
checks for dicts only and the array checks for arrays only.
"""

from __future__ import annotations

from typing import Any

from mutators.introspect import group_policy
from mutators.jsonvalues import render
from mutators.keyword_checks import Check, Err, under, unknown_key_detail
from mutators.schema import Node


def conditional_check(compiler: Any, node: Node) -> Check | None:
    """if/then/else: `then` applies when the value matches `if`, `else` when it does not.
    Keys are left to the owning object, as for allOf branches."""
    if node.if_ is None or (node.then is None and node.else_ is None):
        return None
    condition = compiler.check(node.if_, keyed=False)
    then = compiler.check(node.then, keyed=False) if node.then is not None else None
    otherwise = compiler.check(node.else_, keyed=False) if node.else_ is not None else None

    def check(value: Any) -> list[Err] | None:
        branch = otherwise if condition(value) else then
        return branch(value) if branch is not None else None

    return check


def dependency_check(compiler: Any, node: Node) -> Check | None:
    """dependentRequired (a key present requires others) and dependentSchemas (a key present
    makes the whole object match a schema)."""
    required, schemas = node.dependent_required, node.dependent_schemas
    if not required and not schemas:
        return None
    checks = [(key, compiler.check(sub, keyed=False)) for key, sub in schemas]

    def check(obj: dict) -> list[Err] | None:
        errors = None
        for key, needed in required:
            if key in obj:
                for name in needed:
                    if name not in obj:
                        detail = f"missing key, required when {render(key)} is present"
                        errors = (errors or []) + under([Err("required", detail)], name)
        for key, sub in checks:
            if key in obj and (found := sub(obj)):
                errors = (errors or []) + found
        return errors

    return check


def property_names_check(compiler: Any, node: Node) -> Check | None:
    """propertyNames: every key, as a string, must match the schema."""
    if node.property_names is None:
        return None
    names = compiler.check(node.property_names)

    def check(obj: dict) -> list[Err] | None:
        errors = None
        for key in obj:
            if found := names(key):
                detail = f"key {render(key)} is not an allowed name: {found[0].detail}"
                errors = (errors or []) + under([Err("property_name", detail)], key)
        return errors

    return check


def contains_check(compiler: Any, node: Node) -> Check | None:
    """contains: at least minContains (default 1), at most maxContains items match."""
    if node.contains is None:
        return None
    matches = compiler.check(node.contains)
    low = 1 if node.min_contains is None else node.min_contains
    high = node.max_contains

    def check(array: list) -> list[Err] | None:
        count = sum(1 for item in array if not matches(item))
        if count < low:
            return [Err("contains", f"{count} item(s) match `contains`, fewer than {render(low)}")]
        if high is not None and count > high:
            return [Err("contains", f"{count} items match `contains`, more than maxContains "
                                    f"{render(high)}")]
        return None

    return check


def unevaluated_properties_check(compiler: Any, node: Node) -> Check | None:
    """Keys no adjacent keyword or passing in-place subschema evaluated must match
    `unevaluatedProperties`; with `false` each is an unknown key, reported with the keys the
    schema and its branches name. Where a schema says this, the project's key policy is not
    checked (compile.py): this check alone decides, as JSON Schema says."""
    if node.unevaluated_properties is None:
        return None
    evaluated = compiler.evaluation.adjacent_keys(node)
    never = node.unevaluated_properties.never
    rest = compiler.check(node.unevaluated_properties)
    detail = unknown_key_detail(group_policy(node)) if never else ""
    own = frozenset(node.properties)

    def check(obj: dict) -> list[Err] | None:
        if own and own.issuperset(obj):  # the common case: every key is a declared property
            return None
        seen = evaluated(obj)
        if seen is None:
            return None
        errors = None
        for key, value in obj.items():
            if key in seen:
                continue
            found = [Err("unknown_key", detail)] if never else rest(value)
            if found:
                errors = (errors or []) + under(found, key)
        return errors

    return check


def unevaluated_items_check(compiler: Any, node: Node) -> Check | None:
    """Items past those prefixItems/items/contains (and passing subschemas) evaluated must
    match `unevaluatedItems`; with `false` each such item is forbidden."""
    if node.unevaluated_items is None:
        return None
    evaluated = compiler.evaluation.adjacent_items(node)
    never = node.unevaluated_items.never
    rest = compiler.check(node.unevaluated_items)

    prefix = len(node.prefix_items)

    def check(array: list) -> list[Err] | None:
        if len(array) <= prefix:  # prefixItems evaluated them all
            return None
        seen = evaluated(array)
        if seen is None:
            return None
        errors = None
        for index, item in enumerate(array):
            if index in seen:
                continue
            found = [Err("forbidden", "item not allowed: no prefixItems, items or contains "
                                      "evaluates it (unevaluatedItems is false)")] if never \
                else rest(item)
            if found:
                errors = (errors or []) + under(found, index)
        return errors

    return check
