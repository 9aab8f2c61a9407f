"""A real S3 API for tests: moto's server on 127.0.0.1 (module-scoped fixture `s3`), the AWS
environment a process needs to reach it, and helpers to look into buckets. Test modules
import the fixture: `from tests.s3server import s3  # noqa: F401`.

The secret key is a random string, so a test can assert it appears in no log, metric or
config dump (moto accepts any credentials)."""

from __future__ import annotations

import io
import secrets
import socket
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


@dataclass(frozen=True)
class S3:
    endpoint: str
    env: dict[str, str]  # what a process needs to reach the server
    client: object

    @property
    def secret(self) -> str:
        return self.env["AWS_SECRET_ACCESS_KEY"]

    def bucket(self) -> str:
        """A fresh bucket: tests do not see each other's objects."""
        name = f"t-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                       Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def polars_options(self) -> dict[str, str]:
        return {"aws_endpoint_url": self.endpoint,
                "aws_access_key_id": self.env["AWS_ACCESS_KEY_ID"],
                "aws_secret_access_key": self.secret, "aws_region": "us-east-1",
                "aws_allow_http": "true"}


@pytest.fixture(scope="module")
def s3():
    boto3 = pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": f"secret-{secrets.token_hex(8)}",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        patch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        try:
            yield S3(endpoint, env, boto3.client("s3"))
        finally:
            server.stop()


def pq_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def job_env(ray_head, s3: S3, **extra: str) -> dict[str, str]:
    """A CLI's environment with the S3 settings, and the same settings for its Ray workers:
    what `ray job submit --runtime-env-json '{"env_vars": {...}}'` gives a job (workers on a
    running cluster do not inherit the driver's environment)."""
    import orjson

    job = {"runtime_env": {"env_vars": s3.env}}
    return {**ray_head.env, **s3.env, **extra,
            "RAY_JOB_CONFIG_JSON_ENV_VAR": orjson.dumps(job).decode()}
