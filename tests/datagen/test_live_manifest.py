"""manifest.json while a run lasts: written at its start and then every EVERY_S seconds; `datagen verify` and `datagen inspect` read a running OUT as progress."""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import orjson
import pyarrow as pa

from datagen.config import GenerateConfig
from datagen.pipeline.chunk import ChunkPlan, ChunkProcessor
from datagen.pipeline.cli import main
from datagen.pipeline.live_manifest import LiveManifest
from datagen.pipeline.shards import ShardStore
from tests.datagen.helpers import start_lock_holder


class SteppedClock:
    """A clock the test moves by hand (the manifest's cadence, not time itself, is tested)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _write_chunks(store: ShardStore, chunks: range) -> list:
    for chunk in chunks:
        ids = [f"{chunk}-{i}" for i in range(50)]
        store.write_chunk(chunk, {"trajectories": pa.table({"id": ids})}, {})
    return [store.read_record(chunk) for chunk in chunks]


def _live(store: ShardStore, total: int, clock, allowed=lambda: True) -> LiveManifest:
    return LiveManifest(lambda records: store.write_manifest("fp", {}, total, records),
                        store.kept, allowed=allowed, every_s=30.0, clock=clock)


def _manifest(store: ShardStore) -> dict:
    return orjson.loads((Path(store.root) / "manifest.json").read_bytes())


def test_the_manifest_follows_the_run_from_its_start_without_rereading_markers(tmp_path):
    store = ShardStore(tmp_path / "out")
    store.claim("fp", {}, overwrite=False)
    kept = _write_chunks(store, range(2))  # a resumed OUT: chunks 0-1 from an earlier run
    store.claim("fp", {}, overwrite=False, planned=6)
    assert [record.chunk for record in store.kept] == [0, 1]
    clock = SteppedClock()
    live = _live(store, 6, clock)
    live.start()
    assert _manifest(store)["chunks"] == {"complete": 2, "total": 6}
    assert not _manifest(store)["complete"]
    new = _write_chunks(store, range(2, 6))
    clock.now = 29.0
    live.add(new[0])  # within EVERY_S of the last write: not yet
    live.add(new[1])
    assert _manifest(store)["chunks"]["complete"] == 2
    clock.now = 30.0
    live.add(new[2])
    manifest = _manifest(store)
    assert manifest["chunks"]["complete"] == 5 and live.writes == 2
    assert [s["file"] for s in manifest["shards"]["trajectories"]] == [
        f"trajectories/part-{chunk:06d}.parquet" for chunk in range(5)]
    assert manifest["counts"]["trajectories"] == 250 and kept[0].chunk == 0


def test_no_write_once_the_run_may_not_write_and_a_failed_write_does_not_stop_it(
        tmp_path, caplog):
    store = ShardStore(tmp_path / "out")
    store.claim("fp", {}, overwrite=False, planned=3)
    records = _write_chunks(store, range(3))
    lost = _live(store, 3, SteppedClock(), allowed=lambda: False)  # an s3 lease taken over
    lost.start()
    lost.add(records[0])
    assert not (tmp_path / "out" / "manifest.json").exists() and lost.writes == 0

    def full_disk(records):
        raise OSError(28, "No space left on device")

    failing = LiveManifest(full_disk, [], clock=SteppedClock())
    with caplog.at_level(logging.WARNING):
        failing.start()
        failing.add(records[0])
    assert failing.writes == 0 and len(failing.records) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "manifest.json not updated during the run: [Errno 28] No space left on device"]


def _running_out(tmp_path: Path) -> ShardStore:
    """An OUT as a run in progress leaves it (real chunks of oracle trajectories, written as a
    chunk worker writes them): 3 chunks in the manifest's last update, 2 more complete since,
    and a shard of a chunk whose marker is not written yet."""
    config = GenerateConfig(out=str(tmp_path / "out"), num_trajectories=80, chunk_size=10,
                            negatives={"enabled": False}, critics={"enabled": False})
    store = ShardStore(config.out, ["trajectories"])
    store.claim("fp", {}, overwrite=False, planned=8)
    processor = ChunkProcessor(config)
    records = [processor.process(chunk) for chunk in list(ChunkPlan(80, 10))[:5]]
    store.write_manifest("fp", {}, 8, records[:3])
    store.storage.write("trajectories/part-000005.parquet", b"PAR1 half written")
    return store


def test_verify_reads_a_running_out_as_progress_and_the_same_out_left_as_damage(
        tmp_path, capsys):
    store = _running_out(tmp_path)
    holder = start_lock_holder(tmp_path / "out", "fp", "live-run")
    try:
        rc = main(["verify", str(store.root)])
        out = capsys.readouterr().out
    finally:
        holder.kill()
        holder.wait()
    assert rc == 1 and "5 shards of 5/8 chunks checked" in out, out
    assert "2 chunk(s) completed since manifest.json's last update were checked against " \
           "their markers; 1 shard file(s) of chunks not complete yet were left alone" in out
    assert "DAMAGED" not in out and "STRAY" not in out
    assert out.strip().endswith("result: intact so far, INCOMPLETE: the run above is still "
                                "writing")

    rc = main(["verify", str(store.root)])  # nobody writes now: a killed run's leftovers
    out = capsys.readouterr().out
    assert rc == 1 and "a run is writing" not in out
    assert out.count("does not list it (an interrupted run; rerun generate)") == 2
    assert "STRAY trajectories/part-000005.parquet" in out


def test_inspect_says_a_run_is_writing_and_shows_what_it_has_written(tmp_path, capsys):
    store = _running_out(tmp_path)
    stamp = time.time() - 42  # the manifest's last update, 42 s ago
    os.utime(store.root / "manifest.json", (stamp, stamp))
    holder = start_lock_holder(tmp_path / "out", "fp", "live-run")
    try:
        assert main(["inspect", str(store.root), "--samples", "0"]) == 0
        out = capsys.readouterr().out
    finally:
        holder.kill()
        holder.wait()
    assert out.startswith(f"{store.root}: INCOMPLETE, 3/8 chunks, fingerprint fp\n"
                          f"  note: a run is writing here now (pid {holder.pid} on ")
    assert re.search(r"live-run\); these are its chunks as of the manifest's last update, "
                     r"4[23] s ago \(at most every 30 s while it runs; less often for an OUT of "
                     r"thousands of chunks\)\n", out)
    assert "trajectories: 30 rows" in out and "per environment:" in out


def test_a_costly_write_spaces_the_next_ones_out(tmp_path):
    """A 5M run's manifest takes ~0.8 CPU-s to write: 100x that between writes."""
    def slow_write(records):
        started = time.thread_time()
        while time.thread_time() - started < 0.01:
            pass

    clock = SteppedClock()
    live = LiveManifest(slow_write, [], every_s=0.1, clock=clock)
    live.start()
    assert live.writes == 1 and live.interval_s >= 1.0
    store = ShardStore(tmp_path / "out")
    store.claim("fp", {}, overwrite=False, planned=3)
    records = _write_chunks(store, range(3))
    clock.now = 0.5  # past every_s, not past the interval
    live.add(records[0])
    assert live.writes == 1
    clock.now = 60.0
    live.add(records[1])
    assert live.writes == 2
