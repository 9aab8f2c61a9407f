"""How much of a chunk's CPU is Python and how much is native libraries, from a py-spy profile.

    pip install py-spy   # not a project dependency
    py-spy record --native -r 500 -f raw -o /tmp/spy.txt -- \\
        .venv/bin/python benchmarks/profile_pipeline.py --n 6000 --no-profile
    python benchmarks/native_split.py /tmp/spy.txt

cProfile cannot answer this (it times Python calls and charges its own overhead to them);
a sampling profiler with native stacks can. Each sample of `ChunkProcessor.process` is charged
to what its deepest Python frame was doing: running its own bytecode or the interpreter's C
code for it (object allocation, dicts, the collector, libc's malloc / memcpy) is "python"; a
call into an extension is that extension's ("sqlite", "arrow" for pyarrow / Arrow / Parquet /
zstd, "json" for orjson and the stdlib encoder, "random" for seeding and drawing, "hash").
Module imports (the warm-up chunk's one-off pandas import) are left out. Printed overall and
per stage, so the question "what would remain if the Python were free" has a number.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

STAGES = {  # a frame of this function marks the sample's stage
    "ChunkProcessor.rollout": "rollout", "TrajectoryStage.run": "trajectories",
    "NegativeStage.run": "negatives", "CriticStage.run": "critics",
    "ShardStore.write_chunk": "write",
}
LIBRARIES = (  # (pattern in the frame's file, category); the first match wins
    ("sqlite", "sqlite"), ("cursor.c", "sqlite"), ("connection.c", "sqlite"),
    ("statement.c", "sqlite"), ("arrow", "arrow"), ("parquet", "arrow"), ("orjson", "json"),
    ("_json.c", "json"), ("_random", "random"), ("libcrypto", "hash"), ("_hashopenssl", "hash"),
    ("sha", "hash"), ("blake2", "hash"), ("_ctypes", "ctypes"),
    ("libpython", None), ("libc.so", None), ("ld-linux", None), ("object.h", None),
)
FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def is_python(file: str) -> bool:
    return file.endswith(".py") or file.startswith("<")


def library(file: str) -> str | None:
    """The frame's category, None for the interpreter and libc, "other" for the rest."""
    for pattern, category in LIBRARIES:
        if pattern in file:
            return category
    return "other"


def charge(frames: list[tuple[str, str]]) -> str:
    """What the deepest Python frame was doing when this stack was sampled."""
    last = max((i for i, (_, file) in enumerate(frames) if is_python(file)), default=-1)
    for _, file in frames[last + 1:]:
        category = library(file)
        if category is not None:
            return category
    return "python"


def split(path: Path) -> tuple[Counter, dict[str, Counter]]:
    overall: Counter = Counter()
    by_stage: dict[str, Counter] = defaultdict(Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = []
        for text in stack.split(";"):
            match = FRAME.match(text)
            frames.append((match["name"], match["file"]) if match else (text, text))
        names = [name for name, _ in frames]
        if "ChunkProcessor.process" not in names or "_find_and_load" in names:
            continue
        category = charge(frames)
        stage = next((STAGES[name] for name in names if name in STAGES), "between stages")
        overall[category] += int(count)
        by_stage[stage][category] += int(count)
    return overall, by_stage


def show(label: str, counts: Counter, total: int) -> None:
    part = sum(counts.values())
    shares = "  ".join(f"{category} {value / part:.0%}"
                       for category, value in counts.most_common())
    print(f"{label:<16}{part / total:>6.1%} of the chunk   {shares}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="py-spy record -f raw output")
    args = parser.parse_args()
    overall, by_stage = split(args.profile)
    total = sum(overall.values())
    if not total:
        raise SystemExit(f"{args.profile}: no samples inside ChunkProcessor.process")
    print(f"{total:,} samples inside ChunkProcessor.process (imports left out)")
    show("all", overall, total)
    for stage, counts in sorted(by_stage.items(), key=lambda item: -sum(item[1].values())):
        show(stage, counts, total)


if __name__ == "__main__":
    main()
