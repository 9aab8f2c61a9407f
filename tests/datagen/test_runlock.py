"""The run lock on OUT: one run at a time, a refusal that names the holder, and a crashed
holder (SIGKILL) that never blocks the rerun."""

from __future__ import annotations

import os
import signal
import socket

import pytest

from datagen.pipeline.runlock import FileRunLock, LockOwner, RunLocked, lock_holder, run_lock
from datagen.pipeline.shards import OutputConflict
from tests.datagen.helpers import start_lock_holder

@pytest.fixture
def holder(tmp_path):
    """A separate process that holds the lock on tmp_path/out until killed."""
    out = tmp_path / "out"
    proc = start_lock_holder(out, "fp-holder", "--tag", "holder-test")
    try:
        yield out, proc
    finally:
        proc.kill()
        proc.wait()


def test_a_second_run_is_refused_with_the_holders_name(holder):
    out, proc = holder
    with pytest.raises(RunLocked) as info:
        FileRunLock(out, LockOwner.current("fp-second")).acquire()
    message = str(info.value)
    assert f"pid {proc.pid} on {socket.gethostname()}" in message
    assert "fingerprint fp-holder" in message and "--tag holder-test" in message
    assert isinstance(info.value, OutputConflict)  # the CLI's exit code 2
    assert lock_holder(out).pid == proc.pid


def test_a_sigkilled_holder_does_not_block_the_rerun(holder):
    out, proc = holder
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out / "_run.lock").exists()  # the crashed run's record is left behind ...
    assert lock_holder(out) is None      # ... but nobody holds it
    with FileRunLock(out, LockOwner.current("fp-rerun")) as lock:
        assert lock_holder(out).pid == os.getpid()
        assert lock.owner.fingerprint == "fp-rerun"
    assert not (out / "_run.lock").exists()


def test_release_lets_the_next_run_in_and_leaves_no_file(tmp_path):
    out = tmp_path / "out"
    first = FileRunLock(out, LockOwner.current("a"))
    first.acquire()
    with pytest.raises(RunLocked, match="fingerprint a"):
        FileRunLock(out, LockOwner.current("b")).acquire()  # also within one process
    first.release()
    first.release()  # idempotent
    with FileRunLock(out, LockOwner.current("b")):
        assert (out / "_run.lock").exists()
    assert list(out.iterdir()) == []


def test_unusable_outs_are_refused_clearly(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputConflict, match="is a file, not a directory"):
        run_lock(tmp_path / "file", LockOwner.current("fp")).acquire()
    # s3:// takes a lease (tests/datagen/test_s3_output.py); other stores have no conditional put
    assert type(run_lock("s3://bucket/out", LockOwner.current("fp"))).__name__ == "S3LeaseLock"
    with pytest.raises(OutputConflict, match="supports s3://bucket/prefix URIs only"):
        run_lock("gs://bucket/out", LockOwner.current("fp"))
