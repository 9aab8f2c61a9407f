"""The trajectory reader's stored token and teacher top-k columns (trainer/readers/
trajectories.py, trainer/data_checks.py): a bent top-k row is one DataError naming shard, row,
column and token (before: a silent shift of the batch's later teacher targets, a nan loss, a
gather error in the worker, 3.3 GB for one wide token); only the max_seq_len prefix becomes
Python; rows dropped for want of a trained token are counted, and a stream left with none is
bad data (not retried). Function-level: no Ray fit."""

from __future__ import annotations

import logging
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from trainer.contract import ACT, PROMPT, REASON
from trainer.data_checks import TOPK_MAX, TOPK_MAX_LOGPROB, DataError
from trainer.documents import ReadSettings
from trainer.readers.trajectories import trajectory_shaped_documents

SHARD = "/out/trajectories/part-000002.parquet"
SPANS = [PROMPT] * 4 + [REASON] * 3 + [ACT] * 3   # 10 tokens, the last 6 trained
VOCAB = 1000  # tiny_tokenizer_dir's


def _settings(tokenizer, max_seq_len=64, read_topk=True) -> ReadSettings:
    return ReadSettings(tokenizer=str(tokenizer), max_seq_len=max_seq_len, use_mch=False,
                        read_topk=read_topk, complexity_weights=(1.0, 1.0, 1.0))


def _topk_row(spans: list[int]) -> tuple[list, list]:
    """Two candidates per trained token (the token first), none elsewhere."""
    ids = [[5 + t, 7] if s in (REASON, ACT) else [] for t, s in enumerate(spans)]
    logprobs = [[-0.5, -1.5] if s in (REASON, ACT) else [] for s in spans]
    return ids, logprobs


def _table(bend=None, spans=SPANS, rows=2) -> pa.Table:
    """`rows` rows of stored tokens with top-k; `bend(ids, logprobs)` edits row 0's lists."""
    topk = [_topk_row(spans) for _ in range(rows)]
    if bend is not None:
        bend(*topk[0])
    return pa.table({
        "id": [f"r{i}" for i in range(rows)], "success": [True] * rows, "n_steps": [1] * rows,
        "input_ids": pa.array([[5 + t for t in range(len(spans))]] * rows, pa.list_(pa.int32())),
        "span_ids": pa.array([spans] * rows, pa.list_(pa.int8())),
        "teacher_topk_ids": pa.array([ids for ids, _ in topk], pa.list_(pa.list_(pa.int32()))),
        "teacher_topk_logprobs": pa.array([lp for _, lp in topk],
                                          pa.list_(pa.list_(pa.float32()))),
        "path": [SHARD] * rows})


def _set(ids, logprobs, token=5, new_ids=None, new_logprobs=None):
    if new_ids is not None:
        ids[token] = new_ids
    if new_logprobs is not None:
        logprobs[token] = new_logprobs


BENT = {
    "rows_longer": (lambda i, lp: (i.extend([[1, 2]] * 50), lp.extend([[-1.0, -2.0]] * 50)),
                    "'teacher_topk_ids' has 60 per-token lists for 10 input_ids"),
    "rows_shorter": (lambda i, lp: (i.pop(), lp.pop()),
                     "'teacher_topk_ids' has 9 per-token lists for 10 input_ids"),
    "logprobs_rows_longer": (lambda i, lp: lp.append([-1.0]),
                             "'teacher_topk_logprobs' has 11 per-token lists"),
    "id_out_of_vocab": (lambda i, lp: _set(i, lp, new_ids=[VOCAB + 5, 7]),
                        f"'teacher_topk_ids' token 5: holds {VOCAB + 5}, outside"),
    "id_negative": (lambda i, lp: _set(i, lp, new_ids=[-5, 7]),
                    "'teacher_topk_ids' token 5: holds -5, outside"),
    "logprob_posinf": (lambda i, lp: _set(i, lp, new_logprobs=[float("inf"), -1.0]),
                       "'teacher_topk_logprobs' token 5: holds inf, not a log-probability"),
    "logprob_positive": (lambda i, lp: _set(i, lp, new_logprobs=[5.0, -1.0]),
                         "'teacher_topk_logprobs' token 5: holds 5.0, not a log-probability"),
    "logprob_nan": (lambda i, lp: _set(i, lp, new_logprobs=[float("nan")] * 2),
                    "'teacher_topk_logprobs' token 5: holds nan"),
    "more_logprobs_than_ids": (lambda i, lp: _set(i, lp, new_logprobs=[-1.0] * 12),
                               "token 5: has 12 log-probabilities for 2 top-k ids"),
    "too_wide": (lambda i, lp: _set(i, lp, new_ids=list(range(TOPK_MAX + 1)),
                                    new_logprobs=[-9.0] * (TOPK_MAX + 1)),
                 f"token 5: has {TOPK_MAX + 1} entries, more than {TOPK_MAX}"),
    "null_token_list": (lambda i, lp: i.__setitem__(5, None),
                        "token 5: has a null top-k list"),
}


