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


def _out(root: Path, columns: dict, chunk: int = 0, table: str = "trajectories") -> Path:
    (root / table).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), root / table / f"part-{chunk:06d}.parquet")
    return root


def _row(**cells) -> dict:
    return {"task_id": ["sql-0-00000000"], "task_seed": [7], "env": ["sql"], "task": ["x"],
            **{name: [value] if not isinstance(value, pa.Array) else value
               for name, value in cells.items()}}


@pytest.mark.timeout(60)
def test_other_schemes_are_refused_before_any_request():
    """gs:// retried for minutes offline; foo:// was an Arrow message."""
    from trainer.eval import EvalConfig

    for uri in ("foo://bucket/out", "gs://bucket/out"):
        with pytest.raises(ValueError, match=f"--shards {uri}: .* not read here"):
            heldout_tasks(["sql"], 2, shards=[uri])
        with pytest.raises(ValueError, match="not read here"):
            EvalConfig(checkpoint="c", shards=(uri,))


def test_recorded_outs_of_other_schemes_are_not_found_and_never_probed(tmp_path, monkeypatch):
    from trainer.eval import training_shards
    from trainer.lineage import write_lineage

    probed = []
    monkeypatch.setattr("trainer.heldout.shard_files", lambda root: probed.append(root) or [])
    write_lineage(tmp_path, {"shards": ["gs://bucket/out", "hdfs://host/out"]}, step=1)
    shards, provenance = training_shards((), str(tmp_path))
    assert shards == () and probed == []
    assert provenance["recorded_not_found"] == ["gs://bucket/out", "hdfs://host/out"]


def test_shards_without_the_task_columns_are_counted_and_said(tmp_path):
    """OUT/preferences (its instruction is in prompt_text) and a hand-made shard without env
    passed as a checked leak check with no note."""
    task = heldout_tasks(["sql"], 1).tasks[0]
    prefs = _out(tmp_path / "a", {"id": ["p0"], "env": ["sql"], "prompt_text": [task.instruction]},
                 table="preferences")
    no_env = _out(tmp_path / "b", {"task_id": ["sql-0-00000000"], "task_seed": [1],
                                   "task": [task.instruction]})
    for shards in ([prefs / "preferences"], [no_env]):
        leak_check = heldout_tasks(["sql"], 1, shards=shards).describe()["leak_check"]
        assert leak_check["files_missing_columns"] == 1
        assert "1 training shard(s) lack columns the check reads" in leak_check["note"]
    clean = _out(tmp_path / "c", _row())
    assert "note" not in heldout_tasks(["sql"], 1, shards=[clean]).describe()["leak_check"]


@pytest.mark.parametrize("kind", [pa.large_string(), pa.string_view(), "dictionary"])
def test_text_columns_of_other_string_types_are_compared(tmp_path, kind):
    clean = heldout_tasks(["sql"], 2).tasks

    def typed(value):
        array = pa.array([value])
        return array.dictionary_encode() if kind == "dictionary" else array.cast(kind)

    seen = _out(tmp_path / "seen", _row(env=typed("sql"), task=typed(clean[0].instruction)))
    chosen = heldout_tasks(["sql"], 2, shards=[seen])
    assert chosen.describe()["leak_check"]["dropped_same_instruction"] == 1
    leaked = _out(tmp_path / "leaked", _row(task_id=typed(clean[1].id)))
    with pytest.raises(LeakError, match=clean[1].id):
        heldout_tasks(["sql"], 2, shards=[leaked])


@pytest.mark.parametrize("column,value,expected", [
    ("task", 5, "column task is int64, not text"),
    ("task_id", 1, "column task_id is int64, not text"),
    ("task_seed", "123", "column task_seed is string, not an integer"),
])
def test_columns_of_another_type_are_refused_naming_the_file(tmp_path, column, value, expected):
    bent = _out(tmp_path / "bent", _row(**{column: value}))
    with pytest.raises(ValueError, match=f"--shards {bent}: trajectories/part-000000.parquet: "
                                         f"{expected}"):
        heldout_tasks(["sql"], 1, shards=[bent])


def test_an_unreadable_shard_among_many_is_named(tmp_path):
    import os

    out = tmp_path / "out"
    for chunk in range(5):
        _out(out, _row(), chunk=chunk)
    (out / "trajectories" / "part-000003.parquet").write_bytes(b"truncated")
    with pytest.raises(ValueError, match=f"--shards {out}: trajectories/part-000003.parquet: "
                                         "cannot be read"):
        heldout_tasks(["sql"], 1, shards=[out])
    odd = _out(tmp_path / "odd", _row())
    os.rename(odd / "trajectories" / "part-000000.parquet",
              os.fsencode(odd / "trajectories") + b"/part-\xff.parquet")
    with pytest.raises(ValueError, match=r"trajectories/part-\\udcff.parquet: cannot be read") \
            as refused:
        heldout_tasks(["sql"], 1, shards=[odd])
    str(refused.value).encode("utf-8")  # printable as it is


def test_an_unreachable_store_is_probed_once_for_all_its_recorded_outs(tmp_path, monkeypatch):
    """A loop run on a store records an OUT per round; each failed probe cost ~6 s."""
    from trainer.eval import training_shards
    from trainer.lineage import write_lineage

    probed = []

    def unreachable(root):
        probed.append(root)
        raise OSError("When listing objects: AWS Error NETWORK_CONNECTION")

    monkeypatch.setattr("trainer.heldout.shard_files", unreachable)
    recorded = [f"s3://store/loop/round-{i}/out" for i in range(20)] + ["s3://other/out"]
    write_lineage(tmp_path, {"shards": recorded}, step=1)
    shards, provenance = training_shards((), str(tmp_path))
    assert shards == () and provenance["recorded_not_found"] == recorded
    assert probed == ["s3://store/loop/round-0/out", "s3://other/out"]
