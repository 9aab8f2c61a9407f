"""`mutate` / `mutate_report`: typed hard negatives for one correct tool call.

For each requested kind the kind's operators propose candidates, the candidates are ordered
with an RNG seeded from (seed, kind) (so asking for extra kinds does not change the core
ones), and the first candidate that passes the kind's test becomes the negative. A kind with
no such candidate is reported in `MutationReport.impossible` with the reason, never faked.
Nothing here raises: a malformed call or spec, or a failing operator, becomes a reason.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

from mutators import extra_kinds, hallucinated_key, logical_error, type_error
from mutators.jsonvalues import copy_json, nested_deeper_than
from mutators.negative import (ALL_KINDS, KINDS, KindSpec, MutationContext, MutationReport,
                               Negative, Operator, Rejected, materialise)
from mutators.outcome import OutcomeProbe, is_read_only
from mutators.slots import walk
from mutators.validate import (ToolInfo, ValidationError, call_arguments, load_tool,
                               too_deep_error, validate_with)

SPECS: dict[str, KindSpec] = {
    "type_error": type_error.SPEC,
    "hallucinated_key": hallucinated_key.SPEC,
    "logical_error": logical_error.SPEC,
    "wrong_function": extra_kinds.WRONG_FUNCTION,
    "missing_required": extra_kinds.MISSING_REQUIRED,
}
MAX_PROPOSED = 2000   # candidates proposed per kind (a huge call is not enumerated fully)
MAX_TRIED = 64        # candidates validated per kind before giving up
_MAX_TOOL_SETS = 256  # tool lists whose loaded tools are kept (an environment has one)
# ids of a tool list's specs -> (the specs, their loaded tools): every call of an episode
# passes the same specs, and loading them per call cost ~3% of the demo pipeline
_tool_sets: dict[tuple[int, ...], tuple[list[Any], list[ToolInfo]]] = {}
_NO_RNG = random.Random(0)  # MutationContext.rng until a kind sets its own


def _context(call: Any, tool: Any, env: Any, other_tools: Iterable[Any] | None,
             original_valid: bool = False) -> MutationContext | Rejected:
    """The shared context, or why the call cannot be mutated at all."""
    loaded = load_tool(tool)
    if isinstance(loaded, ValidationError):
        return Rejected("malformed_tool", f"the tool spec is malformed: {loaded.message}")
    name, arguments, malformed = call_arguments(call)
    if malformed is not None:
        return Rejected("malformed_call", f"the call is malformed: {malformed.message}")
    errors = _original_errors(call, loaded, original_valid, arguments)
    if errors:
        shown = "; ".join(e.message for e in errors[:3])
        return Rejected("invalid_original", f"the original call is invalid ({shown}); "
                        "negatives need a valid original")
    others = [info for info in loaded_tools(_tool_list(other_tools, env))
              if info.name != loaded.name]
    canonical = {"name": name, "arguments": copy_json(arguments)}
    # the rng is each kind's own (`_run_kind_safely` seeds it before any operator runs); a
    # placeholder here, not a fresh Random(0) per call (~4 us of seeding each)
    return MutationContext(canonical, loaded, walk(canonical["arguments"], loaded.schema),
                           _NO_RNG, env, others)


def _original_errors(call: Any, tool: ToolInfo, vouched: bool,
                     arguments: Any) -> list[ValidationError]:
    """`validate_with`, with a value nested too deeply an error, as `validate` reports it:
    such a call is an invalid original, not an unreadable one. The depth is checked even
    when the caller `vouched` for the call: every walk below recurses."""
    if vouched:
        return [too_deep_error()] if nested_deeper_than(arguments) else []
    try:
        return validate_with(call, tool)
    except RecursionError as exc:
        return [too_deep_error(exc)]


def loaded_tools(specs: list[Any]) -> list[ToolInfo]:
    """The specs that load, loaded; cached by the specs' identities (specs are treated as
    immutable once seen, as `load_tool` does)."""
    key = tuple(map(id, specs))
    hit = _tool_sets.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], specs)):
        return hit[1]
    infos = [info for info in map(load_tool, specs) if isinstance(info, ToolInfo)]
    if len(_tool_sets) >= _MAX_TOOL_SETS:
        for old in list(_tool_sets)[: _MAX_TOOL_SETS // 4]:
            _tool_sets.pop(old, None)
    _tool_sets[key] = (list(specs), infos)
    return infos


def _tool_list(other_tools: Iterable[Any] | None, env: Any) -> list[Any]:
    """`other_tools`, else the environment's own `tools()`; [] when neither is usable."""
    try:
        if other_tools is None and callable(getattr(env, "tools", None)):
            other_tools = env.tools()
        return list(other_tools or ())
    except Exception:  # noqa: BLE001 - a broken tool list only costs borrowed keys
        return []


