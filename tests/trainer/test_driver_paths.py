"""`loss.teacher_model` and `scaling.deepspeed_config` are checked on the driver before Ray
starts (trainer/fit.py, trainer/engines.py): a missing or bent one is one `cannot train:` line
naming the field. Before, both were first read inside the Ray Train worker: a missing file
failed after ~65 s with advice to rerun, and a FIFO as the DeepSpeed JSON hung the fit
forever. Driver-side functions only: no fit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Iterator

import pytest

import trainer.fit
from trainer.config import OptimConfig, load_config
from trainer.engines import DEEPSPEED_JSON_BYTES, read_deepspeed_config

ROOT = Path(__file__).resolve().parents[2]


def _config(*overrides: str):
    return load_config(ROOT / "configs" / "train_tiny.yaml", list(overrides))


@contextlib.contextmanager
def _fails_after(seconds: int) -> Iterator[None]:
    """A TimeoutError instead of a test that hangs (a FIFO read waits for a writer)."""
    def expire(signum, frame):
        raise TimeoutError(f"still reading after {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _no_ray(monkeypatch):
    def reached(*args, **kwargs):
        raise AssertionError("the fit reached Ray")
    monkeypatch.setattr(trainer.fit, "_train", reached)
    monkeypatch.setattr(trainer.fit, "init_ray", reached)


def _bent_deepspeed_json(tmp_path: Path, case: str) -> Path:
    path = tmp_path / "ds.json"
    if case == "fifo":
        os.mkfifo(path)
    elif case == "not_json":
        path.write_text("not json")
    elif case == "list":
        path.write_text("[]")
    elif case == "huge":
        with open(path, "wb") as handle:
            handle.truncate(DEEPSPEED_JSON_BYTES + 1)
    elif case == "directory":
        path.mkdir()
    return path  # "missing": nothing there


DEEPSPEED_CASES = {"missing": "no such file or directory", "fifo": r"not a regular file \(a FIFO\)",
                   "not_json": "is not JSON", "list": "holds a JSON list, not an object",
                   "huge": "bytes, over the", "directory": "is a directory"}


@pytest.mark.parametrize("case", sorted(DEEPSPEED_CASES))
def test_a_bent_deepspeed_config_fails_on_the_driver_naming_the_field(tmp_path, monkeypatch,
                                                                      tiny_tokenizer_dir, case):
    _no_ray(monkeypatch)
    path = _bent_deepspeed_json(tmp_path, case)
    cfg = _config("scaling.strategy=deepspeed", f"scaling.deepspeed_config={path}",
                  f"run_dir={tmp_path / 'run'}", f"tokenizer={tiny_tokenizer_dir}")
    with pytest.raises(ValueError, match=f"^scaling.deepspeed_config: .*{DEEPSPEED_CASES[case]}"), \
            _fails_after(30):
        trainer.fit.fit(cfg)


def test_the_worker_reads_the_deepspeed_config_bounded(tmp_path):
    """The worker reads it again (the driver checked it): a FIFO put there since is an error
    at once, not a read that waits for a writer forever."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, "optimizer": {"type": "Adam"}}))
    config = read_deepspeed_config(str(path), 4, OptimConfig())
    assert config["train_micro_batch_size_per_gpu"] == 4 and "optimizer" not in config
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(ValueError, match=r"scaling.deepspeed_config: .*\(a FIFO\)"), \
            _fails_after(10):
        read_deepspeed_config(str(path), 4, OptimConfig())


def test_a_missing_online_teacher_fails_on_the_driver_naming_the_field(tmp_path, monkeypatch,
                                                                       tiny_tokenizer_dir):
    _no_ray(monkeypatch)
    cfg = _config("loss.teacher=online", f"loss.teacher_model={tmp_path / 'nowhere'}",
                  f"run_dir={tmp_path / 'run'}", f"tokenizer={tiny_tokenizer_dir}")
    with pytest.raises(FileNotFoundError, match="^loss.teacher_model: no checkpoint"):
        trainer.fit.fit(cfg)


def test_an_online_teacher_run_directory_resolves_to_its_newest_checkpoint(tmp_path):
    """As model.init_from and dpo.reference_model: resolved once, on the driver."""
    from tests.trainer.helpers import tiny_model

    run_dir = tmp_path / "teacher_run"
    for name in ("checkpoint_000000", "checkpoint_000001"):
        tiny_model(vocab_size=64).save_pretrained(run_dir / name)
    cfg = trainer.fit.absolute_paths(_config("loss.teacher=online",
                                             f"loss.teacher_model={run_dir}"))
    assert cfg.loss.teacher_model == str(run_dir / "checkpoint_000001")


def test_an_unused_teacher_model_is_left_alone(tmp_path):
    """loss.teacher topk does not load teacher_model: a stale path there is no error."""
    cfg = trainer.fit.absolute_paths(_config("loss.teacher=topk",
                                             f"loss.teacher_model={tmp_path / 'nowhere'}"))
    assert cfg.loss.teacher_model == str(tmp_path / "nowhere")
