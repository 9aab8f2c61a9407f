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
- `printf_too_wide`: printf()/format() with a width or precision over MAX_VALUE_BYTES is
  refused (SQLite writes `%.*c` repeats before checking its length limit, inside one VM
  instruction: `printf('%.*c', 2147483647, 'x')` ran 8.9 s where no progress handler could
  stop it);
- `collect_rows`: results are fetched row by row and cut at `max_rows` rows or
  MAX_RESULT_CHARS characters, blobs shown as `<blob N bytes>`, long texts shortened.
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
from typing import Any, Callable, Protocol

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

_PRINTF_SPEC = re.compile(r"%%|%[-+ 0#!,]*(\d+|\*)?(?:\.(\*|\d*))?")
_LEADING_INT = re.compile(r"\s*[-+]?\d{1,19}")


def printf_too_wide(fmt: Any, args: tuple) -> bool:
    """Does a printf()/format() call ask for a width or precision over MAX_VALUE_BYTES?
    Each conversion takes its `*` arguments, then one value, as in SQLite."""
    if not isinstance(fmt, str):
        return False
    index = 0
    for spec in _PRINTF_SPEC.finditer(fmt):
        if spec.group(0) == "%%":
            continue
        for part in spec.groups():
            if part == "*":
                value = _as_int(args[index]) if index < len(args) else 0
                index += 1
            elif part:
                value = int(part) if len(part) <= 9 else MAX_VALUE_BYTES + 1
            else:
                continue
            if abs(value) > MAX_VALUE_BYTES:
                return True
        index += 1
    return False


def _as_int(value: Any) -> int:
    """The integer SQLite reads from a printf argument (text: its leading digits)."""
    if isinstance(value, bool) or value is None or isinstance(value, bytes):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value == value and abs(value) < 9.3e18 else 2**63 - 1
    match = _LEADING_INT.match(str(value))
    return int(match.group()) if match else 0


# Results ----------------------------------------------------------------------------------------

def shown_value(value: Any) -> Any:
    """A result value as an observation shows it: blobs as `<blob N bytes>` (raw bytes are
    not JSON), texts over MAX_SHOWN_TEXT characters shortened with a count of the rest."""
    if isinstance(value, bytes):
        return f"<blob {len(value)} bytes>"
    if isinstance(value, str) and len(value) > MAX_SHOWN_TEXT:
        return f"{value[:MAX_SHOWN_TEXT]}... <{len(value) - MAX_SHOWN_TEXT} more characters>"
    return value


def collect_rows(cursor: sqlite3.Cursor, names: list[str], max_rows: int
                 ) -> tuple[list[tuple], str | None]:
    """Rows fetched one by one, as shown, and why the result was cut: None (complete),
    "rows" (more than `max_rows`) or "size" (over MAX_RESULT_CHARS; the first row is always
    kept). Nothing beyond the cut is fetched, so a huge result costs no memory."""
    per_row = sum(len(name) + 4 for name in names)
    rows: list[tuple] = []
    size = 0
    fetch = cursor.fetchone
    while (row := fetch()) is not None:
        if len(rows) == max_rows:
            return rows, "rows"
        row_size = per_row
        for value in row:
            if type(value) is str and len(value) <= MAX_SHOWN_TEXT:
                row_size += len(value)
            elif type(value) is str or type(value) is bytes:
                row = tuple(map(shown_value, row))  # rare: shape the row, count it as shown
                row_size = per_row + sum(len(v) if type(v) is str else 8 for v in row)
                break
            else:
                row_size += 8
        size += row_size
        if rows and size > MAX_RESULT_CHARS:
            return rows, "size"
        rows.append(row)
    return rows, None
