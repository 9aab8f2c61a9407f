"""Resource limits on the agent's SQL statements, and how query results are cut to size.

Before these limits (issue 12) `SELECT zeroblob(100000000)` came back as a 500 MB observation
after 13.7 s at 1.07 GB RSS, `zeroblob(999999999)` under a memory limit crashed the process
inside `orjson.dumps`, and 200 rows of `hex(zeroblob(4e6))` reached 4.6 GB RSS. A world
database holds at most 7 pages (28 KB; seeds 0-2999) and gold results a few hundred bytes,
so each limit below sits one to three orders of magnitude above what any task needs.

Where each is enforced:
- SQLite's own limits (`Connection.setlimit`): no string, blob or stored row over
  MAX_VALUE_BYTES, at most MAX_COLUMNS columns, short LIKE/GLOB patterns;
- `PRAGMA max_page_count`: writes cannot grow the database past MAX_DB_PAGES;
- `PRAGMA temp_store = MEMORY`: sorts and temporary b-trees never touch the host disk;
- the progress handler (every 1,000 VM instructions): at most ~2M instructions and
  MAX_STATEMENT_HEAP bytes of SQLite heap growth per statement (`sqlite3_memory_used`, read
  through ctypes from the library Python's sqlite3 module runs on; where that library cannot
  be reached, a process-wide `PRAGMA hard_heap_limit` of FALLBACK_HEAP_LIMIT is the backstop);
- the `Watchdog` thread: MAX_STATEMENT_SECONDS of wall time per statement. The progress
  handler cannot be the clock: one row of `instr()` over two long texts takes 0.1 s in one
  VM instruction, so 1,000 instructions can take minutes;
- `printf_arguments`: printf()/format() with a width or precision over MAX_VALUE_BYTES is
  refused (SQLite writes `%.*c` repeats before checking its length limit, inside one VM
  instruction: `printf('%.*c', 2147483647, 'x')` ran 8.9 s where no progress handler could
  stop it), and the `*` values it checked are the ones formatted;
- `collect_rows`: results are fetched row by row and cut at `max_rows` rows or
  MAX_RESULT_CHARS characters of JSON, blobs shown as `<blob N bytes>`, long texts shortened
  (and the texts of a first row that alone is over MAX_RESULT_CHARS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import sqlite3
import threading
import time
import weakref
from typing import Any, Callable, Iterator, Protocol

import orjson

MAX_VALUE_BYTES = 100_000      # SQLITE_LIMIT_LENGTH: one string, blob or stored row
MAX_COLUMNS = 100              # SQLITE_LIMIT_COLUMN (widest world table: 12 columns)
MAX_LIKE_PATTERN = 1_000       # SQLITE_LIMIT_LIKE_PATTERN_LENGTH
MAX_SQL_CHARS = 20_000         # SQLITE_LIMIT_SQL_LENGTH (agent SQL is capped at 4,000 by schema)
MAX_DB_PAGES = 256             # 1 MB per database; the largest world uses 7 pages
RECYCLE_PAGES = 32             # a pooled database grown past this by writes is replaced
MAX_STATEMENT_SECONDS = 1.0    # gold statements take microseconds to a few milliseconds
MAX_STATEMENT_HEAP = 64 << 20  # SQLite heap growth allowed to one statement
FALLBACK_HEAP_LIMIT = 1 << 30  # process-wide SQLite heap cap when the meter is unavailable
MAX_RESULT_CHARS = 16_000      # rows of one observation (~4k tokens)
MAX_SHOWN_TEXT = 1_000         # characters of one text value in an observation

_LIMITS = ((sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES),
           (sqlite3.SQLITE_LIMIT_COLUMN, MAX_COLUMNS),
           (sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_LIKE_PATTERN),
           (sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_CHARS))


def apply_limits(conn: sqlite3.Connection) -> None:
    """SQLite's own limits, the page cap and in-memory temporary storage on `conn` (run after
    the DDL: the column limit would refuse nothing there, but keep the order obvious)."""
    for limit, value in _LIMITS:
        conn.setlimit(limit, value)
    conn.execute(f"PRAGMA max_page_count = {MAX_DB_PAGES}")
    conn.execute("PRAGMA temp_store = MEMORY")


# The clock -----------------------------------------------------------------------------------------

class Interruptible(Protocol):
    def interrupt_if_late(self, now: float) -> None: ...


class Watchdog:
    """One daemon thread per process that wakes every PERIOD seconds and asks each watched
    sandbox to interrupt its statement if it is past its deadline (`sqlite3_interrupt` is
    the one thread-safe way into a running statement; Python's sqlite3 releases the GIL
    while SQLite runs). Restarted after a fork, which keeps only the calling thread."""

    PERIOD = 0.05

    def __init__(self) -> None:
        self._watched: weakref.WeakSet = weakref.WeakSet()
        self._lock = threading.Lock()
        self._pid: int | None = None

    def watch(self, sandbox: Interruptible) -> None:
        with self._lock:
            self._watched.add(sandbox)
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="sql-watchdog", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(self.PERIOD)
            now = time.monotonic()
            for sandbox in list(self._watched):
                sandbox.interrupt_if_late(now)


WATCHDOG = Watchdog()


# The heap meter -------------------------------------------------------------------------------

_UNPROBED: Any = object()
_meter: Callable[[], int] | None = _UNPROBED


def heap_meter() -> Callable[[], int] | None:
    """`sqlite3_memory_used` of the SQLite library that Python's sqlite3 module uses, or None
    (probed once per process; a statically linked sqlite3 module hides its library, and a
    second copy loaded by ctypes would count nothing). With None, the process-wide hard heap
    limit is set instead."""
    global _meter
    if _meter is _UNPROBED:
        _meter = _probe_meter()
        if _meter is None:
            _set_hard_heap_limit()
    return _meter


def _probe_meter() -> Callable[[], int] | None:
    for name in ("libsqlite3.so.0", "libsqlite3.dylib", ctypes.util.find_library("sqlite3")):
        if not name:
            continue
        try:
            used = ctypes.CDLL(name).sqlite3_memory_used
        except (OSError, AttributeError):
            continue
        used.restype, used.argtypes = ctypes.c_int64, []
        if _counts_python_sqlite(used):
            return used
    return None


def _counts_python_sqlite(used: Callable[[], int]) -> bool:
    """Does `used` see memory that Python's sqlite3 module allocates? (the same library)"""
    probe = sqlite3.connect(":memory:")
    try:
        before = used()
        cursor = probe.execute("SELECT randomblob(1000000)")  # the row stays in the statement
        grew = used() - before
        cursor.close()
        return grew >= 900_000
    finally:
        probe.close()


