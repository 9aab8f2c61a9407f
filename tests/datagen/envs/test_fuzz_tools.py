"""Fuzzing the tools of the three built-in environments with random and hostile arguments
(issue 12): no exception escapes `step`, each call finishes within a budget with a bounded
observation, and no host file is opened, created or removed (fs is virtual, sql in-memory).

Python-level file access is caught by an audit hook recording only while `step` runs;
SQLite's own file access (ATTACH, VACUUM INTO) leaves no audit event, so the test also runs
in an empty working directory and asserts it stays empty. FUZZ_EXAMPLES=2000 for a longer hunt.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datagen.envs import make_env

FAMILIES = ("sql", "fs", "enterprise")
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "120"))
CALL_BUDGET_S = 3.0           # statements stop at 1 s; regexes spend at most ~0.25 s
MAX_OBSERVATION = 200_000     # characters
_FILE_EVENTS = ("open", "os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.listdir",
                "os.scandir", "os.symlink", "os.truncate", "shutil.rmtree", "shutil.copyfile")
_recording: list[tuple[str, Any]] | None = None


def _audit(event: str, args: tuple) -> None:
    if _recording is not None and event in _FILE_EVENTS:
        _recording.append((event, args[:1]))


sys.addaudithook(_audit)

HOSTILE_TEXT = [
    "SELECT zeroblob(100000000)", "SELECT hex(zeroblob(4000000)) FROM {t}",
    "SELECT printf('%.*c', 2147483647, 'x')", "ATTACH DATABASE 'evil.db' AS evil",
    "VACUUM INTO 'copy.db'", "SELECT readfile('/etc/passwd')", "SELECT load_extension('x')",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c",
    "SELECT * FROM {t} a, {t} b, {t} c, {t} d, {t} e", "PRAGMA writable_schema = 1",
    "INSERT INTO {t} SELECT * FROM {t}", "UPDATE {t} SET {c} = hex(zeroblob(99999))",
    "DELETE FROM {t}; DROP TABLE {t}", "SELECT 1; SELECT 2", "SELECT '\x00'", "SELECT '\ud800'",
    "(a+)+$", "((a)+)+$", "(a|a)*$", "(a|a?)+$", "(?:a|a)+b", "(a|a)*$(?=b)", "(?<=x", "[",
    "../../../etc/passwd", "/etc/passwd", "~/../../root", "//", "/" + "a/" * 200, "~",
    "*" * 90 + "[!", "\u202e\u0000\n\r\t", "a" * 5000 + "!", "😀" * 50, "'; --", "%s%n%x",
]
ODD_VALUES = [None, True, -1, 0, 2**63, -(2**63) - 1, 10**5000, 1e308, float("inf"),
              float("nan"), "", [], {}, [None], {"a": {"b": [1]}}, b"bytes", ("tuple",)]


def text_values(draw) -> str:
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(st.text(max_size=60))
    if choice == 1:
        return draw(st.sampled_from(HOSTILE_TEXT))
    parts = draw(st.lists(st.sampled_from(HOSTILE_TEXT + ["SELECT", "*", "FROM", "WHERE",
                                                          "x", "1", "(", ")", "/", "a"]),
                          min_size=1, max_size=6))
    return " ".join(parts)


@st.composite
def argument_value(draw, schema: dict) -> Any:
    kind = schema.get("type")
    if draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(ODD_VALUES))
    if kind == "string":
        if "enum" in schema and draw(st.booleans()):
            return draw(st.sampled_from(schema["enum"]))
        return text_values(draw)
    if kind == "integer":
        return draw(st.integers(-5, 600) | st.sampled_from([10**30, 10**5000, -(10**5000)]))
    if kind == "number":
        return draw(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 5))
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "array":
        return draw(st.lists(argument_value(schema.get("items", {})), max_size=4))
    if kind == "object":
        return draw(arguments_for(schema))
    return draw(st.sampled_from(ODD_VALUES))


@st.composite
def arguments_for(draw, schema: dict) -> dict:
    properties = schema.get("properties", {})
    chosen = draw(st.lists(st.sampled_from(sorted(properties)), unique=True)) \
        if properties else []
    arguments = {key: draw(argument_value(properties[key])) for key in chosen}
    if draw(st.integers(0, 6)) == 0:
        arguments[draw(st.text(max_size=12))] = draw(st.sampled_from(ODD_VALUES))
    return arguments


@st.composite
def tool_calls(draw, env) -> dict:
    specs = {spec["function"]["name"]: spec["function"]["parameters"] for spec in env.tools()}
    name = draw(st.sampled_from(sorted(specs)) | st.text(max_size=10)) \
        if draw(st.integers(0, 9)) == 0 else draw(st.sampled_from(sorted(specs)))
    arguments: Any = draw(arguments_for(specs[name])) if name in specs else {}
    shape = draw(st.integers(0, 12))
    if shape == 0:
        return {"name": name, "arguments": draw(st.sampled_from(
            ["{", "[]", "null", '{"path": 1e999}', "\ud800"]))}
    if shape == 1:
        return {"name": name, "arguments": draw(st.sampled_from(ODD_VALUES))}
    return {"name": name, "arguments": arguments}


def _fill(text: Any, env) -> Any:
    """Point SQL templates at a real table of the current database."""
    if env.name != "sql" or not isinstance(text, str) or "{t}" not in text:
        return text
    table = env.db.tables()[0] if env.db.tables() else "x"
    return text.replace("{t}", table).replace("{c}", "name")


@pytest.fixture(scope="module")
def envs() -> dict:
    ready = {}
    for name in FAMILIES:
        env = make_env(name)
        env.reset(env.generate_task(3, "fuzz"))
        ready[name] = env
    return ready


@pytest.mark.parametrize("family", FAMILIES)
def test_random_and_hostile_tool_calls(family, envs, tmp_path, monkeypatch):
    global _recording
    env = envs[family]
    monkeypatch.chdir(tmp_path)
    touched: list[tuple[str, Any]] = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        global _recording
        if data.draw(st.integers(0, 15)) == 0:
            env.reset(env.generate_task(data.draw(st.integers(0, 50)), "fuzz"))
        call = data.draw(tool_calls(env))
        if isinstance(call.get("arguments"), dict):
            call["arguments"] = {k: _fill(v, env) for k, v in call["arguments"].items()}
        _recording = touched
        start = time.perf_counter()
        try:
            obs = env.step(call)
        finally:
            _recording = None
        seconds = time.perf_counter() - start
        assert seconds < CALL_BUDGET_S, (call, seconds)
        assert isinstance(obs.content, str) and len(obs.content) < MAX_OBSERVATION, call
        assert "failed unexpectedly" not in obs.content, (call, obs.content)

    run()
    assert touched == [] and list(tmp_path.iterdir()) == [], touched
