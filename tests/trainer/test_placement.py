"""Workers the cluster cannot place end a fit in one line naming scaling.* and what the cluster
has: at once when it can never hold them, else after scaling.worker_start_timeout_s (Ray
Train alone asked again every 60 s, forever). On the session's 2-CPU head."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from trainer.config import ScalingConfig

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = r"the cluster has CPU 2 \([\d.]+ free now\)"


def _pending_groups() -> list:
    import ray.util

    return [group for group in ray.util.placement_group_table().values()
            if group["state"] not in ("REMOVED", "CREATED")]


def test_workers_the_cluster_does_not_place_fail_in_one_line_within_the_bound(
        ray_head, tmp_path, capsys, caplog, tiny_tokenizer_dir):
    """The head was started by someone else: more may join it, so this is a bounded wait."""
    from trainer.__main__ import main

    started = time.monotonic()
    assert main(["fit", "--config", str(ROOT / "configs" / "train_tiny.yaml"),
                 "--set", f"tokenizer={tiny_tokenizer_dir}", "--set", f"run_dir={tmp_path / 'run'}",
                 "--set", f"shards={tmp_path / 'out'}", "--set", "scaling.cpus_per_worker=64",
                 "--set", "scaling.worker_start_timeout_s=2"]) == 2
    assert time.monotonic() - started < 30
    assert "waiting up to 2s (scaling.worker_start_timeout_s) for the cluster to grow: " \
           "scaling.num_workers=1 x scaling.cpus_per_worker=64 asks for CPU 64 in all" \
           in caplog.text  # said before the wait (on stderr outside pytest)
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"cannot train: the workers were not placed within 2s \(scaling.worker_start_timeout_s\): "
        rf"scaling.num_workers=1 x scaling.cpus_per_worker=64 asks for CPU 64 in all; {CLUSTER}; "
        r"other jobs may hold the rest, or an autoscaler still be adding nodes\n", err), err
    assert _pending_groups() == []  # the wait's placement group is given back


def test_workers_a_ray_of_our_own_can_never_hold_are_refused_at_once(ray_head):
    """A Ray the fit started itself has no autoscaler and nobody joins it (the session's head
    stands in for one here)."""
    from datagen.pipeline.cluster import ClusterError
    from trainer.placement import place_workers

    started = time.monotonic()
    for scaling, asked in [(ScalingConfig(cpus_per_worker=64), "CPU 64"),
                           (ScalingConfig(num_workers=3), "CPU 3"),
                           (ScalingConfig(use_gpu=True), "CPU 1, GPU 1")]:
        with pytest.raises(ClusterError, match=f"^the cluster can never place the workers: "
                                               f".* asks for {asked} in all; {CLUSTER}"):
            place_workers(scaling.model_copy(update={"worker_start_timeout_s": 600}),
                          started_here=True)
    assert time.monotonic() - started < 5 and _pending_groups() == []
    place_workers(ScalingConfig(worker_start_timeout_s=10), started_here=True)  # 1 CPU of 2:
    # placed, and given back
    assert _pending_groups() == []


def test_ray_trains_own_wait_gets_the_bound_and_its_timeout_the_same_message(ray_head,
                                                                           monkeypatch):
    """The gap between our wait and Ray Train's, and restarts after a dead worker: Ray Train
    waits as long (its variable, read when the fit starts) and its timeout reads as ours."""
    from ray.train import ControllerError
    from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError

    from datagen.pipeline.cluster import ClusterError
    from trainer.placement import bounded_worker_start

    name = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"
    monkeypatch.setenv(name, "60")
    scaling = ScalingConfig(cpus_per_worker=64, worker_start_timeout_s=7.5)
    with pytest.raises(ClusterError, match=f"^the workers were not placed within 7.5s .* asks "
                                           f"for CPU 64 in all; {CLUSTER}"):
        with bounded_worker_start(scaling):
            assert os.environ[name] == "7.5"
            raise ControllerError(WorkerGroupStartupTimeoutError(num_workers=1))
    assert os.environ[name] == "60"
    with pytest.raises(ControllerError):  # any other controller failure is left as it is
        with bounded_worker_start(scaling):
            raise ControllerError(RuntimeError("something else"))


def test_ppo_rollout_actors_the_cluster_cannot_place_end_the_fit_instead_of_waiting(
        ray_head, tmp_path):
    """PPO's rollout actors sit outside the learners' placement group; with more CPUs than the
    cluster holds their learner waited on them forever."""
    from datagen.pipeline.cluster import ClusterError
    from trainer.config import TrainConfig
    from trainer.placement import check_rollout_actors
    from trainer.rl.rollout import start_actors

    cfg = TrainConfig(recipe="ppo", run_dir=str(tmp_path / "run"), tokenizer="tok",
                      ppo={"rollout_cpus": 64}, scaling={"worker_start_timeout_s": 1})
    with pytest.raises(ClusterError, match=re.escape(
            "the cluster can never place the PPO rollout actors: scaling.num_workers=1 x "
            "ppo.rollout_workers=1 x ppo.rollout_cpus=64 = CPU 64 beside the learners' CPU 1; "
            "the cluster has CPU 2")):
        check_rollout_actors(cfg, started_here=True)
    check_rollout_actors(cfg, started_here=False)  # a cluster that may grow: waited for ...
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=re.escape(
            "1 of 1 PPO rollout actors (ppo.rollout_cpus=64 each) were not placed within 1s "
            "(scaling.worker_start_timeout_s)")):
        start_actors(cfg, {}, 1)  # ... by the learner, boundedly
    assert time.monotonic() - started < 20
    check_rollout_actors(cfg.model_copy(update={"ppo": cfg.ppo.model_copy(
        update={"rollout_cpus": 1.0})}), started_here=True)  # 1 + 1 of 2 CPUs: fits


def test_a_ray_this_process_started_earlier_counts_as_started_here(tmp_path):
    """`trainer loop` starts one Ray for all its fits, and each fit calls init_ray again: that
    Ray is still ours, so workers it can never hold are refused at once (before, every fit of
    the loop saw "not started here" and waited out scaling.worker_start_timeout_s)."""
    import subprocess
    import sys

    script = (
        "import ray, time\n"
        "ray.init(address='local', num_cpus=1, include_dashboard=False, logging_level='ERROR')\n"
        "from trainer.fit import init_ray\n"
        "from trainer.config import ScalingConfig\n"
        "from trainer.placement import place_workers\n"
        "from datagen.pipeline.cluster import ClusterError\n"
        "assert init_ray(None) is True\n"
        "started = time.monotonic()\n"
        "try:\n"
        "    place_workers(ScalingConfig(cpus_per_worker=4, worker_start_timeout_s=600),\n"
        "                  init_ray(None))\n"
        "except ClusterError as exc:\n"
        "    print(round(time.monotonic() - started), exc)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, timeout=120,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    seconds, message = result.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(seconds) < 5
    assert message.startswith("the cluster can never place the workers: scaling.num_workers=1 "
                              "x scaling.cpus_per_worker=4 asks for CPU 4 in all; the cluster "
                              "has CPU 1"), message
