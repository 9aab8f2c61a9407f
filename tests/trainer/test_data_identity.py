"""The identity of the data a checkpoint read (trainer/data_identity.py): kept by a copy of the
OUT (on disk or on object storage) and by an OUT that grew, lost by a changed, removed or
unfinished shard; recorded in training.json and compared by `trainer eval`'s leak check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.s3server import s3  # noqa: F401 - a fixture
from trainer.config import load_config
from trainer.data_identity import (data_identity, holds, parse_ranges, shard_sizes,
                                   valid_identity)
from trainer.eval import training_shards
from trainer.lineage import (LINEAGE_FILE, MAX_OUTS, lineage, recorded_data, recorded_shards,
                             write_lineage)

ROOT = Path(__file__).resolve().parents[2]


def _shard(out: Path, table: str, chunk: int, rows: int) -> None:
    (out / table).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"task_id": [f"sql-{chunk}-{i:08d}" for i in range(rows)]}),
                   out / table / f"part-{chunk:06d}.parquet")


def _chunk(out: Path, chunk: int, repairs: bool = True, marked: bool = True) -> None:
    """One chunk of a datagen OUT: its trajectories (and repairs) shard and, once complete,
    its marker."""
    _shard(out, "trajectories", chunk, 3 + chunk)
    if repairs:
        _shard(out, "repairs", chunk, 1)
    if marked:
        (out / "_chunks").mkdir(exist_ok=True)
        (out / "_chunks" / f"chunk-{chunk:06d}.json").write_text("{}")


@pytest.fixture
def out(tmp_path) -> Path:
    """Chunks 0-2 complete (chunk 1 without repairs) and chunk 3 still running."""
    out = tmp_path / "out"
    for chunk in range(3):
        _chunk(out, chunk, repairs=chunk != 1)
    _chunk(out, 3, marked=False)
    return out


def test_a_copy_or_a_grown_out_holds_the_identity_a_changed_one_does_not(out, tmp_path):
    identity = data_identity(str(out))
    assert identity["chunks"] == "0-2" and identity["files"] == 5  # chunk 3 is not data yet
    assert holds(shard_sizes(str(out)), identity)

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    _chunk(copy, 7)  # grew after the fit started: still holds what the fit read
    assert holds(shard_sizes(str(copy)), identity)

    def changed(name: str, change) -> bool:
        other = tmp_path / name
        shutil.copytree(out, other)
        change(other)
        return holds(shard_sizes(str(other)), identity)

    assert not changed("rewritten", lambda o: _shard(o, "trajectories", 1, 40))
    assert not changed("lost_repairs", lambda o: (o / "repairs/part-000002.parquet").unlink())
    assert not changed("gained_repairs", lambda o: _shard(o, "repairs", 1, 1))
    assert not changed("unmarked", lambda o: (o / "_chunks/chunk-000001.json").unlink())
    assert data_identity(str(tmp_path / "nowhere")) is None
    assert not holds(shard_sizes(str(tmp_path / "nowhere")), identity)


def test_a_bent_identity_is_no_identity():
    assert parse_ranges("0-2,5,7-9") == [(0, 2), (5, 5), (7, 9)]
    for text in ("", "1-", "-1", "3-1", "1,1", "2,1", "a", "1-2-3", "1,,2", "9" * 5000,
                 "\u00b2", None, 5):
        assert parse_ranges(text) is None, text
    assert valid_identity({"chunks": "0-2", "files": 5, "digest": "ab"})
    for bent in ({"chunks": "0-2", "files": "5", "digest": "ab"}, {"chunks": "x", "files": 5,
                 "digest": "ab"}, {"files": 5, "digest": "ab"}, [], "0-2"):
        assert not valid_identity(bent), bent
        assert not holds({"trajectories/part-000000.parquet": 1}, bent if isinstance(
            bent, dict) else {})


def _checkpoint(tmp_path: Path, record: dict) -> str:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir(parents=True)
    write_lineage(checkpoint, record, step=1)
    return str(checkpoint)


def test_a_checkpoint_records_its_data_and_inherits_that_of_its_start(out, tmp_path):
    def config(name, *overrides):
        return load_config(ROOT / "configs" / name, ["run_dir=/runs/x",
                                                     "tokenizer=/runs/tokenizer", *overrides])

    sad = lineage(config("train_tiny.yaml", f"shards={out}", "model.init_from=null"))
    assert sad["data"] == {str(out): data_identity(str(out))}
    start = _checkpoint(tmp_path, sad)
    other = tmp_path / "other"
    _chunk(other, 0)
    dpo = lineage(config("dpo_tiny.yaml", f"shards={other}", f"model.init_from={start}"))
    assert dpo["data"] == {str(out): sad["data"][str(out)],
                           str(other): data_identity(str(other))}
    (Path(start) / LINEAGE_FILE).write_text(json.dumps(
        {**sad, "data": {str(out): {"chunks": "2-1"}, "x": 3}}))
    assert recorded_data(start) == {}  # read, not trusted
    many = {f"/out/{i}": sad["data"][str(out)] for i in range(MAX_OUTS + 1)}
    (Path(start) / LINEAGE_FILE).write_text(json.dumps({"shards": list(many), "data": many}))
    assert recorded_data(start) == {} and recorded_shards(start) is None  # each would be listed


def test_eval_says_which_out_holds_the_data_the_checkpoint_read(out, tmp_path):
    record = {"shards": [str(out)], "data": {str(out): data_identity(str(out))}}
    checkpoint = _checkpoint(tmp_path, record)
    shards, provenance = training_shards((), checkpoint)
    assert shards == (str(out),) and provenance["recorded_data_held_by"] == {str(out): str(out)}
    assert provenance["recorded_data_not_held"] == [] and "note" not in provenance

    copy = tmp_path / "elsewhere"  # the OUT copied to the machine that evaluates
    shutil.copytree(out, copy)
    other = tmp_path / "other"
    _chunk(other, 0)
    _, provenance = training_shards((str(other), str(copy)), checkpoint)
    assert provenance["recorded_data_held_by"] == {str(out): str(copy)}
    _, provenance = training_shards((str(other),), checkpoint)  # not the training data
    assert provenance["recorded_data_not_held"] == [str(out)]
    assert provenance["note"].startswith("1 of the 1 OUT(s) whose shards the checkpoint "
                                         "records are held by no --shards OUT")

    _shard(out, "trajectories", 0, 30)  # regenerated in place since the fit
    shards, provenance = training_shards((), checkpoint)
    assert shards == (str(out),) and provenance["recorded_data_not_held"] == [str(out)]
    assert provenance["note"].startswith("1 recorded OUT(s) no longer hold the shards")

    gone = _checkpoint(tmp_path / "g", {"shards": ["/gone/out"],
                                        "data": {"/gone/out": record["data"][str(out)]}})
    _, provenance = training_shards((), gone)  # not here: said once, as before
    assert provenance["recorded_not_found"] == ["/gone/out"]
    assert "recorded_data_not_held" not in provenance and provenance["note"].count(";") == 0


def test_an_out_copied_to_object_storage_holds_its_identity(out, s3):  # noqa: F811
    bucket = s3.bucket()
    for path in out.rglob("*"):
        if path.is_file():
            s3.client.put_object(Bucket=bucket, Key=f"out/{path.relative_to(out)}",
                                 Body=path.read_bytes())
    uri = f"s3://{bucket}/out"
    assert data_identity(uri) == data_identity(str(out))
    _, provenance = training_shards((uri,), _checkpoint(
        out.parent, {"shards": [str(out)], "data": {str(out): data_identity(str(out))}}))
    assert provenance["recorded_data_held_by"] == {str(out): uri}


def test_many_recorded_outs_are_matched_with_one_digest_per_out(tmp_path, monkeypatch):
    """A loop run records an OUT per round; each record was checked against each OUT by
    re-filtering and re-hashing that OUT's listing (1,000 OUTs: ~10^6 digests)."""
    import trainer.data_identity as identities
    from trainer.eval import _holders

    outs = [str(tmp_path / f"out{i}") for i in range(30)]
    listings = {out: {f"trajectories/part-{c:06d}.parquet": i + 1 for c in range(5)}
                for i, out in enumerate(outs)}
    monkeypatch.setattr(identities, "shard_sizes", listings.__getitem__)
    recorded = {out: {"chunks": "0-4", "files": 5, "digest": identities._digest(listings[out])}
                for out in outs}
    recorded[outs[0]] = recorded[outs[1]]  # regenerated: its data is now only in out1
    digests = []
    real = identities._digest
    monkeypatch.setattr(identities, "_digest", lambda sized: digests.append(1) or real(sized))
    held_by, not_held = _holders(recorded, tuple(outs))
    assert held_by == {out: out for out in outs[1:]} | {outs[0]: outs[1]} and not_held == []
    assert len(digests) <= len(outs)
