"""The data path: tokenising readers vs the generation side's labels, MCH negatives,
stored teacher top-k, and the Ray Data stream with the worker-side collate. Batch
composition and repairs: tests/trainer/test_batching.py."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.collate import Collate
from trainer.curriculum import CurriculumSampler, pacing_fraction
from trainer.contract import TRAJECTORY_COLUMNS, call_act_text
from trainer.data import DataSettings, build_dataset, inspect_shards
from trainer.documents import document_table
from trainer.negatives import negative_example
from trainer.readers.preferences import negative_documents
from trainer.readers.trajectories import trajectory_shaped_documents
from trainer.tokens import load_tokenizer, special_ids, tool_call_step_ends


def prepare(table, settings, weight=1.0):
    rows, _ = trajectory_shaped_documents(table, settings.read_settings(), weight)
    return document_table(rows, settings.read_topk)


def _first_shard(out):
    return sorted((out / "trajectories").glob("part-*.parquet"))[0]


def test_trainer_tokenisation_equals_the_labels_stored_by_the_pipeline(pipeline_out, tokenized_out,
                                                                       trainer_tokenizer):
    plain = pq.read_table(_first_shard(pipeline_out), columns=list(TRAJECTORY_COLUMNS))
    stored = pq.read_table(_first_shard(tokenized_out))
    assert plain.column("id").to_pylist() == stored.column("id").to_pylist()
    settings = DataSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=100_000)
    ours = prepare(plain, settings)
    assert ours.column("input_ids").to_pylist() == stored.column("input_ids").to_pylist()
    assert ours.column("span_ids").to_pylist() == stored.column("span_ids").to_pylist()
    taken = prepare(stored.select(list(TRAJECTORY_COLUMNS) + ["input_ids", "span_ids"]), settings)
    assert taken.column("input_ids").to_pylist() == stored.column("input_ids").to_pylist()


def test_negative_example_replaces_the_call_and_cuts_after_it(pipeline_out):
    row = pq.read_table(_first_shard(pipeline_out)).slice(0, 1).to_pylist()[0]
    wrong = {"name": "run_query", "arguments": {"sql": "SELECT ünïcode FROM x"}}
    text, spans = negative_example(row["text"], row["spans"], 1, json.dumps(wrong))
    act = next(s for s in row["spans"] if s["kind"] == "ACT" and s["step"] == 1)
    assert text == row["text"][:act["start"]] + call_act_text("run_query", wrong["arguments"])
    assert text.endswith('"arguments": {"sql": "SELECT ünïcode FROM x"}}\n</tool_call><|im_end|>\n')
    assert spans[-1] == {"kind": "ACT", "start": act["start"], "end": len(text), "step": 1}
    assert all(a["end"] == b["start"] for a, b in zip(spans, spans[1:]))
    final_step = max(s["step"] for s in row["spans"])
    assert negative_example(row["text"], row["spans"], final_step, json.dumps(wrong)) is None
    assert negative_example(row["text"], row["spans"], 1, '"not a call"') is None


def test_readers_label_steps_and_read_negatives_from_the_paired_shard(pipeline_out,
                                                                      trainer_tokenizer):
    """MCH negatives are the pipeline's `negative` pairs (prompt_text + rejected_text) of
    the same chunk's preferences/ shard, nothing re-rendered."""
    shard = _first_shard(pipeline_out)
    table = pq.read_table(shard, columns=list(TRAJECTORY_COLUMNS)).slice(0, 16)
    table = table.append_column("path", pa.array([str(shard)] * table.num_rows))
    settings = DataSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=100_000, use_mch=True)
    positives = prepare(table, settings).to_pylist()
    call_id = special_ids(load_tokenizer(str(trainer_tokenizer)))["tool_call_start"]
    assert len(positives) == 16
    for row in positives:
        ends = tool_call_step_ends(np.array(row["input_ids"]), np.array(row["span_ids"]), call_id)
        assert row["mch_positions"] == ends and set(row["mch_labels"]) == {1} and row["lm_weight"] == 1
    scores = {tid: float(i) for i, tid in enumerate(table.column("id").to_pylist())}
    chosen = negative_documents(table, settings.read_settings(), 12, scores)
    negatives = document_table(chosen, False).to_pylist()
    assert len(negatives) == 12
    pairs = pq.read_table(pipeline_out / "preferences" / shard.name).to_pylist()
    tokenizer = load_tokenizer(str(trainer_tokenizer))
    written = {tuple(tokenizer.encode([p["prompt_text"] + p["rejected_text"]])[0][0])
               for p in pairs if p["source"] == "negative"}
    for row in negatives:
        assert tuple(row["input_ids"]) in written  # exactly the text the pipeline wrote
        ends = tool_call_step_ends(np.array(row["input_ids"]), np.array(row["span_ids"]), call_id)
        assert row["lm_weight"] == 0 and row["mch_positions"] == ends
        assert ends[-1] == len(row["input_ids"]) - 1  # the wrong call ends the row: label 0
        assert row["mch_labels"] == [1] * (len(ends) - 1) + [0]  # the source's correct calls: 1
        assert row["complexity"] in scores.values()  # its source trajectory's score
    again = document_table(negative_documents(table, settings.read_settings(), 12, scores), False)
    assert again.to_pylist() == negatives  # the same choice on every epoch and rerun


