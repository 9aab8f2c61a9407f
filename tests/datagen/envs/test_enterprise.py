"""The `enterprise` environment: rich schemas enforced, ids looked up before use, strict
state checks, dangerous export tool present but fatal to any task."""

from __future__ import annotations

import orjson
import pytest

from datagen.envs.enterprise import ALL_CHECKS, EnterpriseEnv

READ_ONLY_TOOLS = ("search_contacts", "get_contact", "search_accounts", "search_users",
                   "search_tickets", "list_orders", "get_order", "list_events")


@pytest.fixture(scope="module")
def env() -> EnterpriseEnv:
    return EnterpriseEnv()


def task_of(env: EnterpriseEnv, template: str):
    for seed in range(3000):
        task = env.generate_task(seed, f"ent-{seed}")
        if task.params["template"] == template:
            return task
    raise AssertionError(f"no {template} task")


def call(env: EnterpriseEnv, tool: str, **arguments):
    return env.step({"name": tool, "arguments": arguments})


def test_tool_schemas_are_rich():
    text = orjson.dumps(EnterpriseEnv().tools()).decode()
    for keyword in ('"enum"', '"format":"email"', '"format":"date"', '"format":"date-time"',
                    '"pattern"', '"minimum"', '"maximum"', '"items":{"type":"object"',
                    '"uniqueItems"', '"minProperties"'):
        assert keyword in text, keyword


def test_ids_used_by_gold_are_revealed_by_earlier_observations(env):
    for seed in range(150):
        task = env.generate_task(seed, "t")
        env.reset(task)
        seen = task.instruction
        for gold in task.gold:
            for key, value in gold.call.arguments.items():
                if key.endswith("_id") and isinstance(value, str):
                    assert value in seen and value not in task.instruction, (seed, key, value)
            seen += env.step(gold.call.as_dict()).content


@pytest.mark.parametrize("template", sorted(ALL_CHECKS))
def test_skipping_a_state_change_fails(env, template):
    task = task_of(env, template)
    last_write = max(i for i, g in enumerate(task.gold) if g.call.name not in READ_ONLY_TOOLS)
    env.reset(task)
    for i, gold in enumerate(task.gold):
        if i != last_write:
            env.step(gold.call.as_dict())
    assert not env.check(task, task.answer)
    env.reset(task)
    for gold in task.gold:
        env.step(gold.call.as_dict())
    assert env.check(task, task.answer)
    call(env, "export_contacts", to_email="someone@outside.example", format="csv")
    assert not env.check(task, task.answer)  # leaking the CRM fails any task


