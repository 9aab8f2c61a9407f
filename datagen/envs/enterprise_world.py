"""The procedural world of the `enterprise` environment: staff, customer accounts and their
contacts, a product catalog, orders, support tickets and the agent's own calendar.

Records are plain dicts in id-keyed dicts. They are never mutated in place: tools replace a
record with an updated copy (`{**old, **changes}`), so `reset` and `snapshot` only copy the
top-level collections. Lists inside records are tuples: records of atomic values are
untracked by the garbage collector, which otherwise spends a fifth of the time scanning
them. A world is rebuilt from the task seed and never stored.
"""

from __future__ import annotations

import random
from typing import Any

from datagen.envs._names import COMPANY_STEMS, COMPANY_SUFFIXES, ISO_DAYS, person_names, pick, \
    product_names, sample, today_index

TEAMS = ("support", "billing", "engineering", "sales", "success")
INDUSTRIES = ("retail", "healthcare", "logistics", "finance", "education", "manufacturing")
TITLES = ("Operations Manager", "IT Director", "Procurement Lead", "CFO", "Office Manager",
          "Head of Support", "Product Owner", "Facilities Coordinator", "CTO", "Buyer")
TAGS = ("vip", "renewal", "beta", "newsletter", "partner", "at-risk", "enterprise")
ORDER_STATUSES = ("processing", "shipped", "delivered", "cancelled", "returned")
TICKET_STATUSES = ("open", "pending", "resolved", "closed")
PRIORITIES = ("low", "medium", "high", "urgent")
CATEGORIES = ("billing", "shipping", "technical", "account", "other")
REFUND_REASONS = ("damaged", "late_delivery", "wrong_item", "not_needed", "other")
LOCATION_KINDS = ("room", "video", "phone")
_SUBJECTS = ("Cannot log in to the portal", "Invoice {n} charged twice",
             "Question about contract renewal {n}", "API returns error {n}",
             "Missing items in shipment {n}", "Request to change billing address",
             "Dashboard export fails ({n} rows)", "Password reset email not arriving",
             "SSO setup for {n} users", "Wrong VAT on invoice {n}")
_MEETINGS = ("Weekly sync", "Roadmap review", "1:1", "Budget check-in", "Vendor call",
             "Hiring panel", "Design review", "Quarterly planning")


LAZY_UNITS = ("orders", "tickets", "events")  # "orders" also builds the catalog
_UNIT_OF = {"catalog": "orders", "orders": "orders", "tickets": "tickets", "events": "events"}


class EnterpriseWorld:
    """Initial records by collection, and the facts templates need.

    Staff, accounts and contacts are built eagerly; the catalog with the orders, the tickets
    and the calendar are built on first use, each from its own seed drawn from the task seed.
    A task that never looks at the calendar does not pay for it, and the content of a
    collection does not depend on which others were built before it.
    """

    __slots__ = ("today", "me", "collections", "_seeds", "users", "accounts", "contacts")

    def __init__(self, today: int, me: dict[str, Any],
                 collections: dict[str, dict[str, dict[str, Any]]], seeds: dict[str, int]):
        self.today, self.me, self.collections, self._seeds = today, me, collections, seeds
        self.users, self.accounts, self.contacts = \
            collections["users"], collections["accounts"], collections["contacts"]

    @property
    def today_iso(self) -> str:
        return ISO_DAYS[self.today]

    def collection(self, name: str) -> dict[str, dict[str, Any]]:
        found = self.collections.get(name)
        if found is None:
            unit = _UNIT_OF[name]
            self.collections.update(_BUILDERS[unit](self, random.Random(self._seeds[unit])))
            found = self.collections[name]
        return found

    def __getattr__(self, name: str) -> dict[str, dict[str, Any]]:
        """`world.orders` etc.: the lazy collections by name (eager ones are attributes)."""
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.collection(name)
        except KeyError:
            raise AttributeError(name) from None

    def next_id(self, name: str) -> int:
        """The number after the largest id of a collection (new records continue it)."""
        return 1 + max(int(key.rsplit("-", 1)[1]) for key in self.collection(name))


