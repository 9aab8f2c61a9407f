"""The guarded SQLite behind the `sql` environment: connection pool, table refills, the
authorizer, a runaway-query stop, schema catalog, snapshots.

Safety: databases are `:memory:`; agent statements run under an authorizer that refuses
ATTACH/DETACH, PRAGMA (except read-only schema info), schema changes and file or extension
functions, and in read mode any write; a progress handler stops statements that run too long
or take too much memory, and results are fetched row by row within a size budget (limits and
measurements in `sql_limits`). The caller also filters statements by their first keyword, so
read and write texts never share a statement-cache entry that was authorized in the other
mode.

Speed: CREATE TABLE costs ~50 us and a fresh database re-parses its schema on first use, so
there is one connection per schema variant (at most 192, ~0.2 MB each) whose tables are
emptied and refilled with `executemany` for every task.

SQLite 3.40 crashes when a table-valued function (pragma_table_info, json_each) that was
used before a `deserialize` is used again after it (`test_sql.py` segfaults when `restore`
deserializes into the agent's connection). Databases are therefore never deserialized into a
used connection: a scratch connection that runs no statement holds the image, and snapshots
are copied back from it through the backup API.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

from datagen.envs.sql_limits import (MAX_DB_PAGES, MAX_STATEMENT_HEAP, MAX_STATEMENT_SECONDS,
                                     MAX_VALUE_BYTES, RECYCLE_PAGES, WATCHDOG, apply_limits,
                                     collect_rows, heap_meter, printf_arguments)
from datagen.envs.sql_world import DISTRACTORS, Schema, SqlWorld

_PROGRESS_STEP = 1000    # VM instructions between progress callbacks
_PROGRESS_LIMIT = 2000   # callbacks before a query is stopped (~2M instructions)
_PAGE_BYTES = 4096       # SQLite's default page size (compile option DEFAULT_PAGE_SIZE)
_NEVER = {sqlite3.SQLITE_ATTACH: "ATTACH", sqlite3.SQLITE_DETACH: "DETACH",
          sqlite3.SQLITE_PRAGMA: "PRAGMA"}
_INFO_PRAGMAS = ("table_info", "table_xinfo", "foreign_key_list", "index_list", "index_info",
                 "table_list")
_WRITES = (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE)
_READS = (sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION,
          getattr(sqlite3, "SQLITE_RECURSIVE", 33))
_BLOCKED_FUNCTIONS = ("load_extension", "readfile", "writefile", "edit", "fts3_tokenizer")
_REFILLS: dict[tuple[int, int, int], list[tuple[str, str, str]]] = {}
RAN_TOO_LONG = "it ran too long"  # the watchdog's and the instruction budget's stop reason


def stop_message(reason: str) -> str:
    """The error of a statement the guards stopped (`SqlEnv.timed_out` recognises it)."""
    return f"query stopped: {reason} (add filters or a LIMIT)"


def _insert_sql(table: str, core: tuple[str, ...], extras: tuple[tuple[str, str, str], ...]
                ) -> str:
    """INSERT of the core columns; optional columns come from SQL expressions of ?1/?2."""
    columns = ", ".join(core + tuple(name for name, _, _ in extras))
    values = ", ".join([f"?{i + 1}" for i in range(len(core))] + [e for _, _, e in extras])
    return f"INSERT INTO {table} ({columns}) VALUES ({values})"


def refill_statements(s: Schema) -> list[tuple[str, str, str]]:
    """(table, DELETE, INSERT) that refill the tables of a schema, in SqlWorld row order."""
    statements = _REFILLS.get(s.key)
    if statements is None:
        pairs = [(s.group, _insert_sql(s.group, s.group_cols, ())),
                 (s.entity, _insert_sql(s.entity, s.entity_cols, s.entity_extras)),
                 (s.item, _insert_sql(s.item, s.item_cols, s.item_extras)),
                 (s.event, _insert_sql(s.event, s.event_cols, s.event_extras))]
        if s.distractor >= 0:
            table, columns = DISTRACTORS[s.distractor]
            marks = ", ".join("?" * (columns.count(",") + 1))
            pairs.append((table, f"INSERT INTO {table} VALUES ({marks})"))
        statements = _REFILLS[s.key] = [(t, f"DELETE FROM {t}", insert) for t, insert in pairs]
    return statements


class SqlSandbox:
    """The current database of an SqlEnv and everything that guards it."""

    def __init__(self) -> None:
        self._pool: dict[tuple[int, int, int], sqlite3.Connection] = {}
        self._catalogs: dict[sqlite3.Connection, dict[str, Any]] = {}
        self._retired: sqlite3.Connection | None = None
        self.mode = "admin"  # admin (internal) | read (run_query) | write (execute)
        self.denied: str | None = None
        self.stopped: str | None = None  # why the progress handler ended the statement
        self.ticks = 0
        # (connection, deadline) of the agent statement running now; the watchdog thread
        # reads it under the lock, so it never interrupts a statement that already ended
        self._running: tuple[sqlite3.Connection, float] | None = None
        self._running_lock = threading.Lock()
        self._heap_start = 0
        self._heap = heap_meter()
        # formats printf()/format() calls that passed `printf_arguments` (the agent's own
        # connections have both names replaced by the guarded `_printf`)
        self._printer = sqlite3.connect(":memory:", check_same_thread=False)
        apply_limits(self._printer)
        self.conn = self._connect(())
        # holds the last restored image (`restore`); it only deserializes and backs up
        self._scratch = sqlite3.connect(":memory:", check_same_thread=False)
        self._scratch_image: bytes | None = None
        WATCHDOG.watch(self)
        # Rows per table while the database holds exactly what `load` put in (cleared by any
        # agent write, a drop or a restore): describe_table and the checker ask for counts on
        # every task, and a COUNT(*) round trip costs ~15 us.
        self._loaded_counts: dict[str, int] | None = None

    def _connect(self, ddl: tuple[str, ...]) -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False,
                               cached_statements=64)
        for statement in ddl:
            conn.execute(statement)
        apply_limits(conn)
        for name in ("printf", "format"):
            conn.create_function(name, -1, self._printf, deterministic=True)
        conn.set_authorizer(self._authorize)
        conn.set_progress_handler(self._on_progress, _PROGRESS_STEP)
        return conn

    def load(self, world: SqlWorld) -> None:
        """Make the current database hold exactly `world`'s rows."""
        s, self.mode = world.schema, "admin"
        conn = self._pool.get(s.key)
        if conn is None:
            conn = self._pool[s.key] = self._connect(s.ddl)
        if self._retired is not None:
            self._catalogs.pop(self._retired, None)
            self._retired.close()
            self._retired = None
        self.conn = conn
        rows = (world.groups, world.entities,
                [(r[0], r[1], r[2], r[3] / 100) for r in world.items], world.events,
                world.distractor_rows)
        self._loaded_counts = None
        counts = {}
        conn.execute("BEGIN")  # one transaction: autocommit per row costs 3x
        for (table, delete, insert), table_rows in zip(refill_statements(s), rows):
            conn.execute(delete)
            conn.executemany(insert, table_rows)
            counts[table] = len(table_rows)
        conn.execute("COMMIT")
        self._loaded_counts = counts

    # Guards ---------------------------------------------------------------------------

    def _authorize(self, action: int, arg1: Any, arg2: Any, db: Any, source: Any) -> int:
        mode = self.mode
        if mode == "admin" or action in _READS and not (
                action == sqlite3.SQLITE_FUNCTION and arg2 in _BLOCKED_FUNCTIONS):
            return sqlite3.SQLITE_OK
        if action in _WRITES and mode == "write" and not str(arg1).startswith("sqlite_"):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and mode == "read":
            # asked while preparing an eponymous table (json_each ...); a real write to
            # sqlite_master needs PRAGMA writable_schema, which is refused
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and arg1 in _INFO_PRAGMAS:
            return sqlite3.SQLITE_OK  # read-only schema info, e.g. pragma_table_info('t')
        if action in _NEVER:
            self.denied = f"{_NEVER[action]} is not allowed"
        elif action == sqlite3.SQLITE_FUNCTION:
            self.denied = f"the function {arg2}() is not allowed"
        elif action in _WRITES:
            self.denied = "run_query is read-only; use execute for INSERT/UPDATE/DELETE"
        else:
            self.denied = "schema changes and other statements are not allowed"
        return sqlite3.SQLITE_DENY

    def _on_progress(self) -> int:
        if self.mode == "admin":
            return 0
        self.ticks += 1
        if self.ticks > _PROGRESS_LIMIT:
            self.stopped = RAN_TOO_LONG
        elif self._heap is not None and self._heap() - self._heap_start > MAX_STATEMENT_HEAP:
            self.stopped = f"it needed more than {MAX_STATEMENT_HEAP >> 20} MB of memory"
        return self.stopped is not None

    def interrupt_if_late(self, now: float) -> None:
        """Called by the watchdog thread: stop the running statement past its deadline."""
        with self._running_lock:
            if self._running is not None and now > self._running[1]:
                self.stopped = RAN_TOO_LONG
                self._running[0].interrupt()

    def _printf(self, fmt: Any, *args: Any) -> Any:
        checked = printf_arguments(fmt, args)
        if checked is None:
            self.denied = f"printf()/format() width or precision over {MAX_VALUE_BYTES:,}"
            raise ValueError(self.denied)
        marks = ", ".join("?" * (len(checked) + 1))
        return self._printer.execute(f"SELECT printf({marks})", (fmt, *checked)).fetchone()[0]

    def _begin(self, mode: str) -> None:
        """Guards on for one agent statement: its mode, instruction, time and memory budgets."""
        self.mode, self.denied, self.stopped, self.ticks = mode, None, None, 0
        self._heap_start = self._heap() if self._heap is not None else 0
        self._running = (self.conn, time.monotonic() + MAX_STATEMENT_SECONDS)

    def _end(self) -> None:
        with self._running_lock:
            self._running = None
        self.mode = "admin"

    def _error(self, exc: BaseException) -> str:
        if self.denied:
            return f"statement refused: {self.denied}"
        if self.stopped:
            return stop_message(self.stopped)
        if isinstance(exc, MemoryError):  # SQLITE_NOMEM under the process-wide heap limit
            return "query stopped: SQLite ran out of memory (add filters or a LIMIT)"
        text = str(exc)
        if "too big" in text:
            return (f"SQL error: {text}: a single value or row may hold at most "
                    f"{MAX_VALUE_BYTES:,} bytes here")
        if "full" in text:
            return (f"SQL error: {text}: this database may grow to at most "
                    f"{MAX_DB_PAGES * 4} KB; the statement was rolled back")
        return f"SQL error: {text}"

    def read(self, sql: str, max_rows: int) -> tuple[list[str], list[tuple], str | None] | str:
        """Column names, up to `max_rows` rows as shown to the agent, and why the result was
        cut (None, "rows" or "size"; see `collect_rows`) -- or an error."""
        self._begin("read")
        cursor = None
        try:
            cursor = self.conn.execute(sql)
            names = [column[0] for column in cursor.description or ()]
            return (names, *collect_rows(cursor, names, max_rows))
        except (sqlite3.Error, sqlite3.Warning, MemoryError, OverflowError) as exc:
            return self._error(exc)
        finally:
            if cursor is not None:
                cursor.close()
            self._end()

    def write(self, sql: str) -> tuple[int, int | None] | str:
        """(rows changed, last insert rowid) of an agent statement, or an error."""
        self._begin("write")
        self._loaded_counts = None
        try:
            cursor = self.conn.execute(sql)
            result = cursor.rowcount, cursor.lastrowid
            cursor.close()
            return result
        except (sqlite3.Error, sqlite3.Warning, MemoryError, OverflowError) as exc:
            return self._error(exc)
        finally:
            self._end()
            self._recycle_if_grown()

    def _recycle_if_grown(self) -> None:
        """Retire a connection whose database writes grew past RECYCLE_PAGES: its pages stay
        allocated after the next refill. Pages are SQLite heap, so a statement that grew the
        heap by less than that cannot have grown the database (and costs no PRAGMA)."""
        if self._heap is not None and \
                self._heap() - self._heap_start < RECYCLE_PAGES * _PAGE_BYTES:
            return
        if self.query("PRAGMA page_count")[0][0] > RECYCLE_PAGES:
            self._retire_current()

    def query(self, sql: str) -> list[tuple]:
        """An internal query (no guards): checks and descriptions."""
        self.mode = "admin"
        return self.conn.execute(sql).fetchall()

    # Catalog ----------------------------------------------------------------------------

    def _catalog(self) -> dict[str, Any]:
        """Table names and column descriptions of the current connection, cached because
        PRAGMA statements are re-prepared on every call. Only drop_table and restore change a
        schema; they reset the table list (a table's columns never change)."""
        catalog = self._catalogs.get(self.conn)
        if catalog is None:
            catalog = self._catalogs[self.conn] = {"tables": None, "columns": {}}
        if catalog["tables"] is None:
            catalog["tables"] = [row[0] for row in self.query(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                "'sqlite_%' ORDER BY name")]
        return catalog

    def tables(self) -> list[str]:
        return self._catalog()["tables"]

    def columns(self, table: str) -> list[dict[str, Any]]:
        """Name, type, key and foreign-key facts of an existing table's columns."""
        by_table = self._catalog()["columns"]
        columns = by_table.get(table)
        if columns is None:
            quoted = table.replace('"', '""')
            references = {row[3]: f"{row[2]}.{row[4]}"
                          for row in self.query(f'PRAGMA foreign_key_list("{quoted}")')}
            columns = by_table[table] = []
            for _, name, kind, notnull, _, pk in self.query(f'PRAGMA table_info("{quoted}")'):
                column: dict[str, Any] = {"name": name, "type": kind}
                if pk:
                    column["primary_key"] = True
                if notnull:
                    column["not_null"] = True
                if name in references:
                    column["references"] = references[name]
                columns.append(column)
        return columns

    def row_count(self, table: str) -> int:
        counts = self._loaded_counts
        if counts is not None and table in counts:
            return counts[table]
        return self.query('SELECT COUNT(*) FROM "{}"'.format(table.replace('"', '""')))[0][0]

    def row_counts(self, tables: list[str]) -> list[int]:
        """Rows of each of `tables` (one statement when they are not known from `load`)."""
        counts = self._loaded_counts
        if counts is not None and all(table in counts for table in tables):
            return [counts[table] for table in tables]
        return list(self.query("SELECT " + ", ".join(
            '(SELECT COUNT(*) FROM "{}")'.format(table.replace('"', '""'))
            for table in tables))[0])

    def drop(self, table: str) -> None:
        """Drop a table; its connection leaves the pool (the next task gets a fresh one)."""
        self.query('DROP TABLE "{}"'.format(table.replace('"', '""')))
        self._loaded_counts = None
        self._forget_tables()
        self._retire_current()

    def _retire_current(self) -> None:
        """Take the current connection out of the pool; `load` closes it and the next task
        of its schema gets a fresh one."""
        for key, conn in self._pool.items():
            if conn is self.conn:
                del self._pool[key]
                self._retired = conn
                break

    # Snapshots --------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The database image (`serialize`: plain bytes, picklable)."""
        self.mode = "admin"
        return self.conn.serialize()

    def restore(self, image: bytes) -> None:
        """Copy an image back page by page from the scratch connection (backup API). The
        scratch keeps the last image: an outcome probe restores one snapshot before every
        candidate, so most restores are one backup, without a new connection (which cost
        ~4% of the demo pipeline) or a deserialize."""
        self.mode = "admin"
        try:
            if self._scratch_image is not image:  # bytes are immutable: same object, same image
                self._scratch_image = None
                self._scratch.deserialize(image)
                self._scratch_image = image if isinstance(image, bytes) else None
            self._scratch.backup(self.conn)
        finally:
            self._loaded_counts = None
            self._forget_tables()

    def _forget_tables(self) -> None:
        catalog = self._catalogs.get(self.conn)
        if catalog is not None:
            catalog["tables"] = None