def test_a_document_without_trained_tokens_is_not_emitted(pipeline_out, trainer_tokenizer):
    table = pq.read_table(_first_shard(pipeline_out), columns=list(TRAJECTORY_COLUMNS)).slice(0, 4)
    settings = DataSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=16)  # inside the system prompt: nothing to train
    assert prepare(table, settings).num_rows == 0


def _stream_batches(dataset, pad_id, with_topk=False):
    return list(dataset.iterator().iter_torch_batches(
        batch_size=1, collate_fn=Collate(pad_id, with_topk=with_topk)))


def test_every_batch_of_the_stream_has_lm_tokens_and_both_mch_classes(pipeline_out,
                                                                      trainer_tokenizer):
    settings = DataSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=1024, batch_size=3, mch_rows=2, use_mch=True,
                            bucket_pool_batches=4)
    dataset, info = build_dataset(settings)
    assert info["negative_shards"] == 2 and not info["tokenised_in_shards"]
    pad_id = special_ids(load_tokenizer(str(trainer_tokenizer)))["pad"]
    batches = _stream_batches(dataset, pad_id)
    lm_documents = 0
    padding, tokens = 0, 0
    for batch in batches:
        real = batch["span_ids"] >= 0
        lengths = real.sum(1)
        assert torch_all_right_padded(real) and batch["input_ids"].shape[1] % 16 == 0
        assert batch["input_ids"].shape[1] <= 1024
        assert (batch["input_ids"][~real] == pad_id).all()
        lm = batch["lm_weight"] > 0
        trained = (batch["span_ids"][lm] == 1) | (batch["span_ids"][lm] == 2)
        assert 1 <= int(lm.sum()) <= 3 and trained.any()  # every step has LM loss
        assert int((~lm).sum()) == 2  # and exactly mch_rows negatives
        labels = batch["mch_labels"][batch["mch_labels"] >= 0]
        assert {0, 1} <= set(labels.tolist())  # both MCH classes
        for row in np.flatnonzero((~lm).numpy()):
            last = int((batch["mch_labels"][row] >= 0).sum()) - 1
            assert batch["mch_labels"][row, last] == 0 and batch["mch_positions"][row, last] == lengths[row] - 1
        lm_documents += int(lm.sum())
        padding += int((~real).sum())
        tokens += real.numel()
    assert lm_documents == 96  # every trajectory exactly once per epoch
    assert padding / tokens < 0.2


def torch_all_right_padded(real) -> bool:
    """Every row is real tokens then padding, never padding first."""
    return bool((real.int().diff(dim=1) <= 0).all())


