"""What checking an OUT costs: the resume check (size + Parquet footer + rows of every shard)
against the sha256 of every byte, on a 100k-trajectory OUT, with the page cache warm and cold.

    .venv/bin/python benchmarks/bench_verify.py                      # builds /tmp/bench-verify
    .venv/bin/python benchmarks/bench_verify.py --out DIR --trajectories 100000

The OUT is built without Ray: `--real` trajectories (default 10k, the demo config: negatives
and critics on, chunks of 1,000) are generated in this process, then their chunks are copied
under new chunk numbers (markers and manifest included) up to `--trajectories`. The checks'
cost depends on the number and size of the shards, not on what they hold, so the copies cost
what generated chunks would. "Cold" evicts every shard from the page cache first
(posix_fadvise DONTNEED, no privileges needed), so its figure is this disk's read speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from datagen.pipeline.chunk import ChunkProcessor, plan_chunks
from datagen.config import RUN_ONLY_FIELDS, load_config
from datagen.pipeline.shards import ChunkRecord, ShardInfo, ShardStore, read_manifest
from datagen.pipeline.verify import verify_output


def build(out: Path, real: int, total: int) -> ShardStore:
    config = load_config("configs/demo.yaml", {"out": str(out), "num_trajectories": real,
                                               "chunk_size": 1000})
    store = ShardStore(out)
    store.claim("bench", config.model_dump(mode="json", exclude=RUN_ONLY_FIELDS), True)
    processor = ChunkProcessor(config)
    started = time.perf_counter()
    records = [processor.process(chunk) for chunk in plan_chunks(config)]
    print(f"generated {real:,} trajectories in {time.perf_counter() - started:.0f}s")
    for chunk in range(len(records), total // 1000):
        source = records[chunk % len(records)]
        shards = {}
        for table, info in source.shards.items():
            target = store.shard_path(table, chunk)
            shutil.copyfile(out / info.file, target)
            shards[table] = ShardInfo(str(target.relative_to(out)), info.rows, info.bytes,
                                      info.sha256)
        store.marker_path(chunk).write_bytes(ChunkRecord(chunk, shards, source.stats).to_json())
    store.write_manifest("bench", {}, total // 1000, store.records())
    return store


def shard_files(root: Path) -> list[Path]:
    return [root / info["file"] for infos in read_manifest(root)["shards"].values()
            for info in infos]


def evict(root: Path) -> None:
    for path in shard_files(root):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(label: str, run, root: Path, cold: bool) -> None:
    best = float("inf")
    for _ in range(3):
        if cold:
            evict(root)
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    print(f"{label:<52}{'cold' if cold else 'warm':>6}{best * 1000:>10.0f} ms (best of 3)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/tmp/bench-verify")
    parser.add_argument("--trajectories", type=int, default=100_000)
    parser.add_argument("--real", type=int, default=10_000)
    parser.add_argument("--keep", action="store_true", help="reuse an OUT built before")
    args = parser.parse_args()
    out = Path(args.out)
    store = ShardStore(out) if args.keep and (out / "manifest.json").exists() else build(
        out, args.real, args.trajectories)
    shards = shard_files(out)
    size = sum(p.stat().st_size for p in shards)
    print(f"{out}: {len(store.marked_chunks())} chunks, {len(shards)} shards, "
          f"{size / 2**20:,.0f} MiB; load average {os.getloadavg()[0]:.1f}")
    for cold in (False, True):
        timed("resume check (claim: size, footer, rows)", store.drop_damaged, out, cold)
        timed("datagen verify --quick", lambda: verify_output(out, checksum=False), out, cold)
        timed("datagen verify (adds sha256 of every byte)", lambda: verify_output(out), out,
              cold)


if __name__ == "__main__":
    main()
