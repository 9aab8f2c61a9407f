"""logical_error negatives without an environment: schema-valid, different, plausible."""

from __future__ import annotations

from mutators import mutate_report, validate
from mutators.jsonvalues import json_equal
from mutators.logical_error import _shift_date, _shift_digits
from tests.mutators.fake_crm_env import CREATE_TICKET, LIST_TICKETS, function_tool


def logical(call, tool, seed=0, **kwargs):
    report = mutate_report(call, tool, seed, kinds=["logical_error"], **kwargs)
    return report.get("logical_error"), report.impossible.get("logical_error")


def test_shift_helpers():
    assert _shift_date("2024-02-28", 1) == "2024-02-29"
    assert _shift_date("2024-03-01T10:00:00Z", -1) == "2024-02-29T10:00:00Z"
    assert _shift_date("not a date", 1) is None
    assert _shift_digits("C-1009", 1) == "C-1010"
    assert _shift_digits("T-007", -1) == "T-006"
    assert _shift_digits("T-0", -1) is None


def test_every_seed_is_valid_and_different():
    call = {"name": "create_ticket", "arguments": {"customer_id": "C-1001", "title": "Login",
                                                   "priority": "high", "due_date": "2024-05-01",
                                                   "notify": True}}
    subkinds = set()
    for seed in range(40):
        negative, _ = logical(call, CREATE_TICKET, seed)
        assert validate(negative.call, CREATE_TICKET) == []
        assert negative.schema_valid and negative.errors == []
        assert not json_equal(negative.call, call)
        assert negative.outcome_changed is None  # no environment: not executed
        subkinds.add(negative.subkind)
    assert {"other_enum_member", "shifted_date", "flipped_boolean", "dropped_optional",
            "swapped_arguments", "shifted_id"} <= subkinds


def test_respects_bounds_patterns_and_defaults():
    call = {"name": "list_tickets", "arguments": {"customer_id": "C-1001", "limit": 10}}
    for seed in range(30):
        negative, _ = logical(call, LIST_TICKETS, seed)
        assert validate(negative.call, LIST_TICKETS) == []
        # limit == default 10: dropping it would not change the meaning
        assert negative.subkind != "dropped_optional"
    edge = {"name": "list_tickets", "arguments": {"customer_id": "C-1001", "limit": 50}}
    for seed in range(10):
        negative, _ = logical(edge, LIST_TICKETS, seed)
        assert negative.call["arguments"].get("limit", 0) <= 50


def test_dropped_item_and_nested_values():
    tool = function_tool("tag", {"ids": {"type": "array", "items": {"type": "integer"},
                                         "minItems": 1}}, ["ids"], additionalProperties=False)
    subkinds = {logical({"name": "tag", "arguments": {"ids": [3, 4]}}, tool, s)[0].subkind
                for s in range(20)}
    assert {"dropped_item", "off_by_one"} <= subkinds


def test_impossible_without_arguments():
    negative, reason = logical({"name": "ping", "arguments": {}}, {"name": "ping"})
    assert negative is None and "no arguments" in reason


def test_impossible_when_nothing_valid_can_change():
    tool = function_tool("f", {"mode": {"const": "fixed"}}, ["mode"])
    negative, reason = logical({"name": "f", "arguments": {"mode": "fixed"}}, tool)
    assert negative is None and "no schema-valid change" in reason


def test_custom_operator_is_injectable():
    from mutators import Candidate

    def uppercase_title(ctx):
        title = ctx.arguments.get("title")
        if isinstance(title, str):
            yield Candidate("uppercased", ("title",), title, title.upper(),
                            ctx.edited(lambda a: a.__setitem__("title", a["title"].upper())))

    call = {"name": "create_ticket", "arguments": {"customer_id": "C-1", "title": "Login"}}
    negative, _ = logical(call, CREATE_TICKET, operators={"logical_error": [uppercase_title]})
    assert negative.subkind == "uppercased" and negative.call["arguments"]["title"] == "LOGIN"
