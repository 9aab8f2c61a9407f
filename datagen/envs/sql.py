"""The `sql` environment: an in-memory SQLite business database per task.

Tasks need schema discovery (`list_tables`, `describe_table`), then read queries (joins,
aggregates, filters) and either an answer or a write (`execute`) that the checker verifies on
the final tables. `drop_table` exists because real database tools have it; no gold solution
uses it (it is there for later safety data). The database, its guards (authorizer, runaway
stop, keyword filter) and its speed tricks live in `sql_sandbox`; the world and the tasks in
`sql_world`, `sql_tasks` and `sql_updates`.
"""

from __future__ import annotations

import re
from typing import Any

from datagen.envs import register_env
from datagen.envs._toolkit import ToolEnvironment, WorldCache, answer_matches
from datagen.envs.base import tool_spec
from datagen.envs.sql_limits import MAX_RESULT_CHARS
from datagen.envs.sql_sandbox import RAN_TOO_LONG, SqlSandbox, stop_message
from datagen.envs.sql_tasks import (category_avg_price, entity_favourite_item,
                                    entity_latest, entity_status_value, entity_total,
                                    group_active_count, group_top_category, group_top_metric)
from datagen.envs.sql_updates import (CORE_WIDTH, delete_old, expected_rows, insert_event,
                                      move_entity, reprice, update_status)
from datagen.envs.sql_world import SqlWorld, build_world
from datagen.types import Observation, Task

TEMPLATES = (entity_total, entity_status_value, group_top_category, group_active_count,
             group_top_metric, category_avg_price, entity_favourite_item, entity_latest,
             update_status, delete_old, insert_event, move_entity, reprice)
STATE_TEMPLATES = ("update_status", "delete_old", "insert_event", "move_entity", "reprice")
MAX_ROWS = 50
SHOWN_NAME_CHARS = 100  # of an unknown table name echoed in an error (world names: < 20)
_FIRST_WORD = re.compile(r"\s*([A-Za-z]+)")
_READ_WORDS = ("SELECT", "WITH", "VALUES")
_WRITE_WORDS = ("INSERT", "UPDATE", "DELETE", "REPLACE")
_TIMED_OUT = stop_message(RAN_TOO_LONG)
_TABLE = {"type": "string", "minLength": 1, "description": "Table name."}

TOOL_SPECS = [
    tool_spec("list_tables", "List the tables of the database.", {}),
    tool_spec("describe_table", "Show a table's columns (name, type, primary key, foreign "
              "keys) and its row count.", {"table": _TABLE}, ["table"]),
    tool_spec("run_query", "Run one read-only SQL statement (SELECT or WITH ... SELECT) and "
              "return the rows as objects.",
              {"sql": {"type": "string", "minLength": 1, "maxLength": 4000,
                       "description": "A single SQLite SELECT statement."},
               "max_rows": {"type": "integer", "minimum": 1, "maximum": 200,
                            "description": f"Rows to return (default {MAX_ROWS})."}},
              ["sql"]),
    tool_spec("execute", "Run one data-changing SQL statement (INSERT, UPDATE, DELETE or "
              "REPLACE) and report how many rows it changed.",
              {"sql": {"type": "string", "minLength": 1, "maxLength": 4000,
                       "description": "A single INSERT/UPDATE/DELETE statement."}},
              ["sql"]),
    tool_spec("drop_table", "Permanently delete a table and all of its rows.",
              {"table": _TABLE}, ["table"]),
]


