"""logical_error: a call that passes validation but is wrong.

Operators (subkinds):
- wrong_entity: another value that exists in the environment's state for that argument
  (`env.alternatives(call, path)`): another customer's id, another file; tried first.
- other_entity: another entity of the same kind (`entities.py`: "Paris" -> "Berlin",
  "USD" -> "EUR", "cm" -> "in") or another example the description gives ("e.g. 'London'").
- parent_path: a file path or URL without its last segment ("/etc/hosts" -> "/etc").
- swapped_arguments: two arguments of the same JSON type trade values.
- off_by_one / shifted_number: an integer +-1, a float +-1 (or about +-10%).
- shifted_date: a date (ISO, `03/15/2024`, `15.03.2024`, `March 15, 2024`, a date-time's
  date part) +-1 day, in its own format.
- shifted_id: the last digit run of an id-like string +-1 (`C-1002` -> `C-1003`).
- other_enum_member: another member of the enum, or of the values the description lists
  ("one of 'metric', 'imperial'").
- flipped_boolean.
- truncated_text: a multi-word string cut short (an incomplete name or query).
- dropped_optional: an optional argument removed.
- set_optional: an absent optional argument set to a value other than its stated default.
- dropped_item: one item removed from an array.

Every candidate must validate and differ from the original (as JSON). With an environment
that executes calls, it must also change the outcome (see `outcome.py`), which proves the
change; the candidates are then the plain ones above, as before (no other_entity or
set_optional, +-1 only for numbers).

Without one, nothing proves the change, so only changes that certainly alter the meaning
are proposed (`certain` below; the facts stated in prose come from `prose.py`):
- dropping or setting an optional argument counts only against a default the spec states,
  in `default` or in the description ("Defaults to 'cm'"), and only when the value differs
  from it (a default named but unreadable, or none stated, makes the change uncertain);
- a boolean is flipped only when required or when its default is stated, and never when its
  description marks it optional or cosmetic ("Optional.", "verbose", "pretty-print");
- no replacement may have the original's meaning: not the same text but for case,
  whitespace or `-`/`_`, not an equal number in another type (1 vs "1" vs 1.0);
- two arguments with parallel names (`num1`/`num2`, `a`/`b`, `x`/`y`) are not swapped: the
  function may be symmetric (gcd, sum); nor are any two of a tool that says it computes a
  symmetric relation (a distance, a similarity, a greatest common divisor); nor two numbers
  of a tool that calculates a quantity (base x height, mass x acceleration);
- an array item that occurs twice is not dropped (a set would not change);
- a name is not cut to its first comma part ("Boston, MA" -> "Boston") nor just stripped of
  a company suffix ("Tesla Inc"), nor is a quantity cut ("10:00 AM" -> "10:00");
- a value that is one of those its description lists ("pm25, pm10, o3 or no2") only becomes
  another listed value: shifting, cutting or swapping it would leave the stated set;
- parent_path only for what is surely a path or URL (not "g/cm3" or "11/06/1990");
- no other name of the same thing: an alias ("asc" / "ascending", "UK" / "United Kingdom")
  or a value inside the other ("Lakers" / "Los Angeles Lakers"); a short code only becomes
  another of its class when the argument's name says which class ("KO" under `ticker` is
  not Korean);
- a default or member that only the context fixes ("today", "auto", "latest") is no
  definite value: not dropped to, set against, or moved to or from;
- an argument that only tunes the call (`timeout`, `max_retries`, `verbose`, `max_tokens`)
  or its display (`mrkdwn`, `unfurl_links`) is not changed, dropped or set.
"""

from __future__ import annotations

import itertools
import re
from typing import Iterator

from mutators import certain
from mutators.entities import alias_of, overlaps, siblings
from mutators.jsonvalues import (copy_json, delete_at, format_path, get_at, json_equal,
                                 json_type, non_json_reason, set_at)
from mutators.negative import Candidate, KindSpec, MutationContext, Proposal, by_subkind
from mutators.prose import prose_enum, prose_examples, same_meaning
from mutators.schema import Node
from mutators.validate import ValidationError
from mutators.value_shifts import (number_steps, parent_path, shift_date, shift_digits,
                                   truncate_name)

