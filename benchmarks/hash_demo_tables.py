"""Hash every table of a small demo run, to show a speed change leaves the outputs alone.

    .venv/bin/python -m benchmarks.hash_demo_tables            # 300 trajectories, 3 chunks
    .venv/bin/python -m benchmarks.hash_demo_tables --n 300 --chunk-size 100 --rows

Runs `configs/demo.yaml`'s pipeline in one process (no Ray) over tasks [0, n) in chunks and
prints, per table, the row count and a sha256 of its rows in order (each row as sorted-key
JSON). Run it in two checkouts and compare the lines; `--rows` also prints a hash per source
and kind of the preference rows, to say which rows a change touched.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
from collections import defaultdict

import orjson

from benchmarks.profile_pipeline import build


def _row_bytes(row: dict) -> bytes:
    return orjson.dumps(row, option=orjson.OPT_SORT_KEYS, default=str)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300, help="trajectories")
    parser.add_argument("--chunk-size", type=int, default=100)
    parser.add_argument("--rows", action="store_true", help="hash preferences per source, kind")
    args = parser.parse_args()
    from datagen.pipeline.chunk import ChunkPlan

    out = tempfile.mkdtemp(prefix="hash-demo-")
    hashes: dict[str, hashlib._Hash] = defaultdict(hashlib.sha256)
    rows: dict[str, int] = defaultdict(int)
    try:
        processor = build(out, args.n, args.chunk_size, {})
        for chunk in ChunkPlan(args.n, args.chunk_size):
            tables, _ = processor.run_stages(processor.rollout(chunk))
            for name, table in sorted(tables.items()):
                for row in table.to_pylist():
                    hashes[name].update(_row_bytes(row))
                    rows[name] += 1
                    if args.rows and name == "preferences":
                        key = f"preferences[{row['source']}:{row['kind']}]"
                        hashes[key].update(_row_bytes(row))
                        rows[key] += 1
    finally:
        shutil.rmtree(out, ignore_errors=True)
    for name in sorted(hashes):
        print(f"{name:<52}{rows[name]:>7} rows  {hashes[name].hexdigest()[:16]}")


if __name__ == "__main__":
    main()
