"""Held-out tasks: disjoint from a real pipeline OUT, refused or replaced when shards hold them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.tasks import TaskSource
from datagen.teachers import EnvPool
from tests.s3server import s3  # noqa: F401 - a fixture
from trainer.heldout import LeakError, find_overlap, heldout_tasks, refuse_leaks


def _training_tasks(out: Path) -> pa.Table:
    return pq.read_table(out / "trajectories", columns=["task_id", "task_seed", "env", "task"])


def _doctored_copy(out: Path, target: Path, **cells) -> Path:
    """A copy of OUT whose first trajectory row has some task columns replaced (as if the
    run had generated that task)."""
    shutil.copytree(out, target)
    shard = sorted((target / "trajectories").glob("part-*.parquet"))[0]
    table = pq.read_table(shard)
    for column, value in cells.items():
        values = table.column(column).to_pylist()
        values[0] = value
        table = table.set_column(table.schema.get_field_index(column), column,
                                 pa.array(values, table.schema.field(column).type))
    pq.write_table(table, shard)
    return target


def test_the_old_default_played_training_tasks_and_the_check_catches_it(pipeline_out):
    """What `trainer eval --seed 0` used to play (TaskSource(seed=0), the demo's own tasks)
    is all in the shards; the check refuses it. The held-out space shares nothing."""
    training = _training_tasks(pipeline_out)
    old = TaskSource(("sql",), (1.0,), seed=0, count=20).generate(0, 20, EnvPool())
    overlap = find_overlap(old, [pipeline_out])
    assert len(overlap.ids) == 20 and len(overlap.seeds) == 20
    with pytest.raises(LeakError, match="20 held-out task ids and 20 task seeds"):
        refuse_leaks(overlap, [pipeline_out])
    chosen = heldout_tasks(["sql"], 20, shards=[pipeline_out])
    ids = {t.id for t in chosen.tasks}
    assert len(ids) == 20 and not ids & set(training.column("task_id").to_pylist())
    assert not {t.seed for t in chosen.tasks} & set(training.column("task_seed").to_pylist())
    report = chosen.describe()
    assert report["count"] == 20 and report["per_env"] == {"sql": 20}
    assert report["leak_check"]["training_rows"] >= training.num_rows
    assert report["leak_check"]["dropped_same_instruction"] == 0


def test_held_out_tasks_are_deterministic_balanced_and_disjoint_across_eval_seeds():
    first = heldout_tasks(["sql", "fs", "enterprise"], 9, eval_seed=0)
    again = heldout_tasks(["sql", "fs", "enterprise"], 9, eval_seed=0)
    other = heldout_tasks(["sql", "fs", "enterprise"], 9, eval_seed=1)
    assert [t.id for t in first.tasks] == [t.id for t in again.tasks]
    assert [t.instruction for t in first.tasks] == [t.instruction for t in again.tasks]
    assert first.describe()["per_env"] == {"sql": 3, "fs": 3, "enterprise": 3}
    assert not {t.seed for t in first.tasks} & {t.seed for t in other.tasks}
    assert first.describe()["ids_sha256"] != other.describe()["ids_sha256"]
    assert "not checked" in first.describe()["leak_check"]["note"]


def test_shards_holding_a_held_out_id_or_seed_are_refused(pipeline_out, tmp_path):
    task = heldout_tasks(["sql"], 3).tasks[1]
    by_id = _doctored_copy(pipeline_out, tmp_path / "by_id", task_id=task.id)
    with pytest.raises(LeakError, match=f"1 held-out task ids.*{task.id}"):
        heldout_tasks(["sql"], 3, shards=[pipeline_out, by_id])
    by_seed = _doctored_copy(pipeline_out, tmp_path / "by_seed", task_seed=task.seed)
    with pytest.raises(LeakError, match="0 held-out task ids and 1 task seeds"):
        heldout_tasks(["sql"], 3, shards=[by_seed])


def test_a_held_out_instruction_seen_in_training_is_dropped_and_replaced(pipeline_out, tmp_path):
    clean = heldout_tasks(["sql"], 4).tasks
    seen = _doctored_copy(pipeline_out, tmp_path / "seen", env="sql", task=clean[2].instruction)
    chosen = heldout_tasks(["sql"], 4, shards=[seen])
    assert [t.id for t in chosen.tasks] == [clean[0].id, clean[1].id, clean[3].id,
                                            "heldout-0-sql-000004"]
    assert chosen.describe()["leak_check"]["dropped_same_instruction"] == 1
    # the same text under another environment is another task: kept
    elsewhere = _doctored_copy(pipeline_out, tmp_path / "elsewhere", env="fs",
                               task=clean[2].instruction)
    assert [t.id for t in heldout_tasks(["sql"], 4, shards=[elsewhere]).tasks] == [t.id for t in clean]


def test_bad_inputs_fail_before_any_work(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        heldout_tasks(["sql"], 2, shards=[tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no trajectories"):
        heldout_tasks(["sql"], 2, shards=[tmp_path / "empty"])
    with pytest.raises(KeyError, match="unknown environment 'nope'"):
        heldout_tasks(["sql", "nope"], 2)


def test_shards_on_object_storage_are_checked_like_a_directory(s3, tmp_path):  # noqa: F811
    """An OUT written to s3:// (datagen's `out: s3://...`): `--shards s3://...` and a
    checkpoint that records the URI are both read for the leak check."""
    from tests.s3server import pq_bytes
    from trainer.eval import training_shards
    from trainer.lineage import write_lineage

    clean = heldout_tasks(["sql"], 4).tasks
    bucket = s3.bucket()
    rows = pa.table({"task_id": ["sql-0-00000000", "sql-0-00000001"], "task_seed": [1, 2],
                     "env": ["sql", "sql"], "task": [clean[2].instruction, "something else"]})
    s3.client.put_object(Bucket=bucket, Key="out/trajectories/part-000000.parquet",
                         Body=pq_bytes(rows))
    uri = f"s3://{bucket}/out"
    chosen = heldout_tasks(["sql"], 4, shards=[uri])
    assert [t.id for t in chosen.tasks] == [clean[0].id, clean[1].id, clean[3].id,
                                            "heldout-0-sql-000004"]
    assert chosen.describe()["leak_check"]["training_rows"] == 2
    leaked = rows.set_column(0, "task_id", pa.array([clean[0].id, "x"]))
    s3.client.put_object(Bucket=bucket, Key="leak/repairs/part-000003.parquet",
                         Body=pq_bytes(leaked))
    with pytest.raises(LeakError, match=clean[0].id):
        heldout_tasks(["sql"], 4, shards=[f"s3://{bucket}/leak"])
    with pytest.raises(FileNotFoundError, match="no trajectories"):
        heldout_tasks(["sql"], 4, shards=[f"s3://{bucket}/nothing"])

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    write_lineage(checkpoint, {"shards": [uri, f"s3://{bucket}/nothing"]}, step=1)
    shards, provenance = training_shards((), str(checkpoint))
    assert shards == (uri,) and provenance["recorded_not_found"] == [f"s3://{bucket}/nothing"]