MAX_ALTERNATIVE_SLOTS = 64
MAX_ALTERNATIVES = 8
MAX_SIBLINGS = 6
MAX_SWAP_PAIRS = 4096  # argument pairs examined per call: all of them up to 91 scalar arguments
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})")


def _replace(slot_parts: tuple, subkind: str, old, new, template: str,
             *details) -> Proposal:
    """A proposal to set the value at `slot_parts` to `new`; its description is
    `template.format(*details, path=<the path>)`, written only if it is drawn."""
    return Proposal(subkind, old, _replaced, (slot_parts, subkind, old, new, template, details))


def _replaced(ctx: MutationContext, slot_parts: tuple, subkind: str, old, new, template: str,
              details: tuple) -> Candidate:
    return Candidate(subkind, slot_parts, old, new,
                     ctx.edited(lambda a, p=slot_parts, v=new: set_at(a, p, copy_json(v))),
                     template.format(*details, path=format_path(slot_parts)))


def _unverified(ctx: MutationContext) -> bool:
    """No environment executes the calls: only certainly meaning-changing candidates."""
    return ctx.probe is None


def _tuning(ctx: MutationContext, slot) -> bool:
    """Without an environment, an argument that only tunes the call (`timeout`) is left as
    it is: changing it rarely changes the answer."""
    if ctx.probe is not None:
        return False
    if "tuning" not in slot.memo:
        slot.memo["tuning"] = certain.tunes_only(slot.key)
    return slot.memo["tuning"]


def _listed(ctx: MutationContext, slot) -> bool:
    """Without an environment, whether the value is one its description lists (then only
    another listed value replaces it)."""
    if ctx.probe is not None:
        return False
    if "listed" not in slot.memo:
        slot.memo["listed"] = certain.listed_in_prose(slot)
    return slot.memo["listed"]


def _another_name(value, original) -> bool:
    """The same thing named otherwise: same meaning, an alias, or one inside the other
    ("Lakers" / "Los Angeles Lakers")."""
    if same_meaning(value, original):
        return True
    return isinstance(value, str) and isinstance(original, str) and (
        alias_of(value, original) or overlaps(value, original))


def wrong_entity(ctx: MutationContext) -> Iterator[Proposal]:
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
        # checked lazily: the first MAX_ALTERNATIVES usable ones, not all that were found
        usable = (v for v in found if non_json_reason(v) is None and not json_equal(v, slot.value))
        for value in itertools.islice(usable, MAX_ALTERNATIVES):
            yield _replace(slot.parts, "wrong_entity", slot.value, value,
                           "another existing value for {path}")


def other_entity(ctx: MutationContext) -> Iterator[Proposal]:
    """Another entity of the same kind for a string ("Paris" -> "Berlin"), or another
    example the description gives; only without an environment (which has its own)."""
    if not _unverified(ctx):
        return
    for slot in ctx.slots[1:]:
        if not isinstance(slot.value, str) or _listed(ctx, slot) or _tuning(ctx, slot):
            continue
        key = slot.key if isinstance(slot.key, str) else ""
        examples = [e for e in prose_examples(slot.node) if isinstance(e, str)]
        for value in list(dict.fromkeys(examples + siblings(slot.value, key)))[:MAX_SIBLINGS]:
            if not _another_name(value, slot.value):
                yield _replace(slot.parts, "other_entity", slot.value, value,
                               "another {0} for {path}", key or "value")
        parent = parent_path(slot.value)
        if parent is not None:
            yield _replace(slot.parts, "parent_path", slot.value, parent,
                           "{path} names the enclosing folder or page")


def swapped_arguments(ctx: MutationContext) -> Iterator[Proposal]:
    """Two scalar arguments of one object, same JSON type, different values, swapped
    (without an environment, none whose value is one of those its description lists)."""
    unverified = _unverified(ctx)
    if unverified and certain.symmetric_tool(ctx.tool):
        return
    kinds = ("string",) if unverified and certain.computes_from_numbers(ctx.tool) else (
        "string", "integer", "number")
    listed = {s.parts for s in ctx.slots[1:] if _listed(ctx, s) or _tuning(ctx, s)}
    pairs = itertools.chain.from_iterable(_scalar_pairs(slot, kinds, listed) for slot in ctx.slots
                                          if isinstance(slot.value, dict))
    # bounded: pairs that cannot be swapped are never yielded, so MAX_PROPOSED does not stop
    # a 5,000-argument object (12.5M pairs) from being examined
    for slot, (first, a), (second, b) in itertools.islice(pairs, MAX_SWAP_PAIRS):
        if json_type(a) != json_type(b) or json_equal(a, b):
            continue
        if unverified and not certain.swap_changes_meaning(ctx.tool, first, second, a, b):
            continue
        yield Proposal("swapped_arguments", [a, b], _swapped,
                       (slot.parts + (first,), slot.parts + (second,), a, b))


