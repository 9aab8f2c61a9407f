"""Engine death mid-chunk (issue 17). The `vllm` teacher's engine actor SIGKILLed while its
episodes are in flight is restarted by Ray (`max_restarts`) and the batch is resent: every
episode comes back from the new incarnation; an engine that keeps dying yields failed rows
with `error_kind` engine_lost and the reason. The `hf` teacher's model lives in the chunk
worker: that worker SIGKILLed mid-chunk is replaced and its chunks rerun, the run completes
with exactly N rows. The real vLLM engine's restart is in test_vllm_actor.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import polars as pl
import pytest
import yaml

from datagen.teachers.vllm_engine import ENGINE_BATCH_ATTEMPTS
from tests.conftest import ROOT
from tests.datagen.teachers.engine_fakes import (FakeCrashingEngineTeacher,
                                                 FakeSlowEngineTeacher, fake_engine_config)
from tests.datagen.teachers.helpers import make_tasks

pytestmark = pytest.mark.slow


def _wait(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while not condition():
        assert time.time() < deadline, f"waited {timeout_s:g}s for {what}"
        time.sleep(0.05)


def _in_thread(call) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", call()), daemon=True)
    thread.start()
    return thread, result


def test_a_killed_engine_actor_is_restarted_and_its_episodes_rerun(ray_head):
    import ray

    teacher = FakeSlowEngineTeacher(fake_engine_config("fake-slow"))
    (engine,) = teacher.engines()
    try:
        first_pid = ray.get(engine.pid.remote())
        tasks = make_tasks(12, envs=("sql", "fs"))
        thread, result = _in_thread(lambda: teacher.rollout_batch(tasks))
        _wait(lambda: ray.get(engine.turns_started.remote()) >= len(tasks), "episodes to start")
        os.kill(first_pid, signal.SIGKILL)  # as the OOM killer would
        thread.join(timeout=180)
        assert not thread.is_alive(), "the batch never came back"
        trajectories = result["value"]
        assert [t.task.id for t in trajectories] == [t.id for t in tasks]
        lost = [t.error for t in trajectories if t.error_kind == "engine_lost"]
        assert not lost, lost[0]
        pids = {t.meta["pid"] for t in trajectories}
        second_pid = ray.get(engine.pid.remote())  # the same handle: restarted in place
        assert second_pid != first_pid and pids == {second_pid}, "rerun on the new incarnation"
        assert ray.get(engine.turns_started.remote()) >= len(tasks)
    finally:
        ray.kill(engine)


def test_an_engine_that_keeps_dying_yields_failed_rows_with_the_reason(ray_head):
    import ray

    teacher = FakeCrashingEngineTeacher(fake_engine_config("fake-crashing"))
    (engine,) = teacher.engines()
    try:
        tasks = make_tasks(4)
        trajectories = teacher.rollout_batch(tasks)
        assert [t.task.id for t in trajectories] == [t.id for t in tasks]
        for traj in trajectories:
            assert not traj.success and traj.error_kind == "engine_lost"
            assert traj.error.startswith(
                f"EngineLost: the engine actor died under this batch {ENGINE_BATCH_ATTEMPTS} "
                "times (last: Actor"), traj.error
            assert "\n" not in traj.error
    finally:
        ray.kill(engine)


def _alive_chunk_worker_pids(head) -> list[int]:
    from ray.util.state import list_actors

    actors = list_actors(address=head.address,
                         filters=[("class_name", "=", "ChunkWorker"), ("state", "=", "ALIVE")])
    return [actor.pid for actor in actors if actor.pid]


def test_an_hf_teachers_worker_killed_mid_chunk_is_replaced_and_the_run_completes(
        ray_head, tiny_model, tmp_path):
    n, out = 8, tmp_path / "out"
    config = {"out": str(out), "num_trajectories": n, "chunk_size": 2, "num_workers": 1,
              "envs": [{"name": "sql"}], "negatives": {"enabled": False},
              "critics": {"enabled": False}, "progress": False,
              "teacher": {"backend": "hf", "name": "tiny-hf", "hf": {"model": str(tiny_model)},
                          "sampling": {"max_tokens_per_turn": 16, "temperature": 1.0, "seed": 1},
                          "episode": {"max_turns": 2, "max_total_tokens": 4096}}}
    (tmp_path / "hf.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [sys.executable, "-m", "datagen", "generate", "--config", str(tmp_path / "hf.yaml"),
         "--address", ray_head.address], cwd=ROOT, env=ray_head.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    markers = lambda: len(list((out / "_chunks").glob("chunk-*.json")))  # noqa: E731
    _wait(lambda: (out / "_chunks").exists() and markers() >= 1 or proc.poll() is not None,
          "the first chunk", timeout_s=240)
    pids = _alive_chunk_worker_pids(ray_head)
    assert pids and proc.poll() is None and markers() < n // 2, "kill while chunks are in flight"
    os.kill(pids[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout + stderr
    assert "lost a chunk worker" in stdout and "retried:" in stdout
    df = pl.read_parquet(out / "trajectories" / "*.parquet")
    assert df.height == n and df["id"].n_unique() == n
    assert set(df["teacher"]) == {"tiny-hf"}
    assert all(orjson.loads(meta)["backend"] == "hf" for meta in df["teacher_meta"])
    verified = subprocess.run([sys.executable, "-m", "datagen", "verify", str(out)], cwd=ROOT,
                              env=ray_head.env, capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
