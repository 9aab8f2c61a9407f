"""An OUT URI with a query string or fragment is refused in one line before any request:
pyarrow's `FileSystem.from_uri` takes options from the query, so
`s3://bucket/out?endpoint_override=evil.example:9000` sent every write, signed with the
environment's credentials, to that host."""

from __future__ import annotations

import pytest

import datagen.pipeline.s3lease
import datagen.pipeline.storage
from datagen.pipeline.cli import main

URIS = ["s3://bucket/out?endpoint_override=evil.example:9000",
        "s3://bucket/out?scheme=http", "s3://bucket/out#part", "file:///tmp/out?x=1"]


@pytest.fixture
def no_requests(monkeypatch):
    """Every way datagen reaches a store fails the test (the pyarrow filesystem made for a
    URI, the lease's boto3 client)."""
    def request(*args, **kwargs):
        raise AssertionError("a store was reached before the URI was refused")

    monkeypatch.setattr(datagen.pipeline.storage, "_filesystem", request)
    monkeypatch.setattr(datagen.pipeline.s3lease, "_client", request)


def _refused(capsys, rc: int) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "query string or fragment" in err and "AWS_ENDPOINT_URL_S3" in err, err
    return err


@pytest.mark.parametrize("uri", URIS)
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_verify_and_inspect_refuse_uri_options(no_requests, capsys, uri, command):
    assert uri in _refused(capsys, main([command, uri]))


@pytest.mark.parametrize("uri", URIS[:3])
def test_generate_refuses_uri_options_before_the_run_lock(no_requests, capsys, uri,
                                                          monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # the way to say it
    _refused(capsys, main(["generate", "--config", "configs/demo.yaml", "--no-progress",
                           "--out", uri]))


def test_a_local_path_with_a_question_mark_is_still_a_path(tmp_path, capsys):
    out = tmp_path / "what?#"
    assert main(["verify", str(out)]) == 2
    assert "query string" not in capsys.readouterr().err


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_credentials_in_an_out_uri_are_refused_and_never_shown(no_requests, capsys, command):
    rc = main([command, "s3://AKIAEXAMPLE:s3cr3tValue@bucket/out?x=1"])
    shown = capsys.readouterr().err.strip()
    assert rc == 2 and len(shown.splitlines()) == 1, shown
    assert "credentials" in shown and "s3://***@bucket/out" in shown, shown
    assert "s3cr3tValue" not in shown and "AKIAEXAMPLE" not in shown


def test_generate_refuses_credentials_in_the_out_uri(no_requests, capsys):
    rc = main(["generate", "--config", "configs/demo.yaml", "--no-progress",
               "--out", "s3://AKIAEXAMPLE:s3cr3tValue@bucket/out"])
    shown = capsys.readouterr().err.strip()
    assert rc == 2 and "credentials" in shown and "s3cr3tValue" not in shown, shown