def _scalar_pairs(slot, kinds: tuple[str, ...], listed: set) -> Iterator[tuple]:
    """(slot, (key, value), (later key, value)) for the object's scalars of `kinds`."""
    scalars = [(k, v) for k, v in slot.value.items()
               if json_type(v) in kinds and slot.parts + (k,) not in listed]
    for i, first in enumerate(scalars):
        for second in scalars[i + 1:]:
            yield slot, first, second


def _swapped(ctx: MutationContext, parts_a: tuple, parts_b: tuple, a, b) -> Candidate:
    def swap(args, pa=parts_a, pb=parts_b):
        va, vb = get_at(args, pa), get_at(args, pb)
        set_at(args, pa, vb)
        set_at(args, pb, va)

    return Candidate("swapped_arguments", parts_a, [a, b], [b, a], ctx.edited(swap),
                     f"swapped {format_path(parts_a)} and {format_path(parts_b)}")


def _shifted_numbers(ctx: MutationContext, slot, tag: str) -> Iterator[Proposal]:
    value = slot.value
    integral = tag == "integer" or float(value).is_integer()
    steps = number_steps(value, integral) if _unverified(ctx) else [value + 1, value - 1]
    for new in steps:
        one = abs(new - value) == 1
        subkind = "off_by_one" if integral and one else "shifted_number"
        yield _replace(slot.parts, subkind, value, new, "{path} {0}{1:g}",
                       "+" if new > value else "-", abs(new - value))


def _shifted_strings(ctx: MutationContext, slot) -> Iterator[Proposal]:
    value = slot.value
    for delta in (1, -1):
        shifted = shift_date(value, delta)
        if shifted is not None:
            yield _replace(slot.parts, "shifted_date", value, shifted,
                           "{path} moved by {0:+d} day", delta)
        elif (shifted := shift_digits(value, delta)) is not None:
            yield _replace(slot.parts, "shifted_id", value, shifted,
                           "{path} points at a neighbouring id")


def shifted_values(ctx: MutationContext) -> Iterator[Proposal]:
    """Numbers +-1, dates +-1 day, id-like strings +-1, booleans flipped."""
    for slot in ctx.slots[1:]:
        tag = json_type(slot.value)
        if _tuning(ctx, slot):
            continue
        if tag == "boolean":
            if not _unverified(ctx) or certain.flip_changes_meaning(slot):
                yield _replace(slot.parts, "flipped_boolean", slot.value, not slot.value,
                               "flipped {path}")
        elif tag in ("integer", "number"):
            yield from _shifted_numbers(ctx, slot, tag)
        elif tag == "string" and not _listed(ctx, slot):
            yield from _shifted_strings(ctx, slot)


