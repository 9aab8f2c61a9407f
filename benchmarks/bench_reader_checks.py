"""What the whole-OUT checks before reading cost at 5M trajectories: the loaders' conversation
check (`datagen.conversation_checks`, run by `load_sft` / `load_preferences` before the first
row, streaming too) and `datagen verify`'s duplicate-id check (`verify.repeated_ids`).

    .venv/bin/python -m benchmarks.bench_reader_checks                     # 5M, ~5 minutes
    .venv/bin/python -m benchmarks.bench_reader_checks --trajectories 500000

The conversation check reads a few columns of every shard, so its cost is per shard: a real
OUT of `--real` demo trajectories (chunks of 1,000) is generated without Ray, and its shard
list is repeated up to `--trajectories` (the page cache warm: the columns read are ~5% of a
shard's bytes). The duplicate-id check runs on `--trajectories` random 16-hex ids (the
trajectories table; repairs in the demo's proportion) split into parts of 1,000 like shards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.bench_verify import build
from datagen.conversation_checks import check_conversations
from datagen.pipeline.shards import manifest_shards, read_manifest
from datagen.pipeline.verify import repeated_ids

REPAIRS_PER_TRAJECTORY = 0.47  # the demo's (benchmarks/PROFILE.md, bytes table)


def time_conversation_checks(out: Path, trajectories: int) -> None:
    shards = manifest_shards(read_manifest(out))
    real = sum(info.rows for info in shards["trajectories"])
    copies = -(-trajectories // real)
    for table in ("trajectories", "repairs", "preferences"):
        files = [str(out / info.file) for info in shards[table]] * copies
        rows = sum(info.rows for info in shards[table]) * copies
        check_conversations(files[:1], table)  # Arrow's compute kernels load on first use
        started = time.perf_counter()
        check_conversations(files, table)
        seconds = time.perf_counter() - started
        print(f"conversation check {table:<13}{len(files):>8,} shards {rows:>12,} rows "
              f"{seconds:>8.1f} s  {seconds / rows * 1e6:6.2f} us/row")


def random_ids(count: int, generator: np.random.Generator) -> list[pa.ChunkedArray]:
    """`count` random 16-hex ids (the pipeline's id width) in parts of 1,000."""
    raw = generator.integers(0, 2**63, size=count, dtype=np.int64)
    ids = pa.array(np.char.mod("%016x", raw).astype(object))
    return [pa.chunked_array([ids.slice(start, 1000)]) for start in range(0, count, 1000)]


def time_duplicate_ids(trajectories: int) -> None:
    generator = np.random.default_rng(0)
    for table, count in (("trajectories", trajectories),
                         ("repairs", int(trajectories * REPAIRS_PER_TRAJECTORY))):
        parts = random_ids(count, generator)
        held = pa.total_allocated_bytes()  # the ids themselves
        started = time.perf_counter()
        found = repeated_ids(parts)
        seconds = time.perf_counter() - started
        peak = pa.default_memory_pool().max_memory() / 2**20
        print(f"duplicate ids      {table:<13}{len(parts):>8,} parts  {count:>12,} ids "
              f"{seconds:>8.1f} s  ids {held / 2**20:,.0f} MiB, Arrow peak {peak:,.0f} MiB "
              f"({len(found)} repeats)")
        del parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=5_000_000)
    parser.add_argument("--real", type=int, default=2_000, help="generated trajectories")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    time_duplicate_ids(args.trajectories)
    out = Path(tempfile.mkdtemp(prefix="bench-reader-checks-"))
    try:
        build(out, args.real, args.real)
        time_conversation_checks(out, args.trajectories)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
