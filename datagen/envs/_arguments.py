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

from typing import Any, Callable

from mutators.compile import compile_schema
from mutators.safe_regex import new_call
from mutators.validate import ValidationError, to_validation_errors

ArgumentCheck = Callable[[Any], "str | None"]
_LARGEST_EXACT_FLOAT = 2.0 ** 53


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
    name = error.path.removeprefix("arguments").removeprefix(".")
    detail = error.message[len(error.path) + 2:]  # the message is "<path>: <detail>"
    if error.reason == "required":
        when = detail.partition(", required ")[2]
        return f"missing required argument '{name}'" + (f" (required {when})" if when else "")
    if error.reason == "unknown_key":
        allowed = detail.partition("not in schema; ")[2].rstrip(")")
        return f"unknown argument '{name}'" + (f" ({allowed})" if allowed else "")
    return f"argument '{name}': {detail}" if name else f"arguments: {detail}"


def as_handler_arguments(value: Any) -> Any:
    """`value` with integral floats turned into ints: the validator accepts `3.0` where an
    integer is expected (JSON Schema does), and handlers index, slice and compare with it.
    Returns `value` itself when it holds no float (the common case: nothing is copied)."""
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
