"""Node loss during `ray job submit` of `datagen generate` on a two-node cluster (issue 17).
The extra node's process group is SIGKILLed while its chunk workers are running chunks. The
job completes with exactly N unique trajectories, one complete shard per chunk, a manifest
that `datagen verify` accepts and a summary that says chunks were retried. With the chunk
workers pinned to the extra node (`worker_resources`), a new node joining after the loss is
where the replacement workers run and finish the job.

Episodes of `PacedCounterEnv` take 50 ms of sleep each, so chunks are in flight for about a
second whatever the machine's load, at no CPU cost."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

N, CHUNK = 600, 20
NODE_CPUS, NODE_RESOURCES = 2, {"extra_node": 2.0}
PACED_ENV = "tests.cluster.paced_env:PacedCounterEnv"


def _generate(out: Path, *overrides: str) -> list[str]:
    sets = [f"chunk_size={CHUNK}", f'envs=[{{"name": "{PACED_ENV}"}}]',
            "negatives.enabled=false", "critics.enabled=false", *overrides]
    return ["python", "-m", "datagen", "generate", "--num-trajectories", str(N), "--out",
            str(out), "--no-progress", *[arg for item in sets for arg in ("--set", item)]]


def _markers(out: Path) -> int:
    return len(list((out / "_chunks").glob("chunk-*.json"))) if (out / "_chunks").exists() else 0


def _kill_while_running_chunks(cluster, node, job, out: Path) -> int:
    """SIGKILL `node` once it runs chunks; returns the chunks complete at that moment."""
    cluster.wait_for(lambda running: running.get(node.node_id, 0) > 0 or job.poll() is not None,
                     "chunks running on the extra node", probe=cluster.running_chunks)
    done = _markers(out)
    assert job.poll() is None and done < N // CHUNK, "the kill must land part way through"
    node.kill()
    return done


def _finish(job, out: Path, killed_at: int) -> str:
    output, _ = job.communicate(timeout=300)
    (out.parent / "job.log").write_text(f"killed with {killed_at} chunks done\n{output}")
    assert job.returncode == 0 and "succeeded" in output, output[-4000:]
    assert "(complete)" in output
    assert "chunk(s) went back to the queue after their worker was lost" in output
    assert "lost a chunk worker" in output
    return output


def _check_dataset(out: Path) -> None:
    df = pl.read_parquet(out / "trajectories" / "*.parquet")
    assert df.height == N and df["id"].n_unique() == N and df["task_id"].n_unique() == N
    shards = sorted(p.name for p in (out / "trajectories").iterdir())
    assert shards == [f"part-{i:06d}.parquet" for i in range(N // CHUNK)], "one shard a chunk"
    assert not list((out / "_tmp").glob("*")), "no partial shard left behind"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["trajectories"] == N
    verified = subprocess.run([sys.executable, "-m", "datagen", "verify", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_node_loss_mid_run_completes_with_exactly_n(cluster, tmp_path):
    """Head (1 CPU) + extra node (2 CPUs): three chunk workers, two of them on the node."""
    out = tmp_path / "out"
    node = cluster.add_node(NODE_CPUS, NODE_RESOURCES)
    job = cluster.submit(_generate(out))
    killed_at = _kill_while_running_chunks(cluster, node, job, out)
    output = _finish(job, out, killed_at)
    assert "chunk worker(s) were never placed" in output  # replacements wait for the dead CPUs
    _check_dataset(out)


def test_a_node_joining_after_the_loss_takes_over(cluster, tmp_path):
    """Chunk workers pinned to nodes offering `extra_node`: after the loss only the new node
    can run them, so the job completing proves the replacements ran there."""
    out = tmp_path / "out"
    node = cluster.add_node(NODE_CPUS, NODE_RESOURCES)
    job = cluster.submit(_generate(out, 'worker_resources={"extra_node": 1}'))
    killed_at = _kill_while_running_chunks(cluster, node, job, out)
    cluster.add_node(NODE_CPUS, NODE_RESOURCES)
    output = _finish(job, out, killed_at)
    assert "were never placed" not in output
    _check_dataset(out)
