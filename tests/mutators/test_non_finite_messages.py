"""Messages spell a non-finite schema bound or value `inf`, `-inf`, `nan`: orjson writes all
three as `null`, so a call over a `-inf` maximum read "greater than the maximum null"."""

from __future__ import annotations

import json

from mutators import validate
from mutators.jsonvalues import render

INF, NAN = float("inf"), float("nan")
# bounds as a spec read with Python's json module arrives: 1e400 is inf
TOOL = {"name": "f", "parameters": json.loads(
    '{"type": "object", "properties": {"low": {"type": "number", "maximum": -1e400},'
    ' "high": {"type": "number", "minimum": 1e400},'
    ' "below": {"type": "integer", "exclusiveMaximum": -1e400},'
    ' "pick": {"enum": [1e400, 1, null]}}}')}


def test_bounds_and_members_are_spelt_out_in_messages():
    call = {"name": "f", "arguments": {"low": 3, "high": 2, "below": 1, "pick": 2}}
    assert validate(call, TOOL) == [
        "arguments.low: 3 is greater than the maximum -inf",
        "arguments.high: 2 is less than the minimum inf",
        "arguments.below: 1 must be less than -inf",
        "arguments.pick: expected one of inf, 1, null; got 2"]
    const_nan = {"name": "f", "parameters": {"type": "object", "properties": {
        "c": {"const": NAN}}}}
    assert validate({"name": "f", "arguments": {"c": 1}}, const_nan) == [
        "arguments.c: expected nan, got 1"]


def test_render_spells_non_finite_numbers_anywhere_and_keeps_null():
    assert render([1.0, INF, -INF, NAN, None, {"a": INF}]) == '[1.0,inf,-inf,nan,null,{"a":inf}]'
    assert render(None) == "null" and render({"a": None}) == '{"a":null}'