def truncated_text(ctx: MutationContext) -> Iterator[Proposal]:
    """A multi-word string cut to its first words ("Sable Retail" -> "Sable"): an
    incomplete name or query (date- and id-like strings are shifted instead)."""
    for slot in ctx.slots[1:]:
        value = slot.value
        if not isinstance(value, str) or _ISO_DATE.match(value) or shift_date(value, 1):
            continue  # a date is shifted, not cut ("June 5, 2024" -> "June")
        if _unverified(ctx):
            shorter = None if _listed(ctx, slot) else truncate_name(value)
        elif " " in value.strip():
            words = value.split()
            shorter = " ".join(words[: max(1, len(words) // 2)])
        else:
            shorter = None
        if shorter is not None:
            yield _replace(slot.parts, "truncated_text", value, shorter, "{path} cut short")


def _enum_members(node: Node) -> tuple:
    if node.enum is not None:
        return node.enum
    for branch in (*node.any_of, *node.all_of):
        if branch.enum is not None:
            return branch.enum
    return ()


def other_enum_member(ctx: MutationContext) -> Iterator[Proposal]:
    """Another member of the enum (without an environment also of the values the
    description lists, when the original is one of them)."""
    for slot in ctx.slots[1:]:
        if _tuning(ctx, slot):
            continue
        members = _enum_members(slot.node)
        if _unverified(ctx):
            prose = prose_enum(slot.node)
            if not members and not prose:
                continue
            members = certain.other_members(members, prose, slot.value)
        for member in members:
            if not json_equal(member, slot.value) and json_type(member) == json_type(slot.value):
                yield _replace(slot.parts, "other_enum_member", slot.value, member,
                               "another enum member for {path}")


def dropped_optional(ctx: MutationContext) -> Iterator[Proposal]:
    """Optional keys removed, unless their value is the default (no change in meaning);
    without an environment only against a stated default the value differs from."""
    for slot in ctx.slots[1:]:
        if slot.required or not slot.parts or isinstance(slot.key, int):
            continue
        if _unverified(ctx):
            if _tuning(ctx, slot) or not certain.drop_changes_meaning(slot):
                continue
        elif slot.node.default is not None and json_equal(slot.node.default[0], slot.value):
            continue
        yield Proposal("dropped_optional", slot.value, _dropped,
                       ("dropped_optional", slot.parts, slot.value))


def set_optional(ctx: MutationContext) -> Iterator[Proposal]:
    """An absent optional argument given a value other than its stated default (only
    without an environment)."""
    if not _unverified(ctx):
        return
    for slot, key, node in certain.absent_optionals(ctx.tool.schema, ctx.slots):
        for value in certain.non_default_values(node, key):
            yield _replace(slot.parts + (key,), "set_optional", None, value,
                           "set the optional argument {path} away from its default")


def dropped_item(ctx: MutationContext) -> Iterator[Proposal]:
    for slot in ctx.slots[1:]:
        if isinstance(slot.value, (list, tuple)) and len(slot.value) >= 2:
            for index in range(min(len(slot.value), 4)):
                if _unverified(ctx) and certain.has_duplicate(slot.value, index):
                    continue
                yield Proposal("dropped_item", slot.value[index], _dropped,
                               ("dropped_item", slot.parts + (index,), slot.value[index]))


def _dropped(ctx: MutationContext, subkind: str, parts: tuple, old) -> Candidate:
    """A drawn proposal to delete the value at `parts` (an optional key or an item)."""
    description = (f"dropped item {parts[-1]} of {format_path(parts[:-1])}"
                   if subkind == "dropped_item" else
                   f"dropped the optional argument {format_path(parts)}")
    return Candidate(subkind, parts, old, None, ctx.edited(lambda a, p=parts: delete_at(a, p)),
                     description)


def accepts(ctx: MutationContext, candidate: Candidate, call: dict,
            errors: list[ValidationError]) -> bool:
    """Valid, different from the original, and (with an environment) a different outcome;
    without one, not the original's meaning in other words."""
    if errors or json_equal(call, ctx.call):
        return False
    if ctx.probe is None:
        return candidate.original is None or candidate.mutated is None or not same_meaning(
            candidate.original, candidate.mutated)
    return ctx.probe.changes_outcome(call)


def impossible(ctx: MutationContext) -> str:
    if ctx.probe is not None and (ctx.probe.failure or ctx.probe.used):
        return ctx.probe.describe_failure()
    if len(ctx.slots) <= 1:
        return "the call has no arguments to change"
    if ctx.probe is None:
        return ("no schema-valid change of the arguments was found that certainly changes "
                "the meaning (without an environment to execute it)")
    return "no schema-valid change of the arguments was found"


def order(candidates: list[Candidate | Proposal], rng) -> Iterator[Candidate | Proposal]:
    """Entities from the environment first (the most realistic mistake), then a random
    subkind at a time."""
    entities = [c for c in candidates if c.subkind == "wrong_entity"]
    rng.shuffle(entities)
    yield from entities
    yield from by_subkind([c for c in candidates if c.subkind != "wrong_entity"], rng)


SPEC = KindSpec("logical_error", (wrong_entity, swapped_arguments, shifted_values,
                                  other_enum_member, truncated_text, dropped_optional,
                                  dropped_item, other_entity, set_optional),
                accepts, impossible, order, outcome_checked=True)
