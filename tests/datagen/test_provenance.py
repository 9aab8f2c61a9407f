"""Which code wrote each chunk: recorded per marker, counted in the manifest, named on a mix."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import critics
import datagen
import mutators
from datagen.config import GenerateConfig
from datagen.pipeline import run_generation
from datagen.pipeline.inspect import inspect_dataset
from datagen.provenance import (code_counts, code_identity, config_user_modules, describe,
                                source_digest, user_digest, written_by)


def _package(root: Path) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "sub" / "t.jinja").write_text("{{ x }}")
    return root / "pkg"


def test_the_source_digest_changes_with_any_byte_or_name_and_ignores_bytecode(tmp_path):
    package = _package(tmp_path)
    before = source_digest([package])
    assert source_digest([package]) == before and len(before) == 16
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00" * 16)
    (package / "sub" / "b.pyc").write_bytes(b"\x01")
    assert source_digest([package]) == before
    (package / "a.py").write_text("A = 2\n")
    assert source_digest([package]) != before
    (package / "a.py").write_text("A = 1\n")
    (package / "a.py").rename(package / "c.py")  # same bytes, another module
    assert source_digest([package]) != before
    (package / "c.py").rename(package / "a.py")
    # a byte moved across the boundary of two files is another source
    (package / "a.py").write_text("A = 1\n{")
    (package / "sub" / "t.jinja").write_text("{ x }}")
    assert source_digest([package]) != before


def test_a_file_over_the_cap_counts_by_name_and_size(tmp_path, monkeypatch):
    import datagen.provenance as provenance

    monkeypatch.setattr(provenance, "MAX_FILE_BYTES", 8)
    package = _package(tmp_path)
    (package / "dump.bin").write_bytes(b"x" * 100)
    before = source_digest([package])
    (package / "dump.bin").write_bytes(b"y" * 100)  # same size: not read
    assert source_digest([package]) == before
    (package / "dump.bin").write_bytes(b"y" * 101)
    assert source_digest([package]) != before


def test_a_tree_of_too_many_files_is_not_walked_whole(tmp_path, monkeypatch):
    import datagen.provenance as provenance

    monkeypatch.setattr(provenance, "MAX_FILES", 3)
    package = _package(tmp_path)
    files = [p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for index in range(3 - len(files)):
        (package / f"extra{index}.py").write_text("")
    assert source_digest([package]) != "unknown"
    (package / "one_more.py").write_text("")
    assert source_digest([package]) == "unknown"


def test_this_process_code_is_the_three_packages_it_imported():
    roots = [Path(module.__file__).parent for module in (datagen, mutators, critics)]
    assert code_identity() == {"version": datagen.__version__, "digest": source_digest(roots)}


@pytest.mark.slow
def test_each_chunk_names_its_code_and_a_resumed_out_with_several_says_so(ray_head, tmp_path):
    out = tmp_path / "out"
    config = GenerateConfig(out=str(out), num_trajectories=60, chunk_size=20, progress=False)
    first = run_generation(config)
    assert first.complete and not any("versions of the code" in n for n in first.notes)
    markers = sorted((out / "_chunks").glob("chunk-*.json"))
    assert len(markers) == 3
    for marker in markers:  # the workers run this checkout (the head's PYTHONPATH)
        assert orjson.loads(marker.read_bytes())["stats"]["code"] == code_identity()
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["code"] == [{**code_identity(), "chunks": 3, "first_chunk": 0,
                                 "last_chunk": 2}]
    assert f"source digest {code_identity()['digest']}: 3 chunk(s)" in \
        (out / "README.md").read_text()

    # What older code left: a marker from before markers named their code, and one of
    # another source. The rerun keeps both chunks (same config) and names the mix.
    older = orjson.loads(markers[0].read_bytes())
    del older["stats"]["code"]
    markers[0].write_bytes(orjson.dumps(older))
    other = orjson.loads(markers[1].read_bytes())
    other["stats"]["code"] = {"version": "0.0.9", "digest": "0123456789abcdef"}
    markers[1].write_bytes(orjson.dumps(other))
    again = run_generation(config)
    assert again.complete and again.generated == 0
    (note,) = [n for n in again.notes if "versions of the code" in n]
    assert note.startswith("this OUT's chunks were written by 3 versions of the code: "
                           "code not recorded (written before datagen recorded it): 1 chunk(s); "
                           "datagen 0.0.9, source digest 0123456789abcdef: 1 chunk(s) "
                           "(chunks 1-1); datagen ")
    assert f"note: {note}" in again.format()
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert [(entry["digest"], entry["chunks"]) for entry in manifest["code"]] == [
        ("unrecorded", 1), ("0123456789abcdef", 1), (code_identity()["digest"], 1)]
    assert written_by(manifest) in inspect_dataset(out, samples=0)


def test_a_manifest_without_or_with_a_bent_code_record_reads_as_unknown():
    assert written_by({}) is None
    assert written_by({"code": "abc"}) is None
    assert written_by({"code": [{"version": "1"}]}) is None
    assert written_by({"code": [{"version": "1", "digest": "d", "chunks": "x",
                                 "first_chunk": 0, "last_chunk": 0}]}) is None


def test_a_bent_marker_code_is_cut_and_a_note_names_at_most_five_codes():
    from datagen.pipeline.shards import ChunkRecord
    from datagen.provenance import MAX_FIELD, code_counts, mixed_code_note

    records = [ChunkRecord(chunk=i, shards={}, stats={"code": {"version": "v" * 10_000,
                                                              "digest": f"{i:016x}"}})
               for i in range(8)]
    counts = code_counts(records)
    assert len(counts) == 8 and len(counts[0]["version"]) == MAX_FIELD
    note = mixed_code_note(counts)
    assert note.count("source digest") == 5 and "; and 3 more (manifest.json" in note
    assert len(note) < 1_000


def test_the_users_modules_are_the_env_modules_and_module_class_envs_but_not_datagens():
    assert config_user_modules(["acme.envs", "datagen.envs.sql", "acme.envs"],
                               ["sql", "acme.more:Shop", "mutators.x:Y", "acme.envs:Toy"]) \
        == ("acme.envs", "acme.more")
    assert config_user_modules([], ["sql", "fs"]) == ()


def test_a_users_module_or_package_has_its_own_digest_that_follows_its_source(
        tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "shop_env_v.py").write_text("PRICE = 1\n")
    package = tmp_path / "shop_pkg_v"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data" / "items.json").write_text("[1]")
    identity = code_identity(("shop_env_v", "shop_pkg_v"))  # imports what no task drew yet
    assert identity["user_modules"] == ["shop_env_v", "shop_pkg_v"]
    assert identity["user_digest"] == source_digest([tmp_path / "shop_env_v.py", package])
    assert identity["digest"] == code_identity()["digest"] and "user_digest" not in code_identity()
    (package / "data" / "items.json").write_text("[2]")  # a data file of the package counts
    assert user_digest(["shop_env_v", "shop_pkg_v"]) != identity["user_digest"]
    assert user_digest(["no_such_module_here"]) == "unknown"


def test_chunks_of_one_datagen_but_two_versions_of_the_users_env_are_two_codes():
    from datagen.pipeline.shards import ChunkRecord

    base = {"version": "0.1.0", "digest": "d" * 16, "user_modules": ["acme.envs"]}
    records = [ChunkRecord(chunk=i, shards={}, stats={"code": {**base, "user_digest": digest}})
               for i, digest in enumerate(["a" * 16, "a" * 16, "b" * 16])]
    records.append(ChunkRecord(chunk=3, shards={}, stats={"code": {"version": "0.1.0",
                                                                  "digest": "d" * 16}}))
    counts = code_counts(records)
    assert [(c.get("user_digest"), c["chunks"]) for c in counts] == [
        ("a" * 16, 2), ("b" * 16, 1), (None, 1)]
    assert describe(counts[1]) == (f"datagen 0.1.0, source digest {'d' * 16}, your modules "
                                   f"(acme.envs) digest {'b' * 16}: 1 chunk(s) (chunks 2-2)")
    assert written_by({"code": counts}).count("your modules") == 2
