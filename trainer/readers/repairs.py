"""`repairs/` -> documents: the repairs made from a pool's trajectories, read from the
repairs/ shard of the same chunk through the trajectory contract columns (stored tokens /
top-k when the repairs carry them). The wrong call is span kind ERROR: context, embedded in
code mode like any call, never trained, and (when it is a tool call) an MCH step labelled
0; the critique (REASON) and the fix (ACT) are trained, the fix labelled 1."""

from __future__ import annotations

from trainer.contract import REPAIR_KEY, TOKEN_COLUMNS, TOPK_COLUMNS, TRAJECTORY_COLUMNS
from trainer.documents import DocumentRows, ReadSettings, paired_rows
from trainer.readers.trajectories import trajectory_shaped_documents


def repair_documents(sources: dict[str, str], settings: ReadSettings, lm_weight: float,
                     ) -> DocumentRows:
    """Repairs made from the given trajectories (id -> trajectory shard path)."""
    columns = list(TRAJECTORY_COLUMNS) + list(TOKEN_COLUMNS) + \
        (list(TOPK_COLUMNS) if settings.read_topk else [])
    table = paired_rows(sources, "repairs", REPAIR_KEY, columns)
    if table is None or table.num_rows == 0:
        return DocumentRows()
    return trajectory_shaped_documents(table, settings, lm_weight)[0]
