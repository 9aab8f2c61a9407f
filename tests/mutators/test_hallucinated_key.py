"""hallucinated_key negatives: a key the tool does not have, rejected for that key."""

from __future__ import annotations

import json

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


def borrowed_negatives(tools, seeds=range(40)):
    """(seed, borrowed Negative) of GET_CUSTOMER's call over `seeds`."""
    found = []
    for seed in seeds:
        negative = mutate_report(CALL, GET_CUSTOMER, seed, kinds=["hallucinated_key"],
                                 other_tools=tools).get("hallucinated_key")
        if negative.subkind == "borrowed":
            found.append((seed, negative))
    return found


def as_dicts(found):
    return [(seed, negative.to_dict()) for seed, negative in found]


TAGGER = function_tool("tag_customer", {"labels": {"type": "array", "items": {"type": "string"}}})


def test_borrowed_keys_kept_per_tool_set_give_what_fresh_specs_give():
    # the borrowable keys are kept per set of other tools; specs never seen before (deep
    # copies) rebuild them: the same seeds must give the same negatives either way, enum
    # values still drawn per call (`priority`), fixed ones (`labels`) never shared
    import copy

    tools = [*CRM_TOOLS, TAGGER]
    first = borrowed_negatives(tools)
    assert {n.mutated for _, n in first} >= {"priority", "labels"}
    for _, negative in first:
        value = negative.call["arguments"][negative.mutated]
        if isinstance(value, list):
            value.append("edited by a consumer")
    assert as_dicts(borrowed_negatives(tools)) == as_dicts(borrowed_negatives(
        copy.deepcopy(tools)))
    assert all(n.call["arguments"]["labels"] == ["example"]
               for _, n in borrowed_negatives(tools) if n.mutated == "labels")


def test_borrowed_keys_follow_a_changed_tool_set():
    extra = function_tool("archive", {"archive_reason": {"type": "string"}})
    assert "archive_reason" in {n.mutated for _, n in borrowed_negatives([*CRM_TOOLS, extra])}
    assert "archive_reason" not in {n.mutated for _, n in borrowed_negatives(CRM_TOOLS)}


def test_other_tools_with_infinite_or_huge_bounds_still_lend_their_keys():
    # sampling their values raised (ceil(inf); 10**400 + 0.5 overflows a float) and failed the
    # whole kind for an ordinary tool; a non-finite bound now counts as absent
    limit = json.loads('{"type": "integer", "minimum": 1e400, "maximum": NaN}')  # 1e400: inf
    odd = [function_tool("list_orders", {"limit": limit}),
           function_tool("pay", {"amount": {"type": "number", "exclusiveMinimum": 10**400}}),
           function_tool("refund", {"cents": {"type": "integer", "exclusiveMaximum": -10**400}})]
    assert hallucinated(CALL, GET_CUSTOMER, 0, [GET_CUSTOMER, *odd])[1] is None
    lent = {n.mutated: n.call["arguments"][n.mutated]
            for _, n in borrowed_negatives([GET_CUSTOMER, *odd])}
    assert lent["limit"] == 1
    assert lent["amount"] == 10**400 + 1 and lent["cents"] == -10**400 - 1  # exact ints
