"""Observations are size-bounded (review of issue 12's fuzzing, which stopped at 5,000
characters): one bound in `ToolEnvironment.step` for every observation, the large echoes
shortened where they are built, and integers beyond 64 bits refused before a tool acts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from datagen.envs import make_env
from datagen.envs._toolkit import ToolEnvironment, WorldCache
from datagen.envs.base import MAX_OBSERVATION_CHARS, tool_spec
from datagen.types import Observation

# A bounded observation plus its note of what was cut
LIMIT = MAX_OBSERVATION_CHARS + 100


def _env(name: str) -> Any:
    env = make_env(name)
    env.reset(env.generate_task(3, "t"))
    return env


def _step(env: Any, tool: str, **arguments: Any) -> Observation:
    return env.step({"name": tool, "arguments": arguments})


class _EchoEnv(ToolEnvironment):
    """A user's environment whose one tool echoes its argument whole."""

    name = "echo_bounds_test"
    TOOL_SPECS = [tool_spec("echo", "Echo text.", {"text": {"type": "string"}}, ["text"]),
                  tool_spec("keep", "Store a record.", {"record": {"type": "object"}},
                            ["record"])]
    TEMPLATES = ()
    FALLBACK = None

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self._worlds = WorldCache(lambda rng: None)

    def reset(self, task: Any) -> None:
        self.state = {}

    def check(self, task: Any, answer: str | None) -> bool:
        return False

    def tool_echo(self, text: str) -> Observation:
        return self.ok({"echo": text})

    def tool_keep(self, record: dict[str, Any]) -> Observation:
        self.state["record"] = record
        return self.ok(record)


def test_every_observation_of_a_user_tool_environment_is_cut_with_a_note() -> None:
    obs = _step(_EchoEnv(), "echo", text="y" * 1_000_000)
    assert len(obs.content) < LIMIT
    assert obs.content.endswith("more characters]") and "[observation cut: " in obs.content


def test_a_short_observation_is_left_alone() -> None:
    assert _step(_EchoEnv(), "echo", text="hello").content == '{"echo":"hello"}'


@pytest.mark.parametrize("family", ["fs", "enterprise", "sql"])
def test_a_huge_unknown_argument_name_is_shortened_in_the_message(family: str) -> None:
    env = _env(family)
    tool = env.tools()[0]["function"]["name"]
    for arguments in ({"k" * 5_000_000: 1}, {"filters": {"k" * 5_000_000: 1}}):
        obs = env.step({"name": tool, "arguments": arguments})
        assert obs.error and "unknown argument" in obs.error and len(obs.content) < 1_000


def test_send_email_echoes_long_addresses_shortened() -> None:
    env = _env("enterprise")
    obs = _step(env, "send_email", to=["a" * 1_000_000 + f"@b{i}.c" for i in range(10)],
                subject="s", body="b")
    assert obs.error is None and len(obs.content) < 5_000
    assert env.state["outbox"][-1]["to"][0].endswith("@b0.c")  # the mail itself is whole
    normal = _step(env, "send_email", to=["ann@example.com"], subject="s", body="b")
    assert orjson.loads(normal.content)["to"] == ["ann@example.com"]


def test_create_event_keeps_at_most_microseconds() -> None:
    env = _env("enterprise")
    obs = _step(env, "create_event", title="x", start="2026-01-01T10:00:00." + "9" * 1_000_000,
                duration_minutes=15, attendees=["a@b.c"], location={"kind": "video"})
    assert obs.error is None and orjson.loads(obs.content)["start"] == "2026-01-01T10:00:00.999999"


def _fs_with(content: str) -> Any:
    env = _env("fs")
    assert _step(env, "write_file", path="/tmp_big.txt", content="X").error is None
    assert _step(env, "edit_file", path="/tmp_big.txt", old_text="X", new_text=content).error \
        is None
    return env


def test_read_file_of_a_huge_one_line_file_shows_its_start() -> None:
    obs = _step(_fs_with("Y" * 20_000_000), "read_file", path="/tmp_big.txt")
    payload = orjson.loads(obs.content)
    assert len(obs.content) < 20_000 and "only its start is shown" in payload["note"]


def test_read_file_cut_by_characters_says_where_to_read_on() -> None:
    env = _fs_with("".join(f"{i:05d}" + "z" * 94 + "\n" for i in range(1, 1001)))
    payload = orjson.loads(_step(env, "read_file", path="/tmp_big.txt", max_lines=1000).content)
    shown = payload["content"].splitlines()
    assert 0 < len(shown) < 1000 and len(payload["content"]) <= 16_000
    assert f"start_line={len(shown) + 1}" in payload["note"]
    following = orjson.loads(_step(env, "read_file", path="/tmp_big.txt",
                                   start_line=len(shown) + 1).content)
    assert following["content"].startswith(f"{len(shown) + 1:05d}")


def test_search_shortens_each_matching_line_and_bounds_the_matches() -> None:
    env = _fs_with("a" * 99_999 + "\n" + ("a" * 199 + "\n") * 500)
    obs = _step(env, "search", path="/tmp_big.txt", text="a", max_results=500)
    payload = orjson.loads(obs.content)  # still JSON: cut at the source, not by the bound
    assert len(obs.content) < 20_000 and payload["count"] == 501 and payload["truncated"]
    assert len(payload["matches"][0]["text"]) < 1_100


@pytest.mark.parametrize("value", [2**63, 2**64, 10**5000], ids=["2**63", "2**64", "10**5000"])
def test_an_integer_beyond_64_bits_is_out_of_range_not_an_unexpected_failure(value: int
                                                                             ) -> None:
    env = _env("fs")
    path = next(iter(env.state["files"]))
    obs = _step(env, "read_file", path=path, start_line=value)
    assert obs.error and "'start_line' is out of range" in obs.error
    assert "unexpectedly" not in obs.error


def test_a_nested_integer_beyond_64_bits_is_refused_before_the_tool_acts() -> None:
    env = _EchoEnv()
    obs = _step(env, "keep", record={"items": [{"n": 1}, {"n": 2**64}]})
    assert obs.error and "'record.items[1].n' is out of range" in obs.error
    assert "record" not in env.state


def test_integers_within_64_bits_still_work() -> None:
    env = _env("fs")
    path = next(iter(env.state["files"]))
    obs = _step(env, "read_file", path=path, start_line=2**63 - 1)
    assert obs.error is None and orjson.loads(obs.content)["content"] == ""
