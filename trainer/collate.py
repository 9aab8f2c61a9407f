"""Worker side of the data path: a Ray Data numpy batch -> padded torch tensors."""

from __future__ import annotations

import numpy as np
import torch
from ray.data.collate_fn import NumpyBatchCollateFn


def _ragged(column: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(x) for x in column]


class Collate(NumpyBatchCollateFn):
    """Numpy batch from Ray Data -> padded tensors (right padding, pad span id -1)."""

    def __init__(self, pad_id: int, pad_multiple: int = 16, with_topk: bool = False) -> None:
        super().__init__()
        self.pad_id, self.pad_multiple, self.with_topk = pad_id, pad_multiple, with_topk

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        ids, spans = _ragged(batch["input_ids"]), _ragged(batch["span_ids"])
        lengths = [len(x) for x in ids]
        width = -(-max(lengths) // self.pad_multiple) * self.pad_multiple
        input_ids = np.full((len(ids), width), self.pad_id, dtype=np.int64)
        span_ids = np.full((len(ids), width), -1, dtype=np.int64)
        for row, (row_ids, row_spans) in enumerate(zip(ids, spans)):
            input_ids[row, :len(row_ids)] = row_ids
            span_ids[row, :len(row_spans)] = row_spans
        out = {"input_ids": input_ids, "span_ids": span_ids,
               "lm_weight": np.array(batch["lm_weight"], dtype=np.float32),
               "complexity": np.array(batch["complexity"], dtype=np.float32)}
        out.update(self._mch(batch))
        if self.with_topk:
            out.update(self._topk(batch, width))
        return {name: torch.from_numpy(value) for name, value in out.items()}

    @staticmethod
    def _mch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        positions, labels = _ragged(batch["mch_positions"]), _ragged(batch["mch_labels"])
        width = max([len(p) for p in positions] + [1])
        pos = np.full((len(positions), width), -1, dtype=np.int64)
        lab = np.full((len(positions), width), -1, dtype=np.int64)
        for row, (row_positions, row_labels) in enumerate(zip(positions, labels)):
            pos[row, :len(row_positions)], lab[row, :len(row_labels)] = row_positions, row_labels
        return {"mch_positions": pos, "mch_labels": lab}

    @staticmethod
    def _topk(batch: dict[str, np.ndarray], width: int) -> dict[str, np.ndarray]:
        rows_ids, rows_lp = batch["teacher_topk_ids"], batch["teacher_topk_logprobs"]
        k = max([len(entry) for row in rows_ids for entry in row] + [1])
        ids = np.zeros((len(rows_ids), width, k), dtype=np.int64)
        logprobs = np.full((len(rows_ids), width, k), -np.inf, dtype=np.float32)
        present = np.zeros((len(rows_ids), width), dtype=bool)
        for row, (row_ids, row_lp) in enumerate(zip(rows_ids, rows_lp)):
            for t, (entry_ids, entry_lp) in enumerate(zip(row_ids, row_lp)):
                if len(entry_ids):
                    ids[row, t, :len(entry_ids)] = entry_ids
                    logprobs[row, t, :len(entry_lp)] = entry_lp
                    present[row, t] = True
        return {"topk_ids": ids, "topk_logprobs": logprobs, "topk_present": present}
