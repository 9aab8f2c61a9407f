"""What a checkpoint was trained on: its run's OUT plus the data behind its starting weights,
and the OUTs `trainer eval` checks its held-out tasks against when `--shards` is not given."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.provenance import source_digest
from trainer.config import load_config
from trainer.eval import training_shards
from trainer.lineage import (LINEAGE_FILE, lineage, recorded_shards, trainer_code,
                             write_lineage)

ROOT = Path(__file__).resolve().parents[2]


def _cfg(recipe, shards=None, init_from=None):
    """The shipped config of `recipe` with the data and start of a test."""
    name = {"sad": "train_tiny", "dpo": "dpo_tiny", "ppo": "ppo_tiny"}[recipe]
    overrides = ["run_dir=/runs/x", "tokenizer=/runs/tokenizer",
                 f"model.init_from={init_from}" if init_from else "model.init_from=null"]
    if shards:
        overrides.append(f"shards={shards}")
    return load_config(ROOT / "configs" / f"{name}.yaml", overrides)


def test_a_checkpoint_names_its_data_and_the_data_of_the_weights_it_started_from(tmp_path):
    sad = tmp_path / "sad" / "checkpoint_000001"
    sad.mkdir(parents=True)
    write_lineage(sad, lineage(_cfg("sad", shards="/data/out_a")), step=100)
    assert json.loads((sad / LINEAGE_FILE).read_text()) == {
        "recipe": "sad", "shards": ["/data/out_a"], "init_from": None,
        "init_from_recorded": None, "data": {}, "code": trainer_code(), "step": 100}
    assert trainer_code() == source_digest([ROOT / "trainer"])
    dpo = lineage(_cfg("dpo", shards="/data/out_b", init_from=str(sad)))
    assert dpo["shards"] == ["/data/out_b", "/data/out_a"] and dpo["init_from_recorded"]
    assert lineage(_cfg("dpo", shards="/data/out_a", init_from=str(sad)))["shards"] == [
        "/data/out_a"]
    ppo_dir = tmp_path / "ppo"
    ppo_dir.mkdir()
    write_lineage(ppo_dir, lineage(_cfg("ppo", init_from=str(sad))), step=5)
    assert recorded_shards(ppo_dir) == ["/data/out_a"]  # PPO plays tasks; its start read A
    released = tmp_path / "smollm2"  # weights with no record add nothing, and say so
    released.mkdir()
    record = lineage(_cfg("sad", shards="/data/out_c", init_from=str(released)))
    assert record["shards"] == ["/data/out_c"] and record["init_from_recorded"] is False


def test_a_missing_or_bent_record_is_no_record(tmp_path):
    assert recorded_shards(tmp_path) is None
    for text in ("not json", "[1, 2]", '{"shards": "one"}', '{"shards": [""]}',
                 '{"shards": [3]}', "[" * 200_000):
        (tmp_path / LINEAGE_FILE).write_text(text)
        assert recorded_shards(tmp_path) is None, text
    (tmp_path / LINEAGE_FILE).write_text('{"shards": []}')
    assert recorded_shards(tmp_path) == []


def test_eval_takes_the_recorded_outs_that_exist_and_names_those_that_do_not(tmp_path):
    out = tmp_path / "out"
    (out / "trajectories").mkdir(parents=True)
    pq.write_table(pa.table({"task_id": ["sql-0-00000000"]}),
                   out / "trajectories" / "part-000000.parquet")
    emptied = tmp_path / "emptied"  # an OUT whose shards were deleted counts as not here
    emptied.mkdir()
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    assert training_shards((), str(checkpoint)) == (
        (), {"shards_from": None, "recorded_in_checkpoint": None})
    recorded = [str(out), "/gone/out", str(emptied)]
    write_lineage(checkpoint, {"shards": recorded}, step=1)
    shards, provenance = training_shards((), str(checkpoint))
    assert shards == (str(out),) and provenance["shards_from"] == "checkpoint"
    assert provenance["recorded_not_found"] == ["/gone/out", str(emptied)]
    assert provenance["note"].startswith("2 of the 3 training OUT(s) the checkpoint records")
    given, provenance = training_shards(("/mine",), str(checkpoint))  # --shards wins
    assert given == ("/mine",) and provenance == {
        "shards_from": "--shards", "recorded_in_checkpoint": recorded}


def test_credentials_in_a_shards_uri_are_refused_and_never_reported(tmp_path, monkeypatch):
    """pyarrow accepts s3://KEY:SECRET@bucket/...: fit recorded it in training.json and eval
    printed it in its report. Refused at validation; an older record loses it when read."""
    from trainer.config import ConfigError

    with pytest.raises(ConfigError, match="credentials") as refused:
        _cfg("sad", shards="s3://AKIAFAKE:S3cretKey@bucket/out")
    assert "S3cretKey" not in str(refused.value)
    secret = "s3://AKIAFAKE:S3cretKey@bucket/out"
    identity = {"chunks": "0", "files": 1, "digest": "0" * 16}
    write_lineage(tmp_path, {"shards": [secret, "/data/out"], "data": {secret: identity}}, step=1)
    assert recorded_shards(tmp_path) == ["s3://bucket/out", "/data/out"]

    def unreachable(root):
        raise OSError("no store here")

    monkeypatch.setattr("trainer.heldout.shard_files", unreachable)
    report = json.dumps(training_shards((), str(tmp_path)))
    assert "S3cretKey" not in report and "AKIAFAKE" not in report
    assert "s3://bucket/out" in report


@pytest.mark.timeout(60)
def test_a_record_that_is_a_fifo_is_no_record_and_no_hang(tmp_path):
    """training.json as a FIFO blocked the read for a writer that never comes."""
    os.mkfifo(tmp_path / LINEAGE_FILE)
    assert recorded_shards(tmp_path) is None
    assert training_shards((), str(tmp_path))[0] == ()
