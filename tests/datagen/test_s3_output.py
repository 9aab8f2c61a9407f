"""OUT on object storage (s3://), against a real S3 API: moto's server on 127.0.0.1.

The shard store on a bucket (marker last, unmarked shards ignored, damaged chunks dropped), the
run lease (conditional puts, heartbeat, takeover after the TTL), and `datagen generate` into
s3:// end to end: exact N, SIGKILL part way and rerun, read back with Polars, Ray Data and the
trainer's reader, `datagen verify` / `inspect` on the URI."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.pipeline.runlock import LockOwner, RunLocked, lock_holder, run_lock
from datagen.pipeline.s3lease import S3LeaseLock
from datagen.pipeline.shards import ShardStore
from tests.conftest import ROOT
from tests.s3server import S3, job_env, pq_bytes, s3  # noqa: F401 - s3 is a fixture

pytest.importorskip("boto3")
pytest.importorskip("moto.server")


def _table(ids: list[str]) -> pa.Table:
    return pa.table({"id": ids, "n": list(range(len(ids)))})


# the shard store on a bucket ---------------------------------------------------------------

def test_marker_last_and_unmarked_shards_are_not_complete(s3):
    bucket = s3.bucket()
    store = ShardStore(f"s3://{bucket}/out", ["trajectories"])
    assert store.claim("fp", {"seed": 1}, overwrite=False) == []
    store.write_chunk(0, {"trajectories": _table(["a", "b"])}, {})
    # a chunk killed after its shard and before its marker: the shard exists, unmarked
    store.storage.write("trajectories/part-000001.parquet", pq_bytes(_table(["x"])))
    assert store.complete_chunks() == {0}
    assert s3.keys(bucket, "out/_chunks/") == ["out/_chunks/chunk-000000.json"]
    record = store.records()[0]
    assert record.shards["trajectories"].file == "trajectories/part-000000.parquet"
    assert record.shards["trajectories"].rows == 2
    manifest = store.write_manifest("fp", {"seed": 1}, 2, store.records())
    assert manifest["counts"] == {"trajectories": 2} and not manifest["complete"]
    assert abs(store.storage.modified("manifest.json") - time.time()) < 60  # inspect: its age
    # the rerun of chunk 1 overwrites the leftover at the same key
    store.write_chunk(1, {"trajectories": _table(["c"])}, {})
    assert pq.read_table(io.BytesIO(store.storage.read("trajectories/part-000001.parquet"))
                         ).column("id").to_pylist() == ["c"]


def test_claim_drops_a_chunk_whose_shard_is_gone_and_refuses_a_foreign_prefix(s3):
    bucket = s3.bucket()
    store = ShardStore(f"s3://{bucket}/out", ["trajectories"])
    store.claim("fp", {}, overwrite=False)
    for chunk in range(3):
        store.write_chunk(chunk, {"trajectories": _table([f"id{chunk}"])}, {})
    s3.client.delete_object(Bucket=bucket, Key="out/trajectories/part-000001.parquet")
    dropped = ShardStore(f"s3://{bucket}/out", ["trajectories"]).claim("fp", {}, False)
    assert [(d.chunk, d.reason) for d in dropped] == [
        (1, "trajectories/part-000001.parquet: missing")]
    assert store.complete_chunks() == {0, 2}
    with pytest.raises(Exception, match="different config"):
        store.claim("other-fp", {}, overwrite=False)
    s3.client.put_object(Bucket=bucket, Key="theirs/data.csv", Body=b"1")
    with pytest.raises(Exception, match="was not written by datagen"):
        ShardStore(f"s3://{bucket}/theirs").claim("fp", {}, overwrite=True)
    assert s3.keys(bucket, "theirs/") == ["theirs/data.csv"]  # nothing of theirs deleted


# the run lease -----------------------------------------------------------------------------

_HOLD_LEASE = """
import sys, time
from datagen.pipeline.runlock import LockOwner, run_lock
lock = run_lock(sys.argv[1], LockOwner.current("fp-holder"))
lock.acquire()
print("locked", flush=True)
time.sleep(600)
"""


def _lease_holder(s3: S3, uri: str, ttl_s: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_LEASE, uri, "--tag", "lease-test"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **s3.env, "PYTHONPATH": str(ROOT),
                                 "DATAGEN_LEASE_TTL_S": str(ttl_s)})
    if proc.stdout.readline().strip() != "locked":
        proc.kill()
        raise RuntimeError("the lease holder did not start")
    return proc


def test_a_live_lease_refuses_a_second_run_and_a_dead_ones_is_taken_over(s3):
    uri = f"s3://{s3.bucket()}/out"
    proc = _lease_holder(s3, uri, ttl_s=1.5)
    try:
        time.sleep(2.5)  # past the TTL: only the heartbeat keeps the lease young
        with pytest.raises(RunLocked) as info:
            run_lock(uri, LockOwner.current("fp-second")).acquire()
        assert f"pid {proc.pid} on {socket.gethostname()}" in str(info.value)
        assert "fingerprint fp-holder" in str(info.value) and "lease-test" in str(info.value)
        assert lock_holder(uri).pid == proc.pid
        os.kill(proc.pid, signal.SIGKILL)  # a crashed run: nobody deletes its lease
        proc.wait()
        with pytest.raises(RunLocked):  # not yet stale
            S3LeaseLock(uri, {"pid": 1}, ttl_s=1.5).acquire()
        time.sleep(2.5)
        assert lock_holder(uri) is None
        with run_lock(uri, LockOwner.current("fp-rerun")):
            assert lock_holder(uri).pid == os.getpid()
        assert lock_holder(uri) is None
        assert s3.keys(uri.split("/")[2]) == []  # released: the lease object is gone
    finally:
        proc.kill()
        proc.wait()


def test_of_two_runs_starting_together_exactly_one_gets_the_lease(s3):
    uri = f"s3://{s3.bucket()}/out"
    barrier, outcomes, won = threading.Barrier(4), [], []

    def start(n: int) -> None:
        lock = S3LeaseLock(uri, {"host": "h", "pid": n, "started": "now", "command": "c",
                                 "fingerprint": "fp"}, ttl_s=30)
        barrier.wait()
        try:
            lock.acquire()
            outcomes.append(("won", n))
            won.append(lock)
        except RunLocked as exc:
            outcomes.append(("refused", exc.owner.pid if exc.owner else None))

    threads = [threading.Thread(target=start, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for lock in won:
        lock.release()  # its heartbeat would outlive the server
    winners = [n for what, n in outcomes if what == "won"]
    assert len(winners) == 1
    assert all(n == winners[0] for what, n in outcomes if what == "refused")


# datagen generate into s3:// ---------------------------------------------------------------

def _generate_args(uri: str, n: int, chunk: int, address: str) -> list[str]:
    return [sys.executable, "-m", "datagen", "generate", "--config", "configs/demo.yaml",
            "--out", uri, "--num-trajectories", str(n), "--set", f"chunk_size={chunk}",
            "--address", address, "--no-progress"]


def _job_env(ray_head, s3: S3, ttl_s: float = 120.0) -> dict[str, str]:
    return job_env(ray_head, s3, DATAGEN_LEASE_TTL_S=str(ttl_s))


@pytest.mark.slow
def test_generate_into_s3_killed_part_way_reruns_to_exactly_n(ray_head, s3, capsys):
    bucket = s3.bucket()
    uri, n, chunk = f"s3://{bucket}/runs/demo", 800, 100
    env = _job_env(ray_head, s3, ttl_s=3.0)
    proc = subprocess.Popen(_generate_args(uri, n, chunk, ray_head.address), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None and \
            not s3.keys(bucket, "runs/demo/_chunks/"):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    markers = s3.keys(bucket, "runs/demo/_chunks/")
    assert 1 <= len(markers) < n // chunk, "the kill must land part way through the run"
    # a chunk the kill cut short leaves an unmarked shard: plant one with ids of no task
    assert f"runs/demo/_chunks/chunk-{n // chunk - 1:06d}.json" not in markers
    last = f"runs/demo/trajectories/part-{n // chunk - 1:06d}.parquet"
    s3.client.put_object(Bucket=bucket, Key=last, Body=pq_bytes(_table(["planted"] * 5)))

    rerun = subprocess.run(_generate_args(uri, n, chunk, ray_head.address), cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    if rerun.returncode == 2:  # the killed run's lease had not expired yet: refused, named
        assert "is in use by another datagen run" in rerun.stderr
        assert f"pid {proc.pid}" in rerun.stderr
        time.sleep(3.5)
        rerun = subprocess.run(_generate_args(uri, n, chunk, ray_head.address), cwd=ROOT,
                               env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "complete" in rerun.stdout
    assert len(s3.keys(bucket, "runs/demo/_chunks/")) == n // chunk
    assert "runs/demo/_run.lock" not in s3.keys(bucket)  # released

    # read back: Polars straight from the bucket
    df = pl.scan_parquet(f"{uri}/trajectories/*.parquet",
                         storage_options=s3.polars_options()).select("id", "task_id").collect()
    assert df.height == n and df["id"].n_unique() == n and df["task_id"].n_unique() == n
    assert "planted" not in df["id"].to_list()

    # Ray Data from the URI (its workers reach the store with their own environment)
    import ray

    dataset = ray.data.read_parquet(f"{uri}/trajectories", columns=["id"],
                                    runtime_env={"env_vars": s3.env})
    assert dataset.count() == n

    # the trainer's shard reader on the same URI: the listing, then the rows of a pool's
    # paired preferences/ shard found from the paths Ray Data reports (the trainer's stream)
    from trainer.data import inspect_shards
    from trainer.documents import paired_file, paired_rows
    from trainer.shard_files import full_uri

    layout = inspect_shards(uri)
    assert len(layout.trajectory_files) == n // chunk
    assert all(f.startswith(f"{uri}/trajectories/part-") for f in layout.trajectory_files)
    assert len(layout.negative_pairs) == n // chunk
    assert paired_file(layout.trajectory_files[0], "preferences") == layout.negative_pairs[0][1]
    pool = ray.data.read_parquet(layout.trajectory_files[:1], columns=["id"], include_paths=True,
                                 runtime_env={"env_vars": s3.env}).take(20)
    sources = {row["id"]: full_uri(row["path"], uri) for row in pool}
    assert set(sources.values()) == {layout.trajectory_files[0]}
    pairs = paired_rows(sources, "preferences", "trajectory_id", ["trajectory_id", "source"])
    assert pairs.num_rows > 0 and set(pairs.column("trajectory_id").to_pylist()) <= set(sources)

    from datagen.pipeline.cli import main

    assert main(["verify", uri]) == 0
    assert "intact and complete" in capsys.readouterr().out
    assert main(["inspect", uri, "--samples", "1"]) == 0
    inspected = capsys.readouterr().out
    assert f"trajectories: {n:,} rows" in inspected and "[ACT" in inspected


def test_verify_on_an_unreachable_store_is_one_clear_line(s3):
    env = {**os.environ, **s3.env, "PYTHONPATH": str(ROOT),
           "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"}
    result = subprocess.run([sys.executable, "-m", "datagen", "verify", "s3://nowhere/out"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("datagen: ") and "Traceback" not in result.stderr
    assert "s3://nowhere/out" in result.stderr and s3.secret not in result.stderr


def test_the_trainer_keeps_a_shards_uri_as_it_is(tmp_path):
    """`trainer fit` makes paths absolute for its workers; a URI is the same everywhere."""
    from trainer.config import TrainConfig
    from trainer.fit import absolute_paths

    config = TrainConfig(run_dir=str(tmp_path / "run"), shards="s3://bucket/runs/demo",
                         tokenizer="tok")
    assert absolute_paths(config).shards == "s3://bucket/runs/demo"
    local = absolute_paths(config.model_copy(update={"shards": "out/demo"})).shards
    assert os.path.isabs(local) and local.endswith("/out/demo")


def test_a_worker_that_cannot_reach_the_store_says_how_to_fix_it(s3, monkeypatch):
    from datagen.pipeline.preflight import OutProbe

    probe = OutProbe.create(f"s3://{s3.bucket()}/out/_tmp")
    assert probe.check() is None  # the driver's environment reaches it
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # a worker's without it
    problem = probe.check()
    assert problem is not None and "OUT is not readable here" in problem
    assert "AWS_ENDPOINT_URL" in problem and "runtime_env" in problem
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    probe.remove()
    assert probe.check() is not None  # removed


def test_the_s3_specific_endpoint_variable_wins(s3, monkeypatch):
    from datagen.pipeline.storage import open_storage

    bucket = s3.bucket()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # another service's
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
    storage = open_storage(f"s3://{bucket}/out")
    storage.write("a/b.txt", b"hello")
    assert storage.read("a/b.txt") == b"hello" and storage.kind() == "dir"
    assert s3.keys(bucket) == ["out/a/b.txt"]
