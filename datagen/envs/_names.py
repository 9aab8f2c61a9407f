"""Word lists shared by the built-in environments (people, companies, products, places).

Tuples, never sets: generation indexes into them with a seeded RNG, so their order is part of
the determinism contract. Appending is safe for new seeds but changes old tasks; prefer adding
new lists to editing these.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Sequence, TypeVar

FIRST_NAMES = (
    "Ada", "Ben", "Chloe", "Dmitri", "Elena", "Farah", "Gustavo", "Hana", "Ivan", "Jun",
    "Kofi", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tariq",
    "Uma", "Viktor", "Wen", "Ximena", "Yusuf", "Zara", "Amara", "Bruno", "Carmen", "Diego",
    "Esther", "Felix", "Greta", "Hugo", "Ines", "Jonas", "Keiko", "Luis", "Maya", "Nikolai",
    "Olga", "Pavel", "Rahul", "Sofia", "Tomas", "Ulla", "Valeria", "Wanjiru", "Yara", "Zoltan",
    "Aisha", "Bjorn", "Celine", "Dario", "Emeka", "Fiona", "Goran", "Helga", "Isaac", "Jana",
    "Karim", "Leila", "Marco", "Noor", "Oscar", "Paula", "Rafael", "Sana", "Theo", "Vera",
)
LAST_NAMES = (
    "Park", "Ortiz", "Nguyen", "Schmidt", "Okafor", "Rossi", "Tanaka", "Kowalski", "Haddad",
    "Silva", "Larsen", "Mensah", "Novak", "Petrov", "Quinn", "Ramos", "Sato", "Torres", "Weber",
    "Yilmaz", "Abbott", "Banerjee", "Castillo", "Dubois", "Eriksen", "Fischer", "Garcia",
    "Hoffmann", "Ibrahim", "Jensen", "Kim", "Lindqvist", "Moreau", "Nakamura", "Olsen", "Pereira",
    "Rahman", "Svensson", "Takahashi", "Vargas", "Walsh", "Zhou", "Alvarez", "Becker", "Chen",
    "Diallo", "Evans", "Ferrari", "Gomez", "Horvat", "Ivanova", "Jovanovic", "Keller", "Lopez",
    "Mwangi", "Nowak", "Osei", "Popescu", "Reyes", "Suzuki", "Tran", "Varga", "Wagner", "Young",
)
COMPANY_STEMS = (
    "Acme", "Bluepeak", "Cobalt", "Driftwood", "Everline", "Foxglove", "Granite", "Harbor",
    "Ironbark", "Juniper", "Kestrel", "Lumen", "Meridian", "Northwind", "Orchid", "Pinnacle",
    "Quarry", "Redwood", "Sable", "Tidewater", "Umber", "Vantage", "Willow", "Zenith",
    "Alder", "Brightwater", "Cedar", "Dunmore", "Ember", "Fairhaven", "Glacier", "Hollis",
)
COMPANY_SUFFIXES = ("Corp", "Labs", "Systems", "Logistics", "Health", "Foods", "Energy",
                    "Retail", "Partners", "Media", "Robotics", "Analytics")
CITIES = ("Lisbon", "Nairobi", "Osaka", "Denver", "Krakow", "Lyon", "Monterrey", "Pune",
          "Tallinn", "Perth", "Bergen", "Accra", "Seville", "Quebec", "Tbilisi", "Busan")
ADJECTIVES = ("Compact", "Deluxe", "Classic", "Rapid", "Silent", "Solar", "Nordic", "Urban",
              "Smart", "Modular", "Vintage", "Ultra", "Eco", "Pro", "Mini", "Heavy-Duty")
PRODUCT_NOUNS = ("Blender", "Desk Lamp", "Kettle", "Backpack", "Router", "Headset", "Monitor",
                 "Drill", "Tent", "Keyboard", "Speaker", "Camera", "Scooter", "Heater",
                 "Projector", "Juicer", "Toaster", "Charger", "Tripod", "Thermos")
APP_NAMES = ("billing", "ledger", "orion", "atlas", "harbor", "pulse", "quartz", "relay",
             "sentinel", "tundra", "vortex", "beacon", "cascade", "ember", "falcon", "granite",
             "helix", "iris", "juno", "kepler", "lumen", "mosaic", "nimbus", "onyx", "polaris",
             "quill", "rivet", "sonar", "tesla", "umbra", "vesper", "zephyr")
REFERENCE_DATE = dt.date(2026, 1, 1)
# ISO dates from REFERENCE_DATE - 2000 days to + 400 days: indexing a list is 10x cheaper than
# date arithmetic plus isoformat on the hot path. ISO_DAYS[TODAY_INDEX] is REFERENCE_DATE.
TODAY_INDEX = 2000
ISO_DAYS = [(REFERENCE_DATE + dt.timedelta(days=i - TODAY_INDEX)).isoformat()
            for i in range(2400)]

T = TypeVar("T")


def pick(rng: random.Random, options: Sequence[T]) -> T:
    """rng.choice without its overhead (hot path: called thousands of times per task)."""
    return options[int(rng.random() * len(options))]


def sample(rng: random.Random, options: Sequence[T], count: int) -> list[T]:
    """`count` distinct elements in random order (rng.sample costs ~10x more on tiny lists)."""
    pool, rand, size = list(options), rng.random, len(options)
    for i in range(count):
        j = i + int(rand() * (size - i))
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:count]


def _pairs(rng: random.Random, count: int, left: Sequence[str], right: Sequence[str]
           ) -> list[tuple[str, str]]:
    """`count` distinct (left, right) pairs, one random draw per pair."""
    seen: dict[tuple[str, str], None] = {}
    rand, n_left, n_pairs = rng.random, len(left), len(left) * len(right)
    while len(seen) < count:
        index = int(rand() * n_pairs)
        seen[(left[index % n_left], right[index // n_left])] = None
    return list(seen)


def person_names(rng: random.Random, count: int) -> list[tuple[str, str]]:
    """`count` distinct (first, last) pairs."""
    return _pairs(rng, count, FIRST_NAMES, LAST_NAMES)


def product_names(rng: random.Random, count: int,
                  adjectives: Sequence[str] = ADJECTIVES,
                  nouns: Sequence[str] = PRODUCT_NOUNS) -> list[str]:
    """`count` distinct "Adjective Noun" names."""
    return [f"{a} {n}" for a, n in _pairs(rng, count, adjectives, nouns)]


def today_index(rng: random.Random) -> int:
    """'Today' of a task as an index into ISO_DAYS: the fixed reference date offset by the
    seed (0-364 days), never the wall clock."""
    return TODAY_INDEX + int(rng.random() * 365)
