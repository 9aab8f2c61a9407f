"""Task templates of the `enterprise` environment and the checks of their final state.

Each template picks targets that make the task well defined (a unique order, a free calendar
slot, a strict maximum), builds the gold calls from ids the earlier calls reveal, and records
in `params` the few facts its check needs. Checks live next to their template in CHECKS; they
look at what changed (new tickets, events, refunds, sent mail, edited records) and require
everything else to be untouched.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from datagen.envs._names import ISO_DAYS, pick, sample
from datagen.envs._toolkit import Draft, gold_call
from datagen.envs.enterprise_world import LOCATION_KINDS, EnterpriseWorld

State = dict[str, Any]
_REASONS = {"damaged": "it arrived damaged", "late_delivery": "it arrived far too late",
            "wrong_item": "the wrong item was delivered", "not_needed": "they no longer need it"}
_TOPICS = ("renewal", "onboarding", "roadmap", "pricing", "integration", "security review")


def first_name(name: str) -> str:
    return name.split(" ", 1)[0]


def find_contact(c: dict) -> Any:
    return gold_call("search_contacts", f"look up the contact record of {c['name']}",
                     query=c["name"])


def on_call_user(w: EnterpriseWorld, team: str) -> dict:
    return next(u for u in w.users.values() if u["team"] == team and u["on_call"])


def damaged_order_ticket(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    shipped = [(o, line) for o in w.orders.values() if o["status"] in ("delivered", "shipped")
               for line in o["lines"]]
    if not shipped:
        return None
    order, line = pick(rng, shipped)
    c = w.contacts[order["contact_id"]]
    if sum(1 for o in w.orders.values() if o["contact_id"] == c["contact_id"]
           and any(item["sku"] == line["sku"] for item in o["lines"])) != 1:
        return None
    agent, product = on_call_user(w, "support"), line["name"]
    priority, tag = pick(rng, ("high", "urgent", "medium")), \
        pick(rng, ("shipping", "replacement", "courier"))
    tid, company = f"T-{w.next_id('tickets')}", w.accounts[c["account_id"]]["name"]
    ask = pick(rng, (
        f"{c['name']} from {company} says the {product} in their order arrived damaged. Open a "
        f"{priority}-priority shipping ticket for them tagged `damaged` and `{tag}`, link the "
        f"order, assign it to whoever is on call in support, and email {first_name(c['name'])} "
        "the ticket number.",
        f"Customer complaint: {c['name']} ({company}) received a broken {product}. Please log "
        f"a shipping ticket (priority {priority}, tags damaged + {tag}) against that order, "
        "give it to the support on-call person and send the customer the ticket id by email."))
    gold = [find_contact(c),
            gold_call("list_orders", f"find the order that contained the {product}",
                      filters={"contact_id": c["contact_id"]}),
            gold_call("search_users", "find who is on call in support", team="support",
                      on_call=True),
            gold_call("create_ticket", "open the ticket", contact_id=c["contact_id"],
                      subject=f"Damaged {product} in order {order['order_id']}",
                      description=f"{c['name']} reports that the {product} in order "
                                  f"{order['order_id']} arrived damaged.",
                      priority=priority, category="shipping", tags=["damaged", tag],
                      assignee_id=agent["user_id"], order_id=order["order_id"]),
            gold_call("send_email", f"email {first_name(c['name'])} the ticket number",
                      to=[c["email"]], subject=f"Your ticket {tid}: damaged {product}",
                      body=f"Hi {first_name(c['name'])},\n\nsorry that your {product} arrived "
                           f"damaged. We opened ticket {tid} and {agent['name']} is on it."
                           f"\n\nBest regards,\n{w.me['name']}", related_ticket_id=tid)]
    return Draft("damaged_order_ticket", ask, gold, f"Opened {tid} and emailed {c['name']}.",
                 {"contact_id": c["contact_id"], "order_id": order["order_id"],
                  "priority": priority, "tags": ["damaged", tag],
                  "assignee_id": agent["user_id"], "email": c["email"]})


def _check_damaged_order_ticket(w: EnterpriseWorld, s: State, p: dict) -> bool:
    new = [t for tid, t in s["tickets"].items() if tid not in w.tickets]
    if len(new) != 1:
        return False
    t = new[0]
    return (t["contact_id"] == p["contact_id"] and t["order_id"] == p["order_id"]
            and t["priority"] == p["priority"] and t["category"] == "shipping"
            and set(p["tags"]) <= set(t["tags"]) and t["assignee_id"] == p["assignee_id"]
            and mailed(s, p["email"], t["ticket_id"]))


def refund_line(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    latest: dict[str, dict] = {}
    for o in w.orders.values():
        if o["status"] == "delivered":
            best = latest.get(o["contact_id"])
            if best is None or o["placed_on"] >= best["placed_on"]:
                latest[o["contact_id"]] = o
    if not latest:
        return None
    order = latest[pick(rng, list(latest))]
    c = w.contacts[order["contact_id"]]
    if sum(1 for o in w.orders.values() if o["contact_id"] == c["contact_id"]
           and o["status"] == "delivered" and o["placed_on"] == order["placed_on"]) != 1:
        return None
    line = pick(rng, order["lines"])
    quantity, reason = 1 + int(rng.random() * line["quantity"]), pick(rng, list(_REASONS))
    amount, oid = round(quantity * line["unit_price"], 2), order["order_id"]
    ask = pick(rng, (
        f"Refund {quantity} x {line['name']} from {c['name']}'s most recent delivered order "
        f"because {_REASONS[reason]}, then confirm the refund to them by email.",
        f"{c['name']} wants money back for {quantity} unit(s) of {line['name']} from their "
        f"latest delivered order: {_REASONS[reason]}. Issue the refund and let them know."))
    gold = [find_contact(c),
            gold_call("list_orders", f"find {first_name(c['name'])}'s delivered orders",
                      filters={"contact_id": c["contact_id"], "status": "delivered"}),
            gold_call("get_order", f"see the lines of {oid}", order_id=oid),
            gold_call("issue_refund", f"refund {quantity} x {line['name']}", order_id=oid,
                      items=[{"sku": line["sku"], "quantity": quantity}], reason=reason),
            gold_call("send_email", "confirm the refund by email", to=[c["email"]],
                      subject=f"Refund for order {oid}",
                      body=f"Hi {first_name(c['name'])},\n\nwe have refunded {amount:.2f} for "
                           f"{quantity} x {line['name']} from order {oid}.\n\nBest regards,"
                           f"\n{w.me['name']}")]
    return Draft("refund_line", ask, gold, f"Refunded {amount:.2f} on {oid}.",
                 {"order_id": oid, "sku": line["sku"], "quantity": quantity, "reason": reason,
                  "email": c["email"]})


def _check_refund_line(w: EnterpriseWorld, s: State, p: dict) -> bool:
    refunds = s["refunds"]
    return (len(refunds) == 1 and refunds[0]["order_id"] == p["order_id"]
            and refunds[0]["reason"] == p["reason"]
            and refunds[0]["items"] == [{"sku": p["sku"], "quantity": p["quantity"]}]
            and mailed(s, p["email"], p["order_id"]))


def _free_hour(w: EnterpriseWorld, day: str, first_hour: int, minutes: int) -> int | None:
    """The first full hour from `first_hour` whose slot of `minutes` ends by 17:00 and
    overlaps none of my events that day."""
    busy = []
    for e in w.events.values():
        if e["start"].startswith(day):
            start = int(e["start"][11:13]) * 60 + int(e["start"][14:16])
            busy.append((start, start + e["duration_minutes"]))
    for hour in range(first_hour, 17):
        start, end = hour * 60, hour * 60 + minutes
        if end <= 17 * 60 and all(end <= b0 or start >= b1 for b0, b1 in busy):
            return hour
    return None


def schedule_meeting(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    day = pick(rng, [e["start"][:10] for e in w.events.values()])
    c1, c2 = sample(rng, list(w.contacts.values()), 2)
    minutes, kind = pick(rng, (30, 45, 60)), pick(rng, LOCATION_KINDS)
    hour = _free_hour(w, day, 9, minutes)
    if hour is None:
        return None
    title = f"{w.accounts[c1['account_id']]['name']} {pick(rng, _TOPICS)}"
    detail = {"room": "Room 2.14", "video": "video link in the invite",
              "phone": c1["phone"]}[kind]
    ask = pick(rng, (
        f"Book a {minutes}-minute {kind} meeting titled '{title}' with {c1['name']} and "
        f"{c2['name']} on {day}, at the earliest full hour between 09:00 and 17:00 when my "
        "calendar is free.",
        f"Find the first free full-hour start on {day} (working hours 9-17) in my calendar and "
        f"schedule '{title}' there: {minutes} minutes, {kind}, with {c1['name']} and "
        f"{c2['name']}."))
    start = f"{day}T{hour:02d}:00:00"
    gold = [find_contact(c1), find_contact(c2),
            gold_call("list_events", f"see what is already in my calendar on {day}", date=day),
            gold_call("create_event", f"book the meeting at {hour:02d}:00", title=title,
                      start=start, duration_minutes=minutes,
                      attendees=[c1["email"], c2["email"]],
                      location={"kind": kind, "detail": detail})]
    return Draft("schedule_meeting", ask, gold, f"Booked '{title}' on {day} at {hour:02d}:00.",
                 {"title": title, "start": start, "minutes": minutes, "kind": kind,
                  "attendees": [c1["email"], c2["email"]]})


def _new_event(w: EnterpriseWorld, s: State, p: dict) -> dict | None:
    new = [e for eid, e in s["events"].items() if eid not in w.events]
    if len(new) != 1:
        return None
    e = new[0]
    attendees = {a.lower() for a in e["attendees"]} - {w.me["email"]}
    if (e["start"][:16] != p["start"][:16] or e["duration_minutes"] != p["minutes"]
            or e["location"]["kind"] != p["kind"] or attendees != set(p["attendees"])):
        return None
    return e


def _check_schedule_meeting(w: EnterpriseWorld, s: State, p: dict) -> bool:
    e = _new_event(w, s, p)
    return e is not None and e["title"].strip().lower() == p["title"].lower()


def ticket_followup_call(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    active = [t for t in w.tickets.values() if t["status"] in ("open", "pending")]
    if not active:
        return None
    t = pick(rng, active)
    c = w.contacts[t["contact_id"]]
    day, after = ISO_DAYS[w.today + 1 + int(rng.random() * 6)], 9 + int(rng.random() * 5)
    hour = _free_hour(w, day, after, 30)
    if hour is None:
        return None
    ask = pick(rng, (
        f"Schedule a 30-minute phone call on {day}, at the first free full hour from "
        f"{after:02d}:00 in my calendar, with the customer who opened the ticket "
        f"'{t['subject']}'. Link the ticket to the event.",
        f"I want to call whoever raised '{t['subject']}'. Put a 30-minute phone call in my "
        f"calendar on {day} at the earliest full hour from {after:02d}:00 that is free, and "
        "relate it to that ticket."))
    start = f"{day}T{hour:02d}:00:00"
    gold = [gold_call("search_tickets", "find the ticket by its subject",
                      filters={"text": t["subject"]}),
            gold_call("get_contact", "get the email and phone of the customer",
                      contact_id=c["contact_id"]),
            gold_call("list_events", f"see what is already in my calendar on {day}", date=day),
            gold_call("create_event", f"book the call at {hour:02d}:00",
                      title=f"Follow-up call: {t['subject']}"[:120], start=start,
                      duration_minutes=30, attendees=[c["email"]],
                      location={"kind": "phone", "detail": c["phone"]},
                      related_ticket_id=t["ticket_id"])]
    return Draft("ticket_followup_call", ask, gold, f"Scheduled the call on {day} at "
                 f"{hour:02d}:00.", {"start": start, "minutes": 30, "kind": "phone",
                                     "attendees": [c["email"]], "ticket_id": t["ticket_id"]})


def _check_ticket_followup_call(w: EnterpriseWorld, s: State, p: dict) -> bool:
    e = _new_event(w, s, p)
    return e is not None and e.get("related_ticket_id") == p["ticket_id"]


def mailed(s: State, address: str, mention: str) -> bool:
    """Some sent email went to `address` and mentions `mention` (case-insensitive)."""
    mention = mention.lower().replace(",", "")
    for message in s["outbox"]:
        if address in [a.lower() for a in message["to"]] and mention in (
                message["subject"] + "\n" + message["body"]).lower().replace(",", ""):
            return True
    return False


def others_unchanged(w: EnterpriseWorld, s: State, collection: str,
                      targets: list[str]) -> bool:
    current, initial = s[collection], w.collection(collection)
    return len(current) == len(initial) and all(
        current.get(key) == record for key, record in initial.items() if key not in targets)


CHECKS: dict[str, Callable[[EnterpriseWorld, State, dict], bool]] = {
    "damaged_order_ticket": _check_damaged_order_ticket, "refund_line": _check_refund_line,
    "schedule_meeting": _check_schedule_meeting,
    "ticket_followup_call": _check_ticket_followup_call,
}
