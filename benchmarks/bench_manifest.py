"""What one manifest write costs the driver at the size of a 5M run (10,000 chunks).

    .venv/bin/python benchmarks/bench_manifest.py OUT [--chunks 10000] [--rounds 3]

OUT is any generated OUT (e.g. `bash scripts/demo.sh --out /tmp/demo`): its chunk records
are repeated under new chunk numbers up to `--chunks`, then `stage_stats` (the stages' merged
counts) and `ShardStore.write_manifest` run as the driver runs them during a run
(datagen/pipeline/live_manifest.py) into a temporary directory. Prints CPU seconds of each
part, wall seconds, and the manifest's size.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from datagen.pipeline.shards import ShardStore
from datagen.pipeline.stages.base import configured_stages
from datagen.pipeline.summary import stage_stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="a generated OUT whose chunk records are repeated")
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    source = ShardStore(args.out)
    records = source.records()
    if not records:
        raise SystemExit(f"{args.out}: no complete chunk to repeat")
    repeated = [dataclasses.replace(records[i % len(records)], chunk=i)
                for i in range(args.chunks)]
    stages = configured_stages(_config(args.out))
    with tempfile.TemporaryDirectory() as target:
        store = ShardStore(target)
        for _ in range(args.rounds):
            wall, cpu = time.perf_counter(), time.process_time()
            stats = stage_stats(stages, repeated)
            merged = time.process_time()
            store.write_manifest("bench", {}, args.chunks, repeated, stats, [])
            written = time.process_time()
            print(f"{args.chunks:,} chunks: stage_stats {merged - cpu:.2f} CPU-s, write "
                  f"{written - merged:.2f} CPU-s, wall {time.perf_counter() - wall:.2f} s, "
                  f"{(Path(target) / 'manifest.json').stat().st_size / 1e6:.1f} MB")


def _config(out: str):
    """The OUT's own config (its manifest records it), so its stages merge their counts."""
    import orjson

    from datagen.config import GenerateConfig

    manifest = orjson.loads((Path(out) / "manifest.json").read_bytes())
    return GenerateConfig(**{**manifest["config"], "out": out})


if __name__ == "__main__":
    main()
