"""Environments check tool arguments with the mutators' validator: one verdict for the episode
and the environment, observations that name the argument, and the four cases where the old
environment checker disagreed decided as JSON Schema says (README "Validation rules")."""

from __future__ import annotations

import pytest

from datagen.envs import make_env
from datagen.envs._arguments import argument_check, as_handler_arguments, handler_arguments
from mutators import ALL_KINDS, mutate_report, validate, validate_detailed

FAMILIES = ("sql", "fs", "enterprise")
_ENVS: dict = {}


def env_of(name: str):
    if name not in _ENVS:
        _ENVS[name] = make_env(name)
    return _ENVS[name]


def spec_of(env, name: str) -> dict:
    return next(spec for spec in env.tools() if spec["function"]["name"] == name)


def candidate_calls(env, task) -> list[tuple[dict, dict]]:
    """(call, spec) for each gold call and each of its negatives (wrong types, unknown keys,
    missing required arguments, logical errors)."""
    found = []
    for index, gold in enumerate(task.gold):
        call = gold.call.as_dict()
        spec = spec_of(env, call["name"])
        found.append((call, spec))
        report = mutate_report(call, spec, seed=index, kinds=[k for k in ALL_KINDS
                                                              if k != "wrong_function"])
        found += [(negative.call, spec) for negative in report.negatives]
    return found


@pytest.mark.parametrize("family", FAMILIES)
def test_environment_refuses_exactly_the_calls_the_validator_refuses(family):
    env = env_of(family)
    refused = accepted = 0
    for seed in range(6):
        task = env.generate_task(seed, f"{family}-{seed}")
        for call, spec in candidate_calls(env, task):
            env.reset(task)
            errors = validate_detailed(call, spec)
            observation = env.step(call)
            check = argument_check(spec["function"]["parameters"])
            if errors:
                refused += 1
                first = errors[0].path.removeprefix("arguments").removeprefix(".")
                assert observation.error is not None, (call, errors)
                assert observation.error.startswith(f"{call['name']}: "), observation.error
                assert f"'{first}'" in observation.error or not first, (observation.error, errors)
            else:
                accepted += 1
                assert check(call["arguments"]) is None, call
    assert refused > 10 and accepted > 10, (refused, accepted)


def test_an_integral_float_is_an_integer_and_reaches_the_handler_as_int():
    env = env_of("enterprise")
    task = env.generate_task(3, "t")
    env.reset(task)
    arguments = {"title": "Sync", "start": "2026-03-04T10:00:00", "duration_minutes": 30.0,
                 "attendees": ["a@b.example.com"], "location": {"kind": "room"}}
    assert validate({"name": "create_event", "arguments": arguments},
                    spec_of(env, "create_event")) == []
    observation = env.step({"name": "create_event", "arguments": arguments})
    assert observation.error is None, observation.content
    event = list(env.state["events"].values())[-1]
    assert event["duration_minutes"] == 30 and type(event["duration_minutes"]) is int
    fractional = {**arguments, "duration_minutes": 30.5}
    assert "expected integer" in env.step({"name": "create_event",
                                           "arguments": fractional}).error


def test_a_date_time_with_a_space_is_accepted_and_stored_in_one_spelling():
    env = env_of("enterprise")
    env.reset(env.generate_task(3, "t"))
    arguments = {"title": "Sync", "start": "2026-03-04 10:00", "duration_minutes": 30,
                 "attendees": ["a@b.example.com"], "location": {"kind": "room"}}
    observation = env.step({"name": "create_event", "arguments": arguments})
    assert observation.error is None, observation.content
    assert list(env.state["events"].values())[-1]["start"] == "2026-03-04T10:00:00"
    wrong = {**arguments, "start": "2026-03-04 25:00"}
    assert "not a valid date-time" in env.step({"name": "create_event", "arguments": wrong}).error


def test_a_tuple_is_an_array_and_any_of_checks_the_branches():
    check = argument_check({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}},
        "limit": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}},
        "additionalProperties": False})
    assert check({"tags": ("a", "b"), "limit": None}) is None
    assert check({"limit": "ten"}) == "argument 'limit': expected integer or null, got string"
    assert "less than the minimum 1" in check({"limit": 0})


def test_observations_name_the_argument_and_count_the_rest():
    check = argument_check({"type": "object", "properties": {
        "filters": {"type": "object", "properties": {"status": {"enum": ["open", "closed"]}},
                    "additionalProperties": False},
        "when": {"type": "string", "format": "date"}},
        "required": ["when"], "dependentRequired": {"filters": ["when"]},
        "additionalProperties": False})
    assert check({"when": "2026-01-01"}) is None
    assert check({}) == "missing required argument 'when'"
    assert check({"filters": {}}) == (
        "missing required argument 'when' (and 1 more problem)")
    assert check({"when": "2026-01-01", "filters": {"state": "open"}}) == (
        "unknown argument 'filters.state' (allowed: status)")
    assert check({"when": "tomorrow"}) == (
        "argument 'when': \"tomorrow\" is not a valid date (YYYY-MM-DD)")
    assert check([1]) == "arguments: expected object, got array"
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert check({"when": "2026-01-01", "filters": {"status": deep}}) is not None


def test_integral_floats_become_ints_where_the_schema_says_integer_and_nowhere_else():
    convert = handler_arguments({"type": "object", "properties": {
        "n": {"type": "integer"}, "x": {"type": "number"}, "name": {"type": "string"},
        "rows": {"type": "array", "items": {"type": "object", "properties": {
            "q": {"type": ["integer", "null"]}}}}}})
    unchanged = {"n": 3, "x": 2.0, "rows": [{"q": 1}]}
    assert convert(unchanged) is unchanged  # nothing to convert: nothing copied
    converted = convert({"n": 3.0, "x": 2.0, "name": "a", "rows": [{"q": 2.0}, {"q": None}]})
    assert converted == {"n": 3, "x": 2.0, "name": "a", "rows": [{"q": 2}, {"q": None}]}
    assert type(converted["n"]) is int and type(converted["x"]) is float
    assert type(converted["rows"][0]["q"]) is int
    assert handler_arguments({"type": "object", "properties": {"s": {"type": "string"}}}) is None
    combined = handler_arguments({"type": "object", "properties": {
        "n": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}})
    assert type(combined({"n": 4.0})["n"]) is int


def test_every_integral_float_is_converted_under_combined_schemas():
    arguments = {"a": [1, "x", {"b": None}], "c": True}
    assert as_handler_arguments(arguments) is arguments
    assert as_handler_arguments({"n": 3.0, "xs": [1.5, 2.0, 1e300]}) == {
        "n": 3, "xs": [1.5, 2, 1e300]}
