"""Tool arguments inside the environments: checked by the project's one validator
(`mutators`, the same one that judges an episode's calls and every negative), its structured
errors turned into the observation an agent reads, and handed to the tool in the shape its
handler expects.

One validator means one verdict: a call the episode accepts is a call the environment runs,
and an invalid argument is counted once. Where the old environment checker disagreed, JSON
Schema decides (README "Validation rules"): `3.0` is an integer (handlers receive `3`), a
date-time may use a space and omit seconds (tools store it as `YYYY-MM-DDTHH:MM:SS`), a tuple
is an array (parsed JSON never holds one), and a wrong type under `anyOf` is an error.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from datagen.envs.base import shortened
from mutators.compile import compile_schema
from mutators.safe_regex import new_call
from mutators.schema import Node
from mutators.validate import ValidationError, to_validation_errors

ArgumentCheck = Callable[[Any], "str | None"]
Convert = Callable[[Any], Any]
_LARGEST_EXACT_FLOAT = 2.0 ** 53
MAX_SHOWN_NAME = 100  # characters of an argument's path in a message (as of an unknown tool)


def argument_check(parameters: dict[str, Any]) -> ArgumentCheck:
    """The check of one tool's `parameters` schema: arguments -> None, or one sentence that
    names the argument and says what is wrong (the first problem; how many more follow)."""
    compiled = compile_schema(parameters)
    check, budgeted = compiled.check, compiled.time_budgeted

    def first_problem(arguments: Any) -> str | None:
        if budgeted:
            new_call()  # a fresh time budget for patterns on the backtracking engine
        try:
            found = check(arguments)
        except RecursionError:
            return "arguments are nested too deeply to check"
        if not found:
            return None
        errors = to_validation_errors(found)
        more = len(errors) - 1
        return describe(errors[0]) + (f" (and {more} more problem{'s' * (more > 1)})"
                                      if more else "")

    return first_problem


def describe(error: ValidationError) -> str:
    """One validator error as a sentence for the agent, naming the argument by its path
    (`filters.status`, `items[0].quantity`)."""
    # an unknown key is echoed in the path: a 5 MB key must not become a 5 MB observation
    name = shortened(error.path.removeprefix("arguments").removeprefix("."), MAX_SHOWN_NAME)
    detail = error.message[len(error.path) + 2:]  # the message is "<path>: <detail>"
    if error.reason == "required":
        when = detail.partition(", required ")[2]
        return f"missing required argument '{name}'" + (f" (required {when})" if when else "")
    if error.reason == "unknown_key":
        allowed = detail.partition("not in schema; ")[2].rstrip(")")
        return f"unknown argument '{name}'" + (f" ({allowed})" if allowed else "")
    return f"argument '{name}': {detail}" if name else f"arguments: {detail}"


def handler_arguments(parameters: dict[str, Any]) -> Convert | None:
    """`integer_converter` of a tool's `parameters` schema."""
    return integer_converter(compile_schema(parameters).root)


def integer_converter(node: Node) -> Convert | None:
    """A function giving a value with integral floats turned into ints wherever `node` says
    integer (the validator accepts `3.0` there, as JSON Schema does, and handlers index,
    slice and compare with it), or None when no integer is expected anywhere below `node`.
    The function returns its input itself when nothing changes (nothing is copied)."""
    return _converter(node, frozenset())


def _converter(node: Node, seen: frozenset[int]) -> Convert | None:
    if node.never or (node.types is not None and "integer" not in node.types
                      and not {"object", "array"} & set(node.types)):
        return None
    if id(node) in seen or node.any_of or node.all_of or node.if_ is not None \
            or node.types is None or len(node.types) > 1 + ("null" in node.types):
        return as_handler_arguments  # combined or recursive schemas: every float is checked
    seen = seen | {id(node)}
    if "integer" in node.types:
        return _integral
    if "object" in node.types:
        if node.pattern_properties or isinstance(node.additional, Node):
            return as_handler_arguments
        fields = {key: found for key, sub in node.properties.items()
                  if (found := _converter(sub, seen)) is not None}
        return partial(_convert_fields, fields) if fields else None
    items = _converter(node.items, seen) if node.items is not None else None
    if node.prefix_items:
        return as_handler_arguments if items or any(
            _converter(sub, seen) for sub in node.prefix_items) else None
    return partial(_convert_items, items) if items else None


def _integral(value: Any) -> Any:
    if type(value) is float and value.is_integer() and abs(value) <= _LARGEST_EXACT_FLOAT:
        return int(value)
    return value


def _convert_fields(fields: dict[str, Convert], obj: Any) -> Any:
    if type(obj) is not dict:
        return obj
    changed = None
    for key, convert in fields.items():
        if key in obj and (new := convert(obj[key])) is not obj[key]:
            changed = changed or dict(obj)
            changed[key] = new
    return obj if changed is None else changed


def _convert_items(convert: Convert, array: Any) -> Any:
    if type(array) is not list and type(array) is not tuple:
        return array
    converted = [convert(item) for item in array]
    return array if all(new is old for new, old in zip(converted, array)) else converted


def as_handler_arguments(value: Any) -> Any:
    """`value` with every integral float turned into an int (for schemas whose integer
    positions are not simply nested properties and items)."""
    return _floats_as_ints(value) if _has_float(value) else value


def _has_float(value: Any) -> bool:
    kind = type(value)
    if kind is float:
        return True
    if kind is dict:
        return any(_has_float(item) for item in value.values())
    if kind is list or kind is tuple:
        return any(_has_float(item) for item in value)
    return False


def _floats_as_ints(value: Any) -> Any:
    kind = type(value)
    if kind is float:
        return int(value) if value.is_integer() and abs(value) <= _LARGEST_EXACT_FLOAT else value
    if kind is dict:
        return {key: _floats_as_ints(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_floats_as_ints(item) for item in value]
    return value
