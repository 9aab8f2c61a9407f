"""Sibling values: another entity of the same kind for a string argument ("Paris" ->
"Berlin", "USD" -> "EUR", "celsius" -> "fahrenheit"), the mistake a model makes when it
picks the wrong city, currency or unit.

Without an environment to list existing values, a logical error must certainly change the
call's meaning; replacing a value by another member of a closed class of distinct entities
does. A value is matched by itself first (case-insensitively, within one class); a few
classes where any member is a plausible substitute are also matched by the argument's name
(`city`, `country`, `language`, `currency`). Units only by value, within one dimension, so a
length never becomes a weight. The replacement keeps the original's letter case.

Short codes are ambiguous across classes ("KO" is Korean and Coca-Cola's ticker, "DE"
German and Germany): a value of three characters or fewer is matched only when the
argument's name names its class (`lang`, `currency`, `unit`, ...), and never by the name
alone ("DE" under `country` could become "Germany", the same country). Classes of common
words ("requests", "express" are also packages) are matched only under such a name, whatever
the length. A replacement that contains the value or is contained in it ("Lakers" / "Los
Angeles Lakers", "Berlin" / "Berlin, Germany") may name the same thing and is not offered.
"""

from __future__ import annotations

import re
from functools import lru_cache

_CLASSES: dict[str, tuple[str, ...]] = {
    "city": ("Berlin", "Paris", "London", "Madrid", "Rome", "Tokyo", "New York",
             "San Francisco", "Los Angeles", "Chicago", "Boston", "Seattle", "Sydney",
             "Toronto", "Mumbai", "Beijing", "Shanghai", "Dubai", "Singapore", "Amsterdam",
             "Vienna", "Prague", "Lisbon", "Dublin", "Oslo", "Stockholm", "Cairo", "Lagos",
             "Nairobi", "Seoul", "Bangkok", "Mexico City", "Austin", "Denver", "Miami",
             "Houston", "Dallas", "Atlanta", "Munich", "Milan", "Barcelona", "Zurich"),
    "country": ("Germany", "France", "Spain", "Italy", "Japan", "China", "India", "Brazil",
                "Canada", "Mexico", "Australia", "United States", "United Kingdom", "USA",
                "UK", "Egypt", "Kenya", "Nigeria", "Sweden", "Norway", "Poland", "Portugal",
                "Netherlands", "Switzerland", "Austria", "South Korea", "Argentina"),
    "country_code": ("US", "DE", "FR", "GB", "JP", "CN", "IN", "BR", "CA", "AU", "IT", "ES",
                     "NL", "SE", "CH", "MX", "KR", "PL"),
    "language": ("English", "French", "German", "Spanish", "Italian", "Japanese",
                 "Chinese", "Portuguese", "Russian", "Arabic", "Hindi", "Korean", "Dutch"),
    "language_code": ("en", "fr", "de", "es", "it", "ja", "zh", "pt", "ru", "ar", "hi",
                      "ko", "nl", "en-US", "en-GB", "fr-FR", "de-DE", "es-ES"),
    "currency": ("USD", "EUR", "GBP", "JPY", "CNY", "INR", "CAD", "AUD", "CHF", "SEK",
                 "BRL", "MXN", "KRW"),
    "weekday": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
                "Sunday"),
    "month": ("January", "February", "March", "April", "May", "June", "July", "August",
              "September", "October", "November", "December"),
    "relative_day": ("today", "tomorrow", "yesterday"),
    "color": ("red", "green", "blue", "yellow", "black", "white", "orange", "purple"),
    "unit_length": ("mm", "cm", "m", "km", "in", "ft", "yd", "mi", "meters", "kilometers",
                    "miles", "feet", "inches", "centimeters"),
    "unit_mass": ("g", "kg", "mg", "lb", "lbs", "oz", "grams", "kilograms", "pounds",
                  "ounces"),
    "unit_temperature": ("celsius", "fahrenheit", "kelvin"),
    "unit_system": ("metric", "imperial"),
    "unit_time": ("seconds", "minutes", "hours", "days", "weeks", "months", "years"),
    "direction": ("north", "south", "east", "west"),
    "order": ("asc", "desc", "ascending", "descending"),
    "size": ("small", "medium", "large"),
    "level": ("low", "medium", "high"),
    "planet": ("Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus",
               "Neptune"),
    "airport_icao": ("KJFK", "KLAX", "KORD", "KSFO", "KATL", "KSEA", "KBOS", "EGLL", "EGKK",
                     "LFPG", "EDDF", "EDDM", "EHAM", "LEMD", "LEBL", "LIRF", "LSZH", "RJTT",
                     "RKSI", "OMDB", "WSSS", "VHHH", "ZBAA", "YSSY", "CYYZ", "SBGR"),
    "airport_iata": ("JFK", "LAX", "ORD", "SFO", "ATL", "SEA", "BOS", "LHR", "LGW", "CDG",
                     "FRA", "MUC", "AMS", "MAD", "BCN", "FCO", "ZRH", "HND", "NRT", "ICN",
                     "DXB", "SIN", "HKG", "PEK", "SYD", "YYZ", "GRU", "DEL", "BOM"),
    # nicknames that are also common words ("Heat", "Magic", "Jazz") are left out
    "basketball_team": ("Lakers", "Celtics", "Warriors", "Bulls", "Knicks", "Spurs",
                        "Mavericks", "Nuggets", "Bucks", "Raptors", "Clippers", "Rockets",
                        "Los Angeles Lakers", "Boston Celtics", "Golden State Warriors",
                        "Chicago Bulls", "New York Knicks", "San Antonio Spurs",
                        "Dallas Mavericks", "Denver Nuggets", "Milwaukee Bucks"),
    "drug": ("warfarin", "aspirin", "ibuprofen", "acetaminophen", "paracetamol", "metformin",
             "lisinopril", "atorvastatin", "simvastatin", "sertraline", "fluoxetine",
             "tramadol", "amoxicillin", "omeprazole", "prednisone", "insulin"),
    "software_package": ("numpy", "pandas", "requests", "scipy", "flask", "django",
                         "matplotlib", "pytest", "torch", "tensorflow", "react", "express",
                         "lodash", "axios"),
}
# Words in an argument's name that confirm a short code's class ("en" under `lang`).
_TOPICS: dict[str, tuple[str, ...]] = {
    "language_code": ("lang", "locale"), "currency": ("currency", "curr"),
    "unit_length": ("unit",), "unit_mass": ("unit",), "unit_time": ("unit",),
    "order": ("order", "sort", "direction"), "country": ("country",),
    "country_code": ("country", "region", "market"),
    "airport_iata": ("airport", "iata", "origin", "dest", "depart", "arriv"),
    "software_package": ("package", "pkg", "module", "librar", "dependenc", "name"),
}
# Classes whose members are also common words elsewhere ("requests", "express"): matched only
# when the argument's name names the class, whatever the value's length.
_KEYED_ONLY = frozenset({"software_package"})
SHORT_CODE = 3
_SEPARATORS = re.compile(r"[,\-_/]")
# Classes whose members may replace any value of an argument with that word in its name.
_BY_KEY = (("city", "city"), ("town", "city"), ("country", "country"),
           ("currency", "currency"), ("language", "language"), ("lang", "language"))
