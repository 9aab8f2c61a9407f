"""Tool specs of the `enterprise` environment: business APIs with rich JSON Schemas (enums,
nested objects, arrays with item schemas, date / date-time / email formats, integer bounds,
id patterns), so that schema-aware hard negatives have something to bite on.
"""

from __future__ import annotations

from datagen.envs.base import tool_spec
from datagen.envs.enterprise_world import CATEGORIES, LOCATION_KINDS, ORDER_STATUSES, \
    PRIORITIES, REFUND_REASONS, TEAMS, TICKET_STATUSES


def _id(prefix: str, digits: int, what: str) -> dict:
    return {"type": "string", "pattern": rf"^{prefix}-\d{{{digits}}}$",
            "description": f"{what} id, e.g. {prefix}-{'1' * digits}."}


CONTACT_ID, ACCOUNT_ID, USER_ID = _id("C", 4, "Contact"), _id("A", 3, "Account"), \
    _id("U", 3, "User")
TICKET_ID, ORDER_ID, SKU = _id("T", 4, "Ticket"), _id("ORD", 5, "Order"), _id("SKU", 4, "Product")
EMAIL = {"type": "string", "format": "email"}
DATE = {"type": "string", "format": "date", "description": "YYYY-MM-DD"}
TAG = {"type": "string", "pattern": "^[a-z][a-z0-9-]{1,30}$"}
TAGS = {"type": "array", "items": TAG, "maxItems": 8, "uniqueItems": True}
LIMIT = {"type": "integer", "minimum": 1, "maximum": 50, "description": "Max results (10)."}


def _obj(properties: dict, required: tuple[str, ...] = (), **extra: object) -> dict:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False, **extra}


TOOL_SPECS = [
    tool_spec("search_contacts", "Find CRM contacts whose name or email contains the query.",
              {"query": {"type": "string", "minLength": 2, "maxLength": 100},
               "account_id": ACCOUNT_ID, "limit": LIMIT}, ["query"]),
    tool_spec("get_contact", "Full record of one contact (phone, title, tags, account).",
              {"contact_id": CONTACT_ID}, ["contact_id"]),
    tool_spec("update_contact", "Change fields of a contact. `tags` replaces the whole list.",
              {"contact_id": CONTACT_ID,
               "changes": _obj({"title": {"type": "string", "minLength": 1, "maxLength": 80},
                                "phone": {"type": "string",
                                          "pattern": r"^\+?[0-9][0-9 ()\-]{6,19}$"},
                                "email": EMAIL, "tags": TAGS}, minProperties=1)},
              ["contact_id", "changes"]),
    tool_spec("search_accounts", "Find customer accounts (companies) by name.",
              {"name": {"type": "string", "minLength": 2, "maxLength": 100}}, ["name"]),
    tool_spec("search_users", "Find colleagues by name, email or id, team, or on-call status.",
              {"query": {"type": "string", "minLength": 2, "maxLength": 100},
               "team": {"type": "string", "enum": list(TEAMS)},
               "on_call": {"type": "boolean"}}),
    tool_spec("create_ticket", "Open a support ticket for a contact.",
              {"contact_id": CONTACT_ID,
               "subject": {"type": "string", "minLength": 5, "maxLength": 120},
               "description": {"type": "string", "minLength": 1, "maxLength": 2000},
               "priority": {"type": "string", "enum": list(PRIORITIES)},
               "category": {"type": "string", "enum": list(CATEGORIES)},
               "tags": TAGS, "assignee_id": USER_ID, "order_id": ORDER_ID, "due_date": DATE},
              ["contact_id", "subject", "description", "priority", "category"]),
    tool_spec("search_tickets", "List tickets matching all given filters.",
              {"filters": _obj({"contact_id": CONTACT_ID, "account_id": ACCOUNT_ID,
                                "status": {"type": "string", "enum": list(TICKET_STATUSES)},
                                "priority": {"type": "string", "enum": list(PRIORITIES)},
                                "assignee_id": USER_ID, "tag": TAG,
                                "text": {"type": "string", "minLength": 2,
                                         "description": "Words in the subject."}}),
               "limit": LIMIT}, ["filters"]),
    tool_spec("update_ticket", "Change a ticket's status, priority, assignee or tags, "
              "optionally with a comment.",
              {"ticket_id": TICKET_ID,
               "changes": _obj({"status": {"type": "string", "enum": list(TICKET_STATUSES)},
                                "priority": {"type": "string", "enum": list(PRIORITIES)},
                                "assignee_id": USER_ID, "add_tags": TAGS}, minProperties=1),
               "comment": {"type": "string", "maxLength": 2000}},
              ["ticket_id", "changes"]),
    tool_spec("list_orders", "List orders of a contact or an account (give one of them).",
              {"filters": _obj({"contact_id": CONTACT_ID, "account_id": ACCOUNT_ID,
                                "status": {"type": "string", "enum": list(ORDER_STATUSES)},
                                "placed_after": {**DATE, "description": "On or after."},
                                "placed_before": {**DATE, "description": "On or before."}}),
               "limit": LIMIT}, ["filters"]),
    tool_spec("get_order", "One order with its lines (sku, name, quantity, unit price).",
              {"order_id": ORDER_ID}, ["order_id"]),
    tool_spec("issue_refund", "Refund some lines of a delivered order.",
              {"order_id": ORDER_ID,
               "items": {"type": "array", "minItems": 1, "maxItems": 20,
                         "items": _obj({"sku": SKU, "quantity": {"type": "integer",
                                                                 "minimum": 1,
                                                                 "maximum": 100}},
                                       ("sku", "quantity"))},
               "reason": {"type": "string", "enum": list(REFUND_REASONS)},
               "note": {"type": "string", "maxLength": 500}},
              ["order_id", "items", "reason"]),
    tool_spec("list_events", "My calendar events on one day.",
              {"date": DATE, "attendee": EMAIL}, ["date"]),
    tool_spec("create_event", "Put a meeting in my calendar and invite the attendees.",
              {"title": {"type": "string", "minLength": 1, "maxLength": 120},
               "start": {"type": "string", "format": "date-time",
                         "description": "Local time, e.g. 2026-03-04T14:00:00."},
               "duration_minutes": {"type": "integer", "minimum": 15, "maximum": 480},
               "attendees": {"type": "array", "items": EMAIL, "minItems": 1, "maxItems": 20,
                             "uniqueItems": True},
               "location": _obj({"kind": {"type": "string", "enum": list(LOCATION_KINDS)},
                                 "detail": {"type": "string", "maxLength": 200}}, ("kind",)),
               "related_ticket_id": TICKET_ID,
               "description": {"type": "string", "maxLength": 2000}},
              ["title", "start", "duration_minutes", "attendees", "location"]),
    tool_spec("send_email", "Send an email from my mailbox.",
              {"to": {"type": "array", "items": EMAIL, "minItems": 1, "maxItems": 10},
               "cc": {"type": "array", "items": EMAIL, "maxItems": 10},
               "subject": {"type": "string", "minLength": 1, "maxLength": 150},
               "body": {"type": "string", "minLength": 1, "maxLength": 5000},
               "related_ticket_id": TICKET_ID,
               "priority": {"type": "string", "enum": ["normal", "high"]}},
              ["to", "subject", "body"]),
    tool_spec("export_contacts", "Export CRM contacts (all, or one account's) as a file sent "
              "to an email address.",
              {"to_email": EMAIL, "format": {"type": "string", "enum": ["csv", "json"]},
               "account_id": ACCOUNT_ID}, ["to_email", "format"]),
]
