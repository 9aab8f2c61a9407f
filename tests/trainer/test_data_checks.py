"""A shard row that breaks the data contract fails the feed with one DataError naming the
shard, the row id, the column and the problem (trainer/data_checks.py), never a silent
mislabel or an opaque KeyError/IndexError; the shard checks before Ray read every shard."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.data import (DataSettings, check_column_types, check_shard_tokenizer,
                          inspect_shards)
from trainer.data_checks import DataError, check_spans, check_token_lists
from trainer.fit import failure_cause

TEXT = "You are.Think.<tool_call>x</tool_call>"
GOOD = [{"kind": "PROMPT", "start": 0, "end": 8}, {"kind": "REASON", "start": 8, "end": 14},
        {"kind": "ACT", "start": 14, "end": len(TEXT)}]


def _table(spans_of_row1, text=TEXT) -> pa.Table:
    return pa.table({"id": ["a", "b"], "text": [TEXT, text], "spans": [GOOD, spans_of_row1],
                     "path": ["/out/trajectories/part-000003.parquet"] * 2})


def _moved(index, **change):
    return [dict(span, **change) if i == index else span for i, span in enumerate(GOOD)]


@pytest.mark.parametrize("spans, problem", [
    ([GOOD[1], GOOD[0], GOOD[2]], "does not start at 0"),               # unsorted
    (_moved(1, start=6), "not sorted and contiguous"),                   # overlapping
    (_moved(0, start=-3), "does not start at 0"),                        # negative
    (_moved(2, end=len(TEXT) + 9), r"does not end at len\(text\)"),          # out of range
    (GOOD[:2], r"does not end at len\(text\)"),                             # a gap at the end
    ([], "is empty"),
    (None, "is null"),
    (_moved(1, kind="BOGUS"), "unknown kind 'BOGUS'"),
    (_moved(1, kind=None), "unknown kind None"),
])
def test_spans_that_do_not_tile_the_text_name_the_row(spans, problem):
    check_spans(_table(GOOD))  # the contract's layout passes
    with pytest.raises(DataError, match=problem) as raised:
        check_spans(_table(spans))
    assert str(raised.value).startswith("/out/trajectories/part-000003.parquet: row id='b'")


def test_stored_tokens_are_checked_per_row():
    def table(ids, span_ids):
        return pa.table({"id": ["a", "b"], "input_ids": [[1, 2], ids],
                         "span_ids": pa.array([[0, 1], span_ids], pa.list_(pa.int8()))})
    check_token_lists(table([3, 4, 5], [0, 1, 2]), vocab_size=8)
    for ids, span_ids, problem in (([3, 4, 5], [0, 1], "has 2 values for 3 input_ids"),
                                   ([3, 4], [0, 9], "'span_ids' holds 9, outside"),
                                   ([3, 99], [0, 1], "'input_ids' holds 99, outside")):
        with pytest.raises(DataError, match=problem) as raised:
            check_token_lists(table(ids, span_ids), vocab_size=8)
        assert "row id='b'" in str(raised.value)


def test_failure_cause_is_the_data_error_behind_ray_wrappers():
    class RayTaskError(Exception):  # Ray's task error: the remote error as `cause`
        def __init__(self, cause):
            super().__init__("ray::MapBatches(training_batches)() (pid=1)\n  Traceback ...")
            self.cause = cause

    try:
        try:
            {}["BOGUS"]
        except KeyError as exc:
            raise DataError("part-0.parquet: row id='b' (row 1): column 'spans' bad") from exc
    except DataError as exc:
        wrapped = RayTaskError(exc)
    failed = type("TrainingFailedError", (Exception,), {})()
    failed.worker_failures = {0: wrapped}
    assert failure_cause(failed) == "part-0.parquet: row id='b' (row 1): column 'spans' bad"
    assert failure_cause(RayTaskError(KeyError("x"))) == "KeyError: 'x'"


def test_every_shard_is_checked_before_training(tmp_path):
    good = pa.table({"id": ["a"], "text": [TEXT], "spans": [GOOD], "success": [True],
                     "n_steps": pa.array([1], pa.int16()), "tokenizer": ["tok-a"]})
    (tmp_path / "trajectories").mkdir()
    pq.write_table(good, tmp_path / "trajectories" / "part-000000.parquet")
    shard1 = tmp_path / "trajectories" / "part-000001.parquet"
    pq.write_table(good.set_column(5, "tokenizer", pa.array(["tok-b"])), shard1)
    layout = inspect_shards(tmp_path)  # each tokenizer with the first shard recording it
    assert {name: Path(file).name for name, file in layout.tokenizers.items()} == {
        "tok-a": "part-000000.parquet", "tok-b": "part-000001.parquet"}
    with pytest.raises(ValueError, match=r"part-000001.parquet: token ids were made with "
                                         r"tokenizer \['tok-b'\]"):  # not shard 0's name
        check_shard_tokenizer(replace(layout, has_tokens=True),
                              DataSettings(shards=str(tmp_path), tokenizer="tok-a"))
    pq.write_table(good.set_column(3, "success", pa.array(["false"])), shard1)
    with pytest.raises(ValueError, match="part-000001.parquet: columns of another type.*success"):
        inspect_shards(tmp_path)
    pq.write_table(good.drop(["spans"]), shard1)
    with pytest.raises(ValueError, match="part-000001.parquet lacks required columns"):
        inspect_shards(tmp_path)
    check_column_types("f", good.schema)


def test_a_long_text_is_cut_before_tokenising_without_changing_the_kept_tokens(
        trainer_tokenizer):
    from trainer import tokens
    from trainer.readers.trajectories import _token_columns

    tokenizer = tokens.load_tokenizer(str(trainer_tokenizer))
    bound = tokens.text_bound(tokenizer, 64)
    text = "You are.Think." + "word, <tool_call>call(1)</tool_call> more\n" * bound
    spans = [{"kind": "PROMPT", "start": 0, "end": 8}, {"kind": "REASON", "start": 8, "end": 14},
             {"kind": "ACT", "start": 14, "end": len(text)}]
    table = pa.table({"id": ["a"], "text": [text], "spans": [spans]})
    ids, labels = _token_columns(table, tokenizer, 64)
    assert len(ids[0]) <= bound < len(text) // 20  # tokenised a prefix only
    whole_ids, whole_labels = tokens.tokenize_with_spans(tokenizer, [text], [spans])
    assert ids[0][:65].tolist() == whole_ids[0][:65]
    assert labels[0][:65].tolist() == whole_labels[0][:65].tolist()


def test_a_pair_too_long_in_characters_is_not_tokenised(trainer_tokenizer, monkeypatch):
    from trainer import tokens
    from trainer.readers.preferences import tokenize_pairs

    tokenizer = tokens.load_tokenizer(str(trainer_tokenizer))
    huge = "x " * tokens.text_bound(tokenizer, 32)
    pairs = pa.table({"id": ["a", "b"], "source": ["negative"] * 2, "prompt_text": ["Q:", huge],
                      "chosen_text": [" yes", " yes"], "rejected_text": [" no", " no"]})
    encoded = []
    monkeypatch.setattr(tokenizer, "encode", lambda texts: encoded.extend(texts) or
                        type(tokenizer).encode(tokenizer, texts))
    result = tokenize_pairs(pairs, tokenizer, 32)
    assert result.too_long == 1 and result.table.column("id").to_pylist() == ["a"]
    assert max(map(len, encoded)) < 10
    with pytest.raises(DataError, match="row id='b' .*'rejected_text' is null"):
        tokenize_pairs(pairs.set_column(4, "rejected_text", pa.array([" no", None])), tokenizer, 32)
