"""Fuzzing `validate` and `mutate_report` with random schemas and instances, hostile parts
included (backtracking patterns, integers past the int-str limit, odd keyword values): no
exception escapes, no "validator failed" message, each call within a time budget
(issue 12). MUTATORS_FUZZ_EXAMPLES=5000 for a longer hunt."""

from __future__ import annotations

import os
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mutators import ALL_KINDS, mutate_report, validate

EXAMPLES = int(os.environ.get("MUTATORS_FUZZ_EXAMPLES", "60"))
VALIDATE_BUDGET_S = 2.0   # fallback regexes spend at most ~0.25 s (+ the engine's overshoot)
MUTATE_BUDGET_S = 10.0
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))

PATTERNS = ["(a+)+$", "((a)+)+$", "(a|a)*$", "(a|a?)+$", "(?:a|a)+b", "(a|a)*$(?=b)",
            "^C-[0-9]{4}$", "^[a-z_]+$", "\\d", "(?<y>\\d{4})", "\\p{L}+", "(", "[",
            "(?:a{1000}){1000}", "^(?=.*\\d).{8,}$", "(a)\\1", "\\u0041", "$", ""]
HUGE = [10**5000, -(10**5000), 10**400, 2**64, 1e308, -1e-320]
TYPES = ["string", "integer", "number", "boolean", "object", "array", "null", "int", "str",
         "List[int]", "Optional[str]", "nonsense", 5, None, ["string", "null"]]
KEYS = ["a", "b", "aa", "a" * 40 + "!", "x-1", "", "\u00e9", "k"]


def huge() -> st.SearchStrategy:
    # drawn by index: Hypothesis shows strategy arguments with repr(), which refuses such ints
    return st.integers(0, len(HUGE) - 1).map(huge_number)


def huge_number(index: int) -> int | float:
    return HUGE[index]


def scalars() -> st.SearchStrategy:
    return (st.none() | st.booleans() | st.integers(-10, 10) | huge()
            | st.floats(allow_nan=True, allow_infinity=True)
            | st.text(max_size=20) | st.sampled_from(["a" * 30 + "!", "x" * 2000, "2024-02-30"]))


def instances() -> st.SearchStrategy:
    return st.recursive(scalars(), lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), inner,
                                          max_size=4), max_leaves=6)


def keyword_values() -> st.SearchStrategy:
    return scalars() | st.sampled_from(PATTERNS) | st.lists(scalars(), max_size=3)


@st.composite
def leaf_schema(draw) -> dict:
    schema: dict = {"type": draw(st.sampled_from(TYPES))}
    for keyword in draw(st.lists(st.sampled_from(
            ["pattern", "minimum", "maximum", "exclusiveMinimum", "multipleOf", "minLength",
             "maxLength", "enum", "const", "format", "minItems", "uniqueItems", "nullable"]),
            max_size=4, unique=True)):
        if keyword == "pattern":
            schema[keyword] = draw(st.sampled_from(PATTERNS) | st.text("a()|+*?$^[]\\d{}1,",
                                                                         max_size=12))
        elif keyword == "format":
            schema[keyword] = draw(st.sampled_from(["date", "email", "uri", "hostname", "x"]))
        elif keyword == "enum":
            schema[keyword] = draw(st.lists(scalars(), max_size=4))
        else:
            schema[keyword] = draw(keyword_values())
    return schema


def schemas() -> st.SearchStrategy:
    def extend(inner):
        return (st.builds(lambda props, pats, extra, req: {
                    "type": "object", "properties": props, "patternProperties": pats,
                    "additionalProperties": extra, "required": req},
                    st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
                    st.dictionaries(st.sampled_from(PATTERNS), inner, max_size=2),
                    st.booleans() | inner, st.lists(st.sampled_from(KEYS), max_size=2))
                | st.builds(lambda items: {"type": "array", "items": items}, inner)
                | st.builds(lambda branches: {"anyOf": branches}, st.lists(inner, max_size=3))
                | st.builds(lambda branches: {"allOf": branches}, st.lists(inner, max_size=2))
                | st.builds(lambda sub: {"not": sub}, inner)
                | st.just({"$ref": "#"}) | st.just({"$ref": "#/$defs/missing"}))
    return st.recursive(leaf_schema() | st.booleans(), extend, max_leaves=4)


@st.composite
def tools_and_arguments(draw) -> tuple[dict, dict]:
    properties = draw(st.dictionaries(st.sampled_from(KEYS), schemas(), max_size=4))
    parameters = {"type": "object", "properties": properties}
    if draw(st.booleans()):
        parameters["patternProperties"] = {draw(st.sampled_from(PATTERNS)): draw(schemas())}
    arguments = draw(st.dictionaries(st.sampled_from(KEYS), instances(), max_size=4))
    return {"name": "t", "parameters": parameters}, arguments


@SETTINGS
@given(tools_and_arguments(), st.integers(0, 3) | huge())
def test_validate_and_mutate_report_never_raise_and_stay_within_budget(tool_and_arguments,
                                                                      seed):
    tool, arguments = tool_and_arguments
    call = {"name": "t", "arguments": arguments}
    start = time.perf_counter()
    errors = validate(call, tool)
    assert time.perf_counter() - start < VALIDATE_BUDGET_S
    assert all(isinstance(e, str) and len(e) < 2_000 for e in errors)
    assert not any("validator failed" in e for e in errors), errors
    start = time.perf_counter()
    report = mutate_report(call, tool, seed, kinds=ALL_KINDS)
    assert time.perf_counter() - start < MUTATE_BUDGET_S
    assert set(report.impossible) | {n.kind for n in report.negatives} == set(ALL_KINDS)
    assert not any("mutator failed" in reason or "cannot read" in reason
                   for reason in report.impossible.values()), report.impossible


def test_a_number_bound_past_the_float_range_is_sampled_as_an_int():
    # found by a longer fuzz run: sample_value did float(10**5000) for a borrowed key's value
    tool = {"name": "t", "parameters": {"type": "object", "properties": {
        "a": {"$ref": "#"}, "b": {"type": "number", "minimum": 10**5000}}}}
    report = mutate_report({"name": "t", "arguments": {}}, tool, 0, kinds=ALL_KINDS)
    assert not any("mutator failed" in str(reason) for reason in report.impossible.values())
