"""type_error: a value somewhere in the arguments replaced by a plausible value of the wrong
JSON type, the kind of slip a model makes: "42" for an integer, 42 for a numeric string id,
a bare item for an array, a JSON string for an object, "true" for a boolean.

The replacement must be rejected by every alternative the schema allows at that spot (type
lists, anyOf/oneOf branches, nullable), so candidates are checked against the slot's accepted
types, and the kind only accepts a candidate that `validate` reports as a type error at
exactly that path.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterator

import orjson

from mutators.introspect import accepted_types
from mutators.jsonvalues import digits_to_int, int_to_text, json_type, render, set_at
from mutators.negative import Candidate, KindSpec, MutationContext, Proposal, interleave_by
from mutators.validate import ValidationError

_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")
_DIGITS = re.compile(r"\d+")


def _from_number(value: int | float) -> list[Any]:
    text = int_to_text(value) if json_type(value) == "integer" else repr(value)
    return ([text] if text is not None else []) + [[value], {"value": value}]


def _from_string(value: str) -> list[Any]:
    wrong: list[Any] = []
    if _NUMBER.fullmatch(value.strip()) and math.isfinite(number := float(value)):
        wrong.append(int(number) if number.is_integer() and "." not in value else number)
    elif (digits := _DIGITS.findall(value)) and digits_to_int(digits[-1]) is not None:
        wrong.append(digits_to_int(digits[-1]))
    if value.strip().lower() in ("true", "false", "yes", "no"):
        wrong.append(value.strip().lower() in ("true", "yes"))
    wrong.extend([[value], None])  # a list around it; null where a string was needed
    return wrong


def _from_array(value: list) -> list[Any]:
    wrong: list[Any] = []
    if value and json_type(value[0]) not in ("object", "array"):
        wrong.append(value[0])
    wrong.append(", ".join(map(_plain_text, value)))
    wrong.append({"items": list(value)})
    return wrong


def _plain_text(item: Any) -> str:
    """str(item), as a person would join items; `render` where str() refuses (huge ints)."""
    try:
        return str(item)
    except ValueError:
        return render(item, 200)


def _from_object(value: dict) -> list[Any]:
    try:
        text = orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = str(value)
    return [text, [value], list(value.values())]


def wrong_values(value: Any) -> list[Any]:
    """Plausible wrong-typed stand-ins for `value`, most plausible first."""
    tag = json_type(value)
    if tag in ("integer", "number"):
        return _from_number(value)
    if tag == "string":
        return _from_string(value)
    if tag == "boolean":
        return [str(value).lower(), int(value), {"enabled": value}]
    if tag == "array":
        return _from_array(value)
    if tag == "object":
        return _from_object(value)
    if tag == "null":
        return ["null", "", 0]
    return []


def _accepts_type(types: frozenset[str], value: Any) -> bool:
    tag = json_type(value)
    return tag in types or (tag == "number" and "integer" in types and float(value).is_integer())


def wrong_type(ctx: MutationContext) -> Iterator[Proposal]:
    """Every (slot, wrong value) pair whose value no alternative of the slot's schema accepts."""
    for slot in ctx.slots[1:]:  # not the arguments object itself
        types = accepted_types(slot.node)
        if types is None or not types:
            continue
        tag = json_type(slot.value)
        expected = tag if tag in types or tag not in ("integer", "number") else "number"
        for wrong in wrong_values(slot.value):
            if _accepts_type(types, wrong):
                continue
            wrong_tag = json_type(wrong)
            yield Proposal(f"{wrong_tag}_for_{expected}", slot.value, _wrong_typed,
                           (slot.parts, slot.value, wrong, wrong_tag, expected), slot.parts)


def _wrong_typed(ctx: MutationContext, parts: tuple, original: Any, wrong: Any, wrong_tag: str,
                 expected: str) -> Candidate:
    """The candidate of a drawn `wrong_type` proposal."""
    return Candidate(subkind=f"{wrong_tag}_for_{expected}", path=parts, original=original,
                     mutated=wrong,
                     build=ctx.edited(lambda args, p=parts, new=wrong: set_at(args, p, new)),
                     description=f"{wrong_tag} where the schema expects {expected}")


def accepts(ctx: MutationContext, candidate: Candidate, call: dict,
            errors: list[ValidationError]) -> bool:
    """A type error reported at exactly the mutated path."""
    return any(e.reason == "type" and e.path == candidate.where for e in errors)


def impossible(ctx: MutationContext) -> str:
    if len(ctx.slots) <= 1:
        return "the call has no argument values to give a wrong type"
    return "no argument value has a type constraint (the schema accepts any type there)"


def order(candidates: list[Candidate], rng) -> Iterator[Candidate]:
    """A random slot first; within a slot, the most plausible wrong value first."""
    return interleave_by(candidates, rng, lambda c: c.path, shuffle_within=False)


SPEC = KindSpec("type_error", (wrong_type,), accepts, impossible, order)
