"""CRM and ticket-queue templates of the `enterprise` environment (see enterprise_tasks for
the conventions): close, reassign and escalate tickets, update a contact, report to an
account owner, and two questions answered from search results.
"""

from __future__ import annotations

import random
from typing import Callable

from datagen.envs._names import pick
from datagen.envs._toolkit import Draft, gold_call
from datagen.envs.enterprise_tasks import State, find_contact, first_name, mailed, on_call_user, \
    others_unchanged
from datagen.envs.enterprise_world import TITLES, EnterpriseWorld

_COMMENTS = ("Resolved with the customer.", "Customer confirmed the fix.",
             "Closing: issue sorted out.", "Confirmed fixed on a call today.")


def close_pending(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    owners = list(dict.fromkeys(t["contact_id"] for t in w.tickets.values()
                                if t["status"] == "pending"))
    if not owners:
        return None
    c = w.contacts[pick(rng, owners)]
    targets = [t["ticket_id"] for t in w.tickets.values()
               if t["contact_id"] == c["contact_id"] and t["status"] == "pending"]
    comment = pick(rng, _COMMENTS)
    ask = pick(rng, (
        f"All of {c['name']}'s pending tickets are sorted out. Close them with the comment "
        f"\"{comment}\"",
        f"Please close every ticket of {c['name']} that is still pending; add the comment "
        f"\"{comment}\" to each."))
    gold = [find_contact(c),
            gold_call("search_tickets", f"list {first_name(c['name'])}'s pending tickets",
                      filters={"contact_id": c["contact_id"], "status": "pending"})]
    gold += [gold_call("update_ticket", f"close {tid}", ticket_id=tid,
                       changes={"status": "closed"}, comment=comment) for tid in targets]
    return Draft("close_pending", ask, gold, f"Closed {len(targets)} ticket(s).",
                 {"tickets": targets, "comment": comment})


def _check_close_pending(w: EnterpriseWorld, s: State, p: dict) -> bool:
    for tid in p["tickets"]:
        t = s["tickets"][tid]
        if t["status"] != "closed" or not any(p["comment"].lower() in note.lower()
                                              for note in t["comments"]):
            return False
    return others_unchanged(w, s, "tickets", p["tickets"])


def reassign_tickets(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    busy = list(dict.fromkeys(t["assignee_id"] for t in w.tickets.values()
                              if t["status"] == "open"))
    if not busy:
        return None
    u1 = w.users[pick(rng, busy)]
    u2 = pick(rng, [u for u in w.users.values() if u["user_id"] != u1["user_id"]
                    and u["team"] in ("support", "engineering", "billing")])
    targets = [t["ticket_id"] for t in w.tickets.values()
               if t["assignee_id"] == u1["user_id"] and t["status"] == "open"]
    ask = pick(rng, (
        f"{u1['name']} is going on leave. Reassign all of their open tickets to {u2['name']}.",
        f"Move every open ticket currently assigned to {u1['name']} over to {u2['name']}; "
        "leave tickets in other states alone."))
    gold = [gold_call("search_users", f"look up the user id of {u1['name']}",
                      query=u1["name"]),
            gold_call("search_users", f"look up the user id of {u2['name']}",
                      query=u2["name"]),
            gold_call("search_tickets", f"list the open tickets of {first_name(u1['name'])}",
                      filters={"assignee_id": u1["user_id"], "status": "open"})]
    gold += [gold_call("update_ticket", f"reassign {tid} to {first_name(u2['name'])}",
                       ticket_id=tid, changes={"assignee_id": u2["user_id"]})
             for tid in targets]
    return Draft("reassign_tickets", ask, gold, f"Reassigned {len(targets)} ticket(s) to "
                 f"{u2['name']}.", {"tickets": targets, "assignee_id": u2["user_id"]})


def _check_reassign_tickets(w: EnterpriseWorld, s: State, p: dict) -> bool:
    return all(s["tickets"][tid]["assignee_id"] == p["assignee_id"]
               and s["tickets"][tid]["status"] == "open" for tid in p["tickets"]) and \
        others_unchanged(w, s, "tickets", p["tickets"])


def escalate_ticket(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    open_by_contact: dict[str, list[str]] = {}
    for t in w.tickets.values():
        if t["status"] == "open":
            open_by_contact.setdefault(t["contact_id"], []).append(t["ticket_id"])
    single = [cid for cid, tickets in open_by_contact.items() if len(tickets) == 1]
    if not single:
        return None
    c = w.contacts[pick(rng, single)]
    t = w.tickets[open_by_contact[c["contact_id"]][0]]
    engineer = on_call_user(w, "engineering")
    ask = pick(rng, (
        f"{c['name']}'s open ticket needs escalating: make it urgent, assign it to the "
        f"on-call engineer, and email {first_name(c['name'])} that it has been escalated "
        "(mention the ticket id).",
        f"Escalate the open ticket of {c['name']}: priority urgent, owner = whoever is on call "
        "in engineering. Then tell the customer by email, quoting the ticket number."))
    gold = [find_contact(c),
            gold_call("search_tickets", f"find {first_name(c['name'])}'s open ticket",
                      filters={"contact_id": c["contact_id"], "status": "open"}),
            gold_call("search_users", "find the on-call engineer", team="engineering",
                      on_call=True),
            gold_call("update_ticket", f"escalate {t['ticket_id']}", ticket_id=t["ticket_id"],
                      changes={"priority": "urgent", "assignee_id": engineer["user_id"]}),
            gold_call("send_email", f"tell {first_name(c['name'])} about the escalation",
                      to=[c["email"]], subject=f"Ticket {t['ticket_id']} escalated",
                      body=f"Hi {first_name(c['name'])},\n\nyour ticket {t['ticket_id']} "
                           f"('{t['subject']}') is now urgent and with {engineer['name']} "
                           f"from engineering.\n\nBest regards,\n{w.me['name']}",
                      related_ticket_id=t["ticket_id"])]
    return Draft("escalate_ticket", ask, gold, f"Escalated {t['ticket_id']}.",
                 {"ticket_id": t["ticket_id"], "assignee_id": engineer["user_id"],
                  "email": c["email"]})


def _check_escalate_ticket(w: EnterpriseWorld, s: State, p: dict) -> bool:
    t = s["tickets"][p["ticket_id"]]
    return t["priority"] == "urgent" and t["assignee_id"] == p["assignee_id"] and \
        others_unchanged(w, s, "tickets", [p["ticket_id"]]) and \
        mailed(s, p["email"], p["ticket_id"])


def update_contact_role(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    c = pick(rng, list(w.contacts.values()))
    title = pick(rng, [t for t in TITLES if t != c["title"]])
    phone = f"+1 555 {100 + int(rng.random() * 900)} {1000 + int(rng.random() * 9000)}"
    tags = list(c["tags"]) + ["decision-maker"]
    account = w.accounts[c["account_id"]]
    owner = w.users[account["owner_id"]]
    ask = pick(rng, (
        f"{c['name']} has been promoted to {title}; their new direct line is {phone}. "
        "Update the CRM record, tag them `decision-maker` (keep their existing tags) and let "
        "the account owner know by email.",
        f"CRM update for {c['name']}: title is now {title}, phone {phone}, and add the tag "
        "decision-maker without dropping other tags. Then email the owner of their account "
        "about the change."))
    gold = [find_contact(c),
            gold_call("get_contact", "see their current tags and account",
                      contact_id=c["contact_id"]),
            gold_call("update_contact", "update title, phone and tags",
                      contact_id=c["contact_id"],
                      changes={"title": title, "phone": phone, "tags": tags}),
            gold_call("search_accounts", f"find the owner of {account['name']}",
                      name=account["name"]),
            gold_call("search_users", "get the account owner's email",
                      query=account["owner_id"]),
            gold_call("send_email", f"tell {first_name(owner['name'])} about the change",
                      to=[owner["email"]], subject=f"{c['name']} is now {title}",
                      body=f"Hi {first_name(owner['name'])},\n\n{c['name']} at {account['name']} "
                           f"is now {title} (phone {phone}). I tagged them as a "
                           f"decision-maker.\n\n{w.me['name']}")]
    return Draft("update_contact_role", ask, gold, f"Updated {c['name']} and emailed "
                 f"{owner['name']}.", {"contact_id": c["contact_id"], "title": title,
                                       "phone": phone, "tags": tags, "email": owner["email"],
                                       "name": c["name"]})


def _check_update_contact_role(w: EnterpriseWorld, s: State, p: dict) -> bool:
    c = s["contacts"][p["contact_id"]]
    return c["title"] == p["title"] and c["phone"] == p["phone"] and \
        set(c["tags"]) == set(p["tags"]) and mailed(s, p["email"], p["name"]) and \
        others_unchanged(w, s, "contacts", [p["contact_id"]])


def _account_contacts(w: EnterpriseWorld, account_id: str) -> list[str]:
    return [cid for cid, c in w.contacts.items() if c["account_id"] == account_id]


def account_summary_email(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    a = pick(rng, list(w.accounts.values()))
    members = _account_contacts(w, a["account_id"])
    orders = [o for o in w.orders.values() if o["contact_id"] in members]
    if not orders:
        return None
    status = pick(rng, list(dict.fromkeys(o["status"] for o in orders)))
    since = pick(rng, [o["placed_on"] for o in orders if o["status"] == status])
    chosen = [o for o in orders if o["status"] == status and o["placed_on"] >= since]
    total, owner = f"{sum(o['total'] for o in chosen):.2f}", w.users[a["owner_id"]]
    ask = pick(rng, (
        f"Email the account owner of {a['name']} the total value of the account's {status} "
        f"orders placed on or after {since}.",
        f"Whoever owns the {a['name']} account should get an email with the combined value of "
        f"its {status} orders since {since} (inclusive)."))
    gold = [gold_call("search_accounts", f"find the id and owner of {a['name']}",
                      name=a["name"]),
            gold_call("list_orders", f"list its {status} orders since {since}",
                      filters={"account_id": a["account_id"], "status": status,
                               "placed_after": since}),
            gold_call("search_users", "get the account owner's email", query=a["owner_id"]),
            gold_call("send_email", f"send {first_name(owner['name'])} the total",
                      to=[owner["email"]], subject=f"{a['name']}: {status} orders since {since}",
                      body=f"Hi {first_name(owner['name'])},\n\n{a['name']} has {len(chosen)} "
                           f"{status} order(s) since {since}, worth {total} in total.\n\n"
                           f"{w.me['name']}")]
    return Draft("account_summary_email", ask, gold, f"Emailed {owner['name']}: {total}.",
                 {"email": owner["email"], "total": total})


def _check_account_summary_email(w: EnterpriseWorld, s: State, p: dict) -> bool:
    return mailed(s, p["email"], p["total"])


def open_ticket_count(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    a = pick(rng, list(w.accounts.values()))
    members = _account_contacts(w, a["account_id"])
    statuses = pick(rng, (("open", "pending"), ("open",), ("pending",), ("open", "pending")))
    count = sum(1 for t in w.tickets.values()
                if t["contact_id"] in members and t["status"] in statuses)
    which = " or ".join(statuses)
    ask = pick(rng, (
        f"How many tickets of {a['name']} are {which} right now?",
        f"Count the {which} tickets across all contacts of {a['name']}.",
        f"What number of {a['name']}'s support tickets currently have status {which}?"))
    gold = [gold_call("search_accounts", f"find the account id of {a['name']}", name=a["name"])]
    gold += [gold_call("search_tickets", f"list its {status} tickets",
                       filters={"account_id": a["account_id"], "status": status})
             for status in statuses]
    return Draft("open_ticket_count", ask, gold, str(count), {})


def top_customer(w: EnterpriseWorld, rng: random.Random) -> Draft | None:
    a = pick(rng, list(w.accounts.values()))
    spent: dict[str, float] = {}
    for o in w.orders.values():
        if o["status"] == "delivered" and w.contacts[o["contact_id"]]["account_id"] == \
                a["account_id"]:
            spent[o["contact_id"]] = spent.get(o["contact_id"], 0) + o["total"]
    ranked = sorted(spent.items(), key=lambda kv: -kv[1])
    if not ranked or len(ranked) > 1 and ranked[0][1] - ranked[1][1] < 0.005:
        return None
    top = w.contacts[ranked[0][0]]
    ask = pick(rng, (
        f"Which contact at {a['name']} has spent the most on delivered orders?",
        f"Among the people at {a['name']}, who is the biggest customer by delivered order "
        "value? Give their name."))
    gold = [gold_call("search_accounts", f"find the account id of {a['name']}", name=a["name"]),
            gold_call("list_orders", "list the account's delivered orders",
                      filters={"account_id": a["account_id"], "status": "delivered"}),
            gold_call("get_contact", "get the name of the contact with the largest total",
                      contact_id=top["contact_id"])]
    return Draft("top_customer", ask, gold, top["name"], {})


CRM_CHECKS: dict[str, Callable[[EnterpriseWorld, State, dict], bool]] = {
    "close_pending": _check_close_pending, "reassign_tickets": _check_reassign_tickets,
    "escalate_ticket": _check_escalate_ticket,
    "update_contact_role": _check_update_contact_role,
    "account_summary_email": _check_account_summary_email,
}
