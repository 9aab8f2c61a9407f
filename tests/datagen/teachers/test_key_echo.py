"""An endpoint that sends the API key back, in every encoding, and nothing stores it: the
`openai` teacher against the echoing fault server on 127.0.0.1 (error bodies, 200 bodies, the
request cache, token-id completions, logs), then a whole `datagen generate` run on the Ray
head, whose every byte under OUT - Parquet tables decoded, the SQLite cache dumped, manifest,
card - and every log line (the CLI's output, every log file of the Ray session) are searched
for the key and its fragments by the independent finder in `leaks.py`."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import polars as pl
import pytest

from critics.llm_critic import CRITIC_SYSTEM_PROMPT
from datagen.rows import render
from datagen.teachers import make_teacher
from datagen.teachers.cache import RequestCache
from datagen.teachers.config import TeacherConfig
from datagen.teachers.trace import decode
from tests.conftest import ROOT
from tests.critics.fakes import GoldCriticFake
from tests.datagen.teachers.fault_server import ECHO_ENCODINGS, ScriptedAgent
from tests.datagen.teachers.helpers import make_tasks
from tests.datagen.teachers.leaks import everything_under, leaks, ray_session_logs

KEY = "sk-echo-7Qf3ZpL9xW2mKv8RtY4nB6cJ0hD5gS1aUe3w"
KEY_ENV = "DATAGEN_ECHO_TEST_KEY"
FAST = {"max_retries": 2, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 10.0}

# The chunk workers get the key the way a cluster operator provides it: in the environment of
# the Ray nodes (`ray start` run with it, a Kubernetes Secret as a pod variable). Set at import,
# so the session's Ray head, started after collection, has it. `ray job submit
# --runtime-env-json '{"env_vars": ...}'` would work too, but Ray 2.60 itself writes that
# runtime env, key included, into the head's runtime_env_agent.log (seen in this test).
os.environ.setdefault(KEY_ENV, KEY)


def _teacher(server, **openai):
    return make_teacher(TeacherConfig(
        backend="openai", name="echo-api",
        openai={"base_url": server.base_url, "model": "fake", "api_key_env": KEY_ENV,
                "cache": False, **FAST, **openai},
        sampling={"temperature": 0.0, "logprobs": 0}, episode={"max_turns": 12}))


def _stored(trajectories) -> str:
    """What the rows of these trajectories carry: text, messages, error, teacher_meta."""
    return "\n".join(render(t)[0] + orjson.dumps(
        [t.error, t.meta, [(s.raw, s.reasoning, s.answer, s.error) for s in t.steps]]).decode()
        for t in trajectories)


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)  # as at import; explicit for the in-process tests


def test_error_echoes_are_redacted_before_the_cut_on_rows_and_in_logs(fault_server, key_env,
                                                                      caplog):
    errors = [f"echo-key:400:{encoding}@{offset}" for encoding in sorted(ECHO_ENCODINGS)
              for offset in (0, 178)]
    retried = [f"echo-key:500:{encoding}" for encoding in sorted(ECHO_ENCODINGS)]
    tasks = make_tasks(len(errors) + 1)
    server = fault_server(ScriptedAgent(tasks))
    server.queue(*errors)
    caplog.set_level(logging.DEBUG)
    failed = _teacher(server, max_concurrency=1, initial_concurrency=1).rollout_batch(
        tasks[:len(errors)])
    assert [t.error.split(": ", 3)[2] for t in failed] == ["HTTP 400"] * len(errors)
    assert all("[redacted]" in t.error for t in failed)
    server.queue(*retried)
    [recovered] = _teacher(server, max_retries=len(retried)).rollout_batch(tasks[-1:])
    assert recovered.success and recovered.meta["retries"] == len(retried)
    assert caplog.text.count("HTTP 500") == len(retried)
    assert leaks(KEY, _stored(failed + [recovered]) + caplog.text) == []
    assert server.authorizations[0] == f"Bearer {KEY}", "the key does reach the server"


def test_a_200_that_echoes_the_key_is_stored_and_cached_redacted(fault_server, key_env,
                                                                 tmp_path, caplog):
    tasks = make_tasks(len(ECHO_ENCODINGS), envs=("sql", "fs"))
    server = fault_server(ScriptedAgent(tasks), echo_200=sorted(ECHO_ENCODINGS))
    caplog.set_level(logging.DEBUG)
    teacher = _teacher(server, cache=True, cache_dir=str(tmp_path))
    first = teacher.rollout_batch(tasks)
    assert all(t.success for t in first), [t.error for t in first]
    assert all("[redacted]" in render(t)[0] for t in first)
    assert teacher.backend.redacted_responses == len(server.bodies)
    assert "sent back the API key" in caplog.text
    cache = everything_under(tmp_path)
    assert cache.count("[redacted]") >= 3 * len(server.bodies)  # id, fingerprint, content
    assert leaks(KEY, _stored(first) + cache + caplog.text) == []

    sent = len(server.bodies)
    again = _teacher(server, cache=True, cache_dir=str(tmp_path)).rollout_batch(tasks)
    assert len(server.bodies) == sent, "the redacted bodies replay from the cache"
    assert [render(t)[0] for t in again] == [render(t)[0] for t in first]


def test_a_cache_written_before_redaction_is_redacted_when_read(fault_server, key_env,
                                                                tmp_path):
    tasks = make_tasks(2)
    server = fault_server(ScriptedAgent(tasks))
    teacher = _teacher(server, cache=True, cache_dir=str(tmp_path))
    first = teacher.rollout_batch(tasks)
    assert all(t.success for t in first)
    path = tmp_path / "openai_requests.sqlite"
    with sqlite3.connect(path) as db:  # what an older version stored for an echoing server
        rows = db.execute("SELECT key, body FROM responses").fetchall()
        db.executemany("UPDATE responses SET body = ? WHERE key = ?",
                       [(_prefix_content(bytes(body), KEY.upper()), key) for key, body in rows])
    again = _teacher(server, cache=True, cache_dir=str(tmp_path)).rollout_batch(tasks)
    # the first turn replays from the cache, redacted (later turns follow another conversation)
    assert all(t.success and t.meta["cache_hits"] >= 1 for t in again)
    assert "[redacted] I need to" in render(again[0])[0]
    assert leaks(KEY, _stored(again)) == []


def _prefix_content(raw: bytes, prefix: str) -> bytes:
    body = orjson.loads(raw)
    message = body["choices"][0]["message"]
    message["content"] = f"{prefix} {message['content']}"
    return orjson.dumps(body)


def test_token_ids_that_spell_the_key_are_dropped_and_not_cached(fault_server, key_env,
                                                                 tiny_tokenizer_dir, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    tasks = make_tasks(1)

    def completions(body):  # a /v1/completions body of ids, as a vLLM server sends them
        ids = tokenizer.encode(f"Echo {KEY}.\nFinal answer: {tasks[0].answer}",
                               add_special_tokens=False)
        ids.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return {"choices": [{"text": "", "finish_reason": "stop", "logprobs": {
            "tokens": [f"token_id:{i}" for i in ids]}}],
            "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}}

    server = fault_server(completions)
    teacher = _teacher(server, token_ids=True, tokenizer=str(tiny_tokenizer_dir), cache=True,
                       cache_dir=str(tmp_path))
    [traj] = teacher.rollout_batch(tasks)
    text = render(traj)[0]
    assert "Echo [redacted]." in text and traj.meta["retokenised_turns"] == 1
    assert decode(tokenizer, traj.tokens.ids) == text, "ids re-made from the redacted text"
    assert len(RequestCache(tmp_path / "openai_requests.sqlite")) == 0
    assert leaks(KEY, _stored([traj]) + decode(tokenizer, traj.tokens.ids)) == []


def _reply(tasks):
    """The echoing endpoint's FAKE models: the critic's for critic prompts, else the agent's."""
    agent, critic = ScriptedAgent(tasks), GoldCriticFake(tasks)

    def reply(body):
        if body["messages"][0]["content"] == CRITIC_SYSTEM_PROMPT:
            return critic(body)
        return agent(body)
    return reply


