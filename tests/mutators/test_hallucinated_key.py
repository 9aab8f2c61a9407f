"""hallucinated_key negatives: a key the tool does not have, rejected for that key."""

from __future__ import annotations

from mutators import mutate_report, validate_detailed
from mutators.hallucinated_key import renamed_keys, split_key, synonym_keys
from tests.mutators.fake_crm_env import CREATE_TICKET, CRM_TOOLS, GET_CUSTOMER, function_tool

CALL = {"name": "get_customer", "arguments": {"customer_id": "C-1001"}}


def hallucinated(call, tool, seed=0, other_tools=None):
    report = mutate_report(call, tool, seed, kinds=["hallucinated_key"], other_tools=other_tools)
    return report.get("hallucinated_key"), report.impossible.get("hallucinated_key")


def test_key_variants():
    assert split_key("customerId") == (["customer", "id"], "camel")
    assert "user_id" in synonym_keys("customer_id")
    assert "begin_time" in synonym_keys("start_time")
    assert "max_results" in synonym_keys("limit")
    assert {"customerId", "customer", "customer-id"} <= set(renamed_keys("customer_id"))
    assert "start" in renamed_keys("start_time")
    assert "qty" in renamed_keys("quantity")
    assert "tag" in renamed_keys("tags")


def test_every_seed_fails_for_the_key_at_its_path():
    subkinds = set()
    for seed in range(30):
        negative, _ = hallucinated(CALL, GET_CUSTOMER, seed, other_tools=CRM_TOOLS)
        errors = validate_detailed(negative.call, GET_CUSTOMER)
        assert any(e.reason == "unknown_key" and e.path == negative.path for e in errors)
        assert negative.path == f"arguments.{negative.mutated}"
        subkinds.add(negative.subkind)
    assert subkinds == {"synonym", "renamed", "borrowed"}


def test_rename_keeps_value_and_position():
    call = {"name": "create_ticket", "arguments": {"customer_id": "C-1", "title": "t"}}
    for seed in range(20):
        negative, _ = hallucinated(call, CREATE_TICKET, seed)
        if negative.original is not None:  # renamed in place
            keys = list(negative.call["arguments"])
            real_index = list(call["arguments"]).index(negative.original)
            assert keys[real_index] == negative.mutated
            assert negative.call["arguments"][negative.mutated] == call["arguments"][negative.original]


def test_nested_closed_object_gets_hallucinated_keys():
    tool = function_tool("f", {"filters": {"type": "object", "properties": {
        "status": {"type": "string"}}, "additionalProperties": False}},
        additionalProperties=True)
    call = {"name": "f", "arguments": {"filters": {"status": "open"}}}
    for seed in range(10):
        negative, _ = hallucinated(call, tool, seed)
        assert negative.path.startswith("arguments.filters.")


def test_impossible_when_additional_properties_allowed_everywhere():
    tool = function_tool("f", {"q": {"type": "string"}}, additionalProperties=True)
    negative, reason = hallucinated({"name": "f", "arguments": {"q": "x"}}, tool)
    assert negative is None and "additional properties" in reason


def test_free_form_object_is_not_closed():
    tool = {"name": "f", "parameters": {"type": "object"}}
    negative, reason = hallucinated({"name": "f", "arguments": {"q": "x"}}, tool)
    assert negative is None and reason


def test_tool_without_parameters_gets_an_invented_key():
    negative, _ = hallucinated({"name": "ping", "arguments": {}}, {"name": "ping"})
    assert negative.subkind == "invented"
