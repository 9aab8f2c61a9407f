"""`datagen verify OUT`: every shard against the manifest and the markers, a per-shard list of
problems, exit 1 on any; `--repair` makes the next `generate` regenerate what is damaged."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from datagen.pipeline.cli import main
from datagen.pipeline.shards import ShardStore
from datagen.pipeline.verify import verify_output


def _out(tmp_path: Path, chunks: int = 3, total: int | None = None) -> ShardStore:
    """An OUT as a run leaves it: shards, markers, manifest (tables of one real column)."""
    store = ShardStore(tmp_path / "out")
    store.claim("fp", {}, overwrite=False)
    for chunk in range(chunks):
        ids = [f"{chunk}-{i}" for i in range(100)]
        store.write_chunk(chunk, {"trajectories": pa.table({"id": ids}),
                                  "negatives": pa.table({"id": ids[:30]})}, {})
    store.write_manifest("fp", {}, total or chunks, store.records())
    return store


def _verify(capsys, *args: str) -> tuple[int, str]:
    rc = main(["verify", *args])
    return rc, capsys.readouterr().out


def test_an_intact_out_passes(tmp_path, capsys):
    store = _out(tmp_path)
    rc, out = _verify(capsys, str(store.root))
    assert rc == 0 and "6 shards of 3/3 chunks checked" in out and "sha256" in out
    assert out.strip().endswith("result: intact and complete")


def test_a_truncated_shard_is_listed_and_repair_makes_generate_redo_it(tmp_path, capsys):
    store = _out(tmp_path)
    shard = store.shard_path("trajectories", 1)
    size = shard.stat().st_size
    with open(shard, "r+b") as handle:
        handle.truncate(size // 2)
    for quick in ([], ["--quick"]):
        rc, out = _verify(capsys, str(store.root), *quick)
        assert rc == 1
        assert (f"DAMAGED trajectories/part-000001.parquet: {size // 2:,} bytes, recorded "
                f"{size:,}") in out
        assert "1 damaged chunk(s)" in out
    rc, out = _verify(capsys, str(store.root), "--repair")
    assert rc == 1 and "repair: dropped 1 damaged chunk(s) (1) and 0 stray file(s)" in out
    assert not store.is_complete(1) and not store.shard_path("negatives", 1).exists()
    assert store.is_complete(0) and store.is_complete(2)


def test_a_changed_byte_needs_the_checksum(tmp_path, capsys):
    store = _out(tmp_path)
    shard = store.shard_path("negatives", 2)
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0xFF  # same size, footer intact
    shard.write_bytes(bytes(data))
    assert _verify(capsys, str(store.root), "--quick")[0] == 0  # what a resume checks
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and "negatives/part-000002.parquet: sha256 differs" in out
    assert store.claim("fp", {}, overwrite=False) == []  # resume alone does not notice ...
    _verify(capsys, str(store.root), "--repair")
    assert not store.is_complete(2)  # ... so --repair hands the chunk back to generate


def test_strays_markers_and_manifest_that_disagree(tmp_path, capsys):
    store = _out(tmp_path)
    stray = store.shard_path("trajectories", 7)
    stray.write_bytes(store.shard_path("trajectories", 0).read_bytes())
    store.marker_path(0).write_bytes(b"{broken")
    store.shard_path("negatives", 1).unlink()
    report = verify_output(store.root)
    found = {(p.file, p.stray) for p in report.problems}
    assert ("trajectories/part-000007.parquet", True) in found
    assert ("_chunks/chunk-000000.json", False) in found
    assert ("negatives/part-000001.parquet", False) in found
    assert report.damaged_chunks == [0, 1] and not report.ok
    rc, out = _verify(capsys, str(store.root), "--repair")
    assert rc == 1 and "STRAY trajectories/part-000007.parquet" in out
    assert "dropped 2 damaged chunk(s) (0, 1) and 1 stray file(s)" in out
    assert not stray.exists() and not store.is_complete(1)


def test_an_incomplete_out_is_not_ok(tmp_path, capsys):
    store = _out(tmp_path, chunks=2, total=5)
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and "2/5 chunks" in out and "INCOMPLETE" in out


@pytest.mark.parametrize("manifest", [None, b"{", b'{"shards": []}'])
def test_no_dataset_is_a_clear_error(tmp_path, capsys, manifest):
    store = _out(tmp_path)
    path = store.root / "manifest.json"
    path.unlink()
    if manifest is not None:
        path.write_bytes(manifest)
    assert main(["verify", str(store.root)]) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err and len(err.strip().splitlines()) == 1


def _edit_json(path: Path, edit) -> None:
    data = orjson.loads(path.read_bytes())
    edit(data)
    path.write_bytes(orjson.dumps(data))


@pytest.mark.parametrize("edit, named", [
    (lambda m: m["shards"]["trajectories"][0].update(rows="100"),
     "shards.trajectories.0: shard rows is '100', not a count"),
    (lambda m: m["shards"]["trajectories"][0].update(bytes=-1), "shard bytes is '-1'"),
    (lambda m: m["shards"]["negatives"][1].update(file=None), "shards.negatives.1: shard file"),
    (lambda m: m["shards"]["negatives"][1].pop("sha256"), "exactly the fields"),
    (lambda m: m.update(chunks={"complete": "abc", "total": 3}), "chunks is not"),
    (lambda m: m.update(chunks=[1]), "chunks is not"),
    (lambda m: m.update(counts={"trajectories": "x"}), "counts is not"),
    (lambda m: m.update(counts=[1]), "counts is not"),
    (lambda m: m.update(complete="yes"), "complete is not true or false"),
])
def test_a_manifest_with_wrong_types_is_a_clear_error(tmp_path, capsys, edit, named):
    # each used to be a traceback in verify and inspect (a hand-edited manifest)
    store = _out(tmp_path)
    _edit_json(store.root / "manifest.json", edit)
    for command in ("verify", "inspect"):
        assert main([command, str(store.root)]) == 2
        err = capsys.readouterr().err
        assert "is not a datagen manifest" in err and named in err
        assert len(err.strip().splitlines()) == 1


def test_a_copied_marker_is_damage_and_repair_deletes_no_other_chunk(tmp_path, capsys):
    store = _out(tmp_path)
    marker = store.marker_path(1).read_bytes()
    store.marker_path(2).write_bytes(marker)  # chunk 2's marker now lists chunk 1's shards
    store.marker_path(9).write_bytes(marker)  # a marker outside the run's 3 chunks
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and "_chunks/chunk-000002.json: marker records chunk 1" in out
    assert "_chunks/chunk-000009.json: marker outside the run's plan of 3 chunks" in out
    rc, out = _verify(capsys, str(store.root), "--repair")
    assert "dropped 2 damaged chunk(s) (2, 9)" in out
    assert store.complete_chunks() == {0, 1}
    assert store.shard_path("trajectories", 1).exists()  # the copied marker's shards stay
    assert not store.shard_path("trajectories", 2).exists()  # chunk 2 is generated again


def test_a_shard_off_its_tables_schema_is_damage_that_repair_hands_back(tmp_path, capsys):
    """Intact bytes, manifest and marker agree, but the columns drift: readers fail on it."""
    store = ShardStore(tmp_path / "out")
    store.claim("fp", {}, overwrite=False)
    steps = [pa.array([1, 2], pa.int16()), pa.array(["1", "2"]), pa.array([1, 2], pa.int16())]
    for chunk, n_steps in enumerate(steps):
        ids = [f"{chunk}-{i}" for i in range(2)]
        store.write_chunk(chunk, {"trajectories": pa.table({"id": ids, "n_steps": n_steps})}, {})
    store.write_manifest("fp", {}, 3, store.records())
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and ("DAMAGED trajectories/part-000001.parquet: not the trajectories "
                        "schema: column n_steps is string, not int16") in out
    _verify(capsys, str(store.root), "--repair")
    assert not store.is_complete(1) and store.is_complete(0) and store.is_complete(2)


def test_ids_two_trajectories_shards_hold_are_named_with_both_shards(tmp_path, capsys):
    store = ShardStore(tmp_path / "out")
    store.claim("fp", {}, overwrite=False)
    for chunk, ids in enumerate([["a", "b"], ["c", "a"], ["d", "e"]]):
        store.write_chunk(chunk, {"trajectories": pa.table({"id": ids})}, {})
    store.write_manifest("fp", {}, 3, store.records())
    assert _verify(capsys, str(store.root), "--quick")[0] == 0  # ids are read with the sha256
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and ("DAMAGED trajectories/part-000001.parquet: 1 id(s) also in "
                        "trajectories/part-000000.parquet (e.g. a)") in out
    assert "1 damaged chunk(s)" in out


def test_repeated_ids_pairs_the_first_and_last_part_of_each_repeated_id():
    from datagen.pipeline.verify import repeated_ids

    def parts(*lists):
        return [pa.chunked_array([pa.array(chunk) for chunk in chunks] or [pa.array([], pa.string())])
                for chunks in lists]

    assert repeated_ids([]) == []
    assert repeated_ids(parts([["a", "b"], ["c"]], [["d"]], [])) == []
    found = repeated_ids(parts([["a", "b"], ["x", "b"]], [["c", "y"]], [["x"], ["a", "z"]],
                               [["y", "q"]]))
    assert sorted(found) == [(0, 0, 1, "b"), (0, 2, 2, "a"), (1, 3, 1, "y")]
    # an id in three parts counts once, for its first and last part
    assert repeated_ids(parts([["k"]], [["k"]], [["k", "m"]])) == [(0, 2, 1, "k")]


# manifest.json's shard lists, walked per table key ---------------------------------------------

def _problems(store: ShardStore) -> list[str]:
    return [f"{p.file}: {p.what}" for p in verify_output(store.root).problems]


def test_shards_listed_under_the_wrong_table_or_twice_are_problems(tmp_path, capsys):
    # every record still matches its file, so this used to pass; a reader taking
    # shards["trajectories"] read a negatives shard, or one shard's rows twice
    store = _out(tmp_path)
    manifest = store.root / "manifest.json"
    intact = manifest.read_bytes()

    def swap(m):
        shards = m["shards"]
        shards["trajectories"][2], shards["negatives"][2] = (shards["negatives"][2],
                                                             shards["trajectories"][2])
    _edit_json(manifest, swap)
    found = _problems(store)
    assert ("trajectories/part-000002.parquet: listed under 'negatives' in manifest.json, but "
            "it is a shard of 'trajectories'") in "\n".join(found)
    assert any(p.startswith("manifest.json: counts trajectories: 300 rows, its shards hold 230")
               for p in found)
    manifest.write_bytes(intact)
    _edit_json(manifest, lambda m: m["shards"]["trajectories"].append(
        m["shards"]["trajectories"][1]))
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1
    assert "DAMAGED trajectories/part-000001.parquet: listed twice in manifest.json" in out
    assert "counts trajectories: 300 rows, its shards hold 400" in out
    store.write_manifest("fp", {}, 3, store.records())  # what a rerun of generate writes
    assert _verify(capsys, str(store.root))[0] == 0


# chunk markers --------------------------------------------------------------------------------

@pytest.mark.parametrize("edit", [lambda r: r["shards"].pop("trajectories"),
                                  lambda r: r.update(shards={})])
def test_a_marker_lacking_a_table_is_a_damaged_chunk_that_repair_hands_back(tmp_path, capsys,
                                                                            edit):
    # it used to pass, and --repair then deleted trajectories/part-000001 as a stray while
    # the chunk stayed complete: its rows were lost for good
    store = _out(tmp_path)
    _edit_json(store.marker_path(1), edit)
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and "DAMAGED _chunks/chunk-000001.json: marker names no shard of " in out
    assert "1 damaged chunk(s)" in out and "STRAY" not in out
    _verify(capsys, str(store.root), "--repair")
    assert store.complete_chunks() == {0, 2}  # generate regenerates chunk 1 whole


def test_marker_and_shard_names_not_the_writers_are_strays(tmp_path, capsys):
    # chunk-1.json counted as chunk 1 but was never regenerated; "²" passed str.isdigit() and
    # failed int(): a traceback
    store = _out(tmp_path)
    marker = store.marker_path(1)
    marker.rename(marker.with_name("chunk-1.json"))
    (marker.parent / "chunk-\u00b2.json").write_text("{}")
    (store.root / "trajectories" / "part-\u00b2.parquet").write_text("x")
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and "STRAY _chunks/chunk-1.json: not a chunk marker's name" in out
    assert "STRAY _chunks/chunk-\u00b2.json" in out
    assert "STRAY trajectories/part-\u00b2.parquet" in out
    assert "DAMAGED trajectories/part-000001.parquet: listed in manifest.json, but no" in out
    _verify(capsys, str(store.root), "--repair")
    assert sorted(p.name for p in marker.parent.iterdir()) == ["chunk-000000.json",
                                                               "chunk-000002.json"]
    assert not (store.root / "trajectories" / "part-\u00b2.parquet").exists()


def test_an_oversized_marker_is_damage_and_a_large_manifest_is_not(tmp_path, capsys):
    from datagen.pipeline.storage import MAX_MARKER_BYTES

    store = _out(tmp_path)
    marker = store.marker_path(1)
    marker.write_bytes(marker.read_bytes() + b" " * MAX_MARKER_BYTES)
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and "DAMAGED _chunks/chunk-000001.json: marker unreadable" in out
    assert "over the 1,048,576" in out
    store.drop_chunk(1)
    store.write_manifest("fp", {}, 3, store.records())
    manifest = store.root / "manifest.json"  # ~1.5 KB a chunk: a large run's is far larger
    manifest.write_bytes(manifest.read_bytes() + b" " * 2 * MAX_MARKER_BYTES)
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and "2/3 chunks" in out and "DAMAGED" not in out


# manifest.json's header against _run.json -----------------------------------------------------

_CONFIG = {"num_trajectories": 300, "chunk_size": 100}


def _planned_out(tmp_path: Path) -> ShardStore:
    """An OUT whose _run.json records a config generate plans 3 chunks of."""
    store = ShardStore(tmp_path / "out")
    store.claim("fp", _CONFIG, overwrite=False)
    for chunk in range(3):
        ids = [f"{chunk}-{i}" for i in range(100)]
        store.write_chunk(chunk, {"trajectories": pa.table({"id": ids})}, {})
    store.write_manifest("fp", _CONFIG, 3, store.records())
    return store


def _drop_last_chunk(m: dict) -> None:
    """A chunk's shards taken out and the header made to agree: a 2-chunk run, it claims."""
    gone = m["shards"]["trajectories"].pop()
    m["counts"]["trajectories"] -= gone["rows"]
    m["chunks"] = {"total": 2, "complete": 2}


