"""The `openai` teacher against a real HTTP server on loopback that misbehaves on purpose:
retries with backoff, timeouts, AIMD under a rate limit, the request cache, key hygiene,
native tool calls. Answers come from `ScriptedAgent`, a fake teacher that plays the gold
solution (so episodes can succeed); the faults are real HTTP responses."""

from __future__ import annotations

import logging

import pyarrow.parquet as pq
import pytest

from datagen.pipeline.chunk import ChunkProcessor, plan_chunks
from datagen.config import GenerateConfig
from datagen.rows import render
from datagen.spans import check_tiling
from datagen.teachers import make_teacher
from datagen.teachers.cache import RequestCache
from datagen.teachers.config import TeacherConfig
from tests.datagen.teachers.fault_server import HOSTILE_BODIES, ScriptedAgent
from tests.datagen.teachers.helpers import make_tasks

FAST_RETRIES = {"max_retries": 6, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
                "timeout_s": 5.0, "cache": False}


def _teacher(server, **openai):
    config = TeacherConfig(backend="openai", name="fake-api",
                           openai={"base_url": server.base_url, "model": "fake",
                                   **FAST_RETRIES, **openai},
                           sampling={"temperature": 0.0, "logprobs": 0},
                           episode={"max_turns": 12})
    return make_teacher(config)


def test_scripted_agent_episodes_succeed_through_the_protocol(fault_server):
    tasks = make_tasks(6, envs=("sql", "fs"))
    server = fault_server(ScriptedAgent(tasks))
    teacher = _teacher(server, usd_per_million_input_tokens=1.0,
                       usd_per_million_output_tokens=2.0)
    trajectories = teacher.rollout_batch(tasks)
    for traj, task in zip(trajectories, tasks):
        assert traj.success and traj.error is None, traj.error
        assert [s.call.name for s in traj.steps if s.call] == [g.call.name for g in task.gold]
        assert all(s.observation is not None for s in traj.steps if s.call)
        meta = traj.meta
        assert meta["turns"] == len(task.gold) + 1 and meta["retries"] == 0
        assert meta["prompt_tokens"] == 100 * meta["turns"] and meta["cost_usd"] > 0
        text, spans = render(traj)
        assert check_tiling(text, spans) is None
        assert {"PROMPT", "REASON", "ACT", "OBS"} <= {span.kind for span in spans}
    assert traj.tokens is None  # a text-only endpoint: no token trace
    tool_messages = [m for m in server.bodies[-1]["messages"] if m["role"] == "tool"]
    assert tool_messages and server.bodies[0]["tool_choice"] == "none"


def test_retries_every_transient_fault_then_succeeds(fault_server):
    tasks = make_tasks(1)
    server = fault_server(ScriptedAgent(tasks))
    server.queue("429", "500", "503", "malformed", "truncated", "no-choices", "429-retry-after")
    [traj] = _teacher(server, max_retries=7).rollout_batch(tasks)
    assert traj.success, traj.error
    assert traj.meta["retries"] == 7
    assert server.statuses[:7] == [429, 500, 503, 200, 200, 200, 429]


def test_a_hang_times_out_and_is_retried(fault_server):
    tasks = make_tasks(1)
    server = fault_server(ScriptedAgent(tasks))
    server.queue("hang")
    [traj] = _teacher(server, timeout_s=0.5).rollout_batch(tasks)
    assert traj.success and traj.meta["retries"] == 1


def test_failures_after_retries_and_client_errors_become_rows(fault_server):
    tasks = make_tasks(2)
    server = fault_server(ScriptedAgent(tasks))
    server.queue("hang", "hang")
    [traj] = _teacher(server, timeout_s=0.3, max_retries=1).rollout_batch(tasks[:1])
    assert not traj.success and traj.steps == []
    assert traj.error == ("generation_failed: turn 0: gave up after 2 attempts: "
                          "timeout after 0.3s")
    assert traj.error_kind == "generation_failed"
    assert traj.tokens is None and traj.meta["finish_reasons"] == ["error"]

    server.queue("400")
    sent = len(server.bodies)
    [traj] = _teacher(server).rollout_batch(tasks[1:])
    assert traj.error.startswith("generation_failed: turn 0: HTTP 400")
    assert len(server.bodies) == sent + 1, "a client error is not retried"


