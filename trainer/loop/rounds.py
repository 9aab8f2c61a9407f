"""Where a round's artefacts live, and when a round counts as complete.

    OUT/loop.json                     the loop's fingerprint and config (a rerun must match)
    OUT/round-NNN/data/               datagen OUT of the round (teacher data; student rollouts,
                                      repairs and repair pairs for r >= 1)
    OUT/round-NNN/mix/trajectories/   r >= 1: what the round trains on (repairs + replay)
    OUT/round-NNN/train/              the SAD run (Ray Train run dir, resumable)
    OUT/round-NNN/dpo/                the optional DPO run
    OUT/round-NNN/{generate,mix,train,dpo,eval}.json   one record per finished phase
    OUT/round-NNN/round.json          the round's manifest, written last: the round is done
    OUT/rounds.jsonl, OUT/rounds.md   the round table, rebuilt from the manifests

Every record is written to a temporary name and renamed, so a killed loop leaves either a
whole record or none; a rerun skips complete rounds and, inside the first incomplete one, the
phases that have a record (generation and training also resume inside themselves).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datagen.bounded_read import read_bounded
from trainer.config import ConfigError

# The most bytes a state file under OUT may have: records are summaries (the largest, a
# `trainer eval` report, holds aggregates, not episodes). A 400 MiB round.json was read whole
# before any check.
STATE_FILE_BYTES = 32 << 20
# What the loop reads from each file; one lacking a key failed as a KeyError traceback.
LOOP_KEYS = ("fingerprint",)
MANIFEST_KEYS = ("round", "checkpoint", "eval", "seconds", "phase_seconds")


class StateFileError(ConfigError):
    """A state file under OUT (loop.json, a round's manifest or phase record) that cannot be
    read as the loop wrote it (cut short, hand-edited, not a regular file): one line naming
    it and what to do (the CLI prints ConfigErrors without a traceback, exit 2). Only an
    absent file means "not done yet"."""


def write_json(path: Path, payload: Any) -> None:
    """Atomically and durably: a reader (or a rerun after a kill or a power loss) sees the
    whole file or none (without the fsync, a power loss could leave the renamed file empty)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as handle:
        handle.write(json.dumps(payload, indent=2, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself
    finally:
        os.close(directory)


def read_json(path: Path, keys: tuple[str, ...] = (), remedy: str = "delete it") -> Any | None:
    """The JSON object in `path` (bounded: STATE_FILE_BYTES), None when there is no file; a
    StateFileError naming `path` and `remedy` when it is not a regular file, not a JSON
    object, or lacks one of `keys`."""
    try:
        data = read_bounded(path, STATE_FILE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        # FileTooLarge and "not a regular file" name the path; errno errors (a directory) do not
        problem = f"{path}: {exc.strerror.lower()}" if exc.strerror else str(exc)
        raise StateFileError(f"{problem}; {remedy}") from None
    try:
        payload = json.loads(data)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise StateFileError(f"{path} is not JSON ({exc}; cut short?); {remedy}") from None
    if not isinstance(payload, dict):
        raise StateFileError(f"{path} holds a JSON {type(payload).__name__}, not an object; "
                             f"{remedy}")
    missing = [key for key in keys if key not in payload]
    if missing:
        raise StateFileError(f"{path} lacks {missing}; {remedy}")
    return payload


@dataclass(frozen=True)
class RoundDir:
    """The directory of round `index` under the loop's OUT."""

    root: Path
    index: int

    @property
    def path(self) -> Path:
        return self.root / f"round-{self.index:03d}"

    @property
    def data(self) -> Path:
        return self.path / "data"

    @property
    def mix(self) -> Path:
        return self.path / "mix"

    @property
    def train(self) -> Path:
        return self.path / "train"

    @property
    def dpo(self) -> Path:
        return self.path / "dpo"

    @property
    def manifest(self) -> Path:
        return self.path / "round.json"

    def record(self, phase: str) -> Path:
        return self.path / f"{phase}.json"

    def done(self, phase: str) -> dict[str, Any] | None:
        """The phase's record, None when the phase has not finished."""
        return read_json(self.record(phase), self.record_keys(phase),
                         f"delete it to redo round {self.index}'s {phase} phase (it resumes "
                         f"from what it left)")

    def record_keys(self, phase: str) -> tuple[str, ...]:
        """What the loop reads from a phase's record (trainer.loop.run)."""
        if phase in ("train", "dpo"):
            return ("checkpoint",)
        return ("repairs",) if phase == "generate" and self.index > 0 else ()

    def complete(self) -> dict[str, Any] | None:
        """The round's manifest, None while the round is not complete."""
        manifest = read_json(self.manifest, MANIFEST_KEYS, self._rebuild_advice)
        if manifest is not None and not isinstance(manifest["eval"], dict):
            raise StateFileError(f"{self.manifest}: 'eval' is not an object; "
                                 f"{self._rebuild_advice}")
        return manifest

    @property
    def _rebuild_advice(self) -> str:
        return f"delete it to rebuild round {self.index}'s manifest from its phase records"


def claim(out: Path, fingerprint: str, config_dump: dict[str, Any]) -> None:
    """Record the loop's fingerprint, or refuse a rerun whose config would change what earlier
    rounds produced (run-only fields - rounds, stop, Ray address - may change)."""
    marker = out / "loop.json"
    existing = read_json(marker, LOOP_KEYS, "it records which config made this out's rounds: "
                         "restore it, or use another out")
    if existing is not None and existing.get("fingerprint") != fingerprint:
        raise ConfigError(f"{out} holds a loop run with another config (fingerprint "
                          f"{existing.get('fingerprint')}, this one {fingerprint}); use another "
                          f"out, or remove it to start over")
    if existing is None:
        write_json(marker, {"fingerprint": fingerprint, "config": config_dump})
