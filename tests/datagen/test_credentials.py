"""Credentials in a config never reach OUT (issue 12): a `user:password@` endpoint, an api key in
`extra_body`, a `?key=` query, an `--set` on the command line. Unit checks of the redaction and
of the fingerprint rule, then a real `datagen generate` against the loopback chat server whose
every byte under OUT is searched by the independent leak finder."""

from __future__ import annotations

import hashlib
import json
import sys
import time

import orjson
import pyarrow as pa
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datagen.pipeline.cli import main
from datagen.config import RUN_ONLY_FIELDS, GenerateConfig, fingerprint, load_config, public_dump
from datagen.credentials import credential_name, redact_argv, redact_credentials, redact_text
from datagen.rows import SCHEMA_VERSION
from datagen.pipeline.runlock import LockOwner
from datagen.pipeline.shards import OutputConflict, ShardStore
from tests.datagen.teachers.fault_server import FaultServer, ScriptedAgent
from tests.datagen.teachers.helpers import make_tasks
from tests.datagen.teachers.leaks import everything_under, leaks, ray_session_logs

# Sections left out of the public dump at their defaults, so older OUTs keep their fingerprint.
AT_DEFAULT_LEFT_OUT = {"preferences": True, "consistency": True, "round": True,
                       "critics": {"safety_target"}}
LEFT_OUT = {**dict.fromkeys(RUN_ONLY_FIELDS, True), **AT_DEFAULT_LEFT_OUT}

PASSWORD = "pw-7Hq2xLm9Zt4Kc8Rv"
BODY_KEY = "sk-body-3Nf8Wq1Ys6Jd0Pa5"
R = "[redacted]"


@pytest.mark.parametrize("name, secret", [
    ("api_key", True), ("x-api-key", True), ("apiKey", True), ("Authorization", True),
    ("hf_token", True), ("AUTH_TOKEN", True), ("client_secret", True), ("password", True),
    ("api_key_env", False), ("max_tokens", False), ("token_ids", False), ("tokenizer", False),
    ("top_k", False), ("base_url", False), ("keys_count", False)])
def test_credential_names(name, secret):
    assert credential_name(name) is secret


@pytest.mark.parametrize("text, expected", [
    ("http://alice:s3cr@t@10.0.0.5:8000/v1", f"http://{R}@10.0.0.5:8000/v1"),
    ("https://ghp_TOKEN1234@host/v1?x=1", f"https://{R}@host/v1?x=1"),
    ("https://host/v1?key=AIza123&alt=json", f"https://host/v1?key={R}&alt=json"),
    ("https://host/v1?alt=json&access_token=abc", f"https://host/v1?alt=json&access_token={R}"),
    ("Authorization: Bearer sk-abc123def456", f"Authorization: Bearer {R}"),
    ("Basic authentication is fine", "Basic authentication is fine"),
    ("http://10.0.0.5:8000/v1", "http://10.0.0.5:8000/v1"),
    ("mail me at bob@example.com", "mail me at bob@example.com"),
])
def test_redact_text(text, expected):
    assert redact_text(text) == expected
    assert redact_text(expected) == expected, "redacting twice changes nothing"


@settings(max_examples=300, deadline=None)
@given(before=st.text(max_size=30), password=st.text(
    st.characters(exclude_characters="/?#@", exclude_categories=("Zs", "Cc", "Zl", "Zp")),
    min_size=1, max_size=20), after=st.text(max_size=30))
def test_any_url_password_goes_and_redaction_is_idempotent(before, password, after):
    text = f"{before} https://user:PW{password}@host.example/v1?key=PW{password} {after}"
    redacted = redact_text(text)
    assert f"PW{password}@" not in redacted and f"key=PW{password}" not in redacted
    assert redact_text(redacted) == redacted


def test_redaction_is_linear_on_a_megabyte():
    """The user-info pattern once retried every letter of a word as a scheme start: 40 KB
    took 2.8 s, a 1 MB config value would take half an hour."""
    for text in ("a" * 1_000_000 + "@", "a://" * 250_000 + "@", "?a" * 500_000 + "="):
        started = time.perf_counter()
        redact_text(text)
        assert time.perf_counter() - started < 5


