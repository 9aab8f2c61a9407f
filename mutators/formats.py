"""Checkers for the `format` keyword (date, date-time, time, email, uri, uuid, ipv4, ipv6,
hostname). Unknown formats are annotations and pass, as JSON Schema says.

The checks are a little more lenient than RFC 3339 where teacher models are routinely lenient
and the meaning is still unambiguous: a date-time may omit seconds or the UTC offset and may
use a space instead of `T`. A wrong calendar date (2024-02-30) or a malformed email is still
an error.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import date
from typing import Callable

# ASCII digits only: Python's \d also takes "２０２４" (fullwidth), which int() then reads
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIME = re.compile(r"(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:?\d{2})?", re.ASCII)
_DATETIME = re.compile(_DATE.pattern + r"[Tt ]" + _TIME.pattern, re.ASCII)
# Argument values have no length limit, so these are only ever `fullmatch`ed, which is linear
# for each of them (1 MB of near-misses: ~0.1 s for _EMAIL, less for the others);
# `search`/`finditer` would try every start and be quadratic for _EMAIL and _URI. _HOSTNAME's
# lookahead fails a value over 254 characters after reading at most that many.
_EMAIL = re.compile(r"[^@\s]+@[^@\s.]+(?:\.[^@\s.]+)+")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}(?:-?[0-9a-fA-F]{4}){3}-?[0-9a-fA-F]{12}")
_HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")


def _valid_date(year: str, month: str, day: str) -> bool:
    try:
        date(int(year), int(month), int(day))
    except ValueError:
        return False
    return True


def _valid_time(hour: str, minute: str, second: str | None) -> bool:
    return int(hour) < 24 and int(minute) < 60 and (second is None or int(second) <= 60)


def is_date(text: str) -> bool:
    match = _DATE.fullmatch(text)
    return bool(match) and _valid_date(*match.groups())


def is_time(text: str) -> bool:
    match = _TIME.fullmatch(text)
    return bool(match) and _valid_time(*match.groups())


def is_date_time(text: str) -> bool:
    match = _DATETIME.fullmatch(text)
    if not match:
        return False
    year, month, day, hour, minute, second = match.groups()
    return _valid_date(year, month, day) and _valid_time(hour, minute, second)


def _is_ip(version: int) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        try:
            return ipaddress.ip_address(text).version == version
        except ValueError:
            return False
    return check


def _matches(pattern: re.Pattern) -> Callable[[str], bool]:
    return lambda text: pattern.fullmatch(text) is not None


FORMAT_CHECKERS: dict[str, Callable[[str], bool]] = {
    "date": is_date,
    "time": is_time,
    "date-time": is_date_time,
    "datetime": is_date_time,
    "email": _matches(_EMAIL),
    "idn-email": _matches(_EMAIL),
    "uri": _matches(_URI),
    "url": _matches(_URI),
    "iri": _matches(_URI),
    "uuid": _matches(_UUID),
    "ipv4": _is_ip(4),
    "ipv6": _is_ip(6),
    "hostname": _matches(_HOSTNAME),
}

# A valid sample per format, for mutators that must invent a value.
FORMAT_SAMPLES: dict[str, str] = {
    "date": "2024-03-15", "time": "09:30:00", "date-time": "2024-03-15T09:30:00Z",
    "datetime": "2024-03-15T09:30:00Z", "email": "alex.morgan@example.com",
    "idn-email": "alex.morgan@example.com", "uri": "https://example.com/items/1",
    "url": "https://example.com/items/1", "iri": "https://example.com/items/1",
    "uuid": "123e4567-e89b-42d3-a456-426614174000", "ipv4": "10.0.0.1", "ipv6": "::1",
    "hostname": "example.com",
}

# What a value of each format looks like, for error messages an agent can act on.
FORMAT_HINTS: dict[str, str] = {
    "date": "YYYY-MM-DD", "time": "HH:MM:SS", "date-time": "YYYY-MM-DDTHH:MM:SS",
    "datetime": "YYYY-MM-DDTHH:MM:SS", "email": "name@example.com",
    "idn-email": "name@example.com", "uri": "scheme:rest, e.g. https://example.com",
    "url": "e.g. https://example.com", "iri": "scheme:rest, e.g. https://example.com",
    "uuid": "8-4-4-4-12 hex digits", "ipv4": "four numbers 0-255, e.g. 10.0.0.1",
    "ipv6": "e.g. 2001:db8::1", "hostname": "e.g. example.com",
}


def canonical_date_time(text: str) -> str:
    """A date-time this module accepts, written the RFC 3339 way: `T` between date and time,
    seconds present (`2024-01-01 10:00` -> `2024-01-01T10:00:00`), so that code downstream
    that slices or compares strings sees one spelling. Other text is returned unchanged."""
    match = _DATETIME.fullmatch(text)
    if not match:
        return text
    offset = text[match.end(5):]  # past HH:MM: [:SS[.frac]][offset]
    if match.group(6) is None:
        offset = ":00" + offset
    return f"{text[:10]}T{text[11:match.end(5)]}{offset}".replace("z", "Z")
