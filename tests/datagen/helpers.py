"""Small builders shared by the datagen tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import pyarrow as pa

from datagen.chat import render_trajectory
from datagen.config import GenerateConfig
from datagen.envs import DEFAULT_ENVS
from datagen.pipeline.chunk import task_source
from datagen.teachers import EnvPool, OracleTeacher
from datagen.types import Trajectory

BUILTIN_ENVS = DEFAULT_ENVS


def oracle_trajectories(count: int, envs=BUILTIN_ENVS, seed: int = 0) -> list[Trajectory]:
    config = GenerateConfig(num_trajectories=count, seed=seed,
                            envs=[{"name": name} for name in envs])
    pool = EnvPool()
    tasks = task_source(config).generate(0, count, pool)
    return OracleTeacher().rollout_batch(tasks, pool)


def oracle_texts(count: int) -> list[str]:
    return [render_trajectory(traj)[0] for traj in oracle_trajectories(count)]


_HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from datagen.pipeline.runlock import FileRunLock, LockOwner
    FileRunLock(sys.argv[1], LockOwner.current(sys.argv[2])).acquire()
    print("locked", flush=True)
    time.sleep(120)
""")


def start_lock_holder(out: Path, fingerprint: str, *tag: str) -> subprocess.Popen:
    """Another process that holds the run lock on `out` (until killed), as a running
    `datagen generate` would; returns once it holds it. `tag` lands in its command line."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(out), fingerprint, *tag],
                            cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                            stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "locked":
        proc.kill()
        raise RuntimeError("the lock holder did not start")
    return proc


def rewrite_shard(out: Path, table: str, index: int,
                  edit: "Callable[[pa.Table], pa.Table]") -> Path:
    """Shard `index` of `table` in OUT rewritten by `edit`, and the manifest updated to match
    (rows, bytes, sha256): damage that the cheap shard check cannot see."""
    import hashlib
    import json

    import pyarrow.parquet as pq

    shard = sorted((out / table).glob("part-*.parquet"))[index]
    pq.write_table(edit(pq.read_table(shard)), shard, compression="zstd")
    manifest = json.loads((out / "manifest.json").read_text())
    for info in manifest["shards"][table]:
        if info["file"] == f"{table}/{shard.name}":
            data = shard.read_bytes()
            info.update(rows=pq.read_metadata(shard).num_rows, bytes=len(data),
                        sha256=hashlib.sha256(data).hexdigest())
    (out / "manifest.json").write_text(json.dumps(manifest))
    return shard