def _openai_config(base_url: str, **extra) -> GenerateConfig:
    # a key variable only without user:password@ (the two together are refused at load)
    key = {} if "@" in base_url else {"api_key_env": "MY_KEY"}
    return GenerateConfig(teacher={"backend": "openai", "openai": {
        "base_url": base_url, "model": "m", **key, **extra}})


def test_public_dump_redacts_and_keeps_the_rest():
    config = _openai_config(f"http://u:{PASSWORD}@h:1/v1", extra_body={
        "api_key": BODY_KEY, "headers": {"X-Api-Key": BODY_KEY}, "top_k": 3, "token": None})
    dump = public_dump(config)
    openai = dump["teacher"]["openai"]
    assert openai["base_url"] == f"http://{R}@h:1/v1"
    assert openai["extra_body"] == {"api_key": R, "headers": {"X-Api-Key": R}, "top_k": 3,
                                    "token": None}
    keyed = public_dump(_openai_config("http://h:1/v1"))["teacher"]["openai"]
    assert keyed["api_key_env"] == "MY_KEY", "the variable's name is no secret"
    assert leaks(PASSWORD, json.dumps(dump)) == [] and leaks(BODY_KEY, json.dumps(dump)) == []
    # (`preferences`, `consistency` and `round` are left out at their defaults: see the
    # fingerprint test below)
    raw = config.model_dump(mode="json", exclude=LEFT_OUT)
    assert {k: v for k, v in dump.items() if k != "teacher"} == {
        k: v for k, v in raw.items() if k != "teacher"}


def test_fingerprint_ignores_credentials_and_is_unchanged_without_them():
    one = _openai_config(f"http://u:{PASSWORD}@h:1/v1", extra_body={"api_key": BODY_KEY})
    other = _openai_config("http://u:another-password@h:1/v1", extra_body={"api_key": "sk-2"})
    elsewhere = _openai_config(f"http://u:{PASSWORD}@h:2/v1", extra_body={"api_key": BODY_KEY})
    assert fingerprint(one) == fingerprint(other), "a rotated password is the same data"
    assert fingerprint(one) != fingerprint(elsewhere), "another endpoint is not"
    # the hash of a password-free config is what it was before redaction existed (and before
    # the `preferences` and `consistency` sections and the `round` and
    # `critics.safety_target` fields, left out at their defaults): OUTs that older runs wrote
    # resume
    for config in (load_config("configs/demo.yaml"), _openai_config("http://h:1/v1")):
        payload = config.model_dump(mode="json", exclude=LEFT_OUT)
        before = hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS))
        assert fingerprint(config) == before.hexdigest()[:16]


def test_redact_credentials_of_nested_lists_and_other_types():
    value = {"a": [{"password": {"nested": 1}}, "http://x:y@h"], "n": 5, "cookie": 123}
    assert redact_credentials(value) == {"a": [{"password": R}, f"http://{R}@h"], "n": 5,
                                         "cookie": R}


def test_the_lock_record_names_the_command_without_credentials(monkeypatch):
    argv = ["/venv/bin/datagen", "generate", "--set",
            f"teacher.openai.base_url=http://u:{PASSWORD}@h/v1", "--set",
            f"teacher.openai.extra_body.api_key={BODY_KEY}",
            f"--set=teacher.openai.extra_body.headers.Authorization=Bearer {BODY_KEY}",
            "--out", "/data/caf\udce9"]  # a non-UTF-8 argv byte, as Python decodes it
    monkeypatch.setattr(sys, "argv", argv)
    owner = LockOwner.current("fp")
    assert leaks(PASSWORD, owner.command) == [] and leaks(BODY_KEY, owner.command) == []
    assert owner.command.startswith("datagen generate --set teacher.openai.base_url=http://"
                                    f"{R}@h/v1 --set teacher.openai.extra_body.api_key={R}")
    assert owner.command.endswith("--out /data/caf\\udce9")
    assert LockOwner.from_json(orjson.dumps(owner.__dict__)) == owner
    assert redact_argv(["seed=3", "x.token=abc"]) == ["seed=3", f"x.token={R}"]