def test_aimd_finds_the_servers_capacity(fault_server):
    tasks = make_tasks(48)
    server = fault_server(ScriptedAgent(tasks), capacity=6, latency_s=0.03)
    teacher = _teacher(server, initial_concurrency=32, max_concurrency=64, max_retries=20)
    trajectories = teacher.rollout_batch(tasks)
    assert all(t.success for t in trajectories), [t.error for t in trajectories if t.error]
    limiter = teacher.backend.limiter
    assert limiter.throttles > 0 and 429 in server.statuses
    assert 1 <= limiter.limit <= 16, "the limit settles near the capacity, far below 32"
    late = server.statuses[len(server.statuses) // 2:]
    assert late.count(429) / len(late) < 0.5, "most late requests fit under the limit"


def test_cache_answers_a_resumed_run_without_requests(fault_server, tmp_path):
    tasks = make_tasks(4, envs=("sql", "fs"))
    server = fault_server(ScriptedAgent(tasks))
    first = _teacher(server, cache=True, cache_dir=str(tmp_path)).rollout_batch(tasks)
    sent = len(server.bodies)
    again = _teacher(server, cache=True, cache_dir=str(tmp_path)).rollout_batch(tasks)
    assert len(server.bodies) == sent, "every turn is answered from the cache"
    assert [render(t)[0] for t in again] == [render(t)[0] for t in first]
    assert all(t.meta["cache_hits"] == t.meta["turns"] > 0 for t in again)
    other_round = _teacher(server, cache=True, cache_dir=str(tmp_path)).rollout_batch(
        tasks[:1], None, 1)
    assert other_round[0].success and len(server.bodies) > sent, "another round is a new request"


def test_api_key_is_sent_but_never_logged_or_written(fault_server, tmp_path, monkeypatch,
                                                     caplog):
    secret = "sk-test-5f1e3a9c0d7b42e8"
    monkeypatch.setenv("DATAGEN_TEST_API_KEY", secret)
    tasks = make_tasks(2, envs=("sql",))
    server = fault_server(ScriptedAgent(tasks))
    server.queue(*["echo-headers"] * 4)  # a proxy that reflects the Authorization header
    teacher = {"backend": "openai", "openai": {
        "base_url": server.base_url, "model": "fake", "api_key_env": "DATAGEN_TEST_API_KEY",
        **FAST_RETRIES, "max_retries": 1}}
    config = GenerateConfig(out=str(tmp_path / "out"), num_trajectories=2, chunk_size=2,
                            envs=[{"name": "sql"}], teacher=teacher, progress=False)
    caplog.set_level(logging.DEBUG)
    ChunkProcessor(config).process(plan_chunks(config)[0])
    assert server.statuses[:4] == [500] * 4
    written = b"".join(path.read_bytes() for path in (tmp_path / "out").rglob("*")
                       if path.is_file())
    assert b"[redacted]" in written, "the echoed error is on the rows, redacted"
    assert secret.encode() not in written and secret not in caplog.text
    assert server.authorizations[0] == f"Bearer {secret}", "the key does reach the server"


def test_api_key_variable_must_exist(fault_server, monkeypatch):
    monkeypatch.delenv("DATAGEN_MISSING_KEY", raising=False)
    server = fault_server(ScriptedAgent([]))
    with pytest.raises(ValueError, match=r"\$DATAGEN_MISSING_KEY, which is not set"):
        _teacher(server, api_key_env="DATAGEN_MISSING_KEY")


def test_native_tool_calls_round_trip(fault_server):
    tasks = make_tasks(3, envs=("sql", "fs"))
    server = fault_server(ScriptedAgent(tasks, native=True))
    trajectories = _teacher(server, tool_format="native").rollout_batch(tasks)
    assert all(t.success for t in trajectories), [t.error for t in trajectories]
    messages = server.bodies[-1]["messages"]
    calls = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
    results = [m for m in messages if m["role"] == "tool"]
    assert calls and [m["tool_call_id"] for m in results] == [
        c["tool_calls"][0]["id"] for c in calls]
    assert "tool_choice" not in server.bodies[-1]
    assert server.bodies[0]["tools"][0]["type"] == "function"
    text, _ = render(trajectories[0])
    assert "<tool_call>" in text, "rows show native calls in the template's text form"


# What a row says (after "malformed response: ") for each hostile 200 body of the fault server.
MALFORMED_BODIES = {
    "choices-str": "choices is str, expected list",
    "message-list": "choices[0].message is list, expected dict",
    "content-dict": "message content is dict, expected str",
    "tool-calls-str": "tool_calls is str, expected list",
    "tool-call-int": "a tool call is int, expected dict",
    "function-str": "a tool call's function is str, expected dict",
    "usage-str": "usage is str, expected dict",
    "usage-huge": "usage.prompt_tokens is 1e+300, expected an integer in [0, 2^40)",
    "usage-negative": "usage.completion_tokens is -5, expected an integer in [0, 2^40)",
    "usage-64bit": "usage.prompt_tokens is 9223372036854775807, expected an integer",
    "content-long": "turn text of 300014 characters, more than 512 tokens can produce",
    "content-9mb": "response body over 8388608 bytes (Content-Length 9000",
}
GAVE_UP = "generation_failed: turn 0: gave up after 2 attempts: malformed response: "


@pytest.mark.parametrize("fault", sorted(MALFORMED_BODIES))
def test_malformed_bodies_become_rows_and_are_retried(fault_server, fault):
    tasks = make_tasks(1)
    server = fault_server(ScriptedAgent(tasks))
    teacher = _teacher(server, max_retries=1)
    server.queue(fault, fault)
    [traj] = teacher.rollout_batch(tasks)
    assert traj.error_kind == "generation_failed"
    assert traj.error.startswith(GAVE_UP + MALFORMED_BODIES[fault]), traj.error
    server.queue(fault)
    [traj] = teacher.rollout_batch(tasks)
    assert traj.success and traj.meta["retries"] == 1, traj.error


def test_an_endless_body_is_read_no_further_than_the_limit(fault_server):
    tasks = make_tasks(1)
    server = fault_server(ScriptedAgent(tasks))
    teacher = _teacher(server, max_retries=1)
    limit = teacher.backend.max_body_bytes
    server.queue("endless", "endless")
    [traj] = teacher.rollout_batch(tasks)
    assert traj.error == GAVE_UP + f"response body over {limit} bytes"
    # what the server got out before the client hung up: the limit plus socket buffers
    assert server.endless_bytes_sent < 2 * limit + (32 << 20), server.endless_bytes_sent


def test_a_malformed_body_is_never_cached_and_a_rerun_recovers(fault_server, tmp_path):
    tasks = make_tasks(2, envs=("sql",))
    server = fault_server(ScriptedAgent(tasks))
    cache_dir = tmp_path / "cache"
    teacher = {"backend": "openai", "openai": {
        "base_url": server.base_url, "model": "fake", **FAST_RETRIES, "max_retries": 1,
        "cache": True, "cache_dir": str(cache_dir)}, "sampling": {"logprobs": 0}}

    def run(name: str) -> list[dict]:
        config = GenerateConfig(out=str(tmp_path / name), num_trajectories=2, chunk_size=2,
                                envs=[{"name": "sql"}], teacher=teacher, progress=False)
        record = ChunkProcessor(config).process(plan_chunks(config)[0])
        return pq.read_table(tmp_path / name / record.shards["trajectories"].file).to_pylist()

    server.queue(*["usage-huge"] * 4)  # both episodes' first turn, and its retry
    rows = run("first")
    assert [row["error"] for row in rows] == [GAVE_UP + MALFORMED_BODIES["usage-huge"]] * 2
    cache = RequestCache(cache_dir / "openai_requests.sqlite")
    assert len(cache) == 0, "a malformed body never enters the cache"
    assert all(row["success"] for row in run("rerun"))
    paid = len(server.bodies)
    assert len(cache) == paid - 4

    # a cache written by a version that checked less: its bodies are sent again, and replaced
    cache._db.execute("UPDATE responses SET body = ?", (HOSTILE_BODIES["usage-huge"](),))
    assert all(row["success"] for row in run("old-cache"))
    assert len(server.bodies) == paid + len(cache)
    assert all(b"1e+300" not in body and b"1e300" not in body
               for (body,) in cache._db.execute("SELECT body FROM responses"))
