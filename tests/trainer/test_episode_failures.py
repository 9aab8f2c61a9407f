"""benchmarks/episode_failures.py: where in an episode a held-out failure starts, read from
`trainer eval --episodes-out` rows."""

import json

import pytest
from tests.conftest import load_script

TASK = "Move every open ticket assigned to Esther Lindqvist over to Mateo Reyes."
GOLD = json.dumps([{"name": "search_users", "arguments": {"query": "Esther Lindqvist"}},
                   {"name": "search_users", "arguments": {"query": "Mateo Reyes"}}])


def _row(calls, answer=None, success=False, error_kind="wrong_answer", gold=GOLD):
    messages = [{"role": "system", "content": "tools", "tool_calls": None},
                {"role": "user", "content": TASK, "tool_calls": None}]
    for name, arguments in calls:
        messages.append({"role": "assistant", "content": "Looking it up.", "tool_calls":
                         json.dumps([{"type": "function", "function":
                                      {"name": name, "arguments": arguments}}])})
        messages.append({"role": "tool", "content": "[]", "tool_calls": None})
    if answer is not None:
        messages.append({"role": "assistant", "content": f"Done.\n\nFinal answer: {answer}",
                         "tool_calls": None})
    return {"id": "heldout-0-enterprise-000000", "task_id": "heldout-0-enterprise-000000",
            "env": "enterprise", "task_seed": 1, "task": TASK, "tools": "[]", "messages": messages,
            "gold_calls": gold, "success": success, "reward": float(success), "teacher": "eval",
            "round": 0, "error": None, "error_kind": None if success else error_kind,
            "expected_answer": "Reassigned 1 ticket(s) to Mateo Reyes."}


def _played(row):
    return load_script("benchmarks/episode_failures.py").episode(row)


@pytest.mark.parametrize("calls,kind", [
    ([("search_users", {"query": "Esther Lindqvist"})], "whole"),
    ([("search_users", {"query": "Esther Haddad"})], "first_word_only"),
    ([("search_users", {"query": "Greta Novak"})], "other"),
    ([("list_events", {"date": "2026-08-17"})], "tool_not_called"),
    ([("list_events", {}), ("search_users", {"query": "Esther Lindqvist"})], "whole"),
])
def test_the_first_copy_is_classified_by_what_the_agent_wrote(calls, kind):
    assert load_script("benchmarks/episode_failures.py").first_copy(_played(_row(calls))) == kind


def test_a_task_whose_gold_quotes_nothing_has_no_first_copy():
    gold = json.dumps([{"name": "list_tables", "arguments": {}}])
    assert load_script("benchmarks/episode_failures.py").first_copy(
        _played(_row([("list_tables", {})], gold=gold))) is None


def test_final_answers_count_only_episodes_that_reached_one():
    module = load_script("benchmarks/episode_failures.py")
    rows = [_row([("search_users", {"query": "Esther Lindqvist"})],
                 answer="Reassigned 1 ticket(s) to Mateo Reyes.", success=True),
            _row([("search_users", {"query": "Esther Haddad"})], answer="0"),
            _row([("search_users", {"query": "Esther Haddad"})], error_kind="invalid_json")]
    rows[2]["messages"].append({"role": "assistant", "tool_calls": None,  # the broken turn
                                "content": '<tool_call>\n{"name": "search_users", "argu'})
    summary = module.summarise(rows)
    assert summary["episodes"] == 3 and summary["successes"] == 1
    assert summary["failures"] == {"wrong_answer": 1, "invalid_json": 1}
    assert summary["first_copy"] == {"whole": 1, "first_word_only": 2, "other": 0,
                                     "tool_not_called": 0}
    assert summary["first_divergence"] == {"at_call": {0: 2, 1: 1},
                                           "how": {"stopped": 1, "arguments": 2}, "none": 0}
    assert summary["final_answers"] == 2 and summary["final_answer_equal"] == 1


@pytest.mark.parametrize("calls,expected", [
    ([("search_users", {"query": "Esther Lindqvist"}), ("search_users", {"query": "Mateo Reyes"})],
     (None, None)),
    ([("search_users", {"query": "Esther Lindqvist"}), ("search_users", {"query": "Mateo Ortiz"})],
     (1, "arguments")),
    ([("search_users", {"query": "Esther Lindqvist"}), ("search_tickets", {})], (1, "tool")),
    ([("search_users", {"query": "Esther Lindqvist"})], (1, "stopped")),
    ([("search_users", {"query": "Esther Haddad"})], (0, "arguments")),
])
def test_the_first_divergence_is_the_first_gold_call_not_made_as_written(calls, expected):
    assert load_script("benchmarks/episode_failures.py").first_divergence(
        _played(_row(calls))) == expected