def _set_hard_heap_limit() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        current = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
        if current == 0 or current > FALLBACK_HEAP_LIMIT:
            conn.execute(f"PRAGMA hard_heap_limit = {FALLBACK_HEAP_LIMIT}")
    finally:
        conn.close()


# printf ----------------------------------------------------------------------------------------

_FLAGS = "-+ #!0,"
_LEADING_INT = re.compile(r"[ \t\n\v\f\r]*([-+]?)0*(\d{1,19})")
# conversions that take one value argument in SQL printf(); %% and %n take none, and any
# other character ends the formatting (SQLite 3.40 printf.c, `bArgList` branches)
_TAKES_VALUE = frozenset("dsgzqQwcouxXfeEGipr")
_TAKES_NOTHING = frozenset("%n")


def printf_arguments(fmt: Any, args: tuple) -> tuple | None:
    """`args` with each `*` width or precision replaced by the integer SQLite reads from it,
    or None when a width or precision is over MAX_VALUE_BYTES. The printer is given these
    integers, so the value checked is the value used (a BLOB `*` argument was read as 0 here
    and as its text by SQLite: `CAST('2147483647' AS BLOB)` ran 19.7 s inside one VM
    instruction). Arguments are taken conversion by conversion as SQLite's parser does."""
    if isinstance(fmt, bytes):
        fmt = fmt.decode("latin-1")  # SQLite formats with a BLOB format read as text
    if not isinstance(fmt, str):
        return tuple(args)  # NULL or a number: no `%` to format
    used = list(args)
    index = 0
    for stars, width, precision, conversion in _conversions(fmt):
        for _ in range(stars):
            value = _as_int(args[index]) if index < len(args) else 0
            if abs(value) > MAX_VALUE_BYTES:
                return None
            if index < len(args):
                used[index] = value
            index += 1
        if max(width, precision) > MAX_VALUE_BYTES:
            return None
        if conversion not in _TAKES_VALUE:
            if conversion not in _TAKES_NOTHING:
                break  # SQLite stops formatting here
            continue
        index += 1
    return tuple(used)


def _conversions(fmt: str) -> Iterator[tuple[int, int, int, str]]:
    """(`*` arguments, digit width, digit precision, conversion character) per `%` spec,
    following SQLite 3.40's flag loop: flags, then a width (digits or `*`), then `.` and a
    precision, then `l`/`ll`; anything else ends the spec as its conversion character."""
    position = fmt.find("%")
    while position >= 0:
        stars, width, precision, position = 0, 0, 0, position + 1
        while position < len(fmt) and fmt[position] in _FLAGS:
            position += 1
        if fmt[position:position + 1] == "*":
            stars, position = 1, position + 1
        else:
            width, position = _digits(fmt, position)
        if fmt[position:position + 1] == ".":
            if fmt[position + 1:position + 2] == "*":
                stars, position = stars + 1, position + 2
            else:
                precision, position = _digits(fmt, position + 1)
        if fmt[position:position + 1] == "l":
            position += 2 if fmt[position + 1:position + 2] == "l" else 1
        conversion = fmt[position:position + 1]
        yield stars, width, precision, conversion
        if conversion == "":
            return
        position = fmt.find("%", position + 1)


