"""What a checkpoint was trained on, saved beside its weights (`training.json`).

`trainer eval` checks its held-out tasks against training shards (trainer/heldout.py), but
only those `--shards` names: an evaluation that forgot them, or named another OUT, checked no
instruction and could not say what the model had seen. Every checkpoint now records its data:
its run's OUT and, through `model.init_from`, the OUTs behind the weights it started from (a
DPO or PPO checkpoint names the SAD run's OUT too), and a digest of the trainer code that
trained it. `trainer eval` without `--shards` checks against those OUTs, and its report says
where the list came from.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

LINEAGE_FILE = "training.json"
MAX_BYTES = 1 << 20  # a record names a few paths; a larger file is not ours


def lineage(cfg: Any) -> dict[str, Any]:
    """The record of a run (paths as the driver resolved them: absolute, or URIs). Weights
    with no record (released ones, or a checkpoint from before records) add no data, and
    `init_from_recorded` says so."""
    inherited = recorded_shards(cfg.model.init_from) if cfg.model.init_from else []
    own = [str(cfg.shards)] if cfg.shards else []
    return {"recipe": cfg.recipe, "shards": list(dict.fromkeys([*own, *(inherited or [])])),
            "init_from": cfg.model.init_from,
            "init_from_recorded": None if not cfg.model.init_from else inherited is not None,
            "code": trainer_code()}


@functools.cache
def trainer_code() -> str:
    """A digest of the `trainer/` source this process runs (datagen/provenance.py's)."""
    from datagen.provenance import source_digest

    try:
        return source_digest([Path(__file__).parent])
    except OSError:
        return "unknown"


def write_lineage(directory: Path, record: dict[str, Any], step: int) -> None:
    (Path(directory) / LINEAGE_FILE).write_text(json.dumps({**record, "step": step}, indent=2))


def recorded_shards(checkpoint: str | Path) -> list[str] | None:
    """The OUTs `checkpoint`'s record names; None when it has no readable record."""
    path = Path(checkpoint) / LINEAGE_FILE
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        shards = json.loads(path.read_text()).get("shards")
    except (OSError, ValueError, AttributeError):  # missing, unreadable, not an object
        return None
    if not isinstance(shards, list) or not all(isinstance(s, str) and s for s in shards):
        return None
    return shards
