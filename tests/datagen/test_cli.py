"""The CLI as users run it: generate, a SIGKILL part way and resume, refusal of a different
config, `datagen inspect`, and `ray job submit` against a Ray head."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from tests.conftest import RAY_BIN, ROOT

pytestmark = pytest.mark.slow


def _datagen(head, *args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "datagen", *args], cwd=ROOT, env=head.env,
                          capture_output=True, text=True, timeout=300, **kwargs)


def _markers(out: Path) -> int:
    return len(list((out / "_chunks").glob("chunk-*.json"))) if (out / "_chunks").exists() else 0


def test_sigkill_part_way_then_resume_yields_exactly_n_unique_ids(ray_head, tmp_path):
    out, n, chunk = tmp_path / "out", 3000, 100
    args = ["generate", "--config", "configs/demo.yaml", "--out", str(out), "--num-trajectories",
            str(n), "--set", f"chunk_size={chunk}", "--address", ray_head.address, "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "datagen", *args], cwd=ROOT, env=ray_head.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while _markers(out) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = _markers(out)
    assert 2 <= done_before < n // chunk, "the kill must land part way through the run"
    for shard in (out / "trajectories").glob("part-*.parquet"):
        pq.read_metadata(shard)  # whatever is visible is a complete Parquet file
    time.sleep(1.0)  # let Ray reap the dead driver's actors

    result = _datagen(ray_head, *args)
    assert result.returncode == 0, result.stderr
    assert "complete" in result.stdout
    df = pl.read_parquet(out / "trajectories" / "*.parquet")
    assert df.height == n and df["id"].n_unique() == n and df["task_id"].n_unique() == n
    negatives = pl.read_parquet(out / "negatives" / "*.parquet")
    assert negatives.height == negatives.select("trajectory_id", "step", "kind").n_unique()
    assert negatives["trajectory_id"].n_unique() == df.filter(pl.col("success")).height


def test_different_config_is_refused_with_a_clear_message(ray_head, tmp_path):
    out = str(tmp_path / "out")
    base = ["generate", "--config", "configs/demo.yaml", "--out", out, "--num-trajectories", "50",
            "--address", ray_head.address, "--no-progress"]
    assert _datagen(ray_head, *base).returncode == 0
    refused = _datagen(ray_head, *base, "--set", "seed=7")
    assert refused.returncode == 2
    assert "different config" in refused.stderr and "--overwrite" in refused.stderr
    replaced = _datagen(ray_head, *base, "--set", "seed=7", "--overwrite")
    assert replaced.returncode == 0, replaced.stderr

    inspected = _datagen(ray_head, "inspect", out, "--samples", "1")
    assert inspected.returncode == 0
    for fragment in ("trajectories: 50 rows", "per environment", "[REASON", "[ACT", "[OBS",
                     "negatives per kind", "hallucinated_key", "impossible_rate"):
        assert fragment in inspected.stdout


def test_invalid_config_fails_before_any_work(ray_head, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("envs:\n  - name: nosuch\n")
    result = _datagen(ray_head, "generate", "--config", str(bad), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "envs.0.name" in result.stderr and "allowed" in result.stderr
    assert not (tmp_path / "out").exists()


def test_ray_job_submit_runs_the_same_entry_point(ray_head, tmp_path):
    out = tmp_path / "job-out"
    command = [RAY_BIN, "job", "submit", "--address", ray_head.dashboard, "--working-dir", ".",
               "--", "python", "-m", "datagen", "generate", "--config", "configs/demo.yaml",
               "--num-trajectories", "200", "--out", str(out), "--no-progress"]
    for _ in range(12):  # a just-started head answers 500 until its job agent has registered
        result = subprocess.run(command, cwd=ROOT, env=ray_head.env, capture_output=True,
                                text=True, timeout=300)
        if "No available agent to submit job" not in result.stderr + result.stdout:
            break
        time.sleep(5)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "succeeded" in result.stdout
    assert pl.read_parquet(out / "trajectories" / "*.parquet").height == 200
