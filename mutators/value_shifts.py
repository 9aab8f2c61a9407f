"""Small, certain changes of one value, in the value's own format: a date a day later
(in whatever format it is written), the last number inside an id one higher, a number a
step away, a name cut short. Each returns None when the value does not take that change.
Pure functions of the value; `logical_error.py` decides where to apply them.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from datetime import date, timedelta

from mutators.jsonvalues import digits_to_int

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_MONTH_NAME = r"(?P<mon>[A-Za-z]{3,9})\.?"
# Whole-value date formats; the named groups are read, shifted and written back in place.
_DATE_FORMATS = (
    re.compile(r"^(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})(?=$|[T ])"),   # ISO, date-time
    re.compile(r"^(?P<y>\d{4})/(?P<m>\d{1,2})/(?P<d>\d{1,2})$"),
    re.compile(r"^(?P<y>\d{4})\.(?P<m>\d{1,2})\.(?P<d>\d{1,2})$"),
    re.compile(r"^(?P<m>\d{1,2})/(?P<d>\d{1,2})/(?P<y>\d{4})$"),           # US 03/15/2024
    re.compile(r"^(?P<d>\d{1,2})\.(?P<m>\d{1,2})\.(?P<y>\d{4})$"),         # 15.03.2024
    re.compile(r"^(?P<d>\d{1,2})-(?P<m>\d{1,2})-(?P<y>\d{4})$"),
    re.compile(r"^(?P<y>(?:19|20)\d{2})(?P<m>\d{2})(?P<d>\d{2})$"),       # compact 20240131
    re.compile(rf"^{_MONTH_NAME} (?P<d>\d{{1,2}})(?:st|nd|rd|th)?,? (?P<y>\d{{4}})$"),
    re.compile(rf"^(?P<d>\d{{1,2}})(?:st|nd|rd|th)? {_MONTH_NAME},? (?P<y>\d{{4}})$"),
)
_DIGITS = re.compile(r"\d+")
_NAME_SUFFIXES = {"inc", "inc.", "ltd", "ltd.", "corp", "corp.", "co", "co.", "llc", "plc",
                  "gmbh", "ag", "sa", "company", "corporation", "limited", "group"}


def _month_number(name: str) -> int | None:
    lower = name.lower()
    return next((i + 1 for i, month in enumerate(_MONTHS)
                 if month == lower or (len(lower) >= 3 and month.startswith(lower))), None)


def _month_like(template: str, month: int) -> str:
    """Month `month` written like `template` ("Mar", "March", "MARCH", "mar")."""
    name = _MONTHS[month - 1]
    name = name[:len(template)] if len(template) <= 4 and len(template) < len(name) else name
    if template.isupper():
        return name.upper()
    return name.capitalize() if template[:1].isupper() else name


def _pad_like(template: str, number: int, padded: bool = True) -> str:
    """`number` as wide as `template` when the format pads (numeric dates do, "March 5"
    does not, unless written "March 05")."""
    width = len(template) if padded or template.startswith("0") else 1
    return str(number).zfill(width)


_DATE_HINT = re.compile(r"\d{4}")  # every format above has a four-digit year


def shift_date(text: str, days: int) -> str | None:
    """`text` with its date moved by `days`, written in the same format ("2024-03-15",
    "03/15/2024", "15.03.2024", "March 15, 2024", "15 Mar 2024", a date-time's date part);
    None when `text` is not such a date."""
    if len(text) > 64 or not _DATE_HINT.search(text):
        return None
    return _shift_date(text, days)


@lru_cache(maxsize=4096)
def _shift_date(text: str, days: int) -> str | None:
    for pattern in _DATE_FORMATS:
        match = pattern.match(text)
        if match is None:
            continue
        parts = match.groupdict()
        month = _month_number(parts["mon"]) if "mon" in parts else int(parts["m"])
        if month is None:
            return None
        try:
            moved = date(int(parts["y"]), month, int(parts["d"])) + timedelta(days=days)
        except (ValueError, OverflowError):
            return None
        named = "mon" in parts
        new = {"y": _pad_like(parts["y"], moved.year),
               "d": _pad_like(parts["d"], moved.day, padded=not named)}
        if named:
            new["mon"] = _month_like(parts["mon"], moved.month)
        else:
            new["m"] = _pad_like(parts["m"], moved.month)
        return _replace_groups(text, match, new)
    return None


def _replace_groups(text: str, match: re.Match, new: dict[str, str]) -> str:
    pieces, last = [], 0
    for name in sorted(new, key=match.start):
        pieces += [text[last:match.start(name)], new[name]]
        last = match.end(name)
    return "".join(pieces) + text[last:]


def _fine_fraction(text: str, run: re.Match) -> bool:
    """A run of 3+ digits after "<digit>.": the fine decimals of a measurement
    ("40.714224"), where +-1 is a change nobody would notice."""
    start = run.start()
    return (len(run.group()) >= 3 and start >= 2 and text[start - 1] == "."
            and text[start - 2].isdigit())


def shift_digits(text: str, delta: int) -> str | None:
    """The last run of digits in `text` moved by `delta`, zero-padding kept (`C-1009` ->
    `C-1010`, `T-007` -> `T-006`); the fine decimals of a measurement are skipped
    ("40.714224,-73.961452" -> "40.714224,-74.961452"). None without digits or below zero."""
    return _shift_digits(text, delta) if len(text) <= 200 else _read_shift_digits(text, delta)


def _read_shift_digits(text: str, delta: int) -> str | None:
    runs = [run for run in _DIGITS.finditer(text) if not _fine_fraction(text, run)]
    if not runs:
        return None
    last = runs[-1]
    number = digits_to_int(last.group())
    if number is None or number + delta < 0:
        return None
    digits = str(number + delta).zfill(len(last.group()))
    return text[: last.start()] + digits + text[last.end():]


def number_steps(value: int | float, integer: bool) -> list[int | float]:
    """Nearby different numbers, most natural first: +-1, then (for non-integers, or when
    +-1 leaves the bounds) about +-10% rounded to the value's own precision."""
    if integer:
        steps: list[int | float] = [value + 1, value - 1]
        return steps + [value + 10, value - 10] if abs(value) >= 20 else steps
    decimals = _decimals(value)
    scale = abs(value) * 0.1 if value else 0.1
    relative = []
    # 10% of a subnormal (5e-324) underflows to 0, whose log10 raises: only +-1 for those
    deltas = (scale, -scale) if scale > 0 and math.isfinite(scale) else ()
    for delta in deltas:
        shifted = round(value + delta, max(decimals, 1 - math.floor(math.log10(scale))))
        if shifted != value and math.isfinite(shifted):
            relative.append(shifted)
    # +-1 written at the value's own precision (2.2945 - 1 is 1.2945, not 1.2945000000000002);
    # for a small value (a probability, 8.854e-12) a step of 1 is no plausible slip: +-10% first.
    units = [round(value + 1, decimals), round(value - 1, decimals)]
    return relative + units if abs(value) < 2 else units + relative


def _decimals(value: float) -> int:
    text = repr(float(value))
    return 0 if "e" in text or "." not in text else len(text.split(".")[1].rstrip("0"))


def truncate_name(text: str) -> str | None:
    """A multi-word name or phrase cut to its first half ("San Francisco, CA" -> "San";
    "best pizza in Rome" -> "best pizza"). None when the cut would keep the meaning: the
    first comma part is one word (dropping ", CA" names the same place), or only a company
    suffix would go ("Tesla Inc" -> "Tesla"), or what is left holds a number ("5 kg",
    "10:00 AM" -> "10:00" may say the same)."""
    head = text.split(",", 1)[0]
    words = head.split()
    if len(words) < 2:
        return None
    kept = words[: max(1, len(words) // 2)]
    dropped = words[len(kept):]
    if all(word.lower().strip(".,") in _NAME_SUFFIXES for word in dropped):
        return None
    shorter = " ".join(kept)
    if _DIGITS.search(shorter) or shorter == text.strip():
        return None  # "10:00 AM" -> "10:00", "5 kg" -> "5": a quantity, not a name cut short
    return shorter


_URL_OR_PATH = re.compile(r"^(?:[a-z][a-z0-9+.\-]*://[^/\s]+)?(?:/?[^/\s]+)(?:/[^/\s]+)+/?$",
                          re.IGNORECASE)
# Only what is surely a location: a URL, an absolute or home- or dot-relative path, or a
# relative path ending in a file name ("src/main.py"). Not a unit ("g/cm3", "km/h"), a ratio
# or a date ("11/06/1990"), whose "parent" would be another kind of value.
_SURE_LOCATION = re.compile(r"^(?:[a-z][a-z0-9+.\-]*://|/|~/|\.{1,2}/)|/[^/\s]*[A-Za-z_][^/\s]*"
                            r"\.[A-Za-z][A-Za-z0-9]{0,7}$", re.IGNORECASE)


def parent_path(text: str) -> str | None:
    """A file path or URL without its last segment ("/etc/hosts" -> "/etc",
    "https://x.org/a/b" -> "https://x.org/a"): another resource. None when `text` is not
    path-like or has no segment to spare."""
    if len(text) > 2000 or not _URL_OR_PATH.match(text) or not _SURE_LOCATION.search(text):
        return None
    trimmed = text.rstrip("/")
    head, _, last = trimmed.rpartition("/")
    if not head or not last or head.endswith(":/") or head.endswith(":") or head in ("", "."):
        return None
    return head


_shift_digits = lru_cache(maxsize=4096)(_read_shift_digits)
