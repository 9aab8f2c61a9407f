"""Optional kinds beyond the three core ones (ask for them with `kinds=ALL_KINDS`):

- wrong_function: the step calls another tool of the environment instead, with the arguments
  carried over where a parameter has the same name (or a near-synonym) and an acceptable
  value, and plausible values for the other required parameters. The mutated call is valid
  for the tool it names; its `errors` are against the original tool (a name error at least).
- missing_required: a required argument left out (validation: "required" at that path).
"""

from __future__ import annotations

from typing import Any, Iterator

from mutators.hallucinated_key import group_properties, renamed_keys, synonym_keys
from mutators.jsonvalues import copy_json, delete_at, format_path
from mutators.negative import Candidate, KindSpec, MutationContext, by_subkind, interleave_by
from mutators.sample import sample_value
from mutators.validate import ToolInfo, ValidationError, validate_with


def _carried_value(ctx: MutationContext, other: ToolInfo, key: str, node) -> tuple[bool, Any]:
    """A value from the original arguments for `key` of the other tool, if one fits."""
    arguments = ctx.arguments
    names = [key] + [k for k in arguments if key in synonym_keys(k) or key in renamed_keys(k)]
    for name in names:
        if name in arguments and other.schema.accepts(node, arguments[name]):
            return True, copy_json(arguments[name])
    return False, None


def map_arguments(ctx: MutationContext, other: ToolInfo) -> tuple[dict[str, Any] | None, int]:
    """Arguments for `other` built from the original call, and how many were carried over;
    None when a required parameter gets no acceptable value."""
    required = set(other.schema.root.required)
    mapped: dict[str, Any] = {}
    carried = 0
    for key, node in group_properties(other):
        found, value = _carried_value(ctx, other, key, node)
        if found:
            mapped[key], carried = value, carried + 1
        elif key in required:
            value = sample_value(node, ctx.rng, key)
            if not other.schema.accepts(node, value):
                return None, 0
            mapped[key] = value
    return mapped, carried


def other_function(ctx: MutationContext) -> Iterator[Candidate]:
    for other in ctx.other_tools:
        if other.name == ctx.tool.name:
            continue
        arguments, carried = map_arguments(ctx, other)
        if arguments is None:
            continue
        call = {"name": other.name, "arguments": arguments}
        yield Candidate("mapped_arguments" if carried else "fresh_arguments", (), ctx.tool.name,
                        other.name, lambda c=call: copy_json(c),
                        f"called `{other.name}` instead of `{ctx.tool.name}` "
                        f"({carried} argument(s) carried over)", path_text="name")


def _accepts_wrong_function(ctx: MutationContext, candidate: Candidate, call: dict,
                            errors: list[ValidationError]) -> bool:
    """Valid for the tool it names, and that tool is not the original one."""
    tool = next((t for t in ctx.other_tools if t.name == call.get("name")), None)
    return tool is not None and tool.name != ctx.tool.name and not validate_with(call, tool)


def _wrong_function_impossible(ctx: MutationContext) -> str:
    if not [t for t in ctx.other_tools if t.name != ctx.tool.name]:
        return "no other tools were given (pass other_tools)"
    return "no other tool could be called with plausible valid arguments"


def dropped_required(ctx: MutationContext) -> Iterator[Candidate]:
    for slot in ctx.slots[1:]:
        if slot.required and isinstance(slot.key, str):
            yield Candidate("missing_required", slot.parts, slot.value, None,
                            ctx.edited(lambda a, p=slot.parts: delete_at(a, p)),
                            f"left out the required argument {format_path(slot.parts)}")


def _accepts_missing(ctx: MutationContext, candidate: Candidate, call: dict,
                     errors: list[ValidationError]) -> bool:
    return any(e.reason == "required" and e.path == candidate.where for e in errors)


def _tools_in_random_order(candidates: list[Candidate], rng) -> Iterator[Candidate]:
    """A random other tool, preferring those that take over some of the arguments."""
    return interleave_by(candidates, rng, lambda c: 0,
                         prefer=lambda c: c.subkind == "mapped_arguments")


WRONG_FUNCTION = KindSpec("wrong_function", (other_function,), _accepts_wrong_function,
                          _wrong_function_impossible, _tools_in_random_order)
MISSING_REQUIRED = KindSpec("missing_required", (dropped_required,), _accepts_missing,
                            lambda ctx: "the call has no required argument to leave out",
                            by_subkind)
