"""Batch composition (trainer.batching) and repairs in SAD training: which documents share a
micro-batch, and what a repair row contributes to the loss and the MCH."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.trainer.test_losses import identity_head
from trainer.batching import batch_table, plan_batches
from trainer.collate import Collate
from trainer.data import DataSettings, build_dataset, training_batches
from trainer.contract import TRAJECTORY_COLUMNS
from trainer.readers.repairs import repair_documents
from trainer.losses import LossSettings, TeacherSignal, make_loss_fn
from trainer.tokens import ERROR, load_tokenizer, special_ids


def test_each_batch_gets_lm_rows_and_mch_rows_of_similar_length():
    rng = np.random.default_rng(0)
    lengths = rng.integers(100, 3000, size=70)
    weights = np.r_[np.ones(40), np.zeros(30)]  # 40 LM documents, 30 negatives
    plan = plan_batches(lengths, weights, lm_rows=4, mch_rows=2, seed=0)
    assert len(plan) == 10
    for batch in plan:
        assert (weights[batch] > 0).sum() == 4 and (weights[batch] == 0).sum() == 2
    def padding(batches):
        return sum((lengths[b].max() - lengths[b]).sum() for b in batches) / \
            sum(lengths[b].max() * len(b) for b in batches)

    unbucketed = np.split(rng.permutation(40), 10)
    assert padding(plan) < 0.25 * padding(unbucketed)  # one batch pads to similar lengths
    assert sorted(np.concatenate(plan)[weights[np.concatenate(plan)] > 0]) == list(range(40))
    assert [b.tolist() for b in plan] == [b.tolist() for b in plan_batches(lengths, weights, 4, 2, 0)]
    assert [b.tolist() for b in plan] != [b.tolist() for b in plan_batches(lengths, weights, 4, 2, 1)]


def test_too_few_negatives_are_reused_and_none_means_lm_only_batches():
    lengths, weights = np.arange(1, 14), np.r_[np.ones(10), np.zeros(3)]
    plan = plan_batches(lengths, weights, lm_rows=2, mch_rows=2, seed=0)
    assert len(plan) == 5 and all((weights[b] == 0).sum() == 2 for b in plan)
    used = np.concatenate([b[weights[b] == 0] for b in plan])
    assert set(used.tolist()) == {10, 11, 12} and np.bincount(used).max() <= 4
    only_lm = plan_batches(lengths[:10], weights[:10], lm_rows=3, mch_rows=2, seed=0)
    assert sorted(len(b) for b in only_lm) == [1, 3, 3, 3]  # the last run is shorter, not dropped
    assert plan_batches(lengths[10:], weights[10:], 2, 2, 0) == []  # negatives alone: no batch


def test_batch_table_concatenates_documents_and_keeps_their_labels():
    documents = pa.table({
        "input_ids": pa.array([[1, 2, 3], [4, 5], [6]], pa.list_(pa.int32())),
        "span_ids": pa.array([[0, 1, 2], [1, 2], [2]], pa.list_(pa.int8())),
        "mch_positions": pa.array([[2], [], [0]], pa.list_(pa.int32())),
        "mch_labels": pa.array([[1], [], [0]], pa.list_(pa.int8())),
        "lm_weight": pa.array([1.0, 0.5, 0.0], pa.float32()),
        "complexity": pa.array([3.0, 2.0, 3.0], pa.float32()),
        "n_tokens": pa.array([3, 2, 1], pa.int32())})
    table = batch_table(documents, [np.array([1, 0, 2])])
    (row,) = table.to_pylist()
    assert row["input_ids"] == [4, 5, 1, 2, 3, 6] and row["lengths"] == [2, 3, 1]
    assert row["lm_weight"] == [0.5, 1.0, 0.0] and row["mch_counts"] == [0, 1, 1]
    assert row["mch_positions"] == [2, 0] and row["mch_labels"] == [1, 0]
    numpy_row = {name: np.array([np.asarray(value)], dtype=object) for name, value in row.items()}
    collated = Collate(pad_id=9)(numpy_row)
    assert collated["input_ids"][:, :3].tolist() == [[4, 5, 9], [1, 2, 3], [6, 9, 9]]
    assert collated["mch_positions"].tolist() == [[-1], [2], [0]]
    assert collated["mch_labels"].tolist() == [[-1], [1], [0]]


def _repairs_of_first_shard(out):
    shard = sorted((out / "trajectories").glob("part-*.parquet"))[0]
    sources = pq.read_table(shard, columns=["id"]).column("id").to_pylist()
    repairs = pq.read_table(out / "repairs" / shard.name)
    return shard, {tid: str(shard) for tid in sources}, repairs


def test_repairs_are_read_through_the_contract_with_the_wrong_call_as_mch_negative(
        pipeline_out, trainer_tokenizer):
    shard, sources, repairs = _repairs_of_first_shard(pipeline_out)
    assert repairs.num_rows > 0
    settings = DataSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=100_000, use_mch=True)
    rows = repair_documents(sources, settings.read_settings(), 0.5)
    assert len(rows) == repairs.num_rows
    call_id = special_ids(load_tokenizer(str(trainer_tokenizer)))["tool_call_start"]
    with_wrong_call = 0
    for ids, spans, positions, labels, weight in zip(
            *(rows.columns[name] for name in ("input_ids", "span_ids", "mch_positions",
                                              "mch_labels", "lm_weight"))):
        assert weight == 0.5
        spans = np.asarray(spans)
        error = np.flatnonzero(spans == ERROR)
        assert len(error) and (np.diff(error) == 1).all()  # one contiguous wrong step
        if (np.asarray(ids)[error] == call_id).any():
            with_wrong_call += 1
            assert labels[positions.index(int(error[-1]))] == 0  # the wrong call: label 0
        assert labels.count(1) >= 1  # the repaired calls: label 1
    assert with_wrong_call > 0


def test_a_repair_reaches_the_loss_with_its_error_span_masked(pipeline_out, trainer_tokenizer):
    """Through the real stream: repair rows (weight 0.5 tells them apart) are trained on the
    critique (REASON) and the fix (ACT), never on the wrong call (ERROR)."""
    settings = DataSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=4096, batch_size=4, use_mch=False,
                            tables=("trajectories", "repairs"),
                            table_weights=(("repairs", 0.5),))
    dataset, info = build_dataset(settings)
    assert info["repair_shards"] == 2
    batches = list(dataset.iterator().iter_torch_batches(batch_size=1, collate_fn=Collate(0)))
    repair_rows = sum(int((b["lm_weight"] == 0.5).sum()) for b in batches)
    _, _, repairs = _repairs_of_first_shard(pipeline_out)
    assert repair_rows >= repairs.num_rows  # both shards' repairs, each once
    batch = next(b for b in batches if (b["lm_weight"] == 0.5).any())
    row = int(torch.nonzero(batch["lm_weight"] == 0.5)[0])
    ids, spans = batch["input_ids"][row:row + 1], batch["span_ids"][row:row + 1]
    vocab = int(ids.max()) + 1
    hidden = torch.randn(1, ids.shape[1], vocab, requires_grad=True)
    loss, parts = make_loss_fn(ids, spans, TeacherSignal(), LossSettings())(hidden, identity_head(vocab))
    (grad,) = torch.autograd.grad(loss, hidden)
    predicts = torch.cat([spans[0, 1:], torch.tensor([-1])])  # span kind of the predicted token
    trained = grad[0].abs().sum(-1) > 0
    assert (predicts == ERROR).any() and not trained[predicts == ERROR].any()
    assert trained[predicts == 1].all() and trained[predicts == 2].all()
    assert not trained[(predicts == 0) | (predicts == 3)].any()


def test_table_weights_scale_a_documents_share_of_the_loss():
    torch.manual_seed(0)
    spans = torch.tensor([[0, 1, 1, 2, 2], [0, 1, 1, 2, 2]])
    ids = torch.randint(0, 5, spans.shape)
    hidden = torch.randn(2, 5, 5)
    settings = LossSettings("sft")
    per_row = [make_loss_fn(ids[i:i + 1], spans[i:i + 1], TeacherSignal(), settings)(
        hidden[i:i + 1], identity_head(5))[0] for i in range(2)]
    weighted, _ = make_loss_fn(ids, spans, TeacherSignal(), settings,
                               row_weight=torch.tensor([1.0, 0.5]))(hidden, identity_head(5))
    expected = (per_row[0] * 4 + 0.5 * per_row[1] * 4) / (4 + 0.5 * 4)
    assert weighted.item() == pytest.approx(expected.item(), rel=1e-6)


def test_repairs_without_a_repairs_table_are_refused_naming_the_field(tokenized_out, tmp_path,
                                                                     trainer_tokenizer):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(tokenized_out / "trajectories", out / "trajectories")
    settings = DataSettings(shards=str(out), tokenizer=str(trainer_tokenizer),
                            tables=("trajectories", "repairs"))
    with pytest.raises(ValueError, match="data.tables names 'repairs'"):
        build_dataset(settings)


def test_training_batches_stage_without_paths_reads_trajectories_only(pipeline_out,
                                                                      trainer_tokenizer):
    table = pq.read_table(sorted((pipeline_out / "trajectories").glob("*.parquet"))[0],
                          columns=list(TRAJECTORY_COLUMNS)).slice(0, 5)
    settings = DataSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=4096, batch_size=2, use_mch=True)
    out = training_batches(table, settings)
    assert [len(x) for x in out.column("lengths").to_pylist()] in ([1, 2, 2], [2, 1, 2], [2, 2, 1])