@pytest.mark.parametrize("case", sorted(BENT))
def test_bent_topk_is_a_data_error_naming_row_column_and_token(tiny_tokenizer_dir, case):
    bend, problem = BENT[case]
    rows, _ = trajectory_shaped_documents(_table(), _settings(tiny_tokenizer_dir), 1.0)
    assert len(rows) == 2  # the contract's layout passes
    with pytest.raises(DataError, match=problem) as raised:
        trajectory_shaped_documents(_table(bend), _settings(tiny_tokenizer_dir), 1.0)
    assert str(raised.value).startswith(f"{SHARD}: row id='r0' (row 0): column 'teacher_topk_")


def test_a_longer_topk_row_is_refused_even_when_its_excess_lies_past_the_cut(tiny_tokenizer_dir):
    """Row lengths are compared whole: cut first, the excess would vanish from the check but
    the shard would still be misaligned (its teacher made other tokens than these)."""
    bend = BENT["rows_longer"][0]
    with pytest.raises(DataError, match="has 60 per-token lists for 10 input_ids"):
        trajectory_shaped_documents(_table(bend), _settings(tiny_tokenizer_dir, max_seq_len=8),
                                    1.0)


def test_zero_probabilities_and_rows_without_topk_pass(tiny_tokenizer_dir):
    """-inf (a zero probability, the loss's padding value), a value a hair above 0 (servers
    round a near-certain token's so) and a row without top-k (a repair) are accepted."""
    def bend(ids, logprobs):
        logprobs[5] = [float(TOPK_MAX_LOGPROB), float("-inf")]
    table = _table(bend)
    rows, scores = trajectory_shaped_documents(table, _settings(tiny_tokenizer_dir), 1.0)
    assert rows.columns["teacher_topk_logprobs"][0][5] == [pytest.approx(1e-4), float("-inf")]
    assert np.isfinite(scores).all(), "a zero probability's entropy term is 0, not nan"
    empty = table.set_column(table.schema.get_field_index("teacher_topk_ids"), "teacher_topk_ids",
                             pa.array([[], _topk_row(SPANS)[0]], pa.list_(pa.list_(pa.int32()))))
    empty = empty.set_column(empty.schema.get_field_index("teacher_topk_logprobs"),
                             "teacher_topk_logprobs",
                             pa.array([[], _topk_row(SPANS)[1]], pa.list_(pa.list_(pa.float32()))))
    rows, _ = trajectory_shaped_documents(empty, _settings(tiny_tokenizer_dir), 1.0)
    assert rows.columns["teacher_topk_ids"][0] == []


def test_topk_bounds_are_datagens():
    """The trainer does not import datagen's teacher modules in Ray Data workers (asyncio,
    pydantic); this keeps the copies equal."""
    from datagen.teachers.config import SamplingConfig
    from datagen.teachers.openai_wire import MAX_LOGPROB

    limits = [m.le for m in SamplingConfig.model_fields["logprobs"].metadata if hasattr(m, "le")]
    assert limits == [TOPK_MAX]
    assert TOPK_MAX_LOGPROB == np.float32(MAX_LOGPROB)