def _digits(fmt: str, position: int) -> tuple[int, int]:
    """The number written at `position` (over MAX_VALUE_BYTES when it has over 9 digits:
    int() of a 5,000-digit string is refused by Python) and the position after it."""
    end = position
    while end < len(fmt) and fmt[end].isascii() and fmt[end].isdigit():
        end += 1
    if end == position:
        return 0, position
    return (int(fmt[position:end]) if end - position <= 9 else MAX_VALUE_BYTES + 1), end


def _as_int(value: Any) -> int:
    """The integer SQLite reads from a printf argument (`sqlite3_value_int64`): a text or a
    BLOB by its leading integer (a BLOB is read as text), a real truncated."""
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value == value and abs(value) < 9.3e18 else 2**63 - 1
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    match = _LEADING_INT.match(text)
    if match is None:
        return 0
    number = int(match.group(2))
    return -number if match.group(1) == "-" else number


# Results ----------------------------------------------------------------------------------------

def shown_value(value: Any) -> Any:
    """A result value as an observation shows it: blobs as `<blob N bytes>` (raw bytes are
    not JSON), texts over MAX_SHOWN_TEXT characters shortened with a count of the rest."""
    if isinstance(value, bytes):
        return f"<blob {len(value)} bytes>"
    if isinstance(value, str) and len(value) > MAX_SHOWN_TEXT:
        return _cut(value, MAX_SHOWN_TEXT)
    return value


def _cut(text: str, keep: int) -> str:
    return f"{text[:keep]}... <{len(text) - keep} more characters>"


def collect_rows(cursor: sqlite3.Cursor, names: list[str], max_rows: int
                 ) -> tuple[list[tuple], str | None]:
    """Rows fetched one by one, as shown, and why the result was cut: None (complete),
    "rows" (more than `max_rows`) or "size" (over MAX_RESULT_CHARS as JSON, escapes counted:
    a control character is 6). A first row over the budget has its texts shortened to fit
    rather than kept whole (100 columns of 1,000 `char(1)` were a 600,993-character
    observation). Nothing beyond the cut is fetched, so a huge result costs no memory."""
    per_row = sum(len(orjson.dumps(name)) + 1 for name in names) + 1  # `"name":` and `,`
    rows: list[tuple] = []
    size = 0
    fetch = cursor.fetchone
    while (fetched := fetch()) is not None:
        if len(rows) == max_rows:
            return rows, "rows"
        row = _shown_row(fetched)
        row_size = per_row + len(orjson.dumps(row))  # `[...]` is as long as `{...}` less names
        if row_size > MAX_RESULT_CHARS and not rows:
            row = _fitted_row(fetched, MAX_RESULT_CHARS - per_row)
            row_size = per_row + len(orjson.dumps(row))
        size += row_size
        if rows and size > MAX_RESULT_CHARS:
            return rows, "size"
        rows.append(row)
    return rows, None


def _shown_row(row: tuple) -> tuple:
    for value in row:
        if type(value) is bytes or type(value) is str and len(value) > MAX_SHOWN_TEXT:
            return tuple(map(shown_value, row))  # rare: shape the row
    return row


def _fitted_row(row: tuple, budget: int) -> tuple:
    """`row` as shown, each text over an equal share of `budget` (JSON characters) cut from
    its full value (so the count of the rest is right for a text over MAX_SHOWN_TEXT too)."""
    texts = {i for i, value in enumerate(row) if type(value) is str}
    fitted = [None if i in texts else shown_value(value) for i, value in enumerate(row)]
    share = max(0, budget - len(orjson.dumps(fitted))) // max(1, len(texts))
    for i in texts:
        shown = shown_value(row[i])
        fitted[i] = shown if len(orjson.dumps(shown)) <= share else _cut_rendered(row[i], share)
    return tuple(fitted)


def _cut_rendered(text: str, share: int) -> str:
    """`text` cut so that its JSON form, with the count of what was cut, is about `share`
    characters (escapes make a prefix of k characters render longer than k)."""
    room = max(0, share - len(_cut(text, 0)) - 2)
    keep = min(len(text), room, MAX_SHOWN_TEXT)
    while keep > 0 and (rendered := len(orjson.dumps(text[:keep])) - 2) > room:
        keep = keep * room // rendered
    return _cut(text, keep)
