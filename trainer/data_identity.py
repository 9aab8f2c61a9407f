"""Which data a checkpoint read, recognisable wherever a copy of it lies.

A checkpoint's training.json names its OUTs by the paths the driver saw (trainer/lineage.py).
On another machine, or after the OUT was regenerated in place, a path says nothing about the
data: `trainer eval --shards /copy/out` checked held-out tasks against whatever /copy/out held,
and a report could not tell a copy of the training data from another OUT. The identity taken
here is the complete chunks' shards of the tables the leak check reads (`trajectories/`,
`repairs/`) by name and size: what a copy (local, rsync, `aws s3 sync`) keeps and a
regeneration with another seed or config does not. Listing only (no shard is read): a
10,000-chunk OUT costs one listing per table (its stats on a disk).

An OUT *holds* an identity when, for the identity's chunks, it has the same shards with the
same sizes; chunks beside them are fine (an OUT that grew after the fit started still contains
what the fit read, and the leak check reads all of it).
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Any

from trainer.shard_files import complete_part_sizes

TABLES = ("trajectories", "repairs")  # the tables trainer/heldout.py reads instructions from
MAX_DIGITS = 18  # a chunk number fits an int64
MAX_RANGES = 100_000  # a record of more is not ours (10,000 chunks every other one: 5,000)


def data_identity(out: str) -> dict[str, Any] | None:
    """{"chunks": "0-9,12", "files": N, "digest": 16 hex} of OUT's complete chunks, or None
    when it has no such shards or cannot be listed (a fit never fails for its record)."""
    sized = shard_sizes(out)
    if not sized:
        return None
    chunks = sorted({_chunk(key) for key in sized})
    return {"chunks": _ranges(chunks), "files": len(sized), "digest": _digest(sized)}


def shard_sizes(out: str) -> dict[str, int] | None:
    """'table/part-K.parquet' -> bytes, for the complete chunks' shards of TABLES; None when
    OUT cannot be listed. (A name without a chunk number, not datagen's, is left out.)"""
    sized = {}
    try:
        for table in TABLES:
            for name, size in complete_part_sizes(out, table, warn=False).items():
                if _number(name) is not None:
                    sized[f"{table}/{name}"] = int(size)
    except (OSError, ValueError):
        return None
    return sized


def holds(sized: dict[str, int] | None, identity: dict[str, Any]) -> bool:
    """Whether an OUT with these `shard_sizes` has, for every chunk of `identity`, the same
    shards with the same sizes."""
    intervals = parse_ranges(identity.get("chunks"))
    if sized is None or intervals is None:
        return False
    return _fingerprint(sized, intervals) == (identity.get("files"), identity.get("digest"))


class Holdings:
    """Which of some OUTs (their `shard_sizes`, in order) hold each of many identities. Each
    OUT's listing is cut to a chunk range and digested once per distinct range: a loop run
    records an OUT per round, each checked against every OUT, and `holds` per pair re-parsed
    and re-hashed for each (1,000 OUTs: ~10^6 digests)."""

    def __init__(self, sizes: dict[str, dict[str, int] | None]) -> None:
        self.sizes = sizes
        self._by_range: dict[str, dict[tuple[int, str], list[str]]] = {}

    def holders(self, identity: dict[str, Any]) -> list[str]:
        """The OUTs that hold `identity`, in the order given."""
        chunks = identity.get("chunks")
        if not isinstance(chunks, str):
            return []
        if chunks not in self._by_range:
            self._by_range[chunks] = self._index(parse_ranges(chunks))
        return self._by_range[chunks].get((identity.get("files"), identity.get("digest")), [])

    def _index(self, intervals: list[tuple[int, int]] | None) -> dict[tuple[int, str], list[str]]:
        index: dict[tuple[int, str], list[str]] = {}
        for out, sized in self.sizes.items():
            if sized is not None and intervals is not None:
                index.setdefault(_fingerprint(sized, intervals), []).append(out)
        return index


def _fingerprint(sized: dict[str, int], intervals: list[tuple[int, int]]) -> tuple[int, str]:
    """Files and digest of the shards of `sized` within the chunk ranges."""
    kept = {key: size for key, size in sized.items() if _within(_chunk(key), intervals)}
    return len(kept), _digest(kept)


def valid_identity(value: Any) -> bool:
    """A record as `data_identity` writes it (training.json is read, not trusted)."""
    return (isinstance(value, dict) and isinstance(value.get("files"), int)
            and isinstance(value.get("digest"), str)
            and parse_ranges(value.get("chunks")) is not None)


def _chunk(key: str) -> int:
    """'trajectories/part-000012.parquet' -> 12."""
    return _number(key.rsplit("/", 1)[-1])


def _number(name: str) -> int | None:
    digits = name.removeprefix("part-").removesuffix(".parquet")
    return int(digits) if _is_number(digits) else None


def _is_number(text: str) -> bool:
    """ASCII digits only ('²' is a digit to str.isdigit, not to int), at most MAX_DIGITS."""
    return text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS


def _digest(sized: dict[str, int]) -> str:
    text = "\n".join(f"{key}:{size}" for key, size in sorted(sized.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _ranges(chunks: list[int]) -> str:
    """Sorted chunk numbers as '0-9,12,14-15'."""
    spans = [[chunks[0], chunks[0]]]
    for chunk in chunks[1:]:
        if chunk == spans[-1][1] + 1:
            spans[-1][1] = chunk
        else:
            spans.append([chunk, chunk])
    return ",".join(f"{low}-{high}" if high > low else f"{low}" for low, high in spans)


def parse_ranges(text: Any) -> list[tuple[int, int]] | None:
    """'0-9,12' -> [(0, 9), (12, 12)], sorted and disjoint; None for anything else."""
    if not isinstance(text, str) or not text or text.count(",") >= MAX_RANGES:
        return None
    intervals = []
    for part in text.split(","):
        low, dash, high = part.partition("-")
        if not _is_number(low) or (dash and not _is_number(high)):
            return None
        intervals.append((int(low), int(high or low)))
    ordered = all(a[1] < b[0] for a, b in zip(intervals, intervals[1:]))
    return intervals if ordered and all(lo <= hi for lo, hi in intervals) else None


def _within(chunk: int, intervals: list[tuple[int, int]]) -> bool:
    at = bisect.bisect_right(intervals, (chunk, float("inf"))) - 1
    return at >= 0 and intervals[at][0] <= chunk <= intervals[at][1]
