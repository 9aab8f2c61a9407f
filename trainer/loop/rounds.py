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

from trainer.config import ConfigError


def write_json(path: Path, payload: Any) -> None:
    """Atomically: a reader (or a rerun after a kill) sees the whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Any | None:
    return json.loads(path.read_text()) if path.is_file() else None


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
        return read_json(self.record(phase))

    def complete(self) -> dict[str, Any] | None:
        return read_json(self.manifest)


def claim(out: Path, fingerprint: str, config_dump: dict[str, Any]) -> None:
    """Record the loop's fingerprint, or refuse a rerun whose config would change what earlier
    rounds produced (run-only fields - rounds, stop, Ray address - may change)."""
    marker = out / "loop.json"
    existing = read_json(marker)
    if existing is not None and existing.get("fingerprint") != fingerprint:
        raise ConfigError(f"{out} holds a loop run with another config (fingerprint "
                          f"{existing.get('fingerprint')}, this one {fingerprint}); use another "
                          f"out, or remove it to start over")
    if existing is None:
        write_json(marker, {"fingerprint": fingerprint, "config": config_dump})
