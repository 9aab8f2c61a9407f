"""Small builders shared by the datagen tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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


def submit_job(head, entrypoint: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """`ray job submit --working-dir . -- ENTRYPOINT` to the session's token-authenticated
    head (tests/conftest.py's `ray_head`), waiting for the job to end. A just-started head
    answers 500 until its job agent has registered: retried for up to a minute."""
    import time

    root = Path(__file__).resolve().parents[2]
    ray_bin = str(Path(sys.executable).with_name("ray"))
    command = [ray_bin, "job", "submit", "--address", head.dashboard, "--working-dir", ".",
               "--", *entrypoint]
    for _ in range(12):
        result = subprocess.run(command, cwd=root, env=head.env, capture_output=True, text=True,
                                timeout=timeout)
        if "No available agent to submit job" not in result.stderr + result.stdout:
            break
        time.sleep(5)
    return result