def test_stored_teacher_topk_reaches_the_batch_aligned(topk_out, trainer_tokenizer):
    settings = DataSettings(shards=str(topk_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=1024, batch_size=2, read_topk=True)
    dataset, info = build_dataset(settings)
    assert info["teacher_topk"] and info["tokenised_in_shards"]
    # the whole stream (a limit would be pushed below the composing stage by Ray Data)
    batch = _stream_batches(dataset, 0, with_topk=True)[0]
    assert batch["input_ids"].shape[0] == 2
    present = batch["topk_present"]
    assistant = (batch["span_ids"] == 1) | (batch["span_ids"] == 2)
    assert present.equal(assistant)
    # the stored lists put the true token first
    assert (batch["topk_ids"][..., 0][present] == batch["input_ids"][present]).all()
    mass = batch["topk_logprobs"].exp().sum(-1)[present]
    assert (mass < 0.96).all() and (mass > 0).all()
    assert (batch["topk_logprobs"][~present] == -np.inf).all()


def test_inspect_shards_names_missing_columns(tmp_path):
    (tmp_path / "trajectories").mkdir()
    pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), tmp_path / "trajectories" / "part-000000.parquet")
    with pytest.raises(ValueError, match="spans"):
        inspect_shards(tmp_path)
    with pytest.raises(FileNotFoundError):
        inspect_shards(tmp_path / "missing")


def test_a_damaged_shard_is_named_before_any_training(pipeline_out, tmp_path):
    """A truncated shard (a half-finished copy) fails on the driver naming it and the fix,
    not in a Ray Data worker after start-up; the paired tables are checked too."""
    from trainer.readers.preferences import preference_files

    damaged = tmp_path / "out"
    shutil.copytree(pipeline_out, damaged)
    shard = sorted((damaged / "preferences").glob("part-*.parquet"))[-1]
    shard.write_bytes(shard.read_bytes()[:100])
    for check in (inspect_shards, preference_files):
        with pytest.raises(ValueError, match=f"1 unreadable shard\\(s\\) under {damaged}: {shard} "
                                             f"\\(.*\\); `datagen verify {damaged}` lists them"):
            check(damaged)


def test_curriculum_admits_the_easiest_rows_first_and_everything_later():
    import torch

    assert pacing_fraction(0.0, 0.3, 0.5) == pytest.approx(0.3)
    assert pacing_fraction(0.25, 0.3, 0.5) == pytest.approx(0.65)
    assert pacing_fraction(0.6, 0.3, 0.5) == 1.0
    assert pacing_fraction(0.0, 0.3, 0.5, "root") == pytest.approx(0.3)
    scores = np.arange(100, dtype=float)
    sampler = CurriculumSampler.from_scores(scores, total_steps=100, start_fraction=0.3, ramp_fraction=0.5)
    batch = torch.tensor([5.0, 50.0, 95.0])
    assert sampler.admit(batch, 0).tolist() == [True, False, False]
    assert sampler.admit(batch, 30).tolist() == [True, True, False]
    assert sampler.admit(batch, 60).tolist() == [True, True, True]


def test_oracle_token_ids_carry_their_tokenizer_and_another_one_is_refused(
        tokenized_out, trainer_tokenizer, tmp_path):
    from datagen.tokenizer import build_bpe_tokenizer
    from trainer.data import check_shard_tokenizer

    layout = inspect_shards(tokenized_out)
    assert layout.has_tokens and set(layout.tokenizers) == {str(trainer_tokenizer)}
    ours = DataSettings(shards=str(tokenized_out), tokenizer=str(trainer_tokenizer))
    check_shard_tokenizer(layout, ours)  # the tokenizer the ids were made with: accepted
    other = tmp_path / "other_tokenizer"
    build_bpe_tokenizer(["a different corpus, so different merges"] * 20, vocab_size=300,
                        out_dir=other)
    with pytest.raises(ValueError, match="token ids were made with tokenizer"):
        check_shard_tokenizer(layout, DataSettings(shards=str(tokenized_out), tokenizer=str(other)))
