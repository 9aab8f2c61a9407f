"""`data.tables: [.., safety]`: the safety pairs' chosen side as SAD documents (prompt without
loss, the chosen turn's REASON / ACT trained), read through the real stream; refused on an OUT
without safety pairs."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from tests.trainer.test_losses import identity_head
from trainer.collate import Collate
from trainer.config import load_config
from trainer.contract import ANSWER_PREFIX, TOOL_CALL_OPEN
from trainer.data import DataSettings, build_dataset
from trainer.losses import LossSettings, TeacherSignal, make_loss_fn
from trainer.readers.safety import distinct_safety_texts, tokenise_safety
from trainer.contract import ACT, PROMPT, REASON
from trainer.tokens import load_tokenizer
from tests.trainer.test_config import ROOT

WEIGHT = 0.25  # tells safety rows apart from trajectories (weight 1) in a batch


def _safety_texts(out) -> list[tuple[str, str]]:
    texts = []
    for shard in sorted((out / "preferences").glob("part-*.parquet")):
        texts += distinct_safety_texts(str(shard))
    return texts


def test_safety_joins_with_a_weight():
    cfg = load_config(ROOT / "configs" / "train_tiny.yaml",
                      ["data.tables=[trajectories, safety]", "data.table_weights={safety: 0.5}"])
    assert cfg.data.tables == ("trajectories", "safety")
    assert cfg.data.table_weights == {"safety": 0.5}


def test_a_safety_document_is_its_prompt_untrained_then_the_chosen_turn(pipeline_out,
                                                                         trainer_tokenizer):
    texts = _safety_texts(pipeline_out)
    rows = pq.read_table(pipeline_out / "preferences", columns=["source", "chosen_text"])
    safety_rows = [c for s, c in zip(*rows.to_pydict().values()) if s == "safety"]
    assert len(safety_rows) > len(texts) > 0  # benign cases' two pairs share a chosen side
    refusals = [c for _, c in texts if TOOL_CALL_OPEN not in c]
    assert refusals and len(refusals) < len(texts)  # both decisions are there
    settings = DataSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=100_000).read_settings()
    docs = tokenise_safety(texts, settings, WEIGHT)
    assert len(docs) == len(texts)
    tokenizer = load_tokenizer(str(trainer_tokenizer))
    for (prompt, chosen), ids, spans, weight in zip(
            texts, docs.columns["input_ids"], docs.columns["span_ids"], docs.columns["lm_weight"]):
        assert weight == WEIGHT
        assert list(ids) == tokenizer.encode([prompt + chosen])[0][0]
        n_prompt = len(tokenizer.encode([prompt])[0][0])
        assert (spans[:n_prompt] == PROMPT).all()
        turn = spans[n_prompt:]
        assert set(turn.tolist()) == {REASON, ACT}
        act = int(np.flatnonzero(turn == ACT)[0])
        assert (turn[:act] == REASON).all() and (turn[act:] == ACT).all()
        acted = tokenizer.decode(ids[n_prompt + act:]).lstrip()
        opening = TOOL_CALL_OPEN if TOOL_CALL_OPEN in chosen else ANSWER_PREFIX.strip()
        assert acted.startswith(opening)  # ACT starts at the call / the final answer


def test_safety_documents_reach_training_batches_trained_on_the_chosen_turn_only(
        pipeline_out, trainer_tokenizer):
    settings = DataSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=4096, batch_size=4, tables=("trajectories", "safety"),
                            table_weights=(("safety", WEIGHT),))
    dataset, info = build_dataset(settings)
    assert info["safety_shards"] == 2
    batches = list(dataset.iterator().iter_torch_batches(batch_size=1, collate_fn=Collate(0)))
    read = [tuple(b["input_ids"][r][b["span_ids"][r] >= 0].tolist())
            for b in batches for r in torch.nonzero(b["lm_weight"] == WEIGHT)[:, 0].tolist()]
    expected = tokenise_safety(_safety_texts(pipeline_out), settings.read_settings(), WEIGHT)
    assert sorted(read) == sorted(tuple(ids) for ids in expected.columns["input_ids"])  # each once
    batch = next(b for b in batches if (b["lm_weight"] == WEIGHT).any())
    row = int(torch.nonzero(batch["lm_weight"] == WEIGHT)[0])
    ids, spans = batch["input_ids"][row:row + 1], batch["span_ids"][row:row + 1]
    vocab = int(ids.max()) + 1
    hidden = torch.randn(1, ids.shape[1], vocab, requires_grad=True)
    loss_fn = make_loss_fn(ids, spans, TeacherSignal(), LossSettings())
    loss, _ = loss_fn(hidden, identity_head(vocab))
    (grad,) = torch.autograd.grad(loss, hidden)
    predicts = torch.cat([spans[0, 1:], torch.tensor([-1])])  # span kind of the predicted token
    trained = grad[0].abs().sum(-1) > 0
    assert trained[predicts == REASON].all() and trained[predicts == ACT].all()
    assert (predicts == PROMPT).any() and not trained[predicts == PROMPT].any()


def test_safety_without_safety_pairs_is_refused(tokenized_out, tmp_path, trainer_tokenizer):
    out = tmp_path / "out"
    shutil.copytree(tokenized_out / "trajectories", out / "trajectories")
    settings = DataSettings(shards=str(out), tokenizer=str(trainer_tokenizer),
                            tables=("trajectories", "safety"))
    with pytest.raises(ValueError, match="data.tables names 'safety' but .* no preferences/"):
        build_dataset(settings)
