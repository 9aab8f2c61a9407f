"""The optional kinds: wrong_function and missing_required (off unless asked for)."""

from __future__ import annotations

from mutators import ALL_KINDS, KINDS, mutate, mutate_report, validate, validate_detailed
from tests.mutators.fake_crm_env import CREATE_TICKET, CRM_TOOLS, GET_CUSTOMER, LIST_TICKETS

CALL = {"name": "list_tickets", "arguments": {"customer_id": "C-1001", "status": "open"}}


def test_extra_kinds_are_off_by_default():
    assert [n.kind for n in mutate(CALL, LIST_TICKETS, other_tools=CRM_TOOLS)] == list(KINDS)
    assert [n.kind for n in mutate(CALL, LIST_TICKETS, other_tools=CRM_TOOLS,
                                   kinds=ALL_KINDS)] == list(ALL_KINDS)


def test_core_negatives_do_not_change_when_extras_are_added():
    core = mutate(CALL, LIST_TICKETS, 3, other_tools=CRM_TOOLS)
    extended = mutate(CALL, LIST_TICKETS, 3, other_tools=CRM_TOOLS, kinds=ALL_KINDS)
    assert [n.to_dict() for n in core] == [n.to_dict() for n in extended[:3]]


def test_wrong_function_is_valid_for_the_tool_it_calls():
    by_name = {t["function"]["name"]: t for t in CRM_TOOLS}
    called = set()
    for seed in range(10):
        negative = mutate_report(CALL, LIST_TICKETS, seed, other_tools=CRM_TOOLS,
                                 kinds=["wrong_function"]).get("wrong_function")
        assert negative.path == "name" and negative.original == "list_tickets"
        assert validate(negative.call, by_name[negative.mutated]) == []
        assert any(e.reason == "name" for e in validate_detailed(negative.call, LIST_TICKETS))
        assert negative.call["arguments"]["customer_id"] == "C-1001"  # carried over
        called.add(negative.mutated)
    assert called == {"get_customer", "create_ticket"}


def test_wrong_function_impossible_without_other_tools():
    report = mutate_report(CALL, LIST_TICKETS, kinds=["wrong_function"])
    assert "other_tools" in report.impossible["wrong_function"]


def test_missing_required():
    negative = mutate_report(CALL, LIST_TICKETS, kinds=["missing_required"]).get("missing_required")
    assert negative.path == "arguments.customer_id" and negative.mutated is None
    assert [e.reason for e in validate_detailed(negative.call, LIST_TICKETS)] == ["required"]
    report = mutate_report({"name": "create_ticket", "arguments": {"customer_id": "C", "title": "t"}},
                           CREATE_TICKET, kinds=["missing_required"])
    assert report.get("missing_required") is not None
    report = mutate_report({"name": "get_customer", "arguments": {"customer_id": "C"}},
                           {"name": "get_customer", "parameters": {"properties": {
                               "customer_id": {"type": "string"}}}}, kinds=["missing_required"])
    assert "no required argument" in report.impossible["missing_required"]
    assert GET_CUSTOMER  # keeps the import meaningful for readers of the fixtures
