"""`datagen verify`'s result line names what fixes the problems it found, on an OUT a real
`datagen generate` wrote: it used to suggest `--repair` for every problem, also for those of
manifest.json alone (listed twice, under another table, a header departing from _run.json),
where `--repair` drops nothing and rerunning generate rewrites manifest.json."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from datagen.pipeline.cli import main
from tests.conftest import ROOT

GENERATE = ["-m", "datagen", "generate", "--config", "configs/demo.yaml",
            "--num-trajectories", "40", "--set", "chunk_size=20", "--no-progress"]
pytestmark = pytest.mark.slow
REWRITE = "rerun `datagen generate` with the same config to rewrite manifest.json"


def _generate(out: Path) -> None:
    done = subprocess.run([sys.executable, *GENERATE, "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A 2-chunk OUT of the demo config (~20 s: a local Ray), copied by each test."""
    out = tmp_path_factory.mktemp("generated") / "out"
    _generate(out)
    return out


@pytest.fixture
def out(generated, tmp_path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(generated, copy)
    return copy


def _edit_manifest(out: Path, edit) -> None:
    path = out / "manifest.json"
    manifest = orjson.loads(path.read_bytes())
    edit(manifest)
    path.write_bytes(orjson.dumps(manifest))


def _verify(capsys, out: Path, *args: str) -> tuple[int, str]:
    rc = main(["verify", str(out), *args])
    return rc, capsys.readouterr().out


def _result(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("result: "))


def _listed_twice(m: dict) -> None:
    m["shards"]["trajectories"].append(m["shards"]["trajectories"][0])


def _under_another_table(m: dict) -> None:
    shards = m["shards"]
    shards["trajectories"][1], shards["negatives"][1] = (shards["negatives"][1],
                                                         shards["trajectories"][1])


def _another_config(m: dict) -> None:
    m["config"]["seed"] = 12345


@pytest.mark.parametrize("edit", [_listed_twice, _under_another_table, _another_config])
def test_problems_of_the_manifest_alone_say_rerun_generate_not_repair(out, capsys, edit):
    _edit_manifest(out, edit)
    rc, text = _verify(capsys, out)
    assert rc == 1 and "0 damaged chunk(s)" in text
    assert _result(text).endswith(f"; {REWRITE} (`--repair` has nothing to drop or delete)")
    rc, text = _verify(capsys, out, "--repair")
    assert "repair: nothing to drop or delete" in text and "dropped" not in text
    _generate(out)  # what the result line says: nothing to regenerate, the manifest rewritten
    rc, text = _verify(capsys, out)
    assert rc == 0 and _result(text) == "result: intact and complete"


def test_a_damaged_shard_still_says_repair_then_generate(out, capsys):
    _edit_manifest(out, _listed_twice)
    shard = out / "negatives" / "part-000001.parquet"
    shard.write_bytes(shard.read_bytes()[:100])
    rc, text = _verify(capsys, out)
    assert rc == 1 and "1 damaged chunk(s)" in text
    assert _result(text).endswith(f"`datagen verify {out} --repair`, then rerunning `datagen "
                                  "generate` with the same config, regenerates them")


def test_a_stray_alone_says_repair_deletes_it(out, capsys):
    shutil.copy(out / "trajectories" / "part-000000.parquet",
                out / "trajectories" / "part-000009.parquet")
    rc, text = _verify(capsys, out)
    assert rc == 1 and "STRAY trajectories/part-000009.parquet" in text
    assert _result(text).endswith(f"`datagen verify {out} --repair` deletes the stray file(s)")
    _verify(capsys, out, "--repair")
    assert _verify(capsys, out)[0] == 0


def test_a_missing_run_record_says_no_command_restores_it(out, capsys):
    (out / "_run.json").unlink()
    rc, text = _verify(capsys, out)
    assert rc == 1 and "DAMAGED _run.json: missing" in text
    assert "--repair" not in _result(text) and "restore it from a copy" in _result(text)
