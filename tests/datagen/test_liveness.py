"""A generation run never waits forever (issue 12): on the session's Ray head (2 CPUs), a
worker killed mid-run, worker requests Ray cannot place, two concurrent runs, workers that
lack what the config needs, a relative OUT, and Ray addresses or tokens that do not work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from datagen.pipeline.cluster import ClusterError
from datagen.config import GenerateConfig
from datagen.pipeline import LivenessPolicy, run_generation
from tests.conftest import ROOT, _free_port

pytestmark = pytest.mark.slow
TRAJECTORIES_ONLY = {"negatives": {"enabled": False}, "critics": {"enabled": False}}


def _generate(head, *args, env: dict | None = None, cwd: Path = ROOT, timeout: float = 240,
              ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "datagen", "generate", *args, "--no-progress"],
                          cwd=cwd, env=env or head.env, capture_output=True, text=True,
                          timeout=timeout)


def _ids(out: Path) -> pl.Series:
    return pl.read_parquet(out / "trajectories" / "*.parquet")["id"]


def _markers(out: Path) -> int:
    return len(list((out / "_chunks").glob("chunk-*.json"))) if (out / "_chunks").exists() else 0


def _alive_chunk_worker_pids(head) -> list[int]:
    from ray.util.state import list_actors

    actors = list_actors(address=head.address,
                         filters=[("class_name", "=", "ChunkWorker"), ("state", "=", "ALIVE")])
    return [actor.pid for actor in actors if actor.pid]


def test_a_worker_killed_mid_run_has_its_chunks_rerun_on_the_others(ray_head, tmp_path):
    out, n = tmp_path / "out", 1600
    proc = subprocess.Popen(
        [sys.executable, "-m", "datagen", "generate", "--config", "configs/demo.yaml", "--out",
         str(out), "--num-trajectories", str(n), "--set", "chunk_size=100", "--address",
         ray_head.address, "--no-progress"],
        cwd=ROOT, env=ray_head.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while _markers(out) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    pids = _alive_chunk_worker_pids(ray_head)
    assert pids and proc.poll() is None, "the kill must land while chunks are in flight"
    os.kill(pids[0], signal.SIGKILL)  # as the OOM killer or a lost node would
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stdout + stderr
    assert "lost a chunk worker" in stdout and "retried:" in stdout
    ids = _ids(out)
    assert ids.len() == n and ids.n_unique() == n
    assert len(list((out / "trajectories").glob("part-*.parquet"))) == n // 100
    assert not list((out / "_tmp").glob("*"))


def test_a_worker_request_nobody_can_satisfy_fails_within_the_bound(ray_head, tmp_path):
    config = GenerateConfig(out=str(tmp_path / "out"), num_trajectories=200, chunk_size=100,
                            progress=False, **TRAJECTORIES_ONLY)
    policy = LivenessPolicy(worker_start_timeout_s=3, worker_resources={"no_such_node": 1})
    started = time.perf_counter()
    with pytest.raises(ClusterError) as error:
        run_generation(config, policy=policy)
    assert time.perf_counter() - started < 30
    message = str(error.value)
    assert "could be placed within 3s" in message and "no_such_node 1" in message
    assert "no_such_node 0 (0 free now)" in message
    assert _markers(tmp_path / "out") == 0


def test_a_worker_that_is_never_placed_does_not_hold_up_the_run(ray_head, tmp_path):
    config = GenerateConfig(out=str(tmp_path / "out"), num_trajectories=600, chunk_size=100,
                            num_workers=3, progress=False)  # 3 x 1 CPU on a 2-CPU head
    summary = run_generation(config)
    assert summary.complete and _ids(tmp_path / "out").n_unique() == 600
    assert any("1 chunk worker(s) were never placed" in note and "CPU 1" in note
               for note in summary.notes), summary.notes


def test_two_concurrent_runs_on_one_cluster_both_finish(ray_head, tmp_path):
    # Each asks for one worker per CPU of the 2-CPU head: one run's second worker waits for
    # a CPU the other run holds. Before, chunks queued on that worker waited forever.
    runs = {}
    for name in ("a", "b"):
        runs[name] = subprocess.Popen(
            [sys.executable, "-m", "datagen", "generate", "--config", "configs/demo.yaml",
             "--out", str(tmp_path / name), "--num-trajectories", "1200", "--set",
             "chunk_size=100", "--address", ray_head.address, "--no-progress"],
            cwd=ROOT, env=ray_head.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for name, proc in runs.items():
        stdout, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 0, stdout + stderr
        assert _ids(tmp_path / name).n_unique() == 1200


def test_workers_without_the_api_key_fail_before_work_saying_how_to_provide_it(ray_head,
                                                                                tmp_path):
    # The variable is set for the driver only, as in a shell that submits to a cluster.
    env = dict(ray_head.env, DATAGEN_TEST_DRIVER_ONLY_KEY="sk-test")
    out = tmp_path / "out"
    result = _generate(ray_head, "--out", str(out), "--num-trajectories", "20",
                       "--set", "teacher.backend=openai",
                       "--set", "teacher.openai={base_url: 'http://127.0.0.1:9/v1', model: m, "
                                "api_key_env: DATAGEN_TEST_DRIVER_ONLY_KEY}",
                       "--address", ray_head.address, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no chunk worker can run this config" in result.stderr
    assert "$DATAGEN_TEST_DRIVER_ONLY_KEY" in result.stderr
    assert "--runtime-env-json" in result.stderr and "Traceback" not in result.stderr
    assert "sk-test" not in result.stderr + result.stdout
    assert _markers(out) == 0


def test_env_modules_the_workers_cannot_import_fail_before_work(ray_head, tmp_path):
    (tmp_path / "driver_only_envs.py").write_text(
        "from datagen.envs import register_env\n"
        "from tests.datagen.toy_envs import CounterEnv\n\n\n"
        "@register_env\nclass DriverOnly(CounterEnv):\n    name = 'toy_driver_only'\n")
    env = dict(ray_head.env, PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    result = _generate(ray_head, "--out", str(tmp_path / "out"), "--num-trajectories", "20",
                       "--set", "env_modules=[driver_only_envs]",
                       "--set", "envs=[{name: toy_driver_only}]",
                       "--address", ray_head.address, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "driver_only_envs" in result.stderr and "--working-dir" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_relative_out_lands_where_the_driver_runs(ray_head, tmp_path):
    result = _generate(ray_head, "--out", "rel-out", "--num-trajectories", "60",
                       "--set", "chunk_size=30", "--address", ray_head.address, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _ids(tmp_path / "rel-out").n_unique() == 60
    assert f"output: {tmp_path / 'rel-out'}" in result.stdout
    assert not (ROOT / "rel-out").exists()


def test_an_address_where_nothing_listens_fails_fast_with_one_line(ray_head, tmp_path):
    started = time.perf_counter()
    result = _generate(ray_head, "--out", str(tmp_path / "out"), "--num-trajectories", "10",
                       "--address", f"127.0.0.1:{_free_port()}", timeout=60)
    assert time.perf_counter() - started < 30
    assert result.returncode == 2
    assert result.stderr.startswith("datagen: cannot reach a Ray cluster at 127.0.0.1:")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_wrong_auth_token_fails_fast_with_one_line(ray_head, tmp_path):
    env = dict(ray_head.env, RAY_AUTH_TOKEN="not-the-cluster-token")
    started = time.perf_counter()
    result = _generate(ray_head, "--out", str(tmp_path / "out"), "--num-trajectories", "10",
                       "--address", ray_head.address, env=env, timeout=60)
    assert time.perf_counter() - started < 30
    assert result.returncode == 2
    assert "refused this process's auth token" in result.stderr
    assert "RAY_AUTH_TOKEN" in result.stderr and "not-the-cluster-token" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
