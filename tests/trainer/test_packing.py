"""Packing (trainer.packing): several documents per row with per-document positions and
attention, the same losses and MCH scores as one padded row per document."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.trainer.helpers import tiny_model
from trainer.collate import Collate, Documents
from trainer.config import ConfigError, load_config
from trainer.losses import LossSettings, TeacherSignal, make_loss_fn
from trainer.packing import first_fit_decreasing, pack
from tests.trainer.test_loop import ROOT

CALL, END = 5, 6


def _document(rng, length: int, calls: int, wrong_last: bool = False):
    """Spans PROMPT then (REASON, ACT with a <tool_call>) x calls, the MCH step at each ACT end."""
    ids = rng.integers(10, 300, size=length)
    spans = np.zeros(length, dtype=np.int64)
    step = (length - 8) // calls
    ends = []
    for c in range(calls):
        start = 8 + c * step
        spans[start:start + step // 2] = 1
        spans[start + step // 2:start + step] = 2
        ids[start + step // 2] = CALL
        ends.append(start + step - 1)
    labels = [1] * calls
    if wrong_last:
        labels[-1] = 0
    return ids, spans, np.array(ends), np.array(labels)


def _documents(seed=0, lengths=(70, 40, 55, 30), weights=(1.0, 0.5, 0.0, 1.0)):
    rng = np.random.default_rng(seed)
    docs = [_document(rng, n, 2, wrong_last=w == 0) for n, w in zip(lengths, weights)]
    return Documents([d[0] for d in docs], [d[1] for d in docs], np.array(weights, np.float32),
                     np.zeros(len(docs), np.float32), [d[2] for d in docs], [d[3] for d in docs])


def test_first_fit_decreasing_places_every_document_once_within_capacity():
    lengths = [70, 40, 55, 30, 100, 5]
    rows = first_fit_decreasing(lengths, 128)
    assert sorted(i for row in rows for i in row) == list(range(6))
    assert all(sum(lengths[i] for i in row) <= 128 for row in rows) and len(rows) == 3


def test_packed_rows_restart_positions_and_mask_document_boundaries():
    documents = _documents()
    packed = pack(documents, max_len=128, pad_id=0)
    # rows no wider than the longest document: [70], [55], [40 + 30]
    assert packed["input_ids"].shape == (3, 80)
    assert packed["input_ids"].shape[1] <= Collate(pad_id=0).tensors(documents)["input_ids"].shape[1]
    for row in range(3):
        starts = np.flatnonzero(packed["position_ids"][row] == 0)
        assert (packed["lm_weight"][row, starts] == 0).all()  # no loss across a boundary
        real = packed["span_ids"][row] >= 0
        assert (packed["lm_weight"][row, ~real] == 0).all()
        assert (np.diff(packed["position_ids"][row][~real]) == 1).all()  # padding continues
    assert sorted(np.unique(packed["lm_weight"]).tolist()) == [0.0, 0.5, 1.0]
    # each row is scored by its first document: the negative opens its row
    labels = packed["mch_labels"]
    assert {0, 1} <= set(labels[labels >= 0].tolist())
    assert (packed["mch_positions"][labels >= 0] < 70).all()


def test_packing_gives_the_losses_and_mch_scores_of_separate_rows():
    torch.manual_seed(0)
    model = tiny_model(split_embeddings=True, use_mch=True, tool_call_start_id=CALL,
                       im_end_id=END).train()
    documents = _documents()
    collate = Collate(pad_id=0)
    padded = collate.tensors(documents)
    packed = Collate(pad_id=0, pack_to=128).tensors(documents)
    assert packed["input_ids"].shape[0] < padded["input_ids"].shape[0]
    settings = LossSettings("sad")
    results = []
    for batch in (padded, packed):
        loss_fn = make_loss_fn(batch["input_ids"], batch["span_ids"], TeacherSignal(), settings,
                               batch["lm_weight"])
        out = model(input_ids=batch["input_ids"], span_ids=batch["span_ids"],
                    position_ids=batch.get("position_ids"), use_cache=False, loss_fn=loss_fn,
                    mch_positions=batch["mch_positions"])
        results.append(out)
    torch.testing.assert_close(results[0].loss, results[1].loss, rtol=1e-5, atol=1e-6)
    for part in ("reason", "act", "reason_tokens", "act_tokens"):
        torch.testing.assert_close(results[0].loss_parts[part], results[1].loss_parts[part])
    # the packed rows' first documents get the MCH scores they get alone
    packed_scores = results[1].mch_logits[packed["mch_labels"] >= 0]
    alone = {round(float(s), 5) for s in results[0].mch_logits[padded["mch_labels"] >= 0]}
    assert all(round(float(s), 5) in alone for s in packed_scores)


def test_packing_crossing_documents_would_change_the_loss():
    """The check above can fail: without per-document positions (one sequence per row)
    the second document attends to the first and its loss changes."""
    model = tiny_model(split_embeddings=False, use_mch=False).eval()
    packed = Collate(pad_id=0, pack_to=128).tensors(_documents())
    settings = LossSettings("sad")
    losses = []
    for positions in (packed["position_ids"], None):
        loss_fn = make_loss_fn(packed["input_ids"], packed["span_ids"], TeacherSignal(), settings,
                               packed["lm_weight"])
        losses.append(model(input_ids=packed["input_ids"], span_ids=packed["span_ids"],
                            position_ids=positions, use_cache=False, loss_fn=loss_fn).loss)
    assert abs(losses[0].item() - losses[1].item()) > 1e-4


def test_packing_with_landmark_attention_is_refused_naming_the_fields():
    with pytest.raises(ConfigError, match="data.packing needs model.use_landmark: false"):
        load_config(ROOT / "configs" / "train_tiny.yaml",
                    ["run_dir=r", "shards=s", "tokenizer=t", "data.packing=true",
                     "model.use_landmark=true"])
    cfg = load_config(ROOT / "configs" / "train_tiny.yaml", ["run_dir=r", "shards=s", "tokenizer=t",
                                                              "data.packing=true",
                                                              "model.use_landmark=false"])
    assert cfg.data.packing