# A replacement must not be another spelling of the same thing.
_ALIASES = ({"ascending", "asc"}, {"descending", "desc"}, {"usa", "united states"},
            {"uk", "united kingdom", "great britain", "britain", "gb"},
            {"us", "united states of america", "america"} | {"usa", "united states"},
            {"m", "meters"}, {"km", "kilometers"},
            {"mi", "miles"}, {"ft", "feet"}, {"in", "inches"}, {"cm", "centimeters"},
            {"g", "grams"}, {"kg", "kilograms"}, {"lb", "lbs", "pounds"}, {"oz", "ounces"},
            {"acetaminophen", "paracetamol"})


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


@lru_cache(maxsize=1)
def _index() -> dict[str, tuple[str, ...]]:
    """Folded member -> the classes it belongs to (a member may sit in several)."""
    index: dict[str, tuple[str, ...]] = {}
    for name, members in _CLASSES.items():
        for member in members:
            index[_fold(member)] = index.get(_fold(member), ()) + (name,)
    return index


@lru_cache(maxsize=4096)
def alias_of(first: str, second: str) -> bool:
    """Whether two strings are spellings of one entity ("asc" / "ascending", "UK" /
    "United Kingdom"), by the alias table or equal when folded."""
    pair = {_fold(first), _fold(second)}
    return pair == {_fold(first)} or any(pair <= group for group in _ALIASES)


@lru_cache(maxsize=4096)
def overlaps(first: str, second: str) -> bool:
    """Whether one string's words run inside the other's ("Lakers" in "Los Angeles Lakers",
    "Paris" in "Paris, France"): the longer may name the same thing more fully."""
    a, b = (" " + " ".join(_SEPARATORS.sub(" ", _fold(x)).split()) + " " for x in (first, second))
    return a.strip() != "" and b.strip() != "" and (a in b or b in a)


def _short_ok(value: str, name: str, key: str) -> bool:
    """A short code (or a member of a class of common words) belongs to class `name` only
    when the argument's name says so."""
    if len(value.strip()) > SHORT_CODE and name not in _KEYED_ONLY:
        return True
    lower = key.lower()
    return any(topic in lower for topic in _TOPICS.get(name, ()))


def _in_case_of(template: str, word: str) -> str:
    if template.isupper() and len(template) > 1:
        return word.upper()
    if template.islower():
        return word.lower()
    if template[:1].isupper() and word.islower():
        return word.capitalize()
    return word


def siblings(value: str, key: str = "", limit: int = 4) -> list[str]:
    """Other entities of `value`'s kind, in a fixed order (the caller's RNG picks): members of
    the classes `value` belongs to, else of the class `key` names; [] when neither is known."""
    if not isinstance(value, str) or len(value) > 80 or not isinstance(key, str):
        return []
    return list(_siblings(value, key[:80], limit))


@lru_cache(maxsize=4096)
def _siblings(value: str, key: str, limit: int) -> tuple[str, ...]:
    folded = _fold(value)
    classes = tuple(name for name in _index().get(folded, ()) if _short_ok(value, name, key))
    if not classes and len(folded) > SHORT_CODE:
        lower = key.lower()
        classes = tuple(dict.fromkeys(cls for word, cls in _BY_KEY if word in lower))
    found: list[str] = []
    for name in classes:
        for member in _CLASSES[name]:
            if not alias_of(member, value) and not overlaps(member, value):
                found.append(_in_case_of(value, member))
    return tuple(dict.fromkeys(found))[:limit * 4]
