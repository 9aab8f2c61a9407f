"""The data the mutators produce (`Negative`, `MutationReport`) and share while producing it
(`Candidate`, `MutationContext`, `KindSpec`).

A mutation kind is a list of operators plus an acceptance test: each operator proposes
candidates (a change and the call it yields), the kind orders them with the seeded RNG, and
the first candidate that passes the test (validated, and for logical errors executed) becomes
the `Negative`. Operators are plain functions, so a caller can add or replace them.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Iterator

from mutators.jsonvalues import Path, copy_json, format_path
from mutators.slots import Slot
from mutators.validate import ToolInfo, ValidationError

KINDS = ("type_error", "hallucinated_key", "logical_error")
EXTRA_KINDS = ("wrong_function", "missing_required")
ALL_KINDS = KINDS + EXTRA_KINDS


@dataclass(slots=True)
class Negative:
    """One hard negative for a correct call.

    `call` is the mutated call (`{"name", "arguments"}`), `path` where it changed
    (`arguments.filters.status`; `name` for wrong_function), `original`/`mutated` the values
    there. For key changes (hallucinated_key) they are the key names: the real key replaced
    (None when a key was added) and the hallucinated one. For a dropped key `mutated` is None.
    `errors` is what `validate` says about `call` against the original tool, `schema_valid`
    whether that is empty. `outcome_changed` is True when an environment confirmed that
    executing `call` gives a different observation than the original, None when not executed.
    """

    kind: str
    subkind: str
    call: dict[str, Any]
    path: str
    original: Any
    mutated: Any
    errors: list[str]
    schema_valid: bool
    outcome_changed: bool | None = None
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Rejected:
    """Why something was not produced, as data: `kind` is a short fixed name to count by
    (`no_candidate`, `invalid_original`, `checker_rejected` ...), `detail` the text for a
    person. The one error type of the generation side (mutators, critics, the pipeline's
    stages): summaries count kinds, not truncated text. `str()` is the detail."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return self.detail

    def __contains__(self, text: str) -> bool:
        return text in self.detail


@dataclass(slots=True)
class MutationReport:
    """What `mutate_report` returns: the negatives (at most one per kind, in the order the
    kinds were asked for) and, for every kind that could not be produced, why."""

    negatives: list[Negative] = field(default_factory=list)
    impossible: dict[str, Rejected] = field(default_factory=dict)

    def get(self, kind: str) -> Negative | None:
        return next((n for n in self.negatives if n.kind == kind), None)


@dataclass(slots=True)
class Candidate:
    """A proposed mutation. `build()` returns the mutated call (a fresh copy each time);
    `path` is relative to the arguments unless `path_text` says otherwise."""

    subkind: str
    path: Path
    original: Any
    mutated: Any
    build: Callable[[], dict[str, Any]]
    description: str = ""
    path_text: str | None = None

    @property
    def where(self) -> str:
        return self.path_text if self.path_text is not None else format_path(self.path)


@dataclass(slots=True)
class MutationContext:
    """Everything an operator may look at. `call` is a private canonical copy of the original
    call; `slots` every value in its arguments with its schema; `env` the optional
    environment (duck-typed: alternatives/snapshot/restore/step); `probe` runs calls in it.
    `rng` orders the candidates; `seed` (the kind's RNG seed) seeds `value_rng`."""

    call: dict[str, Any]
    tool: ToolInfo
    slots: list[Slot]
    rng: random.Random
    env: Any = None
    other_tools: list[ToolInfo] = field(default_factory=list)
    probe: Any = None
    seed: str = ""

    @property
    def arguments(self) -> dict[str, Any]:
        return self.call["arguments"]

    def edited(self, edit: Callable[[dict[str, Any]], None]) -> Callable[[], dict[str, Any]]:
        """A `build` function: copy the original call and apply `edit` to its arguments."""
        def build() -> dict[str, Any]:
            call = copy_json(self.call)
            edit(call["arguments"])
            return call
        return build


