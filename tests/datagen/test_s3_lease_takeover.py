"""A `datagen generate` run whose S3 lease another run took over stops writing: two runs on one
s3:// OUT (moto's server), the first paused (SIGSTOP) past the lease TTL, the second taking its
lease over; resumed, the first commits nothing more (no marker or manifest written, no object
overwritten after the loss) and exits 2 naming the run that holds OUT now."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from datagen.pipeline.runlock import lock_holder
from datagen.pipeline.s3lease import LeaseFence, LeaseLost, S3LeaseLock
from tests.conftest import ROOT
from tests.datagen.test_s3_output import _generate_args, _lease_holder
from tests.s3server import S3, job_env, s3  # noqa: F401 - s3 is a fixture

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

TTL_S = 2.0


def _objects(s3: S3, bucket: str) -> dict[str, tuple[str, object]]:
    """What the run wrote into OUT, with each object's version (ETag, time): run bookkeeping
    excluded (the lease; _tmp/, where a run keeps its own reachability probe)."""
    pages = s3.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="out/")
    return {o["Key"]: (o["ETag"], o["LastModified"]) for page in pages
            for o in page.get("Contents", [])
            if o["Key"] != "out/_run.lock" and not o["Key"].startswith("out/_tmp/")}


def _markers(s3: S3, bucket: str) -> int:
    return len(s3.keys(bucket, "out/_chunks/"))


def _wait_until_quiet(s3: S3, bucket: str, seconds: float) -> None:
    """Until no object changed for `seconds` (the paused driver's workers finish what they
    hold), and at least as long as the lease TTL (the lease goes stale)."""
    last, since = _objects(s3, bucket), time.time()
    deadline = since + 120
    while time.time() < deadline:
        time.sleep(0.25)
        now = _objects(s3, bucket)
        if now != last:
            last, since = now, time.time()
        elif time.time() - since >= seconds:
            return
    raise AssertionError("the paused run's workers kept writing")


def test_a_run_whose_lease_was_taken_over_stops_writing_and_names_the_other_run(ray_head, s3):
    bucket = s3.bucket()
    uri, n, chunk = f"s3://{bucket}/out", 1600, 100
    env = job_env(ray_head, s3, DATAGEN_LEASE_TTL_S=str(TTL_S))
    first = subprocess.Popen(_generate_args(uri, n, chunk, ray_head.address), cwd=ROOT,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    second = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline and first.poll() is None and not _markers(s3, bucket):
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGSTOP)  # a driver that stops answering: GC, swap, a VM
        _wait_until_quiet(s3, bucket, TTL_S + 0.5)
        assert 1 <= _markers(s3, bucket) < n // chunk, "the pause must land part way"
        second = _lease_holder(s3, uri, ttl_s=TTL_S)  # takes the stale lease over, holds it
        before = _objects(s3, bucket)
        os.kill(first.pid, signal.SIGCONT)
        _, stderr = first.communicate(timeout=180)
        assert first.returncode == 2, stderr[-2000:]
        assert "lease was taken over by another datagen run" in stderr
        assert f"pid {second.pid}" in stderr and "Traceback" not in stderr
        after = _objects(s3, bucket)
        # nothing committed or overwritten after the loss: every object as it was, no marker
        # or manifest added; a shard PUT already past its check may have landed, unmarked
        # (ignored by readers and resume; the run holding OUT overwrites it)
        assert {key: after[key] for key in before} == before
        added = sorted(set(after) - set(before))
        marked = {key.rpartition("chunk-")[2].removesuffix(".json")
                  for key in after if key.startswith("out/_chunks/")}
        assert all("/part-" in key and key.rpartition("part-")[2].removesuffix(".parquet")
                   not in marked for key in added), added
        assert lock_holder(uri).pid == second.pid  # and the other run's lease left alone
        assert s3.secret not in stderr
    finally:
        for proc in (first, second):
            if proc is not None:
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.kill()
                proc.wait()


def test_the_fence_passes_for_the_holder_only(s3):
    uri = f"s3://{s3.bucket()}/out"
    record = {"host": "h", "pid": 7, "started": "now", "command": "c", "fingerprint": "fp"}
    with S3LeaseLock(uri, record, ttl_s=30) as lock:
        lock.fence().check()  # ours: passes
        other = LeaseFence(uri, "another run's token")
        assert not other.held()
        with pytest.raises(LeaseLost, match="pid 7 on h"):
            other.check()
    with pytest.raises(LeaseLost, match="gone"):  # released: nobody may write on its word
        lock.fence().check()
