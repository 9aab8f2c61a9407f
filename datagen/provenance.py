"""Which code wrote a chunk.

A run resumed after an upgrade keeps the chunks older code wrote: the config fingerprint is
the same, so resume accepts them (the 5M run was resumed across four commits), and before
this nothing in OUT said which chunk came from which code. Every chunk marker now records
`stats.code` - the package version and a digest of the source that makes the rows (every
file of `datagen/`, `mutators/` and `critics/` that the worker runs) - the manifest
counts chunks per code (`code`), and a run whose OUT holds more than one names them.
Environment modules a config adds (`env_modules`) are the user's code and not in the digest.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SOURCE_PACKAGES = ("datagen", "mutators", "critics")
UNRECORDED = "unrecorded"  # a chunk written before markers named their code
MAX_FIELD = 64  # a hand-edited marker's version or digest, cut for the manifest and notes
MAX_NAMED = 5  # codes a note names; the manifest lists every one


def source_digest(roots: Iterable[Path]) -> str:
    """sha256 (16 hex digits) over every file under `roots` - its path relative to its root's
    parent, then its bytes, both length-prefixed - except bytecode caches."""
    digest = hashlib.sha256()
    for root in roots:
        files = sorted(path for path in root.rglob("*") if path.is_file()
                       and "__pycache__" not in path.parts and path.suffix != ".pyc")
        for path in files:
            for part in (path.relative_to(root.parent).as_posix().encode(), path.read_bytes()):
                digest.update(len(part).to_bytes(8, "little"))
                digest.update(part)
    return digest.hexdigest()[:16]


@functools.cache
def code_identity() -> dict[str, str]:
    """{"version", "digest"} of the code this process runs (computed once: ~1.4 MB read)."""
    from datagen import __version__

    try:  # found, not imported: this module sits below the pipeline and critics
        roots = [Path(importlib.util.find_spec(name).submodule_search_locations[0])
                 for name in SOURCE_PACKAGES]
        digest = source_digest(roots)
    except (OSError, TypeError, AttributeError):  # no source files (a zip, a frozen build)
        digest = "unknown"
    return {"version": __version__, "digest": digest}


def chunk_code(stats: dict[str, Any]) -> tuple[str, str]:
    """(version, digest) a marker's stats record; UNRECORDED for an older marker."""
    code = stats.get("code")
    if not isinstance(code, dict):
        return UNRECORDED, UNRECORDED
    return (str(code.get("version", UNRECORDED))[:MAX_FIELD],
            str(code.get("digest", UNRECORDED))[:MAX_FIELD])


def code_counts(records: Iterable[Any]) -> list[dict[str, Any]]:
    """The manifest's `code`: per (version, digest), its complete chunks and the first and last
    of them, in the order the code first appears."""
    by_code: dict[tuple[str, str], list[int]] = {}
    for record in sorted(records, key=lambda r: r.chunk):
        by_code.setdefault(chunk_code(record.stats), []).append(record.chunk)
    return [{"version": version, "digest": digest, "chunks": len(chunks),
             "first_chunk": chunks[0], "last_chunk": chunks[-1]}
            for (version, digest), chunks in by_code.items()]


def describe(entry: dict[str, Any]) -> str:
    chunks = f"{entry['chunks']:,} chunk(s)"
    if entry["digest"] == UNRECORDED:
        return f"code not recorded (written before datagen recorded it): {chunks}"
    return (f"datagen {entry['version']}, source digest {entry['digest']}: {chunks} "
            f"(chunks {entry['first_chunk']}-{entry['last_chunk']})")


def mixed_code_note(counts: list[dict[str, Any]]) -> str | None:
    """A note for the run's summary when OUT's chunks were written by more than one code."""
    if len(counts) < 2:
        return None
    more = f"; and {len(counts) - MAX_NAMED:,} more" if len(counts) > MAX_NAMED else ""
    return (f"this OUT's chunks were written by {len(counts)} versions of the code: "
            + "; ".join(describe(entry) for entry in counts[:MAX_NAMED]) + more
            + " (manifest.json `code`; each chunk marker's `stats.code` names its own)")


def written_by(manifest: dict[str, Any]) -> str | None:
    """"written by ..." for `datagen inspect` and the dataset card, from the manifest's `code`;
    None for a manifest written before it was recorded (or one edited out of shape)."""
    counts = manifest.get("code")
    keys = {"version", "digest", "chunks", "first_chunk", "last_chunk"}
    if not isinstance(counts, list) or not counts or not all(
            isinstance(entry, dict) and keys <= set(entry) for entry in counts):
        return None
    try:
        return "written by " + "; ".join(describe(entry) for entry in counts)
    except (TypeError, ValueError):  # a count that is not a number
        return None
