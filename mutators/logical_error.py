"""logical_error: a call that passes validation but is wrong.

Operators (subkinds):
- wrong_entity: another value that exists in the environment's state for that argument
  (`env.alternatives(call, path)`): another customer's id, another file; tried first.
- swapped_arguments: two arguments of the same JSON type trade values.
- off_by_one / shifted_number: an integer +-1, a float +-1.
- shifted_date: an ISO date (or the date part of a date-time) +-1 day.
- shifted_id: the last digit run of an id-like string +-1 (`C-1002` -> `C-1003`).
- other_enum_member: another member of the enum.
- flipped_boolean.
- dropped_optional: an optional argument removed (not when it equals the default: then the
  meaning would not change).
- dropped_item: one item removed from an array.
- truncated_text: a multi-word string cut short (an incomplete name or query).

Every candidate must validate and differ from the original (as JSON); when an environment is
given it must also change the observation (see `outcome.py`).
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Iterator

from mutators.jsonvalues import (copy_json, delete_at, digits_to_int, format_path, get_at,
                                 json_equal, json_type, non_json_reason, set_at)
from mutators.negative import Candidate, KindSpec, MutationContext, by_subkind
from mutators.schema import Node
from mutators.validate import ValidationError

MAX_ALTERNATIVE_SLOTS = 64
MAX_ALTERNATIVES = 8
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})")
_DIGITS = re.compile(r"\d+")


def _replace(ctx: MutationContext, slot_parts: tuple, subkind: str, old, new,
             description: str) -> Candidate:
    return Candidate(subkind, slot_parts, old, new,
                     ctx.edited(lambda a, p=slot_parts, v=new: set_at(a, p, copy_json(v))),
                     description)


def wrong_entity(ctx: MutationContext) -> Iterator[Candidate]:
    """Other values existing in the environment's state for an argument."""
    alternatives = getattr(ctx.env, "alternatives", None)
    if alternatives is None:
        return
    for slot in [s for s in ctx.slots[1:] if not isinstance(s.value, dict)][:MAX_ALTERNATIVE_SLOTS]:
        path = format_path(slot.parts)
        try:
            found = alternatives(copy_json(ctx.call), path)
            found = list(found)[: MAX_ALTERNATIVES * 4] if found is not None else []
        except Exception:  # noqa: BLE001 - a broken hook just offers no alternatives
            continue
        usable = [v for v in found if non_json_reason(v) is None and not json_equal(v, slot.value)]
        for value in usable[:MAX_ALTERNATIVES]:
            yield _replace(ctx, slot.parts, "wrong_entity", slot.value, value,
                           f"another existing value for {path}")


def swapped_arguments(ctx: MutationContext) -> Iterator[Candidate]:
    """Two scalar arguments of one object, same JSON type, different values, swapped."""
    for slot in ctx.slots:
        if not isinstance(slot.value, dict):
            continue
        scalars = [(k, v) for k, v in slot.value.items()
                   if json_type(v) in ("string", "integer", "number")]
        for i, (first, a) in enumerate(scalars):
            for second, b in scalars[i + 1:]:
                if json_type(a) != json_type(b) or json_equal(a, b):
                    continue
                parts_a, parts_b = slot.parts + (first,), slot.parts + (second,)

                def swap(args, pa=parts_a, pb=parts_b):
                    va, vb = get_at(args, pa), get_at(args, pb)
                    set_at(args, pa, vb)
                    set_at(args, pb, va)

                yield Candidate("swapped_arguments", parts_a, [a, b], [b, a], ctx.edited(swap),
                                f"swapped {format_path(parts_a)} and {format_path(parts_b)}")


def _shift_date(text: str, days: int) -> str | None:
    match = _ISO_DATE.match(text)
    if not match:
        return None
    try:
        shifted = date(*map(int, match.groups())) + timedelta(days=days)
    except (ValueError, OverflowError):
        return None
    return shifted.isoformat() + text[10:]


def _shift_digits(text: str, delta: int) -> str | None:
    runs = list(_DIGITS.finditer(text))
    if not runs:
        return None
    last = runs[-1]
    number = digits_to_int(last.group())
    if number is None or number + delta < 0:
        return None
    number += delta
    digits = str(number).zfill(len(last.group()))
    return text[: last.start()] + digits + text[last.end():]