def test_an_out_whose_run_record_predates_redaction_resumes(tmp_path):
    """Before, _run.json held the config as it was and a fingerprint of it, password
    included: the same config (any password) is still the same data."""
    config = _openai_config(f"http://u:{PASSWORD}@h:1/v1")
    raw = config.model_dump(mode="json", exclude=RUN_ONLY_FIELDS)
    old_fingerprint = hashlib.sha256(orjson.dumps(raw, option=orjson.OPT_SORT_KEYS))
    store = ShardStore(tmp_path / "out")
    store.claim(old_fingerprint.hexdigest()[:16], raw, overwrite=False)
    (store.root / "_run.json").write_bytes(orjson.dumps({
        "fingerprint": old_fingerprint.hexdigest()[:16], "schema_version": SCHEMA_VERSION,
        "config": raw}))
    rotated = _openai_config("http://u:rotated@h:1/v1")
    store.claim(fingerprint(rotated), rotated.model_dump(mode="json", exclude=RUN_ONLY_FIELDS),
                overwrite=False)
    record = orjson.loads((store.root / "_run.json").read_bytes())
    assert record["fingerprint"] == fingerprint(config) and PASSWORD not in str(record)
    other = _openai_config(f"http://u:{PASSWORD}@h:2/v1")
    store.write_chunk(0, {"trajectories": pa.table({"id": ["t0"]})}, {})  # data to protect
    with pytest.raises(OutputConflict, match="different config"):
        store.claim(fingerprint(other), other.model_dump(mode="json", exclude=RUN_ONLY_FIELDS),
                    overwrite=False)


@pytest.fixture
def chat_server():
    tasks = make_tasks(6, envs=("sql", "fs"))
    server = FaultServer(ScriptedAgent(tasks)).start()
    yield server
    server.stop()


@pytest.mark.slow
def test_a_generate_run_writes_no_credential_under_out(ray_head, chat_server, tmp_path,
                                                       capsys):
    base_url = chat_server.base_url.replace("http://", f"http://datagen:{PASSWORD}@")
    config = tmp_path / "secret.yaml"
    config.write_text(json.dumps({
        "num_trajectories": 6, "chunk_size": 3, "envs": [{"name": "sql"}, {"name": "fs"}],
        "teacher": {"backend": "openai", "name": "api", "openai": {
            "base_url": base_url, "model": "fake", "max_retries": 1, "timeout_s": 20,
            "extra_body": {"api_key": BODY_KEY, "top_k": 1}},
            "sampling": {"temperature": 0.0, "logprobs": 0}, "episode": {"max_turns": 12}}}))
    out = tmp_path / "out"
    argv = ["generate", "--config", str(config), "--out", str(out), "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    first = capsys.readouterr()
    assert pl.read_parquet(out / "trajectories" / "*.parquet")["success"].all()
    requests = len(chat_server.bodies)
    assert chat_server.bodies[0]["api_key"] == BODY_KEY, "extra_body reached the endpoint"
    assert chat_server.authorizations[0].startswith("Basic "), "the password was used"

    written = everything_under(out)
    for secret in (PASSWORD, BODY_KEY):
        assert leaks(secret, written) == [], secret
        assert leaks(secret, first.out + first.err) == [], secret
        logs = {name for name, text in ray_session_logs().items() if leaks(secret, text)}
        assert logs == set(), secret
    for name in ("manifest.json", "_run.json"):
        stored = orjson.loads((out / name).read_bytes())["config"]["teacher"]["openai"]
        assert stored["base_url"] == chat_server.base_url.replace("http://", f"http://{R}@")
        assert stored["extra_body"] == {"api_key": R, "top_k": 1}
    assert f"base_url: http://{R}@127.0.0.1" in (out / "README.md").read_text()

    # the password changes, the data does not: the rerun resumes instead of refusing OUT
    config.write_text(config.read_text().replace(PASSWORD, "rotated-password-0001"))
    assert main(argv) == 0, capsys.readouterr().err
    assert "complete" in capsys.readouterr().out
    assert len(chat_server.bodies) == requests, "nothing was generated again"
