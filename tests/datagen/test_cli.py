"""The CLI as users run it: generate, a SIGKILL part way and resume, refusal of a different
config, two runs into one OUT, a damaged shard regenerated, `datagen inspect`, and
`ray job submit` against a Ray head."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import polars as pl
import pyarrow.parquet as pq
import pytest

from datagen.pipeline.cli import main
from datagen.pipeline.inspect import inspect_dataset
from tests.conftest import ROOT, ray_job_submit

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
    # the killed first run left a manifest (written when it started), so OUT can be inspected
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert not manifest["complete"] and manifest["chunks"]["complete"] <= done_before
    assert inspect_dataset(out, samples=0).startswith(f"{out}: INCOMPLETE, ")
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
    result = ray_job_submit(ray_head, entrypoint=[
        "python", "-m", "datagen", "generate", "--config", "configs/demo.yaml",
        "--num-trajectories", "200", "--out", str(out), "--no-progress"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "succeeded" in result.stdout
    assert pl.read_parquet(out / "trajectories" / "*.parquet").height == 200


def test_set_reaches_the_fields_that_have_flags_too(ray_head, tmp_path, capsys):
    out = tmp_path / "elsewhere"
    rc = main(["generate", "--config", "configs/demo.yaml", "--set", f"out={out}",
               "--set", "num_trajectories=10", "--set", "chunk_size=5", "--set", "progress=false"])
    assert rc == 0, capsys.readouterr().err
    assert pl.read_parquet(out / "trajectories" / "*.parquet").height == 10
    assert "it/s" not in capsys.readouterr().err  # progress=false reached the run


def test_a_truncated_shard_is_regenerated_bit_for_bit(ray_head, tmp_path, capsys, caplog):
    out = tmp_path / "out"
    args = ["generate", "--out", str(out), "--num-trajectories", "300", "--set", "chunk_size=100",
            "--no-progress"]
    assert main(args) == 0
    shard = out / "trajectories" / "part-000001.parquet"
    original = orjson.loads((out / "manifest.json").read_bytes())["shards"]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # truncate -s 50%
    assert main(["verify", str(out)]) == 1
    capsys.readouterr()

    assert main(args) == 0
    assert "this run: 100 trajectories" in capsys.readouterr().out  # the damaged chunk only
    assert "chunk 1 is damaged" in caplog.text and "part-000001.parquet" in caplog.text
    assert "(truncated or rewritten)" in caplog.text
    assert orjson.loads((out / "manifest.json").read_bytes())["shards"] == original
    assert main(["verify", str(out)]) == 0
    assert pl.read_parquet(out / "trajectories" / "*.parquet")["id"].n_unique() == 300


def test_a_second_run_into_a_running_out_is_refused_even_with_overwrite(ray_head, tmp_path):
    """Without the run lock the second run cleared OUT and both wrote into it: one dataset of
    two seeds that a later rerun called complete."""
    out = tmp_path / "out"
    args = ["generate", "--config", "configs/demo.yaml", "--out", str(out), "--set",
            "chunk_size=100", "--address", ray_head.address, "--no-progress"]
    first = subprocess.Popen([sys.executable, "-m", "datagen", *args, "--num-trajectories",
                              "3000"], cwd=ROOT, env=ray_head.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while _markers(out) < 1 and time.time() < deadline and first.poll() is None:
        time.sleep(0.01)
    second = _datagen(ray_head, *args, "--num-trajectories", "3000", "--set", "seed=1",
                      "--overwrite")
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert second.returncode == 2, second.stderr
    assert f"is in use by another datagen run (pid {first.pid} on " in second.stderr
    assert "Traceback" not in second.stderr
    task_ids = pl.read_parquet(out / "trajectories" / "*.parquet")["task_id"]
    assert task_ids.len() == 3000 and task_ids.str.contains("-0-").all()  # seed 0 only