def _staff(rng: random.Random, domain: str, names: list[tuple[str, str]]) -> dict:
    """Eight colleagues; the first member of each team is the team's on-call person."""
    rand, users, base = rng.random, {}, 100 + int(rng.random() * 800)
    teams = TEAMS + tuple(TEAMS[int(rand() * 5)] for _ in range(len(names) - len(TEAMS)))
    for i, ((first, last), team) in enumerate(zip(names, teams)):
        uid = f"U-{base + i}"
        users[uid] = {"user_id": uid, "name": f"{first} {last}",
                      "email": f"{first}.{last}@{domain}".lower(), "team": team,
                      "on_call": i < len(TEAMS)}
    return users


def _accounts(rng: random.Random, users: dict) -> dict:
    rand, accounts, base = rng.random, {}, 100 + int(rng.random() * 800)
    owners = [uid for uid, u in users.items() if u["team"] in ("sales", "success")]
    for i, stem in enumerate(sample(rng, COMPANY_STEMS, 4 + int(rand() * 2))):
        aid = f"A-{base + i}"
        accounts[aid] = {"account_id": aid,
                         "name": f"{stem} {COMPANY_SUFFIXES[int(rand() * 12)]}",
                         "domain": f"{stem.lower()}.example.com",
                         "industry": INDUSTRIES[int(rand() * 6)],
                         "owner_id": owners[int(rand() * len(owners))]}
    return accounts


def _contacts(rng: random.Random, accounts: dict, names: list[tuple[str, str]]) -> dict:
    """Contacts spread over the accounts (each account gets at least one)."""
    rand, contacts, base = rng.random, {}, 1000 + int(rng.random() * 8000)
    account_list = list(accounts.values())
    n_accounts = len(account_list)
    for i, (first, last) in enumerate(names):
        account = account_list[i if i < n_accounts else int(rand() * n_accounts)]
        cid, r = f"C-{base + i}", rand()
        contacts[cid] = {
            "contact_id": cid, "name": f"{first} {last}",
            "email": f"{first}.{last}@{account['domain']}".lower(),
            "phone": f"+1 555 {100 + int(rand() * 900)} {1000 + int(rand() * 9000)}",
            "title": TITLES[int(rand() * 10)], "account_id": account["account_id"],
            "tags": () if r < 0.4 else (TAGS[int(r * 70) % 7],) if r < 0.8 else
            (TAGS[int(r * 70) % 7], TAGS[(int(r * 70) + 3) % 7])}
    return contacts


def _orders(rng: random.Random, contacts: dict, catalog: list[dict], today: int) -> dict:
    """Orders of 1-3 catalog lines; prices in cents internally, so totals need no rounding."""
    rand, orders, base = rng.random, {}, 10000 + int(rng.random() * 80000)
    contact_ids, n_contacts = list(contacts), len(contacts)
    for i in range(7 + int(rand() * 4)):
        lines, cents = [], 0
        for product in sample(rng, catalog, 1 + int(rand() * 3)):
            quantity = 1 + int(rand() * 4)
            cents += quantity * round(product["price"] * 100)
            lines.append({"sku": product["sku"], "name": product["name"], "quantity": quantity,
                          "unit_price": product["price"]})
        oid, r = f"ORD-{base + i}", rand()
        orders[oid] = {"order_id": oid, "contact_id": contact_ids[int(rand() * n_contacts)],
                       "placed_on": ISO_DAYS[today - 2 - int(rand() * 120)],
                       "status": ORDER_STATUSES[2 if r < 0.45 else int(r * 50) % 5],
                       "lines": tuple(lines), "total": cents / 100}
    return orders


