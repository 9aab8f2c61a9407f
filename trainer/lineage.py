"""What a checkpoint was trained on, saved beside its weights (`training.json`).

`trainer eval` checks its held-out tasks against training shards (trainer/heldout.py), but
only those `--shards` names: an evaluation that forgot them, or named another OUT, checked no
instruction and could not say what the model had seen. Every checkpoint now records its data:
its run's OUT and, through `model.init_from`, the OUTs behind the weights it started from (a
DPO or PPO checkpoint names the SAD run's OUT too), and a digest of the trainer code that
trained it. `trainer eval` without `--shards` checks against those OUTs, and its report says
where the list came from. `data` gives each OUT's identity (trainer/data_identity.py), so an
evaluation can tell whether the OUTs it checks against still hold, or are copies of, the
shards the checkpoint read. No URI is recorded with credentials (the config refuses them);
records written before that was refused (before 6ecb774) may hold `user:secret@`, which is
dropped when they are read back, so no report prints a key.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from trainer.data_identity import data_identity, valid_identity
from trainer.shard_files import without_credentials

LINEAGE_FILE = "training.json"
MAX_BYTES = 1 << 20  # a record names a few paths; a larger file is not ours
MAX_OUTS = 1_000  # OUTs one record names (a loop round adds its own): `trainer eval` lists each


def lineage(cfg: Any) -> dict[str, Any]:
    """The record of a run (paths as the driver resolved them: absolute, or URIs). Weights
    with no record (released ones, or a checkpoint from before records) add no data, and
    `init_from_recorded` says so. `data` holds the identity of the run's own OUT as it is now
    and those the starting weights recorded."""
    inherited = recorded_shards(cfg.model.init_from) if cfg.model.init_from else []
    own = [str(cfg.shards)] if cfg.shards else []  # credentials refused by the config
    data = recorded_data(cfg.model.init_from) if cfg.model.init_from else {}
    if own and (identity := data_identity(str(cfg.shards))) is not None:
        data[own[0]] = identity
    return {"recipe": cfg.recipe, "shards": list(dict.fromkeys([*own, *(inherited or [])])),
            "init_from": cfg.model.init_from,
            "init_from_recorded": None if not cfg.model.init_from else inherited is not None,
            "data": data, "code": trainer_code()}


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
    shards = _record(checkpoint).get("shards")
    if (not isinstance(shards, list) or len(shards) > MAX_OUTS
            or not all(isinstance(s, str) and s for s in shards)):
        return None
    return list(dict.fromkeys(map(without_credentials, shards)))


def recorded_data(checkpoint: str | Path) -> dict[str, dict[str, Any]]:
    """The identities `checkpoint`'s record gives its OUTs (none from before they were
    recorded; a malformed entry is left out)."""
    data = _record(checkpoint).get("data")
    if not isinstance(data, dict) or len(data) > MAX_OUTS:
        return {}
    return {without_credentials(out): identity for out, identity in data.items()
            if valid_identity(identity)}


def _record(checkpoint: str | Path) -> dict[str, Any]:
    """training.json as an object; empty when missing, unreadable, not a regular file (a
    FIFO would block the read, /dev/zero never end it) or not an object."""
    from datagen.bounded_read import read_bounded

    try:
        record = json.loads(read_bounded(Path(checkpoint) / LINEAGE_FILE, MAX_BYTES))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested past the parser
        return {}
    return record if isinstance(record, dict) else {}