def shifted_values(ctx: MutationContext) -> Iterator[Candidate]:
    """Numbers +-1, dates +-1 day, id-like strings +-1, booleans flipped."""
    for slot in ctx.slots[1:]:
        value, path = slot.value, format_path(slot.parts)
        tag = json_type(value)
        if tag == "boolean":
            yield _replace(ctx, slot.parts, "flipped_boolean", value, not value, f"flipped {path}")
        elif tag in ("integer", "number"):
            integral = tag == "integer" or float(value).is_integer()
            subkind = "off_by_one" if integral else "shifted_number"
            for delta in (1, -1):
                yield _replace(ctx, slot.parts, subkind, value, value + delta,
                               f"{path} {'+' if delta > 0 else '-'}1")
        elif tag == "string":
            for delta in (1, -1):
                shifted = _shift_date(value, delta)
                if shifted is not None:
                    yield _replace(ctx, slot.parts, "shifted_date", value, shifted,
                                   f"{path} moved by {delta:+d} day")
                elif (shifted := _shift_digits(value, delta)) is not None:
                    yield _replace(ctx, slot.parts, "shifted_id", value, shifted,
                                   f"{path} points at a neighbouring id")


def truncated_text(ctx: MutationContext) -> Iterator[Candidate]:
    """A multi-word string cut to its first words ("Sable Retail" -> "Sable"): an
    incomplete name or query (date- and id-like strings are shifted instead)."""
    for slot in ctx.slots[1:]:
        value = slot.value
        if isinstance(value, str) and " " in value.strip() and not _ISO_DATE.match(value):
            words = value.split()
            shorter = " ".join(words[: max(1, len(words) // 2)])
            yield _replace(ctx, slot.parts, "truncated_text", value, shorter,
                           f"{format_path(slot.parts)} cut short")


def _enum_members(node: Node) -> tuple:
    if node.enum is not None:
        return node.enum
    for branch in (*node.any_of, *node.all_of):
        if branch.enum is not None:
            return branch.enum
    return ()


def other_enum_member(ctx: MutationContext) -> Iterator[Candidate]:
    for slot in ctx.slots[1:]:
        for member in _enum_members(slot.node):
            if not json_equal(member, slot.value) and json_type(member) == json_type(slot.value):
                yield _replace(ctx, slot.parts, "other_enum_member", slot.value, member,
                               f"another enum member for {format_path(slot.parts)}")


def dropped_optional(ctx: MutationContext) -> Iterator[Candidate]:
    """Optional keys removed, unless their value is the default (no change in meaning)."""
    for slot in ctx.slots[1:]:
        if slot.required or not slot.parts or isinstance(slot.key, int):
            continue
        default = slot.node.default
        if default is not None and json_equal(default[0], slot.value):
            continue
        yield Candidate("dropped_optional", slot.parts, slot.value, None,
                        ctx.edited(lambda a, p=slot.parts: delete_at(a, p)),
                        f"dropped the optional argument {format_path(slot.parts)}")


def dropped_item(ctx: MutationContext) -> Iterator[Candidate]:
    for slot in ctx.slots[1:]:
        if isinstance(slot.value, (list, tuple)) and len(slot.value) >= 2:
            for index in range(min(len(slot.value), 4)):
                yield Candidate("dropped_item", slot.parts + (index,), slot.value[index], None,
                                ctx.edited(lambda a, p=slot.parts + (index,): delete_at(a, p)),
                                f"dropped item {index} of {format_path(slot.parts)}")


def accepts(ctx: MutationContext, candidate: Candidate, call: dict,
            errors: list[ValidationError]) -> bool:
    """Valid, different from the original, and (with an environment) a different outcome."""
    if errors or json_equal(call, ctx.call):
        return False
    return ctx.probe is None or ctx.probe.changes_outcome(call)


def impossible(ctx: MutationContext) -> str:
    if ctx.probe is not None and (ctx.probe.failure or ctx.probe.used):
        return ctx.probe.describe_failure()
    if len(ctx.slots) <= 1:
        return "the call has no arguments to change"
    return "no schema-valid change of the arguments was found"


def order(candidates: list[Candidate], rng) -> list[Candidate]:
    """Entities from the environment first (the most realistic mistake), then a random
    subkind at a time."""
    entities = [c for c in candidates if c.subkind == "wrong_entity"]
    rng.shuffle(entities)
    return entities + by_subkind([c for c in candidates if c.subkind != "wrong_entity"], rng)


SPEC = KindSpec("logical_error", (wrong_entity, swapped_arguments, shifted_values,
                                  other_enum_member, truncated_text, dropped_optional,
                                  dropped_item),
                accepts, impossible, order, outcome_checked=True)