def can_execute(env: Any) -> bool:
    """Whether `env` can run calls from a snapshot (otherwise only `alternatives` is used and
    logical errors are not verified: `outcome_changed` stays None)."""
    return all(callable(getattr(env, name, None)) for name in ("snapshot", "restore", "step"))


def _run_kind(spec: KindSpec, ctx: MutationContext) -> Negative | Rejected:
    proposed = itertools.chain.from_iterable(operator(ctx) for operator in spec.operators)
    candidates = list(itertools.islice(proposed, MAX_PROPOSED))
    if not candidates:
        return Rejected("no_candidate", spec.impossible(ctx))
    tried = 0
    for drawn in itertools.islice(spec.order(candidates, ctx.rng), MAX_TRIED):
        tried += 1
        candidate = materialise(drawn, ctx)
        try:
            call = candidate.build()
            errors = validate_with(call, ctx.tool)
            accepted = spec.accepts(ctx, candidate, call, errors)
        except RecursionError:  # a value too deep to check: this candidate proves nothing
            continue
        if accepted:
            description = candidate.description
            if spec.outcome_checked and ctx.probe is not None and ctx.probe.last_change:
                description = f"{description} ({ctx.probe.last_change})"
            return Negative(
                kind=spec.name, subkind=candidate.subkind, call=call, path=candidate.where,
                original=copy_json(candidate.original), mutated=copy_json(candidate.mutated),
                errors=[e.message for e in errors], schema_valid=not errors,
                outcome_changed=True if spec.outcome_checked and ctx.probe is not None else None,
                description=description)
    return Rejected("none_accepted", f"{spec.impossible(ctx)} ({tried} of {len(candidates)} "
                    "candidates validated)")


def mutate_report(call: dict[str, Any], tool: dict[str, Any], seed: int = 0, *,
                  env: Any = None, other_tools: Iterable[dict[str, Any]] | None = None,
                  kinds: Sequence[str] = KINDS,
                  operators: Mapping[str, Sequence[Operator]] | None = None,
                  max_env_checks: int = 12, original_valid: bool = False,
                  advance: bool = False) -> MutationReport:
    """Hard negatives for a valid `call` of `tool`, one per kind in `kinds` when possible,
    and for the others the reason in `impossible`.

    env: optional environment: `alternatives(call, path)` feeds wrong-entity logical errors;
        with `snapshot`/`restore`/`step` every logical error is verified to change the
        outcome. The environment is left exactly as found.
    other_tools: the environment's other tool specs (borrowed keys, wrong_function);
        defaults to `env.tools()` when the environment has that method.
    kinds: any of ALL_KINDS; KINDS (the default) is type_error, hallucinated_key,
        logical_error; ALL_KINDS adds wrong_function and missing_required.
    operators: replace a kind's operators ({"logical_error": [my_operator, ...]}).
    max_env_checks: candidate executions allowed per call for the outcome check.
    original_valid: the caller vouches that `call` is valid for `tool` (it passed this
        validator already, e.g. an environment ran it without an argument error), so it is
        not validated again. Negatives from an invalid original prove nothing: when in
        doubt leave it False, and an invalid call is reported as `invalid_original`.
    advance: leave `env` in the state after `call` instead of as found, as `env.step(call)`
        would (a caller replaying a trajectory steps each call after mutating it): when the
        last kind's outcome check ran the original, its after-state is restored, otherwise
        the call is stepped here (an exception from that step propagates, as the caller's
        own step would have raised), unless `env.read_only(call)` says it changes nothing.

    Never raises on data: whatever the call, the tool spec, the environment or the other
    tools hold, and whatever the seed (an int of any size, or any value with a `str()`),
    problems become reasons in `impossible`, as does an entry of `kinds` that is unknown or
    not a string (reported under its `repr`) and a kind's `operators` entry that fails.
    Arguments of the wrong shape are bugs in the calling code and raise TypeError before any
    work: `kinds` that is a single string or not iterable, `operators` that is not a mapping.
    """
    kind_list = _kind_list(kinds)
    if operators is not None and not isinstance(operators, Mapping):
        raise TypeError(f"operators must be a mapping of kind -> operators, got "
                        f"{type(operators).__name__}")
    report = MutationReport()
    try:
        ctx = _context(call, tool, env, other_tools, original_valid)
        seed_text = _seed_text(seed)
    except Exception as exc:  # noqa: BLE001 - errors become data, never a crash
        ctx = Rejected("unreadable", f"cannot read the call, tool or seed: "
                                     f"{type(exc).__name__}: {_clip(exc)}")
    advanced = False
    for position, kind in enumerate(kind_list, 1):
        key = kind if isinstance(kind, str) else _clip(repr(kind))
        spec = SPECS.get(kind) if isinstance(kind, str) else None
        if isinstance(ctx, Rejected) or spec is None:
            report.impossible[key] = ctx if isinstance(ctx, Rejected) else _unknown_kind(kind)
            continue
        # only the last kind may leave the environment after the call: the others' checks
        # must start from the state the call is made in
        result, advanced = _run_kind_safely(spec, ctx, f"{seed_text}:{kind}", env, operators,
                                            max_env_checks,
                                            advance and position == len(kind_list))
        if isinstance(result, Negative):
            report.negatives.append(result)
        else:
            report.impossible[key] = result
    if advance and not advanced and env is not None and not is_read_only(env, call):
        env.step(copy_json(call))  # a read-only call would leave the state as it is
    return report