@pytest.mark.slow
def test_a_generate_run_against_an_echoing_endpoint_stores_no_key(ray_head, fault_server,
                                                                  tmp_path):
    n, envs = 24, ("sql", "fs")
    server = fault_server(_reply(make_tasks(n, envs=envs)), echo_200=sorted(ECHO_ENCODINGS))
    server.queue(*[f"echo-key:400:{e}@170" for e in ("raw", "b64-2", "json-u", "hex")],
                 *[f"echo-key:500:{e}" for e in ("upper", "url", "html")])
    config = tmp_path / "echo.yaml"
    config.write_text(json.dumps({
        "num_trajectories": n, "chunk_size": 12, "seed": 0, "envs": [{"name": e} for e in envs],
        "teacher": {"backend": "openai", "name": "echo-api", "openai": {
            "base_url": server.base_url, "model": "fake", "api_key_env": KEY_ENV, **FAST,
            "max_retries": 4},  # the 500s never exhaust one request's retries
            "sampling": {"temperature": 0.0, "logprobs": 0}, "episode": {"max_turns": 12}},
        "critics": {"backend": "llm", "inject_rate": 1.0}}))
    out = tmp_path / "out"
    assert ray_head.env.get(KEY_ENV) == KEY, "the head (and so its workers) has the key"
    result = subprocess.run([sys.executable, "-m", "datagen", "generate", "--config", str(config),
                             "--out", str(out), "--address", ray_head.address, "--no-progress"],
                            cwd=ROOT, env=ray_head.env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert server.authorizations[0] == f"Bearer {KEY}", "the workers had the key and sent it"

    trajectories = pl.read_parquet(out / "trajectories" / "*.parquet")
    assert trajectories.height == n and trajectories["success"].sum() >= n - 4
    succeeded = trajectories.filter(pl.col("success"))
    assert succeeded["text"].str.contains("[redacted]", literal=True).all()
    assert trajectories["error"].str.contains("[redacted]", literal=True).sum() == 4
    repairs = pl.read_parquet(out / "repairs" / "*.parquet")
    assert repairs.height and repairs["critique"].str.contains("[redacted]", literal=True).all()
    preferences = pl.read_parquet(out / "preferences" / "*.parquet")
    assert orjson.dumps(preferences.to_dicts()).count(b"[redacted]") > preferences.height
    written = everything_under(out)
    assert written.count("[redacted]") > 3 * n and "openai_requests.sqlite" in str(
        list((out / "_cache").iterdir()))
    assert leaks(KEY, written) == []
    assert leaks(KEY, result.stdout + result.stderr) == []
    logs = {name: found for name, text in ray_session_logs().items() if (found := leaks(KEY, text))}
    assert logs == {}