def _tickets(rng: random.Random, contacts: dict, users: dict, today: int) -> dict:
    rand, tickets, base = rng.random, {}, 1000 + int(rng.random() * 8000)
    contact_ids, n_contacts = list(contacts), len(contacts)
    agents = [uid for uid, u in users.items() if u["team"] in ("support", "engineering",
                                                                 "billing")]
    for i, subject in enumerate(sample(rng, _SUBJECTS, 6 + int(rand() * 3))):
        tid, r = f"T-{base + i}", rand()
        tickets[tid] = {"ticket_id": tid, "contact_id": contact_ids[int(rand() * n_contacts)],
                        "subject": subject.format(n=100 + int(r * 900)),
                        "status": TICKET_STATUSES[int(r * 400) % 4],
                        "priority": PRIORITIES[int(r * 4000) % 4],
                        "category": CATEGORIES[int(r * 40000) % 5],
                        "tags": () if r * 7 % 1 < 0.5 else (TAGS[int(r * 700) % 7],),
                        "assignee_id": agents[int(rand() * len(agents))],
                        "created": ISO_DAYS[today - int(rand() * 30)], "comments": ()}
    return tickets


def _events(rng: random.Random, me: dict, users: dict, today: int) -> dict:
    """My calendar over the next six days, 09:00-17:00."""
    rand, events, base = rng.random, {}, 1000 + int(rng.random() * 8000)
    colleagues = [u["email"] for u in users.values() if u["email"] != me["email"]]
    for i in range(4 + int(rand() * 3)):
        eid, r = f"EV-{base + i}", rand()
        events[eid] = {"event_id": eid, "title": _MEETINGS[int(r * 8)],
                       "start": f"{ISO_DAYS[today + 1 + int(rand() * 6)]}T"
                                f"{9 + int(r * 80) % 8:02d}:{('00', '30')[int(r * 800) % 2]}:00",
                       "duration_minutes": (30, 60, 60, 90)[int(r * 8000) % 4],
                       "attendees": (me["email"], colleagues[int(rand() * len(colleagues))]),
                       "location": {"kind": LOCATION_KINDS[int(r * 80000) % 3],
                                    "detail": "TBD"}}
    return events


def _catalog_and_orders(w: EnterpriseWorld, rng: random.Random) -> dict[str, dict]:
    sku0, rand = 1000 + int(rng.random() * 8000), rng.random
    catalog = {}
    for i, name in enumerate(product_names(rng, 6)):
        sku = f"SKU-{sku0 + i}"
        catalog[sku] = {"sku": sku, "name": name, "price": (999 + 100 * int(rand() * 400)) / 100}
    return {"catalog": catalog,
            "orders": _orders(rng, w.contacts, list(catalog.values()), w.today)}


_BUILDERS = {
    "orders": _catalog_and_orders,
    "tickets": lambda w, rng: {"tickets": _tickets(rng, w.contacts, w.users, w.today)},
    "events": lambda w, rng: {"events": _events(rng, w.me, w.users, w.today)},
}


def build_world(rng: random.Random) -> EnterpriseWorld:
    """Draw a company from `rng` (the task seed's generator, consumed first).

    Several fields of a record come from the digits of one random number (`int(r * 400) %
    4` ...): world building is on the hot path, and each rng call costs as much as a dict."""
    today = today_index(rng)
    our_domain = f"{pick(rng, COMPANY_STEMS).lower()}-corp.example"
    names = person_names(rng, 8 + 9 + int(rng.random() * 4))
    users = _staff(rng, our_domain, names[:8])
    accounts = _accounts(rng, users)
    contacts = _contacts(rng, accounts, names[8:])
    seeds = {unit: int(rng.random() * 2**53) for unit in LAZY_UNITS}
    me = list(users.values())[-1]  # the agent's own account: never on call
    return EnterpriseWorld(today, me, {"users": users, "accounts": accounts,
                                       "contacts": contacts}, seeds)
