"""The loop's state files under OUT (trainer/loop/rounds.py): loop.json, a round's manifest
and phase records. One cut short, hand-edited, of the wrong shape or kind, or huge is one line
from `trainer loop` naming the file and what to do (exit 2), not a JSONDecodeError /
KeyError / IsADirectoryError traceback or a 400 MiB read; records are fsynced before the
rename that publishes them. The CLI runs with planning and Ray stubbed: no fit."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

import trainer.fit
import trainer.loop as loop_package
from trainer.loop import cli, run
from trainer.loop.config import LoopConfig
from trainer.loop.rounds import (STATE_FILE_BYTES, RoundDir, StateFileError, claim, read_json,
                                 write_json)

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = {"round": 0, "checkpoint": "/x", "eval": {}, "seconds": 0, "phase_seconds": {}}


def _loop_cli(out: Path, monkeypatch) -> int:
    """`trainer loop` on `out` as the CLI runs it, with planning and Ray stubbed."""
    cfg = LoopConfig.model_validate({
        "out": str(out), "rounds": 2,
        "round0": {"data": "/nonexistent", "checkpoint": "/nonexistent"},
        "train": {"config": str(ROOT / "configs" / "train_tiny.yaml")}})
    plan = run.Plan(cfg, out, None, Path("/nonexistent"), ("trajectories",), "tok")
    monkeypatch.setattr(run, "make_plan", lambda config: plan)
    monkeypatch.setattr(run, "loop_fingerprint", lambda config: "fp")
    monkeypatch.setattr(trainer.fit, "init_ray", lambda *args, **kwargs: None)
    monkeypatch.setattr(loop_package, "load_loop_config", lambda *args, **kwargs: cfg)
    return cli._run(argparse.Namespace(config="loop.yaml", set=[]))


def _bend(out: Path, case: str) -> Path:
    """Lay out OUT with one bent state file; the bent file's path."""
    round0 = out / "round-000"
    round0.mkdir(parents=True)
    (out / "loop.json").write_text('{"fingerprint": "fp"}')
    manifest = round0 / "round.json"
    if case == "loop_truncated":
        (out / "loop.json").write_text('{"fingerprint": "fp", "con')
        return out / "loop.json"
    if case == "loop_list":
        (out / "loop.json").write_text("[]")
        return out / "loop.json"
    if case == "loop_missing_key":
        (out / "loop.json").write_text('{"config": {}}')
        return out / "loop.json"
    if case == "phase_truncated":
        (round0 / "generate.json").write_text('{"out": "/x", "rollo')
        return round0 / "generate.json"
    if case == "phase_fifo":
        os.mkfifo(round0 / "generate.json")
        return round0 / "generate.json"
    if case == "manifest_truncated":
        manifest.write_text('{"round": 0, "checkpoint": "/x", "ev')
    elif case == "manifest_empty":  # a power loss after an unsynced write and its rename
        manifest.write_text("")
    elif case == "manifest_missing_key":
        manifest.write_text('{"round": 0, "checkpoint": "/x"}')
    elif case == "manifest_eval_not_object":
        manifest.write_text(json.dumps({**MANIFEST, "eval": [1]}))
    elif case == "manifest_is_dir":
        manifest.mkdir()
    elif case == "manifest_huge":  # sparse: no disk, and a whole read would take 400 MiB
        with open(manifest, "wb") as handle:
            handle.truncate(400 << 20)
    return manifest


CASES = {
    "loop_truncated": "is not JSON", "loop_list": "holds a JSON list, not an object",
    "loop_missing_key": r"lacks \['fingerprint'\]", "phase_truncated": "is not JSON",
    "phase_fifo": r"is not a regular file \(a FIFO\)", "manifest_truncated": "is not JSON",
    "manifest_empty": "is not JSON", "manifest_missing_key": r"lacks \['eval', 'seconds'",
    "manifest_eval_not_object": "'eval' is not an object", "manifest_is_dir": "is a directory",
    "manifest_huge": "is 419,430,400 bytes, over the",
}
REMEDY = {"loop": "restore it, or use another out",
          "phase": "delete it to redo round 0's generate phase",
          "manifest": "delete it to rebuild round 0's manifest from its phase records"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bent_state_file_is_one_line_naming_it(tmp_path, monkeypatch, capsys, case):
    bent = _bend(tmp_path / "out", case)
    assert _loop_cli(tmp_path / "out", monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trainer loop: {bent}") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert REMEDY[case.split("_")[0]] in err
    with pytest.raises(StateFileError, match=CASES[case]):
        if case.startswith("loop"):
            claim(tmp_path / "out", "fp", {})
        elif case.startswith("phase"):
            RoundDir(tmp_path / "out", 0).done("generate")
        else:
            RoundDir(tmp_path / "out", 0).complete()


def test_absent_files_mean_not_done_and_whole_ones_are_read(tmp_path):
    directory = RoundDir(tmp_path, 1)
    assert directory.complete() is None and directory.done("train") is None
    write_json(directory.manifest, {**MANIFEST, "round": 1})
    write_json(directory.record("train"), {"checkpoint": "/c", "steps": 3})
    assert directory.complete()["round"] == 1 and directory.done("train")["steps"] == 3
    write_json(directory.record("generate"), {"out": "/x"})  # a student round's lacks repairs
    with pytest.raises(StateFileError, match=r"lacks \['repairs'\]; delete it to redo round 1"):
        directory.done("generate")
    assert STATE_FILE_BYTES >= 1 << 20  # an eval report fits


def test_a_record_is_synced_before_the_rename_that_publishes_it(tmp_path, monkeypatch):
    """Without the fsync, a power loss after the rename could leave round.json empty."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(source, target):
        events.append(("replace", str(source)))
        real_replace(source, target)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_json(tmp_path / "round.json", MANIFEST)
    temporary = next(path for kind, path in events if kind == "replace")
    assert events.index(("fsync", temporary)) < events.index(("replace", temporary)), events
    assert read_json(tmp_path / "round.json") == MANIFEST
