"""Which code wrote a chunk.

A run resumed after an upgrade keeps the chunks older code wrote: the config fingerprint is
the same, so resume accepts them (the 5M run was resumed across four commits), and before
this nothing in OUT said which chunk came from which code. Every chunk marker now records
`stats.code` - the package version and a digest of the source that makes the rows (every
file of `datagen/`, `mutators/` and `critics/` that the worker runs) - the manifest
counts chunks per code (`code`), and a run whose OUT holds more than one names them.
The user's code that makes rows too - the config's `env_modules` (environments, stages,
scorers) and the modules of `module:Class` environments - gets a digest of its own
(`user_modules`, `user_digest`): an edited environment resumed into the same OUT is a
second code, named like an upgrade of datagen.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SOURCE_PACKAGES = ("datagen", "mutators", "critics")
UNRECORDED = "unrecorded"  # a chunk written before markers named their code
MAX_FIELD = 64  # a hand-edited marker's version or digest, cut for the manifest and notes
MAX_NAMED = 5  # codes a note names; the manifest lists every one
MAX_FILE_BYTES = 1 << 20  # larger files count by name and size (source files are far smaller)
MAX_FILES = 20_000  # files under one root (datagen, mutators and critics: ~125)


def source_digest(roots: Iterable[Path]) -> str:
    """sha256 (16 hex digits) over every file under `roots` (a root may be one file) - its path
    relative to its root's parent, then its bytes, both length-prefixed - except bytecode
    caches. A file over MAX_FILE_BYTES (a user's package with a data dump in it) counts by
    name and size, and a root of more than MAX_FILES files (a package that is a whole project
    tree) is not walked further, "unknown": each worker computes this once, and it must stay
    cheap."""
    digest = hashlib.sha256()
    for root in roots:
        found = ([root] if root.is_file() else
                 (path for path in root.rglob("*") if path.is_file()
                  and "__pycache__" not in path.parts and path.suffix != ".pyc"))
        files = sorted(itertools.islice(found, MAX_FILES + 1))
        if len(files) > MAX_FILES:
            return "unknown"
        for path in files:
            size = path.stat().st_size
            content = path.read_bytes() if size <= MAX_FILE_BYTES else f"size {size}".encode()
            for part in (path.relative_to(root.parent).as_posix().encode(), content):
                digest.update(len(part).to_bytes(8, "little"))
                digest.update(part)
    return digest.hexdigest()[:16]


@functools.cache
def code_identity(user_modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """{"version", "digest"} of the code this process runs, plus {"user_modules",
    "user_digest"} when the config names modules of its own (computed once per set: ~1.4 MB
    read)."""
    from datagen import __version__

    try:  # found, not imported: this module sits below the pipeline and critics
        roots = [Path(importlib.util.find_spec(name).submodule_search_locations[0])
                 for name in SOURCE_PACKAGES]
        digest = source_digest(roots)
    except (OSError, TypeError, AttributeError):  # no source files (a zip, a frozen build)
        digest = "unknown"
    identity: dict[str, Any] = {"version": __version__, "digest": digest}
    if user_modules:
        identity.update(user_modules=list(user_modules), user_digest=user_digest(user_modules))
    return identity


def config_user_modules(env_modules: Sequence[str], env_names: Sequence[str]) -> tuple[str, ...]:
    """The user's modules a run imports: `env_modules`, then the module of each
    `module:Class` environment; datagen's own (already in the source digest) left out."""
    names = [*env_modules, *(name.partition(":")[0] for name in env_names if ":" in name)]
    return tuple(dict.fromkeys(name for name in names
                               if name.partition(".")[0] not in SOURCE_PACKAGES))


def user_digest(modules: Sequence[str]) -> str:
    """source_digest over the files of imported `modules`: a package's whole directory, a
    module's file; "unknown" if one has no source here (a namespace without files, a build)."""
    roots: list[Path] = []
    for name in modules:
        try:  # imported already, except a `module:Class` environment no task has drawn yet
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the run reports the import failure itself
            return "unknown"
        paths = getattr(module, "__path__", None)
        if paths is not None:  # a package: every file under it
            roots += [Path(path) for path in paths]
        elif getattr(module, "__file__", None):
            roots.append(Path(module.__file__))
        else:
            return "unknown"
    try:
        return source_digest(roots)
    except OSError:
        return "unknown"


def chunk_code(stats: dict[str, Any]) -> tuple[str, str, str, str]:
    """(version, digest, user modules, user digest) a marker's stats record; UNRECORDED for an
    older marker; the last two "" when the run named no modules of its own."""
    code = stats.get("code")
    if not isinstance(code, dict):
        return UNRECORDED, UNRECORDED, "", ""
    modules = code.get("user_modules")
    modules = ", ".join(map(str, modules)) if isinstance(modules, list) else ""
    return (str(code.get("version", UNRECORDED))[:MAX_FIELD],
            str(code.get("digest", UNRECORDED))[:MAX_FIELD], modules[:MAX_FIELD],
            str(code.get("user_digest", ""))[:MAX_FIELD])


def code_counts(records: Iterable[Any]) -> list[dict[str, Any]]:
    """The manifest's `code`: per code (chunk_code), its complete chunks and the first and
    last of them, in the order the code first appears."""
    by_code: dict[tuple[str, str, str, str], list[int]] = {}
    for record in sorted(records, key=lambda r: r.chunk):
        by_code.setdefault(chunk_code(record.stats), []).append(record.chunk)
    counts = []
    for (version, digest, modules, digest_of_modules), chunks in by_code.items():
        entry: dict[str, Any] = {"version": version, "digest": digest}
        if modules or digest_of_modules:
            entry.update(user_modules=modules, user_digest=digest_of_modules)
        counts.append({**entry, "chunks": len(chunks), "first_chunk": chunks[0],
                       "last_chunk": chunks[-1]})
    return counts


def describe(entry: dict[str, Any]) -> str:
    chunks = f"{entry['chunks']:,} chunk(s)"
    if entry["digest"] == UNRECORDED:
        return f"code not recorded (written before datagen recorded it): {chunks}"
    user = (f", your modules ({entry['user_modules']}) digest {entry.get('user_digest')}"
            if entry.get("user_modules") else "")
    return (f"datagen {entry['version']}, source digest {entry['digest']}{user}: {chunks} "
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
