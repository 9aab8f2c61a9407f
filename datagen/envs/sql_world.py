"""The procedural world of the `sql` environment: domains, schema variants and seeded rows.

Every database has the same *shape* — a group table (regions), an entity table (customers)
that references it, an item table (products) and an event table (orders) that references both —
but six domains and eight naming variants per domain (table names, primary-key style, column
names, optional columns, a distractor table) make the surface vary from task to task.
A world is a few lists of row tuples; it is rebuilt from the task seed and never stored.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from datagen.envs._names import APP_NAMES, CITIES, ISO_DAYS, person_names, pick, \
    product_names, sample, today_index


@dataclass(frozen=True, slots=True)
class Domain:
    """Names and value ranges of one business domain; tuples hold naming alternatives."""

    key: str
    group_tables: tuple[str, str]
    group_noun: str
    group_values: tuple[str, ...]
    entity_tables: tuple[str, str]
    entity_noun: str
    entity_plural: str
    metric: tuple[tuple[str, str], tuple[int, int, int]]  # (column, label), (lo, hi, step)
    since_columns: tuple[str, str]
    item_tables: tuple[str, str]
    item_noun: str
    item_plural: str
    item_name_columns: tuple[str, str]
    item_words: tuple[tuple[str, ...], tuple[str, ...]]
    categories: tuple[str, ...]
    price: tuple[tuple[str, str], str, int, int]  # column choices, label, cents lo, hi
    event_tables: tuple[str, str]
    event_key: str
    event_noun: str
    event_plural: str
    qty: tuple[tuple[str, str], str, int]  # column choices, label, max per event
    statuses: tuple[str, ...]
    date_columns: tuple[str, str]


DOMAINS = (
    Domain("retail", ("regions", "sales_regions"), "region",
           ("North", "South", "East", "West", "Central", "Coastal", "Highlands", "Metro"),
           ("customers", "clients"), "customer", "customers",
           (("credit_limit", "credit limit"), (500, 20000, 250)), ("joined_on", "signup_date"),
           ("products", "catalog_items"), "product", "products", ("name", "product_name"),
           (("Compact", "Deluxe", "Classic", "Rapid", "Silent", "Smart", "Nordic", "Eco"),
            ("Blender", "Desk Lamp", "Kettle", "Router", "Headset", "Monitor", "Drill", "Tent",
             "Speaker", "Camera", "Heater", "Juicer")),
           ("Electronics", "Kitchen", "Garden", "Toys", "Sports", "Office"),
           (("price", "unit_price"), "price", 499, 49999),
           ("orders", "sales"), "order", "order", "orders",
           (("quantity", "units"), "units", 5),
           ("pending", "shipped", "delivered", "cancelled"), ("order_date", "placed_on")),
    Domain("hr", ("departments", "teams"), "department",
           ("Finance", "Legal", "Research", "Support", "Marketing", "Operations", "Design"),
           ("employees", "staff"), "employee", "employees",
           (("salary", "salary"), (38000, 160000, 500)), ("hired_on", "start_date"),
           ("projects", "initiatives"), "project", "projects", ("name", "project_name"),
           (tuple(name.title() for name in APP_NAMES),
            ("Migration", "Audit", "Rollout", "Redesign", "Upgrade", "Pilot", "Integration")),
           ("Internal", "Client", "Research", "Compliance"),
           (("hourly_rate", "billing_rate"), "hourly rate", 4000, 25000),
           ("timesheets", "time_entries"), "entry", "timesheet entry", "timesheet entries",
           (("hours", "hours_logged"), "hours", 8),
           ("draft", "submitted", "approved", "rejected"), ("work_date", "entry_date")),
    Domain("library", ("branches", "locations"), "branch",
           ("Riverside", "Old Town", "Hillcrest", "Harbourview", "Northgate", "Parkside"),
           ("members", "patrons"), "member", "members",
           (("max_loans", "loan limit"), (2, 60, 1)), ("member_since", "joined_on"),
           ("books", "titles"), "book", "books", ("title", "book_title"),
           (("Silent", "Hidden", "Last", "Golden", "Broken", "Distant", "Northern", "Secret"),
            ("Garden", "River", "Archive", "Harbor", "Letter", "Forest", "Kingdom", "Voyage")),
           ("Fiction", "History", "Science", "Poetry", "Travel", "Biography"),
           (("replacement_cost", "list_price"), "replacement cost", 899, 4999),
           ("loans", "checkouts"), "loan", "loan", "loans",
           (("copies", "num_copies"), "copies", 3),
           ("active", "returned", "overdue", "lost"), ("loan_date", "borrowed_on")),
    Domain("clinic", ("clinics", "sites"), "clinic",
           ("Eastside", "Lakeside", "Midtown", "Westfield", "Southbank", "Greenway"),
           ("patients", "clients"), "patient", "patients",
           (("age", "age"), (18, 95, 1)), ("registered_on", "first_visit"),
           ("treatments", "services"), "treatment", "treatments", ("name", "treatment_name"),
           (("Basic", "Extended", "Follow-up", "Initial", "Advanced", "Pediatric"),
            ("Consultation", "X-Ray", "Physiotherapy", "Blood Panel", "Cleaning", "Check-up")),
           ("Dental", "Physio", "Imaging", "Lab", "General"),
           (("fee", "base_fee"), "fee", 2500, 45000),
           ("appointments", "visits"), "appointment", "appointment", "appointments",
           (("sessions", "session_count"), "sessions", 4),
           ("booked", "completed", "cancelled", "no_show"), ("appointment_date", "visit_date")),
    Domain("events", ("cities", "markets"), "city", CITIES,
           ("attendees", "guests"), "attendee", "attendees",
           (("loyalty_points", "points"), (0, 5000, 10)), ("registered_on", "joined_on"),
           ("events", "shows"), "event", "events", ("name", "title"),
           (("Summer", "Midnight", "Acoustic", "Grand", "Winter", "Open-Air", "Jazz"),
            ("Festival", "Gala", "Showcase", "Concert", "Night", "Tour", "Matinee")),
           ("Concert", "Theatre", "Sport", "Comedy", "Family"),
           (("ticket_price", "price"), "ticket price", 1500, 25000),
           ("bookings", "reservations"), "booking", "booking", "bookings",
           (("tickets", "seats"), "tickets", 6),
           ("reserved", "paid", "refunded", "cancelled"), ("booking_date", "booked_on")),
    Domain("logistics", ("depots", "warehouses"), "depot", CITIES,
           ("suppliers", "vendors"), "supplier", "suppliers",
           (("rating", "score"), (1, 100, 1)), ("onboarded_on", "partner_since"),
           ("parts", "components"), "part", "parts", ("name", "part_name"),
           (("Steel", "Brass", "Carbon", "Nylon", "Copper", "Titanium", "Rubber"),
            ("Bracket", "Valve", "Gasket", "Bearing", "Hinge", "Pulley", "Spring", "Sensor")),
           ("Hydraulics", "Fasteners", "Electrical", "Seals", "Motion"),
           (("unit_cost", "cost"), "unit cost", 99, 9999),
           ("shipments", "deliveries"), "shipment", "shipment", "shipments",
           (("units", "quantity"), "units", 40),
           ("ordered", "in_transit", "received", "returned"), ("ship_date", "dispatched_on")),
)

# Optional columns: (name, SQL type, SQL expression of the row's id ?1 and name ?2). A variant
# keeps a random subset; SQLite fills them while inserting, so they cost no Python per row.
ENTITY_EXTRAS = (("email", "TEXT", "lower(replace(?2, ' ', '.')) || '@example.com'"),
                 ("phone", "TEXT", "'+1-555-' || (1000 + ?1 * 7919 % 9000)"),
                 ("is_active", "INTEGER", "(?1 * 7 % 10 < 8)"))
ITEM_EXTRAS = (("stock", "INTEGER", "?1 * 37 % 200"),
               ("sku", "TEXT", "'SKU-' || (1000 + ?1 * 7919 % 9000)"),
               ("is_archived", "INTEGER", "(?1 * 7 % 10 >= 8)"))
EVENT_EXTRAS = (("notes", "TEXT", "CASE ?1 % 5 WHEN 1 THEN 'gift' WHEN 2 THEN 'rush' "
                 "WHEN 3 THEN 'repeat' END"),
                ("channel", "TEXT", "CASE ?1 % 4 WHEN 0 THEN 'web' WHEN 1 THEN 'phone' "
                 "WHEN 2 THEN 'store' ELSE 'partner' END"))
DISTRACTORS = (
    ("audit_log", "id INTEGER PRIMARY KEY, action TEXT NOT NULL, actor TEXT, created_at TEXT"),
    ("app_settings", "key TEXT PRIMARY KEY, value TEXT"),
    ("schema_migrations", "version INTEGER PRIMARY KEY, applied_on TEXT"),
)
VARIANTS_PER_DOMAIN = 8


@dataclass(frozen=True, slots=True)
class Schema:
    """Concrete table and column names of one database variant (core columns first)."""

    key: tuple[int, int, int]
    domain: Domain
    group: str
    entity: str
    item: str
    event: str
    group_cols: tuple[str, str]                  # pk, name
    entity_cols: tuple[str, str, str, str, str]  # pk, name, group fk, metric, since
    item_cols: tuple[str, str, str, str]         # pk, name, category, price
    event_cols: tuple[str, str, str, str, str, str]  # pk, entity fk, item fk, qty, status, date
    entity_extras: tuple[tuple[str, str, str], ...]
    item_extras: tuple[tuple[str, str, str], ...]
    event_extras: tuple[tuple[str, str, str], ...]
    distractor: int  # index into DISTRACTORS, -1 for none
    ddl: tuple[str, ...]

    @property
    def core_tables(self) -> tuple[str, str, str, str]:
        return self.group, self.entity, self.item, self.event


def _ddl(table: str, core: list[str], extras: tuple[tuple[str, str, str], ...]) -> str:
    return f"CREATE TABLE {table} ({', '.join(core + [f'{n} {t}' for n, t, _ in extras])})"


@lru_cache(maxsize=None)
def schema_variant(domain_index: int, variant: int, distractor: int) -> Schema:
    """Variant `variant` of a domain: naming choices drawn from a fixed per-variant seed."""
    d = DOMAINS[domain_index]
    rng = random.Random(1000 * domain_index + variant)
    alt = [int(rng.random() * 2) for _ in range(9)]
    noun_pk = rng.random() < 0.5
    group, entity = d.group_tables[alt[0]], d.entity_tables[alt[1]]
    item, event = d.item_tables[alt[2]], d.event_tables[alt[3]]
    pk = (lambda noun: f"{noun}_id") if noun_pk else (lambda noun: "id")
    g_fk, e_fk, i_fk = f"{d.group_noun}_id", f"{d.entity_noun}_id", f"{d.item_noun}_id"
    group_cols = (pk(d.group_noun), "name")
    entity_cols = (pk(d.entity_noun), ("name", "full_name")[alt[4]], g_fk, d.metric[0][0],
                   d.since_columns[alt[5]])
    item_cols = (pk(d.item_noun), d.item_name_columns[alt[6]], "category",
                 d.price[0][alt[7]])
    event_cols = (pk(d.event_key), e_fk, i_fk, d.qty[0][alt[8]], "status",
                  d.date_columns[int(rng.random() * 2)])
    extras = [tuple(x for x in pool if rng.random() < 0.5)
              for pool in (ENTITY_EXTRAS, ITEM_EXTRAS, EVENT_EXTRAS)]
    ddl = [
        _ddl(group, [f"{group_cols[0]} INTEGER PRIMARY KEY", "name TEXT NOT NULL"], ()),
        _ddl(entity, [f"{entity_cols[0]} INTEGER PRIMARY KEY", f"{entity_cols[1]} TEXT NOT NULL",
                      f"{g_fk} INTEGER REFERENCES {group}({group_cols[0]})",
                      f"{entity_cols[3]} INTEGER", f"{entity_cols[4]} TEXT"], extras[0]),
        _ddl(item, [f"{item_cols[0]} INTEGER PRIMARY KEY", f"{item_cols[1]} TEXT NOT NULL",
                    "category TEXT", f"{item_cols[3]} REAL"], extras[1]),
        _ddl(event, [f"{event_cols[0]} INTEGER PRIMARY KEY",
                     f"{e_fk} INTEGER REFERENCES {entity}({entity_cols[0]})",
                     f"{i_fk} INTEGER REFERENCES {item}({item_cols[0]})",
                     f"{event_cols[3]} INTEGER", "status TEXT", f"{event_cols[5]} TEXT"],
             extras[2]),
    ]
    if distractor >= 0:
        ddl.append(f"CREATE TABLE {DISTRACTORS[distractor][0]} ({DISTRACTORS[distractor][1]})")
    return Schema((domain_index, variant, distractor), d, group, entity, item, event,
                  group_cols, entity_cols, item_cols, event_cols, *extras, distractor,
                  tuple(ddl))


@dataclass(slots=True)
class SqlWorld:
    """Rows of one database, core columns only (optional columns are filled by SQLite)."""

    schema: Schema
    today: str
    groups: list[tuple]    # (id, name)
    entities: list[tuple]  # (id, name, group_id, metric, since)
    items: list[tuple]     # (id, name, category, price_cents)
    events: list[tuple]    # (id, entity_id, item_id, qty, status, date)
    distractor_rows: list[tuple]


def build_world(rng: random.Random) -> SqlWorld:
    """Draw a database from `rng` (the task seed's generator, consumed first)."""
    rand = rng.random
    domain_index = int(rand() * len(DOMAINS))
    schema = schema_variant(domain_index, int(rand() * VARIANTS_PER_DOMAIN),
                            int(rand() * (len(DISTRACTORS) + 1)) - 1)
    d, today = schema.domain, today_index(rng)
    gid0 = 1 + int(rand() * 9)
    groups = [(gid0 + i, name) for i, name in
              enumerate(sample(rng, d.group_values, 3 + int(rand() * 3)))]
    n_entities = 6 + int(rand() * 4)
    lo, hi, step = d.metric[1]
    metrics = _distinct(rng, n_entities, (hi - lo) // step)
    eid0 = 100 + 10 * int(rand() * 80)
    entities = [(eid0 + i, f"{first} {last}", groups[int(rand() * len(groups))][0],
                 lo + step * metrics[i], ISO_DAYS[today - 200 - int(rand() * 1500)])
                for i, (first, last) in enumerate(person_names(rng, n_entities))]
    iid0 = 10 + int(rand() * 90)
    categories = sample(rng, d.categories, 3 + int(rand() * 2))
    price_lo, price_span = d.price[2], d.price[3] - d.price[2]
    items = [(iid0 + i, name, categories[int(rand() * len(categories))],
              price_lo + int(rand() * price_span))
             for i, name in enumerate(product_names(rng, 5 + int(rand() * 3), *d.item_words))]
    vid0 = 1000 + 100 * int(rand() * 90)
    max_qty, statuses = d.qty[2], d.statuses
    n_e, n_i, n_s = len(entities), len(items), len(statuses)
    events = [(vid0 + i, entities[int(rand() * n_e)][0], items[int(rand() * n_i)][0],
               1 + int(rand() * max_qty), statuses[int(rand() * n_s)],
               ISO_DAYS[today - 1 - int(rand() * 180)])
              for i in range(12 + int(rand() * 7))]
    return SqlWorld(schema, ISO_DAYS[today], groups, entities, items, events,
                    _distractor_rows(rng, schema.distractor, today))


def _distinct(rng: random.Random, count: int, span: int) -> list[int]:
    """`count` distinct integers in [0, span] (span is far larger than count)."""
    seen: dict[int, None] = {}
    while len(seen) < count:
        seen[int(rng.random() * (span + 1))] = None
    return list(seen)


def _distractor_rows(rng: random.Random, distractor: int, today: int) -> list[tuple]:
    if distractor == 0:
        return [(i + 1, pick(rng, ("login", "export", "update", "backup")),
                 pick(rng, ("system", "admin", "cron")), ISO_DAYS[today - 3 * i])
                for i in range(3)]
    if distractor == 1:
        return [("currency", pick(rng, ("USD", "EUR", "GBP"))),
                ("timezone", pick(rng, ("UTC", "Europe/Lisbon", "America/Denver"))),
                ("report_day", pick(rng, ("monday", "friday")))]
    if distractor == 2:
        return [(20240101 + i, ISO_DAYS[today - 400 + 90 * i]) for i in range(3)]
    return []
