"""Worker side of the data path: one composed micro-batch (a stream row, see
trainer.batching) -> `Documents` (NumPy, what the curriculum filters) -> torch tensors,
one padded document per row:

    input_ids, span_ids   [D, W]   right padding (pad id, span id -1), W a multiple of 16
    lm_weight, complexity [D]
    mch_positions/labels  [D, S]   -1 where a row has fewer scored steps
    topk_ids/logprobs     [D, W, K], topk_present [D, W]   (stored teacher top-k)

or, with packing, several documents per row (trainer.packing: `position_ids` [R, W] and a
per-token `lm_weight` [R, W] instead of per-row weight and complexity).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch
from ray.data.collate_fn import NumpyBatchCollateFn


@dataclass
class Documents:
    """The documents of one micro-batch as NumPy arrays (split from the stream row)."""

    input_ids: list[np.ndarray]
    span_ids: list[np.ndarray]
    lm_weight: np.ndarray
    complexity: np.ndarray
    mch_positions: list[np.ndarray]
    mch_labels: list[np.ndarray]
    topk_ids: list[np.ndarray] | None = None       # per document: object array, one per token
    topk_logprobs: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.input_ids)

    def fingerprint(self) -> int:
        """A checksum of the documents' token ids (metrics.jsonl `batches`), so a resumed run
        can be checked for micro-batches trained twice."""
        checksum = 0
        for ids in self.input_ids:
            checksum = zlib.crc32(np.ascontiguousarray(ids, dtype=np.int64).tobytes(), checksum)
        return checksum

    def select(self, keep: np.ndarray) -> "Documents":
        """The documents where `keep` is true."""
        index = np.flatnonzero(keep)

        def pick(values):
            return None if values is None else [values[i] for i in index]
        return Documents(pick(self.input_ids), pick(self.span_ids), self.lm_weight[index],
                         self.complexity[index], pick(self.mch_positions), pick(self.mch_labels),
                         pick(self.topk_ids), pick(self.topk_logprobs))

    @classmethod
    def from_row(cls, batch: dict[str, np.ndarray], with_topk: bool) -> "Documents":
        row = {name: value[0] for name, value in batch.items()}
        cuts = np.cumsum(row["lengths"])[:-1]
        mch_cuts = np.cumsum(row["mch_counts"])[:-1]
        return cls(np.split(np.asarray(row["input_ids"]), cuts),
                   np.split(np.asarray(row["span_ids"]), cuts),
                   np.asarray(row["lm_weight"], dtype=np.float32),
                   np.asarray(row["complexity"], dtype=np.float32),
                   np.split(np.asarray(row["mch_positions"]), mch_cuts),
                   np.split(np.asarray(row["mch_labels"]), mch_cuts),
                   np.split(row["teacher_topk_ids"], cuts) if with_topk else None,
                   np.split(row["teacher_topk_logprobs"], cuts) if with_topk else None)


def pad_steps(positions: list[np.ndarray], labels: list[np.ndarray],
              ) -> dict[str, np.ndarray]:
    width = max([len(p) for p in positions] + [1])
    pos = np.full((len(positions), width), -1, dtype=np.int64)
    lab = np.full((len(positions), width), -1, dtype=np.int64)
    for row, (row_positions, row_labels) in enumerate(zip(positions, labels)):
        pos[row, :len(row_positions)], lab[row, :len(row_labels)] = row_positions, row_labels
    return {"mch_positions": pos, "mch_labels": lab}


def fill_topk(ids_out: np.ndarray, logprobs_out: np.ndarray, present_out: np.ndarray, row: int,
              start: int, token_ids: np.ndarray, token_logprobs: np.ndarray) -> None:
    """Write one document's per-token top-k lists at [row, start:]."""
    for t, (entry_ids, entry_lp) in enumerate(zip(token_ids, token_logprobs)):
        if len(entry_ids):
            ids_out[row, start + t, :len(entry_ids)] = entry_ids
            logprobs_out[row, start + t, :len(entry_lp)] = entry_lp
            present_out[row, start + t] = True


def topk_width(documents: Documents) -> int:
    return max([len(entry) for doc in documents.topk_ids for entry in doc] + [1])


class Collate(NumpyBatchCollateFn):
    """A stream row (one micro-batch) from Ray Data -> tensors: padded (right padding, pad
    span id -1), or packed into rows of `pack_to` tokens. As a collate_fn it takes
    `iter_torch_batches(batch_size=1, ...)` batches; the training loop calls `documents`
    and `tensors` itself so that the curriculum can drop documents before packing."""

    def __init__(self, pad_id: int, pad_multiple: int = 16, with_topk: bool = False,
                 pack_to: int | None = None) -> None:
        super().__init__()
        self.pad_id, self.pad_multiple, self.with_topk = pad_id, pad_multiple, with_topk
        self.pack_to = pack_to

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return self.tensors(self.documents(batch))

    def documents(self, batch: dict[str, np.ndarray]) -> Documents:
        return Documents.from_row(batch, self.with_topk)

    def tensors(self, documents: Documents) -> dict[str, torch.Tensor]:
        if self.pack_to is None:
            arrays = self.pad(documents)
        else:
            from trainer.packing import pack  # packing builds on this module's helpers

            arrays = pack(documents, self.pack_to, self.pad_id, self.pad_multiple, self.with_topk)
        # Arrow-backed arrays are read-only; torch wants writable memory (a copy only then).
        return {name: torch.from_numpy(np.require(value, requirements="W"))
                for name, value in arrays.items()}

    def pad(self, documents: Documents) -> dict[str, np.ndarray]:
        ids, spans = documents.input_ids, documents.span_ids
        width = -(-max(len(x) for x in ids) // self.pad_multiple) * self.pad_multiple
        input_ids = np.full((len(ids), width), self.pad_id, dtype=np.int64)
        span_ids = np.full((len(ids), width), -1, dtype=np.int64)
        for row, (row_ids, row_spans) in enumerate(zip(ids, spans)):
            input_ids[row, :len(row_ids)] = row_ids
            span_ids[row, :len(row_spans)] = row_spans
        out = {"input_ids": input_ids, "span_ids": span_ids, "lm_weight": documents.lm_weight,
               "complexity": documents.complexity}
        out.update(pad_steps(documents.mch_positions, documents.mch_labels))
        if self.with_topk:
            out.update(self._topk(documents, width))
        return out

    @staticmethod
    def _topk(documents: Documents, width: int) -> dict[str, np.ndarray]:
        rows, k = len(documents.topk_ids), topk_width(documents)
        ids = np.zeros((rows, width, k), dtype=np.int64)
        logprobs = np.full((rows, width, k), -np.inf, dtype=np.float32)
        present = np.zeros((rows, width), dtype=bool)
        for row, (row_ids, row_lp) in enumerate(zip(documents.topk_ids, documents.topk_logprobs)):
            fill_topk(ids, logprobs, present, row, 0, row_ids, row_lp)
        return {"topk_ids": ids, "topk_logprobs": logprobs, "topk_present": present}