class Proposal:
    """A candidate not built yet: what ordering looks at (`subkind`, `original` and, where a
    kind's order groups by it, `path`, as on `Candidate`) and how to build it,
    `make(ctx, *args) -> Candidate`. Operators yield these
    where building is the cost (a kind proposes ~50 candidates per call and tries 1-3): the
    order functions draw from group sizes alone, so the same draws pick the same candidates,
    and `_run_kind` builds only the drawn ones (`materialise`). Being independent of the
    call's context, a proposal can be kept on a schema's memo and reused across calls."""

    __slots__ = ("subkind", "original", "make", "args", "path")

    def __init__(self, subkind: str, original: Any, make: Callable[..., Candidate],
                 args: tuple = (), path: Path | None = None) -> None:
        self.subkind, self.original, self.make, self.args = subkind, original, make, args
        self.path = path


def materialise(proposed: Candidate | Proposal, ctx: MutationContext) -> Candidate:
    """The candidate a drawn proposal stands for (a `Candidate` is returned as it is)."""
    if type(proposed) is Proposal:
        return proposed.make(ctx, *proposed.args)
    return proposed


def value_rng(seed: str, parts: Path) -> random.Random:
    """The RNG a candidate samples its value from when it is built, seeded per (the kind's
    seed, path): a value is drawn only for the few candidates tried, and a candidate gets the
    same value whatever else was proposed."""
    return random.Random(f"{seed}:{format_path(parts)}")


Operator = Callable[[MutationContext], Iterable[Candidate | Proposal]]
Acceptance = Callable[[MutationContext, Candidate, dict, list[ValidationError]], bool]


@dataclass(frozen=True, slots=True)
class KindSpec:
    """A mutation kind: its operators, the test a candidate must pass, the order candidates
    are tried in, and the reason given when no candidate exists at all."""

    name: str
    operators: tuple[Operator, ...]
    accepts: Acceptance
    impossible: Callable[[MutationContext], str]
    order: Callable[[list[Candidate | Proposal], random.Random], Iterable[Candidate | Proposal]]
    outcome_checked: bool = False


def interleave_by(candidates: list[Candidate], rng: random.Random,
                  group: Callable[[Candidate], Any], shuffle_within: bool = True,
                  prefer: Callable[[Candidate], bool] | None = None) -> Iterator[Candidate]:
    """Shuffle the groups (e.g. subkinds), then take one from each group in turn, drawn at
    random within the group (the `prefer`red ones first) or in order without
    `shuffle_within`. Every group gets the same chance to be first, however many candidates
    it has; later ones are the fallbacks when one fails. Lazy: a candidate is drawn only when
    the caller asks for the next one, so ordering costs what is tried, not what is proposed."""
    groups: dict[Any, list[Candidate]] = {}
    for candidate in candidates:
        groups.setdefault(group(candidate), []).append(candidate)
    order = list(groups.values())
    rng.shuffle(order)
    streams = [_drawn(members, rng, shuffle_within, prefer) for members in order]
    while streams:
        alive = []
        for stream in streams:
            candidate = next(stream, None)
            if candidate is not None:
                alive.append(stream)
                yield candidate
        streams = alive


def _drawn(members: list[Candidate], rng: random.Random, shuffle: bool,
           prefer: Callable[[Candidate], bool] | None) -> Iterator[Candidate]:
    if prefer is None or not shuffle:
        pools = [members]
    else:  # one pass (`prefer` once per candidate), each part in the members' order
        pools = [[], []]
        for candidate in members:
            pools[not prefer(candidate)].append(candidate)
    for pool in pools:
        pool = pool[::-1]  # popped from the end: in order, or a random one swapped there
        while pool:
            if shuffle:
                index = rng.randrange(len(pool))
                pool[index], pool[-1] = pool[-1], pool[index]
            yield pool.pop()


def by_subkind(candidates: list[Candidate], rng: random.Random) -> Iterator[Candidate]:
    return interleave_by(candidates, rng, lambda c: c.subkind)
