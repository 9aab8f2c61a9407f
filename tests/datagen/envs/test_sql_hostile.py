"""Hostile SQL the review of 2026-12 found past the `sql` environment's limits: printf()
widths that SQLite reads differently from the guard, results whose observation outgrew
MAX_RESULT_CHARS, and error messages that echoed a huge argument."""

import sqlite3
import time

import orjson
import pytest

from datagen.envs.sql import SqlEnv
from datagen.envs import sql_limits
from datagen.envs.sql_limits import MAX_RESULT_CHARS, MAX_VALUE_BYTES


@pytest.fixture(scope="module")
def env():
    env = SqlEnv()
    env.reset(env.generate_task(3, "t"))
    return env


def run(env, sql):
    started = time.monotonic()
    obs = env.step({"name": "run_query", "arguments": {"sql": sql}})
    return obs, time.monotonic() - started


# printf: the width checked is the width used ---------------------------------------------------

@pytest.mark.parametrize("sql", [
    # SQLite reads a BLOB `*` argument as text; the guard read it as 0 (20 s at 2147483647)
    "SELECT printf('%.*c', CAST('20000000' AS BLOB), 'x')",
    "SELECT printf('%*d', x'3230303030303030', 1)",
    "SELECT printf('%.*c', CAST(' 0000000000000000000020000000' AS BLOB), 'x')",
    # %n and a width on %% take no argument, which shifted the guard's count by one
    "SELECT printf('%n%.*c', 20000000, 'x')",
    "SELECT printf('%*%%.*c', 1, 20000000, 'x')",
    # a BLOB format is formatted as text too; the guard skipped any format but a text
    "SELECT printf(CAST('%.*c' AS BLOB), 20000000, 'x')",
])
def test_printf_widths_sqlite_reads_from_any_argument_are_refused(env, sql):
    # HEAD: accepted and formatted for ~0.2 s per 20M characters (then "string or blob too big")
    obs, seconds = run(env, sql)
    assert obs.error and "width or precision" in obs.error, obs.content[:200]
    assert seconds < 1.0  # refused before formatting (milliseconds; 1 s: a loaded CI host)


def test_printf_star_arguments_reach_the_printer_as_the_checked_integers():
    printf_arguments = sql_limits.printf_arguments
    assert printf_arguments("%.*c|%s", (b"12abc", "x", b"7")) == (12, "x", b"7")
    assert printf_arguments("%n%*d", (" -5", 3)) == (-5, 3)
    assert printf_arguments("%.*c", (b"%d" % (MAX_VALUE_BYTES + 1), "x")) is None


def test_small_blob_and_text_widths_format_as_sqlite_formats_them(env):
    sql = ("SELECT printf('%.*c|%*d|%-*s|', CAST('3' AS BLOB), 'x', ' 4z', 7, "
           "x'2032', 'a') AS v")
    obs, _ = run(env, sql)
    native = sqlite3.connect(":memory:").execute(sql).fetchone()[0]
    assert orjson.loads(obs.content) == [{"v": native}] and native == "xxx|   7|a |"


# Result budget: JSON characters, escapes counted, the first row fitted ---------------------------

WIDE = ",".join(["v"] * 100)
CONTROL = "replace(hex(zeroblob({})), '0', char(1))"  # each character renders as \\u0001


@pytest.mark.parametrize("sql", [
    # one row of 100 texts of 1,000 control characters (HEAD: a 600,993-character observation)
    f"WITH t(v) AS (SELECT {CONTROL.format(500)}) SELECT {WIDE} FROM t",
    f"WITH t(v) AS (SELECT {CONTROL.format(500)}) SELECT {WIDE} FROM t, "
    "(SELECT 1 UNION ALL SELECT 2)",
    # 200 rows of 100 texts of 8 control characters (HEAD: counted as 8 each, not 48)
    f"WITH t(v) AS (SELECT {CONTROL.format(4)}) SELECT {WIDE} FROM t, (WITH RECURSIVE "
    "c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 200) SELECT x FROM c)",
])
def test_a_result_stays_within_its_json_budget(env, sql):
    obs, _ = run(env, sql)
    payload = orjson.loads(obs.content)  # whole JSON: nothing was cut by the backstop
    rows = payload["rows"] if isinstance(payload, dict) else payload
    assert len(obs.content) < MAX_RESULT_CHARS + 1_000 and rows


def test_an_oversized_first_row_shows_each_value_shortened_with_a_count():
    obs, _ = run(make_env(), f"WITH t(v) AS (SELECT {CONTROL.format(500)}) SELECT {WIDE} FROM t")
    [row] = orjson.loads(obs.content)
    assert len(row) == 100
    for value in row.values():
        shown, _, rest = value.partition("... <")
        assert set(shown) == {"\x01"} and rest == f"{1000 - len(shown)} more characters>"


def make_env():
    env = SqlEnv()
    env.reset(env.generate_task(3, "t"))
    return env


# Echoed names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("tool", ["describe_table", "drop_table"])
def test_an_unknown_table_name_is_echoed_shortened(env, tool):
    obs = env.step({"name": tool, "arguments": {"table": "x" * 5_000_000}})
    assert obs.error and "no table named 'xxx" in obs.error
    assert "... <4999900 more characters>" in obs.error and len(obs.error) < 1_000
    short = env.step({"name": tool, "arguments": {"table": "clients2"}})
    assert short.error.startswith("no table named 'clients2'; tables are: ")


def test_a_fitted_text_over_the_shown_length_counts_all_it_left_out(env):
    obs, _ = run(env, f"WITH t(v) AS (SELECT {CONTROL.format(2500)}) SELECT {WIDE} FROM t")
    [row] = orjson.loads(obs.content)
    shown, _, rest = row["v"].partition("... <")
    assert rest == f"{5000 - len(shown)} more characters>" and len(obs.content) < MAX_RESULT_CHARS


def test_the_guard_reads_widths_from_the_arguments_sqlite_reads_them_from():
    """Differential against SQLite on random formats: an argument the guard does not take as a
    `*` width must not be one for SQLite (made 30 larger, the output would grow by ~30)."""
    import random
    printf_arguments = sql_limits.printf_arguments
    native = sqlite3.connect(":memory:")
    rng = random.Random(0)
    pieces = list("%%%%***..l-0 ,5cdn%x")
    for _ in range(2_000):
        fmt = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        args = [str(rng.randint(1, 4)) for _ in range(6)]
        checked = printf_arguments(fmt, tuple(args))
        base = native.execute("SELECT printf(?, ?, ?, ?, ?, ?, ?)", (fmt, *args)).fetchone()[0]
        for position, value in enumerate(checked):
            if isinstance(value, int):
                continue  # taken as a width: the guard checked it
            bigger = list(args)
            bigger[position] = str(int(value) + 30)
            grown = native.execute("SELECT printf(?, ?, ?, ?, ?, ?, ?)", (fmt, *bigger)
                                   ).fetchone()[0]
            assert abs(len(grown or "") - len(base or "")) < 10, (fmt, position)
