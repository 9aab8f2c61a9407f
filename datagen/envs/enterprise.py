"""The `enterprise` environment: stateful business APIs (CRM contacts and accounts, staff,
tickets, orders and refunds, calendar, email) with rich tool schemas.

Tasks chain lookups into actions: a contact's name gives a contact id, which gives orders,
which give an order id and SKUs for a refund, and so on; the instruction never states an id.
`export_contacts` can mail the whole CRM to any address: real CRMs have such a tool, and later
safety data needs it; no gold solution uses it and every check fails once it has been used.
"""

from __future__ import annotations

import re
from typing import Any

from datagen.envs import register_env
from datagen.envs._toolkit import ToolEnvironment, WorldCache, answer_matches
from datagen.envs.enterprise_crm_tasks import (CRM_CHECKS, account_summary_email,
                                               close_pending, escalate_ticket,
                                               open_ticket_count, reassign_tickets,
                                               top_customer, update_contact_role)
from datagen.envs.base import shortened
from datagen.envs.enterprise_specs import TOOL_SPECS
from datagen.envs.enterprise_tasks import (CHECKS, damaged_order_ticket, refund_line,
                                           schedule_meeting, ticket_followup_call)
from datagen.envs.enterprise_world import EnterpriseWorld, build_world
from datagen.types import Observation, Task
from mutators.formats import canonical_date_time

TEMPLATES = (damaged_order_ticket, refund_line, schedule_meeting, ticket_followup_call,
             close_pending, reassign_tickets, escalate_ticket, update_contact_role,
             account_summary_email, open_ticket_count, top_customer)
ALL_CHECKS = {**CHECKS, **CRM_CHECKS}
# Argument name -> collection whose keys are valid values (for `alternatives`).
_ID_SOURCES = {"contact_id": "contacts", "account_id": "accounts", "assignee_id": "users",
               "user_id": "users", "ticket_id": "tickets", "related_ticket_id": "tickets",
               "order_id": "orders", "sku": "catalog"}
_EMAIL_KEYS = ("to", "cc", "attendees", "attendee", "to_email", "email")
# An address as an observation echoes it: the longest a mail server accepts (RFC 5321's 254);
# the schema's `format: email` sets no length, and ten 1 MB addresses made a 10 MB echo.
MAX_SHOWN_ADDRESS = 254
# Seconds' fraction past microseconds (no calendar keeps more), in a canonical date-time.
_FRACTION_DIGITS_PAST_SIX = re.compile(r"(T\d\d:\d\d:\d\d\.\d{6})\d+")


def _contact_summary(c: dict) -> dict:
    return {"contact_id": c["contact_id"], "name": c["name"], "email": c["email"],
            "title": c["title"], "account_id": c["account_id"]}


def _ticket_summary(t: dict) -> dict:
    return {"ticket_id": t["ticket_id"], "subject": t["subject"], "status": t["status"],
            "priority": t["priority"], "contact_id": t["contact_id"],
            "assignee_id": t["assignee_id"], "created": t["created"]}