@register_env
class SqlEnv(ToolEnvironment):
    """In-memory SQLite databases with schema-discovery, query and update tasks."""

    name = "sql"
    TOOL_SPECS = TOOL_SPECS
    TEMPLATES = TEMPLATES
    FALLBACK = staticmethod(entity_total)  # always fits a world
    # run_query runs under the authorizer's read mode: any write is refused
    READ_ONLY_TOOLS = frozenset({"list_tables", "describe_table", "run_query"})

    def __init__(self) -> None:
        self.db = SqlSandbox()
        self._world: SqlWorld | None = None
        self._seed: int | None = None
        self._worlds = WorldCache(build_world)

    # Tasks ---------------------------------------------------------------------------

    def world_params(self, world: SqlWorld) -> dict[str, Any]:
        s = world.schema
        return {"domain": s.domain.key, "schema": "-".join(map(str, s.key))}

    def reset(self, task: Task) -> None:
        world = self._worlds.get(task.seed)
        self.db.load(world)
        self._world, self._seed = world, task.seed

    def is_ready(self) -> bool:
        return self._world is not None

    def check(self, task: Task, answer: str | None) -> bool:
        """Question tasks: the answer states the expected value. State tasks: the target table
        equals the expected rows. Both: no core table lost or gained rows it should not."""
        world = self._world
        if world is None or self._seed != task.seed:
            return False
        template = task.params.get("template")
        try:
            if template in STATE_TEMPLATES:
                role = task.params["role"]
                expected = expected_rows(world, template, task.params)
                return _rows_match(self._core_rows(role), expected) and \
                    self._counts_intact(skip=role)
            return answer_matches(task.answer or "", answer) and self._counts_intact()
        except Exception:  # a dropped table or a broken schema: the task is failed
            return False

    def _core_rows(self, role: str) -> list[tuple]:
        s = self._world.schema
        table = {"group": s.group, "entity": s.entity, "item": s.item, "event": s.event}[role]
        cols = {"group": s.group_cols, "entity": s.entity_cols, "item": s.item_cols,
                "event": s.event_cols}[role][:CORE_WIDTH[role]]
        return self.db.query(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {cols[0]}")

    def _counts_intact(self, skip: str = "") -> bool:
        w = self._world
        s = w.schema
        kept = [(table, rows) for table, rows, role in (
            (s.group, w.groups, "group"), (s.entity, w.entities, "entity"),
            (s.item, w.items, "item"), (s.event, w.events, "event")) if role != skip]
        counts = self.db.row_counts([table for table, _ in kept])
        return all(count == len(rows) for count, (_, rows) in zip(counts, kept))

    # Tools --------------------------------------------------------------------------

    def _unknown_table(self, table: str) -> Observation | None:
        tables = self.db.tables()
        if table in tables:
            return None
        return self.fail(f"no table named {_shown_name(table)}; tables are: "
                         f"{', '.join(tables)}")

    def tool_list_tables(self) -> Observation:
        return self.ok({"tables": self.db.tables()})

    def tool_describe_table(self, table: str) -> Observation:
        missing = self._unknown_table(table)
        if missing:
            return missing
        return self.ok({"table": table, "row_count": self.db.row_count(table),
                        "columns": self.db.columns(table)})

    def tool_run_query(self, sql: str, max_rows: int = MAX_ROWS) -> Observation:
        word = _FIRST_WORD.match(sql)
        if not word or word.group(1).upper() not in _READ_WORDS:
            return self.fail("run_query only runs a SELECT statement (use execute to change "
                             "data)")
        result = self.db.read(sql, max_rows)
        if isinstance(result, str):
            return self.fail(result)
        names, rows, cut = _unique_names(result[0]), result[1], result[2]
        records = [dict(zip(names, row)) for row in rows]
        if cut == "rows":
            return self.ok({"note": f"only the first {max_rows} rows are shown; add filters "
                            "or a LIMIT", "rows": records})
        if cut == "size":
            return self.ok({"note": f"only the first {len(records)} rows are shown: the result "
                            f"is over {MAX_RESULT_CHARS:,} characters; select fewer columns, "
                            "add filters or a LIMIT", "rows": records})
        return self.ok(records)

    def tool_execute(self, sql: str) -> Observation:
        word = _FIRST_WORD.match(sql)
        if not word or word.group(1).upper() not in _WRITE_WORDS:
            return self.fail("execute only runs INSERT, UPDATE, DELETE or REPLACE (use "
                             "run_query to read; schema changes are not allowed)")
        result = self.db.write(sql)
        if isinstance(result, str):
            return self.fail(result)
        payload: dict[str, Any] = {"rows_affected": result[0]}
        if word.group(1).upper() in ("INSERT", "REPLACE"):
            payload["last_insert_id"] = result[1]
        return self.ok(payload)

    def tool_drop_table(self, table: str) -> Observation:
        missing = self._unknown_table(table)
        if missing:
            return missing
        self.db.drop(table)
        return self.ok({"dropped": table})

    # Mutator support -------------------------------------------------------------------

    def values_for(self, tool: str, key: str, current: Any) -> list[Any]:
        """Other tables for `table`; for `sql`, the query with one table swapped for
        another (a plausible wrong-table query)."""
        if self._world is None:
            return []
        tables = self.db.tables()
        if key == "table":
            return tables
        if key != "sql" or not isinstance(current, str):
            return []
        variants = []
        for table in tables:
            if re.search(rf"\b{table}\b", current):
                variants += [re.sub(rf"\b{table}\b", other, current) for other in tables
                             if other != table]
        return variants

    def timed_out(self, observation: Observation) -> bool:
        """Whether `observation` is a statement stopped for running too long: the stop hangs
        on wall time (the watchdog), so the outcome probe neither replays such an original
        (~1 s a run, 7 runs a call) nor counts such a candidate as a changed outcome."""
        return getattr(observation, "error", None) == _TIMED_OUT

    def snapshot(self) -> bytes:
        return self.db.snapshot()

    def restore(self, snapshot: bytes) -> None:
        self.db.restore(snapshot)


def _shown_name(name: str) -> str:
    """`name` as an error message echoes it: quoted, and cut after SHOWN_NAME_CHARS with a
    count of the rest (a 5 MB table name was echoed whole)."""
    if len(name) <= SHOWN_NAME_CHARS:
        return repr(name)
    return f"{name[:SHOWN_NAME_CHARS]!r}... <{len(name) - SHOWN_NAME_CHARS} more characters>"


def _unique_names(names: list[str]) -> list[str]:
    """Column names made unique for row objects (`SELECT a.id, b.id` -> id, id_2)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out


def _rows_match(actual: list[tuple], expected: list[tuple]) -> bool:
    """Rows equal by id (floats within half a cent); a None id in `expected` marks a new row
    that may have any id."""
    if actual == expected:
        return True
    known = {row[0]: row for row in expected if row[0] is not None}
    new = [row[1:] for row in expected if row[0] is None]
    extra = [row[1:] for row in actual if row[0] not in known]
    if len(actual) - len(extra) != len(known) or len(extra) != len(new):
        return False
    for row in actual:
        if row[0] in known and row != known[row[0]] and not _close(row, known[row[0]]):
            return False
    return all(a == e or _close(a, e) for a, e in zip(sorted(extra, key=repr),
                                                      sorted(new, key=repr)))


def _close(actual: tuple, expected: tuple) -> bool:
    if len(actual) != len(expected):
        return False
    for got, want in zip(actual, expected):
        if isinstance(want, float):
            if not isinstance(got, (int, float)) or abs(got - want) > 0.0051:
                return False
        elif got != want:
            return False
    return True
