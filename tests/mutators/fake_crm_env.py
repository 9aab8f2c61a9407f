"""A dict-backed toy CRM environment with the duck-typed hooks `mutate` uses
(alternatives / snapshot / restore / step), and tool specs to go with it."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any


def function_tool(name: str, properties: dict, required: list[str] = (), **extra) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": f"{name} (test tool)",
        "parameters": {"type": "object", "properties": properties,
                       "required": list(required), **extra}}}


GET_CUSTOMER = function_tool("get_customer", {"customer_id": {"type": "string"}},
                             ["customer_id"], additionalProperties=False)
LIST_TICKETS = function_tool("list_tickets", {
    "customer_id": {"type": "string", "pattern": "^C-\\d{4}$"},
    "status": {"type": "string", "enum": ["open", "pending", "closed"]},
    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
}, ["customer_id"])
CREATE_TICKET = function_tool("create_ticket", {
    "customer_id": {"type": "string"},
    "title": {"type": "string", "minLength": 1},
    "priority": {"type": "string", "enum": ["low", "medium", "high"]},
    "due_date": {"type": "string", "format": "date"},
    "notify": {"type": "boolean"},
}, ["customer_id", "title"])
CRM_TOOLS = [GET_CUSTOMER, LIST_TICKETS, CREATE_TICKET]


@dataclass
class FakeObservation:
    content: str
    error: str | None = None


def _initial_state() -> dict[str, Any]:
    return {
        "customers": {"C-1001": {"name": "Ada Park", "tier": "gold"},
                      "C-1002": {"name": "Ben Ode", "tier": "silver"},
                      "C-1003": {"name": "Cy Lam", "tier": "gold"}},
        "tickets": {"T-1": {"customer_id": "C-1001", "status": "open", "title": "Login"},
                    "T-2": {"customer_id": "C-1001", "status": "closed", "title": "Billing"},
                    "T-3": {"customer_id": "C-1002", "status": "open", "title": "Refund"}},
        "next_ticket": 4,
    }


class FakeCrmEnvForTests:
    """Customers and tickets in a dict. Counts every hook call so tests can check that the
    mutators leave the environment as they found it."""

    def __init__(self) -> None:
        self.state = _initial_state()
        self.calls = {"alternatives": 0, "snapshot": 0, "restore": 0, "step": 0}

    def tools(self) -> list[dict]:
        return CRM_TOOLS

    def alternatives(self, call: dict, path: str) -> list:
        self.calls["alternatives"] += 1
        if path == "arguments.customer_id":
            current = call["arguments"].get("customer_id")
            return [c for c in sorted(self.state["customers"]) if c != current]
        if path == "arguments.status":
            return ["open", "pending", "closed"]
        return []

    def snapshot(self) -> Any:
        self.calls["snapshot"] += 1
        return copy.deepcopy(self.state)

    def restore(self, state: Any) -> None:
        self.calls["restore"] += 1
        self.state = copy.deepcopy(state)

    def step(self, call: dict) -> FakeObservation:
        self.calls["step"] += 1
        name, args = call.get("name"), call.get("arguments", {})
        customers, tickets = self.state["customers"], self.state["tickets"]
        if name == "get_customer":
            customer = customers.get(args.get("customer_id"))
            if customer is None:
                return FakeObservation("Error: no such customer", "no such customer")
            return FakeObservation(f"{customer['name']} ({customer['tier']})")
        if name == "list_tickets":
            found = [tid for tid, t in sorted(tickets.items())
                     if t["customer_id"] == args.get("customer_id")
                     and args.get("status", t["status"]) == t["status"]]
            return FakeObservation(",".join(found[: args.get("limit", 10)]))
        if name == "create_ticket":
            tid = f"T-{self.state['next_ticket']}"
            self.state["next_ticket"] += 1
            tickets[tid] = {"customer_id": args.get("customer_id"), "status": "open",
                            "title": args.get("title")}
            return FakeObservation(f"created {tid} for {args.get('customer_id')}")
        return FakeObservation(f"Error: unknown tool {name}", "unknown tool")


class ExplodingEnv(FakeCrmEnvForTests):
    """step raises for every call but the original get_customer of C-1001."""

    def step(self, call: dict) -> FakeObservation:
        if call.get("arguments", {}).get("customer_id") != "C-1001":
            raise RuntimeError("tool crashed")
        return super().step(call)


class NondeterministicEnv(FakeCrmEnvForTests):
    """Every observation differs (a clock in the output)."""

    def step(self, call: dict) -> FakeObservation:
        obs = super().step(call)
        return FakeObservation(f"{obs.content} at t={self.calls['step']}", obs.error)


class BrokenHooksEnv(FakeCrmEnvForTests):
    """alternatives and snapshot raise."""

    def alternatives(self, call: dict, path: str) -> list:
        raise KeyError(path)

    def snapshot(self) -> Any:
        raise OSError("cannot snapshot")


class _Opaque:
    """A snapshot object without equality (compares by identity)."""

    def __init__(self, state: Any) -> None:
        self.state = state


class OpaqueStateEnv(FakeCrmEnvForTests):
    """Snapshots that cannot be compared: only observations can tell outcomes apart."""

    def snapshot(self) -> Any:
        return _Opaque(super().snapshot())

    def restore(self, state: Any) -> None:
        super().restore(state.state)