def _kind_list(kinds: Any) -> list[Any]:
    if isinstance(kinds, (str, bytes)):
        raise TypeError(f"kinds must be a list of kind names such as [{_clip(repr(kinds))}], not a "
                        "single string")
    try:
        return list(kinds)
    except TypeError:
        raise TypeError(f"kinds must be a list of kind names (any of {', '.join(ALL_KINDS)}), "
                        f"got {type(kinds).__name__}") from None


def _seed_text(seed: Any) -> str:
    """The seed as the per-kind RNG's seed string: `str(seed)`, as always (existing datasets
    keep their negatives); an int too long for `str()` (over 4,300 digits) in hex."""
    if isinstance(seed, int):
        try:
            return str(seed)
        except ValueError:
            return hex(seed)
    return f"{seed}"


def _unknown_kind(kind: Any) -> Rejected:
    if not isinstance(kind, str):
        return Rejected("unknown_kind", f"a kind is named by a string, got "
                        f"{type(kind).__name__} (known: {', '.join(ALL_KINDS)})")
    return Rejected("unknown_kind", f"unknown kind {_clip(repr(kind))} (known: "
                    f"{', '.join(ALL_KINDS)})")


def _clip(value: Any, limit: int = 200) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _run_kind_safely(spec: KindSpec, ctx: MutationContext, rng_seed: str, env: Any,
                     operators: Mapping[str, Sequence[Operator]] | None,
                     max_env_checks: int, advance: bool = False,
                     ) -> tuple[Negative | Rejected, bool]:
    """One kind, with its own RNG and outcome probe; any failure becomes the reason. Also
    whether the environment was left after the original call (`advance`, see
    `OutcomeProbe.close`)."""
    kind, ctx.probe, advanced = spec.name, None, False
    try:
        try:
            if operators and kind in operators:
                spec = replace(spec, operators=tuple(operators[kind]))
            ctx.rng, ctx.seed = random.Random(rng_seed), rng_seed
            ctx.probe = OutcomeProbe(env, ctx.call, max_env_checks) if (
                spec.outcome_checked and can_execute(env)) else None
            result = _run_kind(spec, ctx)
        except Exception as exc:  # noqa: BLE001
            result = Rejected("mutator_failed",
                              f"the {kind} mutator failed: {type(exc).__name__}: {_clip(exc)}")
    finally:
        if ctx.probe is not None:
            advanced = ctx.probe.close(advance)
    return result, advanced


def mutate(call: dict[str, Any], tool: dict[str, Any], seed: int = 0, *, env: Any = None,
           other_tools: Iterable[dict[str, Any]] | None = None, kinds: Sequence[str] = KINDS,
           operators: Mapping[str, Sequence[Operator]] | None = None,
           max_env_checks: int = 12) -> list[Negative]:
    """The negatives of `mutate_report` (at most one per kind, in `kinds` order); use
    `mutate_report` to learn why a kind is missing."""
    return mutate_report(call, tool, seed, env=env, other_tools=other_tools, kinds=kinds,
                         operators=operators, max_env_checks=max_env_checks).negatives
