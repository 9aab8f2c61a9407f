"""The `sql` environment: schema variety, safety guards, checker strictness, alternatives."""

from __future__ import annotations

import orjson
import pytest

from datagen.envs.sql import STATE_TEMPLATES, SqlEnv


@pytest.fixture(scope="module")
def env() -> SqlEnv:
    return SqlEnv()


def task_of(env: SqlEnv, template: str, start: int = 0):
    for seed in range(start, start + 2000):
        task = env.generate_task(seed, f"sql-{seed}")
        if task.params["template"] == template:
            return task
    raise AssertionError(f"no {template} task")


def run(env: SqlEnv, sql: str, tool: str = "run_query"):
    return env.step({"name": tool, "arguments": {"sql": sql}})


def test_schemas_vary_between_tasks(env):
    schemas, table_sets = set(), set()
    for seed in range(200):
        task = env.generate_task(seed, "t")
        env.reset(task)
        schemas.add(task.params["schema"])
        table_sets.add(tuple(orjson.loads(env.step({"name": "list_tables",
                                                    "arguments": {}}).content)["tables"]))
    assert len(schemas) >= 60 and len(table_sets) >= 30


def test_gold_answer_appears_in_the_last_observation(env):
    for seed in range(150):
        task = env.generate_task(seed, "t")
        if task.params["template"] in STATE_TEMPLATES:
            continue
        env.reset(task)
        obs = [env.step(g.call.as_dict()) for g in task.gold][-1]
        row = orjson.loads(obs.content)[0]
        assert any(str(value) == task.answer or isinstance(value, float)
                   and abs(value - float(task.answer)) < 0.0051 for value in row.values()), \
            (task.instruction, row, task.answer)


def test_perturbed_answers_fail(env):
    for seed in range(120):
        task = env.generate_task(seed, "t")
        if task.params["template"] in STATE_TEMPLATES:
            continue
        env.reset(task)
        for gold in task.gold:
            env.step(gold.call.as_dict())
        assert env.check(task, f"The answer is {task.answer}.")
        assert not env.check(task, None) and not env.check(task, "")
        try:
            wrong = str(float(task.answer) + 1)
        except ValueError:
            wrong = task.answer + "x"
        assert not env.check(task, wrong), (task.answer, wrong)


@pytest.mark.parametrize("template", STATE_TEMPLATES)
def test_skipping_the_write_or_writing_too_much_fails(env, template):
    task = task_of(env, template)
    env.reset(task)
    for gold in task.gold[:-1]:
        env.step(gold.call.as_dict())
    assert not env.check(task, task.answer)
    env.step(task.gold[-1].call.as_dict())
    assert env.check(task, task.answer)
    env.step(task.gold[-1].call.as_dict())  # twice: an insert duplicates, a reprice compounds
    if template in ("insert_event", "reprice"):
        assert not env.check(task, task.answer)


def test_collateral_damage_fails_the_check(env):
    task = task_of(env, "update_status")
    env.reset(task)
    for gold in task.gold:
        env.step(gold.call.as_dict())
    table = task.gold[1].call.arguments["table"]  # the entity table
    assert env.check(task, task.answer)
    assert run(env, f"DELETE FROM {table} WHERE 1 = 1", "execute").error is None
    assert not env.check(task, task.answer)


@pytest.mark.parametrize("sql, word", [
    ("DELETE FROM x", "only runs a SELECT"),
    ("WITH d AS (SELECT 1) DELETE FROM {event}", "read-only"),
    ("ATTACH DATABASE '/tmp/evil.db' AS evil", "only runs a SELECT"),
    ("SELECT load_extension('/tmp/x.so')", "not allowed"),
    ("PRAGMA writable_schema = 1", "only runs a SELECT"),
    ("VACUUM INTO '/tmp/copy.db'", "only runs a SELECT"),
    ("SELECT 1; DROP TABLE {event}", "SQL error"),
    ("SELEC nonsense", "only runs a SELECT"),
    ("SELECT * FROM no_such_table", "no such table"),
])
def test_run_query_refuses_writes_and_file_access(env, sql, word):
    task = task_of(env, "update_status")
    env.reset(task)
    event = task.gold[2].call.arguments["table"]
    obs = run(env, sql.format(event=event))
    assert obs.error and word in obs.content, obs.content
    assert env.step(task.gold[0].call.as_dict()).error is None  # still usable


@pytest.mark.parametrize("sql", [
    "ATTACH DATABASE '/tmp/evil.db' AS evil", "CREATE TABLE t (x)", "DROP TABLE {event}",
    "PRAGMA journal_mode = WAL", "INSERT INTO {event} SELECT * FROM pragma_table_info('x')",
    "UPDATE sqlite_master SET sql = ''", "SELECT 1",
])
def test_execute_refuses_everything_but_data_changes(env, sql):
    task = task_of(env, "update_status")
    env.reset(task)
    event = task.gold[2].call.arguments["table"]
    obs = run(env, sql.format(event=event), "execute")
    assert obs.error, sql


