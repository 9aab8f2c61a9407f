"""Cost of a checkpoint's data identity (trainer/data_identity.py) on a large OUT.

    .venv/bin/python benchmarks/bench_data_identity.py [--chunks 10000] [--reps 5]

Every fit records its OUT's identity when its first step reports (one listing per table), and
`trainer eval` lists each OUT it checks once more to compare. A 5M-trajectory run in chunks of
500 has 10,000 chunks: this builds an OUT of that many (empty-content shards of varied sizes
under trajectories/ and repairs/, a marker per chunk, on the local disk under --dir) and times
`data_identity` and `shard_sizes` + `holds`, wall and CPU of this process, median and range.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.data_identity import data_identity, holds, shard_sizes  # noqa: E402


def build_out(root: Path, chunks: int, seed: int = 0) -> Path:
    """An OUT layout of `chunks` complete chunks: trajectories and (for 9 in 10) repairs."""
    rng = random.Random(seed)
    for folder in ("trajectories", "repairs", "_chunks"):
        (root / folder).mkdir(parents=True)
    for chunk in range(chunks):
        name = f"part-{chunk:06d}.parquet"
        (root / "trajectories" / name).write_bytes(b"x" * rng.randrange(1, 4096))
        if rng.random() < 0.9:
            (root / "repairs" / name).write_bytes(b"y" * rng.randrange(1, 512))
        (root / "_chunks" / f"chunk-{chunk:06d}.json").write_text("{}")
    return root


def timed(function, reps: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(reps):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return walls, cpus


def spread(values: list[float]) -> str:
    return (f"{statistics.median(values) * 1e3:.0f} ms "
            f"({min(values) * 1e3:.0f}-{max(values) * 1e3:.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to build the OUT (a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        out = str(build_out(Path(folder) / "out", args.chunks))
        identity = data_identity(out)
        print(f"{args.chunks:,} chunks, {identity['files']:,} shards: {identity['chunks']}")
        for name, function in (("data_identity", lambda: data_identity(out)),
                               ("shard_sizes + holds", lambda: holds(shard_sizes(out), identity))):
            walls, cpus = timed(function, args.reps)
            print(f"  {name:20s} wall {spread(walls)}, CPU {spread(cpus)}, {args.reps} reps")


if __name__ == "__main__":
    main()