@pytest.mark.parametrize("edit, named", [
    (_drop_last_chunk, "chunks.total is 2; _run.json's config plans 3"),
    (lambda m: m.update(fingerprint="0" * 16),
     "fingerprint is '0000000000000000', _run.json's 'fp'"),
    (lambda m: m.update(schema_version=1), "schema_version is 1, _run.json's"),
    (lambda m: m["config"].update(num_trajectories=400_000), "config differs"),
    (lambda m: m["counts"].pop("trajectories"), "counts has no 'trajectories'"),
    (lambda m: m["chunks"].update(complete=2), "chunks.complete is 2; its shards are of 3"),
    (lambda m: m.update(complete=False), "complete is False, with 3 of 3 chunks"),
])
def test_a_manifest_header_that_departs_from_the_run_is_a_problem(tmp_path, capsys, edit,
                                                                   named):
    # each passed as "intact and complete": verify never read the header
    store = _planned_out(tmp_path)
    assert _verify(capsys, str(store.root))[0] == 0
    _edit_json(store.root / "manifest.json", edit)
    if edit is _drop_last_chunk:
        store.drop_chunk(2)
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and f"DAMAGED manifest.json: {named}" in out, out
    assert "rewrite manifest.json" in out


def test_an_out_without_its_run_record_is_a_problem(tmp_path, capsys):
    store = _out(tmp_path)
    (store.root / "_run.json").unlink()
    rc, out = _verify(capsys, str(store.root))
    assert rc == 1 and "DAMAGED _run.json: missing" in out
