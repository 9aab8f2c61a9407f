"""`python -m trainer fit` submitted with `ray job submit` to the session's token-authenticated
head, and its Ray Train worker SIGKILLed mid-fit: the job restarts the worker group from the
latest checkpoint (`run.max_failures`) and succeeds; the step count continues and no
micro-batch is trained twice (metrics.jsonl: one record per step, each step's `batches`
fingerprint of the micro-batch it trained)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid

import pytest

from tests.conftest import RAY_BIN, ROOT, ray_job_submit
from trainer.metrics import read_metrics

pytestmark = pytest.mark.slow
SAVE_EVERY, MAX_STEPS = 4, 16  # a step takes ~0.3 s here: the kill has a window of seconds


def _fit_entrypoint(run_dir, shards, tokenizer) -> list[str]:
    overrides = [f"run_dir={run_dir}", f"shards={shards}", f"tokenizer={tokenizer}",
                 f"run.max_steps={MAX_STEPS}", f"run.save_every={SAVE_EVERY}",
                 "run.max_failures=1", "run.progress=false", "data.max_seq_len=1024",
                 "optim.warmup_steps=3"]
    return ["python", "-m", "trainer", "fit", "--config", "configs/train_tiny.yaml",
            *[arg for item in overrides for arg in ("--set", item)]]


def _job(head, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([RAY_BIN, "job", *args, "--address", head.dashboard], cwd=ROOT,
                          env=head.env, capture_output=True, text=True, timeout=timeout)


def _train_worker_pids(head) -> list[int]:
    from ray.util.state import list_actors

    alive = list_actors(address=head.dashboard, filters=[("class_name", "=", "RayTrainWorker"),
                                                         ("state", "=", "ALIVE")])
    return [actor.pid for actor in alive]


def _wait_for_step(head, job_id: str, path, step: int, timeout: float) -> None:
    """Until metrics.jsonl has a record past `step`; fails at once if the job ended first."""
    deadline, next_status = time.time() + timeout, time.time() + 5
    while time.time() < deadline:
        if any(record["step"] > step for record in read_metrics(path)):
            return
        if time.time() > next_status:
            status = _job(head, "status", job_id).stdout
            if re.search(r"failed|stopped|succeeded", status, re.IGNORECASE):
                logs = _job(head, "logs", job_id).stdout
                raise AssertionError(f"the job ended before step {step + 1}:\n{status}"
                                     f"{logs[-3000:]}")
            next_status = time.time() + 5
        time.sleep(0.05)
    raise AssertionError(f"no training step past {step} within {timeout} s")


def test_a_killed_train_worker_resumes_from_the_latest_checkpoint(ray_head, pipeline_out,
                                                                  trainer_tokenizer, tmp_path):
    run_dir, job_id = tmp_path / "run", f"fit-{uuid.uuid4().hex[:8]}"
    metrics = run_dir / "metrics.jsonl"
    submitted = ray_job_submit(ray_head, "--no-wait", "--submission-id", job_id,
                               entrypoint=_fit_entrypoint(run_dir, pipeline_out, trainer_tokenizer))
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-2000:]
    try:
        # job start, Ray Data, the model: 3.5 min at load 54
        _wait_for_step(ray_head, job_id, metrics, 0, timeout=420)
        pids = _train_worker_pids(ray_head)  # while it trains, so that the kill is quick
        assert len(pids) == 1, pids
        _wait_for_step(ray_head, job_id, metrics, SAVE_EVERY, timeout=60)
        os.kill(pids[0], signal.SIGKILL)
        killed_at = time.time()
        dead_leg = {record["step"]: record for record in read_metrics(metrics)}
        logs = _job(ray_head, "logs", "--follow", job_id, timeout=420)
    finally:
        _job(ray_head, "stop", job_id)  # no-op once it ended; frees the head's CPUs otherwise
    status = _job(ray_head, "status", job_id)
    assert "succeeded" in status.stdout, status.stdout + logs.stdout[-4000:]
    assert '"checkpoint"' in logs.stdout  # the FitResult the entry point prints at the end

    records = read_metrics(metrics)
    last_dead = max(dead_leg)
    assert SAVE_EVERY < last_dead < MAX_STEPS, "the kill must land between two checkpoints"
    assert [r["step"] for r in records] == list(range(1, MAX_STEPS + 1))  # one record per step
    # the records the restarted group kept are the dead group's, up to the checkpoint it
    # resumed from; every later step was trained (again) after the kill
    kept = [r["step"] for r in records if r["time"] < killed_at]
    resumed_from = len(kept)
    assert kept == list(range(1, resumed_from + 1))
    assert all(records[step - 1] == dead_leg[step] for step in kept)
    latest = {SAVE_EVERY * ((last_dead - 1) // SAVE_EVERY),  # the checkpoint at last_dead may
              SAVE_EVERY * (last_dead // SAVE_EVERY)}       # have been in flight at the kill
    assert resumed_from in latest, (resumed_from, last_dead)
    # the data position and the optimizer continued: the steps the dead group trained after
    # the checkpoint were trained again on the same micro-batches at the same rate
    for step in range(resumed_from + 1, last_dead + 1):
        assert records[step - 1]["batches"] == dead_leg[step]["batches"]
        assert records[step - 1]["lr"] == pytest.approx(dead_leg[step]["lr"])
        assert records[step - 1]["loss"] == pytest.approx(dead_leg[step]["loss"], rel=1e-3)
    trained = [fingerprint for r in records for fingerprint in r["batches"]]
    assert len(trained) == MAX_STEPS and len(set(trained)) == MAX_STEPS  # none trained twice
    checkpoints = sorted(p.name for p in run_dir.glob("checkpoint_*"))
    assert checkpoints, "the job reported no checkpoint"