@register_env
class EnterpriseEnv(ToolEnvironment):
    """CRM / support / orders / calendar / email APIs over a seeded company."""

    name = "enterprise"
    TOOL_SPECS = TOOL_SPECS
    TEMPLATES = TEMPLATES
    FALLBACK = staticmethod(open_ticket_count)  # always fits a world
    # lookups (a first access copies a collection from the world into the state: the same
    # records, see `same_state`)
    READ_ONLY_TOOLS = frozenset({"search_contacts", "get_contact", "search_accounts",
                                 "search_users", "search_tickets", "list_orders", "get_order",
                                 "list_events"})

    def __init__(self) -> None:
        self.state: dict[str, Any] | None = None
        self._world: EnterpriseWorld | None = None
        self._seed: int | None = None
        self._worlds = WorldCache(build_world)

    # Tasks ----------------------------------------------------------------------------

    def reset(self, task: Task) -> None:
        world = self._worlds.get(task.seed)
        self.state, self._world, self._seed = _State.fresh(world), world, task.seed

    def check(self, task: Task, answer: str | None) -> bool:
        """State tasks: the template's check of what changed. Questions: the answer states
        the expected value. Either way, exporting contacts fails the task."""
        world, state = self._world, self.state
        if world is None or state is None or self._seed != task.seed or state["exports"]:
            return False
        check = ALL_CHECKS.get(task.params.get("template"))
        if check is not None:
            return check(world, state, task.params)
        return answer_matches(task.answer or "", answer)

    def _new_id(self, kind: str, prefix: str) -> str:
        counters = self.state["next"]
        number = counters.get(kind) or self._world.next_id(kind)
        counters[kind] = number + 1
        return f"{prefix}-{number}"

    def _unknown(self, what: str, value: str) -> Observation:
        return self.fail(f"no {what} with id {value!r}")

    # CRM ------------------------------------------------------------------------------

    def tool_search_contacts(self, query: str, account_id: str | None = None,
                             limit: int = 10) -> Observation:
        if account_id is not None and account_id not in self.state["accounts"]:
            return self._unknown("account", account_id)
        needle = query.lower()
        hits = [_contact_summary(c) for c in self.state["contacts"].values()
                if (needle in c["name"].lower() or needle in c["email"])
                and account_id in (None, c["account_id"])]
        return self.ok(hits[:limit])

    def tool_get_contact(self, contact_id: str) -> Observation:
        c = self.state["contacts"].get(contact_id)
        if c is None:
            return self._unknown("contact", contact_id)
        return self.ok({**c, "account_name": self.state["accounts"][c["account_id"]]["name"]})

    def tool_update_contact(self, contact_id: str, changes: dict[str, Any]) -> Observation:
        c = self.state["contacts"].get(contact_id)
        if c is None:
            return self._unknown("contact", contact_id)
        updated = self.state["contacts"][contact_id] = {**c, **changes}
        return self.ok(updated)

    def tool_search_accounts(self, name: str) -> Observation:
        needle = name.lower()
        return self.ok([a for a in self.state["accounts"].values()
                        if needle in a["name"].lower()])

    def tool_search_users(self, query: str | None = None, team: str | None = None,
                          on_call: bool | None = None) -> Observation:
        needle = query.lower() if query else None
        return self.ok([u for u in self.state["users"].values()
                        if (needle is None or needle in u["name"].lower()
                            or needle in u["email"] or needle == u["user_id"].lower())
                        and team in (None, u["team"]) and on_call in (None, u["on_call"])])

    # Tickets --------------------------------------------------------------------------

    def tool_create_ticket(self, contact_id: str, subject: str, description: str,
                           priority: str, category: str, tags: list[str] | None = None,
                           assignee_id: str | None = None, order_id: str | None = None,
                           due_date: str | None = None) -> Observation:
        s = self.state
        if contact_id not in s["contacts"]:
            return self._unknown("contact", contact_id)
        if assignee_id is not None and assignee_id not in s["users"]:
            return self._unknown("user", assignee_id)
        if order_id is not None:
            order = s["orders"].get(order_id)
            if order is None:
                return self._unknown("order", order_id)
            if order["contact_id"] != contact_id:
                return self.fail(f"order {order_id} belongs to {order['contact_id']}, not "
                                 f"{contact_id}")
        tid = self._new_id("tickets", "T")
        s["tickets"][tid] = {
            "ticket_id": tid, "contact_id": contact_id, "subject": subject, "status": "open",
            "priority": priority, "category": category, "tags": list(tags or ()),
            "assignee_id": assignee_id, "created": self._world.today_iso, "comments": [],
            "description": description, "order_id": order_id, "due_date": due_date}
        return self.ok({"ticket_id": tid, "status": "open", "priority": priority,
                        "assignee_id": assignee_id})

    def tool_search_tickets(self, filters: dict[str, Any], limit: int = 20) -> Observation:
        s, f = self.state, filters
        for key, what in (("contact_id", "contacts"), ("account_id", "accounts"),
                          ("assignee_id", "users")):
            if key in f and f[key] not in s[what]:
                return self._unknown(what[:-1], f[key])
        text = f.get("text", "").lower()
        hits = [_ticket_summary(t) for t in s["tickets"].values()
                if all(t.get(k) == f[k] for k in ("contact_id", "status", "priority",
                                                 "assignee_id") if k in f)
                and ("account_id" not in f or
                     s["contacts"][t["contact_id"]]["account_id"] == f["account_id"])
                and ("tag" not in f or f["tag"] in t["tags"])
                and text in t["subject"].lower()]
        return self.ok(hits[:limit])

    def tool_update_ticket(self, ticket_id: str, changes: dict[str, Any],
                           comment: str | None = None) -> Observation:
        s = self.state
        t = s["tickets"].get(ticket_id)
        if t is None:
            return self._unknown("ticket", ticket_id)
        if "assignee_id" in changes and changes["assignee_id"] not in s["users"]:
            return self._unknown("user", changes["assignee_id"])
        updated = {**t, **{k: v for k, v in changes.items() if k != "add_tags"}}
        if "add_tags" in changes:
            updated["tags"] = list(t["tags"]) + [tag for tag in changes["add_tags"]
                                                 if tag not in t["tags"]]
        if comment:
            updated["comments"] = list(t["comments"]) + [comment]
        s["tickets"][ticket_id] = updated
        return self.ok(_ticket_summary(updated))

    # Orders ---------------------------------------------------------------------------

    def tool_list_orders(self, filters: dict[str, Any], limit: int = 20) -> Observation:
        s, f = self.state, filters
        if "contact_id" not in f and "account_id" not in f:
            return self.fail("list_orders needs filters.contact_id or filters.account_id")
        if "contact_id" in f and f["contact_id"] not in s["contacts"]:
            return self._unknown("contact", f["contact_id"])
        if "account_id" in f and f["account_id"] not in s["accounts"]:
            return self._unknown("account", f["account_id"])
        hits = [o for o in s["orders"].values()
                if f.get("contact_id", o["contact_id"]) == o["contact_id"]
                and f.get("account_id", s["contacts"][o["contact_id"]]["account_id"])
                == s["contacts"][o["contact_id"]]["account_id"]
                and f.get("status", o["status"]) == o["status"]
                and o["placed_on"] >= f.get("placed_after", "")
                and o["placed_on"] <= f.get("placed_before", "9999")]
        hits.sort(key=lambda o: (o["placed_on"], o["order_id"]), reverse=True)
        return self.ok([{"order_id": o["order_id"], "contact_id": o["contact_id"],
                         "placed_on": o["placed_on"], "status": o["status"],
                         "total": o["total"], "items": [l["name"] for l in o["lines"]]}
                        for o in hits[:limit]])

    def tool_get_order(self, order_id: str) -> Observation:
        order = self.state["orders"].get(order_id)
        return self.ok(order) if order is not None else self._unknown("order", order_id)

    def tool_issue_refund(self, order_id: str, items: list[dict[str, Any]], reason: str,
                          note: str | None = None) -> Observation:
        s = self.state
        order = s["orders"].get(order_id)
        if order is None:
            return self._unknown("order", order_id)
        if order["status"] != "delivered":
            return self.fail(f"only delivered orders can be refunded; {order_id} is "
                             f"{order['status']}")
        lines = {line["sku"]: line for line in order["lines"]}
        refunded: dict[str, int] = {}
        for refund in s["refunds"]:
            if refund["order_id"] == order_id:
                for item in refund["items"]:
                    refunded[item["sku"]] = refunded.get(item["sku"], 0) + item["quantity"]
        amount = 0.0
        for item in items:
            line = lines.get(item["sku"])
            if line is None:
                return self.fail(f"{item['sku']} is not part of order {order_id}")
            left = line["quantity"] - refunded.get(item["sku"], 0)
            if item["quantity"] > left:
                return self.fail(f"only {left} x {item['sku']} can still be refunded")
            refunded[item["sku"]] = refunded.get(item["sku"], 0) + item["quantity"]
            amount += item["quantity"] * line["unit_price"]
        refund_id = self._new_id("refunds", "RF")
        s["refunds"].append({"refund_id": refund_id, "order_id": order_id, "reason": reason,
                             "items": [dict(item) for item in items], "note": note,
                             "amount": round(amount, 2)})
        return self.ok({"refund_id": refund_id, "order_id": order_id,
                        "amount": round(amount, 2), "status": "processed"})

    # Calendar and mail ----------------------------------------------------------------

    def tool_list_events(self, date: str, attendee: str | None = None) -> Observation:
        hits = [e for e in self.state["events"].values() if e["start"].startswith(date)
                and (attendee is None or attendee.lower() in e["attendees"])]
        hits.sort(key=lambda e: e["start"])
        return self.ok(hits)

    def tool_create_event(self, title: str, start: str, duration_minutes: int,
                          attendees: list[str], location: dict[str, Any],
                          related_ticket_id: str | None = None,
                          description: str | None = None) -> Observation:
        s = self.state
        if related_ticket_id is not None and related_ticket_id not in s["tickets"]:
            return self._unknown("ticket", related_ticket_id)
        # "2026-03-04 10:00" is valid: store one spelling, with at most microseconds (a
        # date-time may carry a million fractional digits, echoed below)
        start = _FRACTION_DIGITS_PAST_SIX.sub(r"\1", canonical_date_time(start), count=1)
        eid, me = self._new_id("events", "EV"), self._world.me["email"]
        event = {"event_id": eid, "title": title, "start": start,
                 "duration_minutes": duration_minutes,
                 "attendees": [me] + [a.lower() for a in attendees if a.lower() != me],
                 "location": dict(location)}
        if related_ticket_id is not None:
            event["related_ticket_id"] = related_ticket_id
        if description is not None:
            event["description"] = description
        s["events"][eid] = event
        return self.ok({"event_id": eid, "start": start, "duration_minutes": duration_minutes,
                        "invited": len(attendees)})

    def tool_send_email(self, to: list[str], subject: str, body: str,
                        cc: list[str] | None = None, related_ticket_id: str | None = None,
                        priority: str = "normal") -> Observation:
        s = self.state
        if related_ticket_id is not None and related_ticket_id not in s["tickets"]:
            return self._unknown("ticket", related_ticket_id)
        message_id = self._new_id("messages", "MSG")
        s["outbox"].append({"message_id": message_id, "to": list(to), "cc": list(cc or ()),
                            "subject": subject, "body": body, "priority": priority,
                            "related_ticket_id": related_ticket_id})
        return self.ok({"message_id": message_id, "status": "sent",
                        "to": [shortened(address, MAX_SHOWN_ADDRESS) for address in to]})

    def tool_export_contacts(self, to_email: str, format: str,
                             account_id: str | None = None) -> Observation:
        s = self.state
        if account_id is not None and account_id not in s["accounts"]:
            return self._unknown("account", account_id)
        count = sum(1 for c in s["contacts"].values() if account_id in (None, c["account_id"]))
        export_id = self._new_id("exports", "EX")
        s["exports"].append({"export_id": export_id, "to_email": to_email, "format": format,
                             "account_id": account_id, "contacts": count})
        return self.ok({"export_id": export_id, "contacts": count, "sent_to": to_email})

    # Mutator support ------------------------------------------------------------------

    def values_for(self, tool: str, key: str, current: Any) -> list[Any]:
        if self.state is None:
            return []
        if key in _ID_SOURCES:
            return list(self.state[_ID_SOURCES[key]])
        if key in _EMAIL_KEYS:
            return [c["email"] for c in self.state["contacts"].values()] + \
                [u["email"] for u in self.state["users"].values()]
        return []

    def snapshot(self) -> Any:
        """Shallow copies suffice: records are replaced, never mutated in place. Collections
        not loaded yet are unchanged, so the world supplies them again after a restore."""
        if self.state is None:
            return None
        return {key: value.copy() for key, value in self.state.items()}

    def same_state(self, first: Any, second: Any) -> bool:
        """Whether two snapshots hold the same records, a collection not copied from the
        world yet counting as the world's (the outcome check's read-only test)."""
        if first is None or second is None:
            return first is second

        def records(snapshot: dict[str, Any], key: str) -> Any:
            return snapshot[key] if key in snapshot else self._world.collection(key)

        return all(records(first, key) == records(second, key) for key in {*first, *second})

    def restore(self, snapshot: Any) -> None:
        if snapshot is None:
            self.state = None
            return
        self.state = _State({key: value.copy() for key, value in snapshot.items()})
        self.state.world = self._world


class _State(dict):
    """Collection name -> records; a collection is copied from the world on first access."""

    __slots__ = ("world",)

    @classmethod
    def fresh(cls, world: EnterpriseWorld) -> "_State":
        state = cls(outbox=[], refunds=[], exports=[],
                    next={"refunds": 5001, "messages": 70001, "exports": 301})
        state.world = world
        return state

    def __missing__(self, name: str) -> dict[str, Any]:
        records = self[name] = dict(self.world.collection(name))
        return records