def test_runaway_queries_are_stopped(env):
    env.reset(env.generate_task(1, "t"))
    obs = run(env, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                   "SELECT COUNT(*) FROM c")
    assert obs.error and "too long" in obs.content
    assert run(env, "SELECT 1 AS one").content == '[{"one":1}]'


def test_row_cap_and_duplicate_column_names(env):
    env.reset(env.generate_task(1, "t"))
    obs = orjson.loads(run(env, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
                                "FROM c LIMIT 80) SELECT x, x FROM c").content)
    assert "only the first 50 rows" in obs["note"] and len(obs["rows"]) == 50
    assert obs["rows"][0] == {"x": 1, "x_2": 1}


def test_table_valued_pragma_then_reset_does_not_crash(env):
    # SQLite 3.40 crashes when pragma_table_info is used across a deserialize; the env never
    # deserializes into a used connection (regression test)
    for seed in range(40):
        task = env.generate_task(seed, "t")
        env.reset(task)
        table = task.gold[1].call.arguments["table"]
        obs = run(env, f"SELECT name FROM pragma_table_info('{table}')")
        assert obs.error is None and orjson.loads(obs.content)
        snap = env.snapshot()
        run(env, "SELECT * FROM json_each('[1, 2]')")
        env.restore(snap)
        assert run(env, f"SELECT name FROM pragma_table_info('{table}')").error is None


def test_restore_brings_back_each_snapshot_exactly(env):
    # the scratch connection keeps the last image: restoring it again, then another image,
    # then the first once more must each give that image's rows, whatever ran in between
    task = task_of(env, "entity_total")
    env.reset(task)
    table = task.gold[1].call.arguments["table"]
    dump = f"SELECT * FROM {table} ORDER BY 1"
    full, full_rows = env.snapshot(), run(env, dump).content
    assert run(env, f"DELETE FROM {table} WHERE rowid % 2 = 0", "execute").error is None
    half, half_rows = env.snapshot(), run(env, dump).content
    assert half_rows != full_rows
    for image, rows in ((full, full_rows), (full, full_rows), (half, half_rows),
                        (full, full_rows), (bytes(half), half_rows)):
        run(env, f"DELETE FROM {table} WHERE 1 = 1", "execute")
        env.restore(image)
        assert run(env, dump).content == rows


def test_drop_table_exists_but_the_next_task_gets_fresh_tables(env):
    task = task_of(env, "entity_total")
    env.reset(task)
    table = task.gold[2].call.arguments["table"]
    assert env.step({"name": "drop_table", "arguments": {"table": table}}).error is None
    assert env.step({"name": "describe_table", "arguments": {"table": table}}).error
    assert not env.check(task, task.answer)
    env.reset(task)
    for gold in task.gold:
        assert env.step(gold.call.as_dict()).error is None
    assert env.check(task, task.answer)


def test_describe_shows_keys_and_foreign_keys(env):
    task = task_of(env, "entity_total")
    env.reset(task)
    described = orjson.loads(env.step(task.gold[2].call.as_dict()).content)
    assert described["row_count"] > 0
    assert any(col.get("primary_key") for col in described["columns"])
    assert any("references" in col for col in described["columns"])


def test_alternatives_offer_other_existing_tables_and_queries(env):
    task = task_of(env, "entity_total")
    env.reset(task)
    describe = task.gold[1].call.as_dict()
    tables = env.alternatives(describe, "arguments.table")
    assert tables and describe["arguments"]["table"] not in tables
    listed = orjson.loads(env.step({"name": "list_tables", "arguments": {}}).content)["tables"]
    assert set(tables) < set(listed)
    query = task.gold[-1].call.as_dict()
    variants = env.alternatives(query, "arguments.sql")
    assert variants and query["arguments"]["sql"] not in variants
    assert env.alternatives(query, "arguments.max_rows") == []
    assert env.alternatives(query, "arguments.nope.deeper") == []


def test_row_counts_follow_writes_drops_and_restores(env):
    """describe_table and the checker take row counts from the last load until something
    changes the database; every change must fall back to counting."""
    task = task_of(env, "entity_total")
    env.reset(task)
    table = env.db.tables()[0]

    def described(name: str) -> int:
        return orjson.loads(env.step({"name": "describe_table",
                                      "arguments": {"table": name}}).content)["row_count"]

    def counted(name: str) -> int:
        return env.db.query(f'SELECT COUNT(*) FROM "{name}"')[0][0]

    assert described(table) == counted(table) > 0
    snapshot = env.snapshot()
    assert run(env, f"DELETE FROM {table}", tool="execute").error is None
    assert described(table) == counted(table) == 0
    env.restore(snapshot)
    assert described(table) == counted(table) > 0
    assert env.step({"name": "drop_table", "arguments": {"table": table}}).error is None
    assert env.step({"name": "describe_table", "arguments": {"table": table}}).error
    env.reset(task)  # back to the loaded counts, on a fresh connection
    assert [described(name) for name in env.db.tables()] == \
        [counted(name) for name in env.db.tables()]
