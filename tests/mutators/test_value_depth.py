"""Argument values nested deeper than MAX_VALUE_DEPTH: one verdict from `validate` and
`mutate_report`, whatever the caller's stack. A free-form object 500-990 levels deep used to
validate while every negative kind ended `unreadable: RecursionError` (copy_json recursed)."""

from __future__ import annotations

import pytest

from mutators import ALL_KINDS, mutate_report, validate
from mutators.jsonvalues import MAX_VALUE_DEPTH, nested_deeper_than

FREE_FORM = {"name": "f", "parameters": {"type": "object", "properties": {
    "meta": {"type": "object"}, "n": {"type": "integer"}}, "required": ["n"]}}
DEPTH_ERROR = f"arguments: value nested too deeply to validate (over {MAX_VALUE_DEPTH} levels)"


def chain(levels: int) -> dict:
    """`levels` objects, one inside the other."""
    value: dict = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def call_with_meta(levels: int) -> dict:
    """A call whose arguments nest `levels` deep (the arguments object is the first)."""
    return {"name": "f", "arguments": {"meta": chain(levels - 1), "n": 3}}


def under_stack(frames: int, fn):
    """`fn()` called `frames` frames deeper than here (a pipeline calls from deep stacks)."""
    return fn() if frames == 0 else under_stack(frames - 1, fn)


@pytest.mark.parametrize("levels", [MAX_VALUE_DEPTH + 1, 500, 990])
@pytest.mark.parametrize("vouched", [False, True])
def test_a_too_deep_original_is_invalid_with_validates_message(levels, vouched):
    call = call_with_meta(levels)
    assert validate(call, FREE_FORM) == [DEPTH_ERROR]
    report = mutate_report(call, FREE_FORM, kinds=ALL_KINDS, original_valid=vouched)
    assert report.negatives == []
    assert {r.kind for r in report.impossible.values()} == {"invalid_original"}
    assert all(DEPTH_ERROR in r.detail for r in report.impossible.values())


@pytest.mark.parametrize("frames", [0, 400])
def test_a_value_at_the_limit_gets_its_negatives_from_any_stack(frames):
    call = call_with_meta(MAX_VALUE_DEPTH)
    assert under_stack(frames, lambda: validate(call, FREE_FORM)) == []
    report = under_stack(frames, lambda: mutate_report(call, FREE_FORM, seed=1))
    assert [n.kind for n in report.negatives] == ["type_error", "hallucinated_key",
                                                  "logical_error"], report.impossible


def test_depth_is_measured_without_recursion_and_stops_on_a_value_holding_itself():
    assert not nested_deeper_than(chain(MAX_VALUE_DEPTH))
    assert nested_deeper_than(chain(MAX_VALUE_DEPTH + 1))
    assert nested_deeper_than(chain(50_000))
    assert not nested_deeper_than("text") and not nested_deeper_than([1, (2,), {}], 2)
    loop: list = []
    loop.extend([loop, loop])
    assert nested_deeper_than(loop)
