"""The `sql` environment's resource limits (issue 12, item 8): values, results, statement time,
statement memory and writes are bounded; gold solutions stay far inside every limit."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from datagen.envs.sql import SqlEnv
from datagen.envs.sql_limits import (MAX_RESULT_CHARS, MAX_SHOWN_TEXT, MAX_VALUE_BYTES,
                                     RECYCLE_PAGES, heap_meter, printf_arguments)

ROOT = Path(__file__).resolve().parents[3]
ROWS_200 = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 200) "


@pytest.fixture()
def env() -> SqlEnv:
    env = SqlEnv()
    env.reset(env.generate_task(1, "t"))
    return env


def timed(env: SqlEnv, sql: str, tool: str = "run_query", **extra):
    start = time.perf_counter()
    obs = env.step({"name": tool, "arguments": {"sql": sql, **extra}})
    return obs, time.perf_counter() - start


def test_a_huge_value_is_refused_instead_of_returned(env):
    # before: a 50 MB observation (500 MB for zeroblob(100000000))
    obs, seconds = timed(env, "SELECT zeroblob(10000000)")
    assert obs.error and f"{MAX_VALUE_BYTES:,} bytes" in obs.error, obs.content[:200]
    assert len(obs.content) < 500 and seconds < 1


def test_big_results_are_cut_by_size_with_a_note(env):
    # 200 rows of 80 KB text: 16 MB before; now the rows that fit 16,000 characters
    obs, _ = timed(env, ROWS_200 + "SELECT x, hex(zeroblob(40000)) AS h FROM c", max_rows=200)
    payload = orjson.loads(obs.content)
    assert obs.error is None and "result is over 16,000 characters" in payload["note"]
    assert 1 <= len(payload["rows"]) < 200 and len(obs.content) < 2 * MAX_RESULT_CHARS
    assert payload["rows"][0]["h"].endswith(f"<{80000 - MAX_SHOWN_TEXT} more characters>")


def test_blobs_are_placeholders_and_small_results_are_untouched(env):
    obs, _ = timed(env, "SELECT randomblob(50) AS b, 'x' AS t, 2.5 AS f, NULL AS n")
    assert orjson.loads(obs.content) == [{"b": "<blob 50 bytes>", "t": "x", "f": 2.5,
                                          "n": None}]


@pytest.mark.parametrize("sql", ["SELECT printf('%.*c', 2147483647, 'x')",
                                 "SELECT length(format('%!.2147483647c', 'x'))",
                                 "SELECT printf('%d %.*c', 1, 2000000000, 'y')"])
def test_printf_repeats_that_no_progress_handler_can_stop_are_refused(env, sql):
    # before: 8.9 s inside one VM instruction
    obs, seconds = timed(env, sql)
    assert obs.error and "width or precision" in obs.error and seconds < 0.5


def test_printf_still_formats():
    args = (3.14159, 42, "ab", 5, "x")
    assert printf_arguments("%.2f|%5d|%-3s|%%.*c|%.*c", args) == args
    assert printf_arguments("%s %.*c", ("a", 100_001, "x")) is None
    env = SqlEnv()
    env.reset(env.generate_task(1, "t"))
    obs, _ = timed(env, "SELECT printf('%.2f', 3.14159) AS a, format('%5d|%.*c', 42, 3, 'x') "
                        "AS b")
    assert orjson.loads(obs.content) == [{"a": "3.14", "b": "   42|xxx"}]


def test_statement_memory_is_bounded(env):
    # an unlimited sort holds every row: 100,000 x 80 KB before the limit
    obs, seconds = timed(env, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                              "LIMIT 100000) SELECT x, hex(zeroblob(40000)) FROM c ORDER BY x "
                              "DESC")
    assert obs.error and ("64 MB of memory" in obs.error or "ran too long" in obs.error)
    assert seconds < 3
    assert heap_meter() is not None  # this platform's sqlite3 module links libsqlite3


def test_writes_are_bounded_rolled_back_and_the_connection_recycled(env):
    table = env.db.tables()[0]
    before = env.db.row_count(table)
    obs, seconds = timed(env, f"INSERT INTO {table} (name) WITH RECURSIVE c(x) AS (SELECT 1 "
                              "UNION ALL SELECT x + 1 FROM c LIMIT 1000000) SELECT "
                              "hex(randomblob(16)) FROM c", "execute")
    assert obs.error and "database or disk is full" in obs.error and seconds < 2
    assert env.db.row_count(table) == before  # the statement was rolled back
    obs, _ = timed(env, f"UPDATE {table} SET name = hex(zeroblob(20000))", "execute")
    assert obs.error is None
    env.reset(env.generate_task(1, "t"))  # the grown database is not reused
    assert env.db.query("PRAGMA page_count")[0][0] <= RECYCLE_PAGES
    assert env.db.row_count(table) == before


def test_gold_solutions_stay_far_inside_every_limit():
    env = SqlEnv()
    for seed in range(300):
        task = env.generate_task(seed, "t")
        env.reset(task)
        for gold in task.gold:
            start = time.perf_counter()
            obs = env.step(gold.call.as_dict())
            assert time.perf_counter() - start < 0.2
            assert obs.error is None and len(obs.content) < MAX_RESULT_CHARS // 8
            assert "<blob" not in obs.content and '"note"' not in obs.content
        assert env.check(task, task.answer)


def test_without_the_heap_meter_a_process_wide_heap_limit_is_the_backstop():
    # run apart: the hard heap limit can only be lowered, and applies to the whole process
    code = ("import datagen.envs.sql_limits as limits, sqlite3\n"
            "limits._probe_meter = lambda: None\n"
            "assert limits.heap_meter() is None\n"
            "conn = sqlite3.connect(':memory:')\n"
            "print(conn.execute('PRAGMA hard_heap_limit').fetchone()[0])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == 1 << 30


def test_one_slow_function_per_row_is_stopped_by_the_watchdog(env):
    # 0.1 s per row inside one VM instruction: no progress callback in 1,000 instructions,
    # so only sqlite3_interrupt from the watchdog thread stops it (before: ~3 hours)
    sql = ("SELECT sum(instr(hex(zeroblob(49999 - x % 2)), substr(hex(zeroblob(25000)), 1, "
           "49999 - x % 2) || '1')) FROM (" + ROWS_200.replace("200", "100000") +
           "SELECT x FROM c)")
    obs, seconds = timed(env, sql)
    assert obs.error and "ran too long" in obs.error and seconds < 2.5
    assert timed(env, "SELECT 1 AS one")[0].content == '[{"one":1}]'
