"""The guarded SQLite behind the `sql` environment: connection pool, table refills, the
authorizer, a runaway-query stop, schema catalog, snapshots.

Safety: databases are `:memory:`; agent statements run under an authorizer that refuses
ATTACH/DETACH, PRAGMA (except read-only schema info), schema changes and file or extension
functions, and in read mode any write; a progress handler stops runaway queries. The caller
also filters statements by their first keyword, so read and write texts never share a
statement-cache entry that was authorized in the other mode.

Speed: CREATE TABLE costs ~50 us and a fresh database re-parses its schema on first use, so
there is one connection per schema variant (at most 192, ~0.2 MB each) whose tables are
emptied and refilled with `executemany` for every task.

SQLite 3.40 crashes when a table-valued function (pragma_table_info, json_each) that was
used before a `deserialize` is used again after it. Databases are therefore never
deserialized into a used connection: snapshots are restored through the backup API.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from datagen.envs.sql_world import DISTRACTORS, Schema, SqlWorld

_PROGRESS_STEP = 1000    # VM instructions between progress callbacks
_PROGRESS_LIMIT = 2000   # callbacks before a query is stopped (~2M instructions)
_NEVER = {sqlite3.SQLITE_ATTACH: "ATTACH", sqlite3.SQLITE_DETACH: "DETACH",
          sqlite3.SQLITE_PRAGMA: "PRAGMA"}
_INFO_PRAGMAS = ("table_info", "table_xinfo", "foreign_key_list", "index_list", "index_info",
                 "table_list")
_WRITES = (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE)
_READS = (sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION,
          getattr(sqlite3, "SQLITE_RECURSIVE", 33))
_BLOCKED_FUNCTIONS = ("load_extension", "readfile", "writefile", "edit", "fts3_tokenizer")
_REFILLS: dict[tuple[int, int, int], list[tuple[str, str, str]]] = {}


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
        self.ticks = 0
        self.conn = self._connect(())
        # Rows per table while the database holds exactly what `load` put in (cleared by any
        # agent write, a drop or a restore): describe_table and the checker ask for counts on
        # every task, and a COUNT(*) round trip costs ~15 us.
        self._loaded_counts: dict[str, int] | None = None

    def _connect(self, ddl: tuple[str, ...]) -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False,
                               cached_statements=64)
        for statement in ddl:
            conn.execute(statement)
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
        return self.ticks > _PROGRESS_LIMIT

    def _error(self, exc: Exception) -> str:
        if self.denied:
            return f"statement refused: {self.denied}"
        if self.ticks > _PROGRESS_LIMIT:
            return "query stopped: it ran too long (add filters or a LIMIT)"
        return f"SQL error: {exc}"

    def read(self, sql: str, max_rows: int) -> tuple[list[str], list[tuple]] | str:
        """Column names and up to `max_rows + 1` rows of an agent query, or an error."""
        self.mode, self.denied, self.ticks = "read", None, 0
        cursor = None
        try:
            cursor = self.conn.execute(sql)
            rows = cursor.fetchmany(max_rows + 1)
            return [column[0] for column in cursor.description or ()], rows
        except (sqlite3.Error, sqlite3.Warning) as exc:
            return self._error(exc)
        finally:
            self.mode = "admin"
            if cursor is not None:
                cursor.close()

    def write(self, sql: str) -> tuple[int, int | None] | str:
        """(rows changed, last insert rowid) of an agent statement, or an error."""
        self.mode, self.denied, self.ticks = "write", None, 0
        self._loaded_counts = None
        try:
            cursor = self.conn.execute(sql)
            result = cursor.rowcount, cursor.lastrowid
            cursor.close()
            return result
        except (sqlite3.Error, sqlite3.Warning) as exc:
            return self._error(exc)
        finally:
            self.mode = "admin"

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
        """Copy an image back page by page through a throwaway connection (backup API)."""
        self.mode = "admin"
        source = sqlite3.connect(":memory:")
        try:
            source.deserialize(image)
            source.backup(self.conn)
        finally:
            source.close()
            self._loaded_counts = None
            self._forget_tables()

    def _forget_tables(self) -> None:
        catalog = self._catalogs.get(self.conn)
        if catalog is not None:
            catalog["tables"] = None