def test_only_the_kept_prefix_becomes_python(tiny_tokenizer_dir):
    """A 2M-id row: its ids were made Python ints whole before the max_seq_len cut (20M ids
    cost 734 MiB; here 32 MiB of list slots). Python's allocations while reading stay small."""
    n = 2_000_000
    table = pa.table({"id": ["big", "small"], "success": [True, True], "n_steps": [1, 1],
                      "input_ids": pa.array([np.resize(np.arange(5, 15, dtype=np.int32), n),
                                             np.arange(5, 15, dtype=np.int32)],
                                            pa.list_(pa.int32())),
                      "span_ids": pa.array([np.resize(np.asarray(SPANS, np.int8), n),
                                            np.asarray(SPANS, np.int8)], pa.list_(pa.int8())),
                      "path": [SHARD] * 2})
    settings = _settings(tiny_tokenizer_dir, max_seq_len=64, read_topk=False)
    trajectory_shaped_documents(table.slice(1), settings, 1.0)  # tokenizer loaded, caches warm
    tracemalloc.start()
    try:
        rows, _ = trajectory_shaped_documents(table, settings, 1.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [len(ids) for ids in rows.columns["input_ids"]] == [64, 10]
    assert peak < 8 << 20, f"{peak / 2**20:.0f} MiB of Python objects for a 64-token cut"


def test_an_act_run_crossing_the_cut_is_not_a_step(tiny_tokenizer_dir):
    """The cut keeps one token past max_seq_len: an ACT run running on past the cut ends
    after it (not scored), as when the whole row was read."""
    from trainer import tokens

    call = tokens.special_ids(tokens.load_tokenizer(str(tiny_tokenizer_dir)))["tool_call_start"]
    spans = [PROMPT] * 2 + [ACT] * 3 + [PROMPT] * 2 + [ACT] * 5
    table = _table(spans=spans, rows=1).drop_columns(["teacher_topk_ids",
                                                      "teacher_topk_logprobs"])
    table = table.set_column(table.schema.get_field_index("input_ids"), "input_ids",
                             pa.array([[5, 6, call, 7, 8, 9, 10, call, 11, 12, 13, 14]],
                                      pa.list_(pa.int32())))
    settings = ReadSettings(str(tiny_tokenizer_dir), 9, True, False, (1.0, 1.0, 1.0))
    rows, _ = trajectory_shaped_documents(table, settings, 1.0)
    assert rows.columns["mch_positions"] == [[4]]  # the first call; the second crosses the cut


def test_rows_without_a_trained_token_in_the_prefix_are_counted(tiny_tokenizer_dir, caplog):
    spans = [PROMPT] * 8 + [REASON, ACT]
    with caplog.at_level(logging.WARNING, logger="trainer.readers.trajectories"):
        rows, scores = trajectory_shaped_documents(_table(spans=spans, rows=3),
                                                   _settings(tiny_tokenizer_dir, max_seq_len=6),
                                                   1.0)
    assert len(rows) == 0 and len(scores) == 3
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"3 of 3 rows of {SHARD} left out: data.max_seq_len 6 keeps no REASON/ACT "
                     "token of theirs (a larger data.max_seq_len keeps them)"]


def test_a_stream_with_no_batch_is_bad_data_not_retried(monkeypatch):
    """Every row dropped: a restart reads the same rows with the same max_seq_len, so the
    worker's error is the lasting kind (not retried; no "rerun" advice)."""
    import ray.train

    from trainer.checkpoints import Position
    from trainer.collate import Collate
    from trainer.fit import lasting_kind
    from trainer.recipes.sad import documents_stream

    class EmptyShard:
        def iter_batches(self, **_):
            return iter(())
    monkeypatch.setattr(ray.train, "get_dataset_shard", lambda name: EmptyShard())
    with pytest.raises(DataError, match=r"within data.max_seq_len \(256 tokens\); raise "
                                        "data.max_seq_len") as raised:
        next(documents_stream(Position(), Collate(pad_id=0), 256))
    assert lasting_kind(raised.value) == "bad data"
