"""type_error negatives: a wrong-typed value, rejected as a type error at its path."""

from __future__ import annotations

from mutators import mutate_report, validate_detailed
from mutators.type_error import wrong_values
from tests.mutators.fake_crm_env import CREATE_TICKET, LIST_TICKETS, function_tool


def type_error(call, tool, seed=0):
    report = mutate_report(call, tool, seed, kinds=["type_error"])
    return report.get("type_error"), report.impossible.get("type_error")


def assert_type_error_at_path(negative, tool):
    errors = validate_detailed(negative.call, tool)
    assert any(e.reason == "type" and e.path == negative.path for e in errors), errors
    assert negative.schema_valid is False and negative.errors


def test_plausible_wrong_values():
    assert wrong_values(42)[0] == "42"
    assert wrong_values("1002")[0] == 1002
    assert wrong_values("C-1002")[0] == 1002
    assert wrong_values(True)[0] == "true"
    assert wrong_values(["a", "b"])[0] == "a"
    assert wrong_values({"a": 1})[0] == '{"a":1}'


def test_type_error_for_every_seed_is_a_type_error_at_its_path():
    call = {"name": "create_ticket", "arguments": {"customer_id": "C-1001", "title": "Login broken",
                                                   "priority": "high", "due_date": "2024-05-01",
                                                   "notify": True}}
    paths = set()
    for seed in range(20):
        negative, _ = type_error(call, CREATE_TICKET, seed)
        assert negative.kind == "type_error"
        assert_type_error_at_path(negative, CREATE_TICKET)
        paths.add(negative.path)
        assert negative.subkind.endswith(("_for_string", "_for_boolean"))
    assert len(paths) >= 3  # the seed moves the mutation around


def test_type_error_at_depth_and_in_arrays():
    tool = function_tool("bulk", {"orders": {"type": "array", "items": {
        "type": "object", "properties": {"qty": {"type": "integer"}}}}})
    call = {"name": "bulk", "arguments": {"orders": [{"qty": 1}, {"qty": 2}]}}
    seen = set()
    for seed in range(30):
        negative, _ = type_error(call, tool, seed)
        assert_type_error_at_path(negative, tool)
        seen.add(negative.path)
    assert {"arguments.orders[0].qty", "arguments.orders"} <= seen


def test_type_error_avoids_every_anyof_branch_and_type_list():
    tool = function_tool("f", {"v": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                               "w": {"type": ["string", "null", "array"]}})
    call = {"name": "f", "arguments": {"v": 5, "w": "x"}}
    for seed in range(15):
        negative, _ = type_error(call, tool, seed)
        assert_type_error_at_path(negative, tool)
        forbidden = {"arguments.v": (int, str), "arguments.w": (str, type(None), list)}
        assert not isinstance(negative.mutated, forbidden[negative.path]) or \
            isinstance(negative.mutated, bool)


def test_integer_never_mutated_to_integral_float():
    for seed in range(10):
        negative, _ = type_error({"name": "list_tickets", "arguments": {"customer_id": "C-1001",
                                                                        "limit": 5}}, LIST_TICKETS, seed)
        assert negative.mutated != 5.0


def test_impossible_without_arguments_or_without_types():
    negative, reason = type_error({"name": "list_tickets", "arguments": {}},
                                  function_tool("list_tickets", {"q": {"type": "string"}}))
    assert negative is None and "no argument values" in reason
    free = function_tool("f", {"blob": {}, "any": {"type": "any"}})
    negative, reason = type_error({"name": "f", "arguments": {"blob": 1, "any": "x"}}, free)
    assert negative is None and "type constraint" in reason