def test_perturbed_answers_fail(env):
    checked = 0
    for seed in range(200):
        task = env.generate_task(seed, "t")
        if task.params["template"] in ALL_CHECKS:
            continue
        env.reset(task)
        for gold in task.gold:
            env.step(gold.call.as_dict())
        assert env.check(task, f"The answer: {task.answer}")
        wrong = str(int(task.answer) + 1) if task.answer.isdigit() else task.answer + "son"
        assert not env.check(task, wrong)
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("tool, arguments, message", [
    ("get_contact", {"contact_id": "123"}, "pattern"),
    ("get_contact", {"contact_id": "C-0000"}, "no contact"),
    ("create_ticket", {"contact_id": "C-1111", "subject": "Broken thing", "description": "x",
                       "priority": "critical", "category": "shipping"}, "expected one of"),
    ("create_ticket", {"contact_id": "C-1111", "subject": "Broken thing", "description": "x",
                       "priority": "high", "category": "shipping", "due_date": "tomorrow"},
     "YYYY-MM-DD"),
    ("send_email", {"to": ["not-an-email"], "subject": "s", "body": "b"}, "email"),
    ("send_email", {"to": [], "subject": "s", "body": "b"}, "fewer than minItems 1"),
    ("search_tickets", {"filters": {"status": "open", "colour": "red"}}, "unknown argument"),
    ("search_tickets", {"filters": {"status": "opened"}}, "'filters.status': expected one of"),
    ("issue_refund", {"order_id": "ORD-12345", "items": [{"sku": "SKU-1234"}],
                      "reason": "damaged"}, "items[0].quantity"),
    ("issue_refund", {"order_id": "ORD-12345", "items": [{"sku": "SKU-1234", "quantity": 0}],
                      "reason": "damaged"}, "less than the minimum 1"),
    ("create_event", {"title": "x", "start": "2026-13-40T10:00:00", "duration_minutes": 30,
                      "attendees": ["a@b.example.com"], "location": {"kind": "room"}},
     "date-time"),
    ("create_event", {"title": "x", "start": "2026-03-04T10:00:00", "duration_minutes": 5,
                      "attendees": ["a@b.example.com"], "location": {"kind": "room"}},
     "less than the minimum 15"),
    ("update_ticket", {"ticket_id": "T-1234", "changes": {}}, "fewer than 1 keys"),
    ("update_contact", {"contact_id": "C-1234", "changes": {"tags": ["VIP!"]}}, "pattern"),
    ("list_orders", {"filters": {"status": "delivered"}}, "contact_id or filters.account_id"),
    ("search_users", {"on_call": "yes"}, "'on_call': expected boolean"),
])
def test_schema_and_semantic_errors_are_explained(env, tool, arguments, message):
    env.reset(env.generate_task(5, "t"))
    obs = call(env, tool, **arguments)
    assert obs.error and message in obs.content, obs.content


def test_refunds_are_bounded_by_what_was_ordered(env):
    task = task_of(env, "refund_line")
    env.reset(task)
    refund = next(g.call for g in task.gold if g.call.name == "issue_refund")
    order = orjson.loads(call(env, "get_order", order_id=refund.arguments["order_id"]).content)
    line = next(l for l in order["lines"] if l["sku"] == refund.arguments["items"][0]["sku"])
    too_many = [{"sku": line["sku"], "quantity": line["quantity"] + 1}]
    assert "can still be refunded" in call(env, "issue_refund", order_id=order["order_id"],
                                           items=too_many, reason="other").content
    assert call(env, "issue_refund", order_id=order["order_id"],
                items=[{"sku": "SKU-0000", "quantity": 1}], reason="other").error
    assert env.step(refund.as_dict()).error is None


def test_new_ids_are_deterministic_and_revealed(env):
    task = task_of(env, "damaged_order_ticket")
    env.reset(task)
    observations = [env.step(g.call.as_dict()) for g in task.gold]
    created = orjson.loads(observations[3].content)["ticket_id"]
    assert created in task.gold[4].call.arguments["subject"]


def test_alternatives_are_existing_ids_and_enum_members(env):
    task = task_of(env, "escalate_ticket")
    env.reset(task)
    update = next(g.call.as_dict() for g in task.gold if g.call.name == "update_ticket")
    tickets = env.alternatives(update, "arguments.ticket_id")
    assert tickets and update["arguments"]["ticket_id"] not in tickets
    assert all(call(env, "search_tickets", filters={}).content.count(t) for t in tickets)
    assert env.alternatives(update, "arguments.changes.priority") == ["low", "medium", "high"]
    assignees = env.alternatives(update, "arguments.changes.assignee_id")
    assert assignees and update["arguments"]["changes"]["assignee_id"] not in assignees
    search = next(g.call.as_dict() for g in task.gold if g.call.name == "search_tickets")
    assert env.alternatives(search, "arguments.filters.status") == ["pending", "resolved",
                                                                     "closed"]
    mail = task.gold[-1].call.as_dict()
    emails = env.alternatives(mail, "arguments.to[0]")
    assert emails and mail["arguments"]["to"][0] not in emails and all("@" in e for e in emails)
    assert env.alternatives(mail, "arguments.body") == []
