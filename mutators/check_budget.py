"""A budget of subschema checks per validation, for schemas whose checks can multiply.

`$ref`s let a small schema apply the same subschema along exponentially many paths: 24
levels of `{"anyOf": [{"$ref": next}, {"$ref": next}]}` (1.8 KB) try 2^24 branches on a value
that fails them all (minutes), and `allOf` does so on every value. Compiling is linear
(`node_graph.py`); checking cannot be, so it is counted instead, like the time budget of the
fallback regex engine (`safe_regex.py`).

Which schemas: those whose graph loops (recursive) or written out as a tree would have over
UNFOLDED_LIMIT nodes (`node_graph.unfolded_size`). Every other schema compiles exactly as
before and pays nothing. In a counted schema each subschema check (and each evaluation for
unevaluatedProperties/Items) spends one unit of a per-thread budget that the root check sets
when a validation starts: MAX_CHECKS, or CHECKS_PER_VALUE per value in the arguments when that
is more (a big value under a recursive schema is not a runaway; the values are counted only
once MAX_CHECKS is spent). Spending past it raises `SchemaTooComplex`, which `validate`
reports as `tool.parameters: schema too complex to validate this value (...)`.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

MAX_CHECKS = 20_000       # 20-100 ms of checks on the shared VM
CHECKS_PER_VALUE = 64     # a recursive anyOf of 6 branches needs ~8 per value
UNFOLDED_LIMIT = 10_000   # tree size past which a schema's checks are counted


class SchemaTooComplex(RecursionError):
    """The checks of one validation ran past the budget. A RecursionError, so that callers
    which already guard a validation against runaway recursion (`datagen/envs/_arguments.py`)
    catch it too."""


class _Budget(threading.local):
    left = MAX_CHECKS
    total = MAX_CHECKS
    value: Any = None
    scaled = True  # a thread that never started a validation gets MAX_CHECKS, not more


_budget = _Budget()


def with_budget(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The root check of a counted schema: a fresh budget for each validation."""
    def validate(value: Any) -> Any:
        budget = _budget
        budget.left = budget.total = MAX_CHECKS
        budget.value, budget.scaled = value, False
        return check(value)

    return validate


def counted(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`function` spending one unit of the budget per call."""
    def spend(value: Any) -> Any:
        budget = _budget
        budget.left -= 1
        if budget.left < 0:
            _overspent(budget)
        return function(value)

    return spend


def _overspent(budget: _Budget) -> None:
    if not budget.scaled:  # first time: allow CHECKS_PER_VALUE per value of the arguments
        budget.scaled = True
        cap = MAX_CHECKS * 100 // CHECKS_PER_VALUE
        extra = CHECKS_PER_VALUE * _count_values(budget.value, cap) - MAX_CHECKS
        budget.value = None
        if extra > 0:
            budget.left += extra
            budget.total += extra
            return
    raise SchemaTooComplex(f"schema too complex to validate this value (over "
                           f"{budget.total:,} subschema checks: its $ref/anyOf/allOf branches "
                           f"multiply)")


def _count_values(value: Any, cap: int) -> int:
    """Values inside `value` (itself included), counted up to `cap`."""
    count, stack = 0, [value]
    while stack and count < cap:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return count
