"""A lasting failure ends a real `trainer fit` with `run.max_failures: 2` at its first
occurrence: one worker group, one line, exit 1 (trainer.retries). Before, Ray Train restarted
the workers from the latest checkpoint twice and they failed the same way each time: three
worker groups, 46-54 s a fit here instead of 22-27 s. Worker groups are counted as the
RayTrainWorker actors the fit created (Ray's state API keeps dead actors). A lost worker is
still restarted (tests/trainer/test_fit_faults.py).

Each real failure is one a user can meet: a shard row that breaks the contract; a checkpoint
whose weights are finite but so large that the first step's gradient overflows float32 (the
final norm's weight 1e30: a run saved while it blew up); a checkpoint holding nan, refused as
it loads, naming the file and the tensor, where it diverged at step 1 with advice to lower
optim.lr before."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import ray
import torch
from ray.exceptions import ActorDiedError
from ray.train import ControllerError, WorkerGroupError
from ray.train.v2._internal.exceptions import WorkerHealthCheckFailedError

from tests.trainer.helpers import tiny_model
from tests.trainer.test_fit_bad_data import _fit, _with_unknown_span_kind
from trainer.engines import TrainingDiverged
from trainer.fit import failure_cause, lasting_failure
from trainer.retries import NotRetried, StopOnLastingFailure, lasting_failures_unwrapped

RETRIES = "run.max_failures=2"


def test_the_controller_stops_at_a_lasting_failure_and_the_driver_sees_the_workers_error():
    """The callback the controller runs after a poll that found failed workers ends the run on
    a diverged step (its error crosses to the driver pickled, inside Ray's ControllerError),
    and the driver gets a WorkerGroupError of the workers' errors, as Ray Train raises it
    without retries: the same one line as before."""
    message = "step 3: gradient norm nan, the update was not applied; lower optim.lr"
    with pytest.raises(NotRetried) as stopped:
        StopOnLastingFailure().after_exception(None, {1: RuntimeError("gloo: connection closed"),
                                                      0: TrainingDiverged(message)})
    assert str(stopped.value) == f"diverged, not retried (a restart would fail the same way): " \
                                 f"{message}"  # what the controller logs
    with pytest.raises(WorkerGroupError) as raised, lasting_failures_unwrapped():
        raise pickle.loads(pickle.dumps(ControllerError(stopped.value)))
    assert sorted(raised.value.worker_failures) == [0, 1]
    assert lasting_failure(raised.value) == "diverged" and failure_cause(raised.value) == message


def test_a_lost_or_crashed_worker_is_left_to_ray_trains_retries():
    for error in [WorkerHealthCheckFailedError("worker died", failure=ActorDiedError()),
                  RuntimeError("CUDA error: an illegal memory access")]:
        StopOnLastingFailure().after_exception(None, {0: error})  # no decision taken here
    other = ControllerError(RuntimeError("placement group removed"))
    with pytest.raises(ControllerError) as raised, lasting_failures_unwrapped():
        raise other
    assert raised.value is other


def _train_workers(head) -> set[str]:
    """Ids of this job's Ray Train workers, dead or alive."""
    from ray.util.state import list_actors

    job = ray.get_runtime_context().get_job_id()
    return {actor.actor_id for actor in list_actors(
        address=head.dashboard, limit=10_000,
        filters=[("class_name", "=", "RayTrainWorker"), ("job_id", "=", job)])}


def _trajectories_only(pipeline_out: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(pipeline_out, out)
    for table in ("repairs", "preferences", "consistency"):  # trajectories alone: a short feed
        shutil.rmtree(out / table, ignore_errors=True)
    return out


def _checkpoint(tmp_path: Path, corrupt) -> Path:
    """A tiny model of the trainer tokenizer's vocabulary, `corrupt`ed, saved as a checkpoint."""
    model = tiny_model(vocab_size=1024)
    with torch.no_grad():
        corrupt(model)
    directory = tmp_path / "start"
    model.save_pretrained(directory)
    return directory


def _fit_once(head, out, tokenizer, tmp_path, capsys, *overrides) -> tuple[int, str, int]:
    """`trainer fit` with two restarts allowed: exit code, last stderr line, worker groups."""
    before = _train_workers(head)
    code, last = _fit(out, tokenizer, tmp_path, capsys, RETRIES, *overrides)
    return code, last, len(_train_workers(head) - before)


def test_bad_data_is_not_retried(ray_head, pipeline_out, trainer_tokenizer, tmp_path, capsys):
    out = _trajectories_only(pipeline_out, tmp_path)
    row_id = _with_unknown_span_kind(out)
    code, last, groups = _fit_once(ray_head, out, trainer_tokenizer, tmp_path, capsys,
                                   "data.max_seq_len=256")
    assert (code, groups) == (1, 1), last
    assert last.startswith(f"training failed: bad data: {out}/trajectories/part-000000.parquet: "
                           f"row id={row_id!r} (row 0): column 'spans' has a span of unknown "
                           f"kind 'BOGUS'"), last
    assert "rerun" not in last  # a rerun reads the same row


def test_a_diverged_step_is_not_retried(ray_head, pipeline_out, trainer_tokenizer, tmp_path,
                                        capsys):
    start = _checkpoint(tmp_path, lambda model: model.model.norm.weight.fill_(1e30))
    code, last, groups = _fit_once(ray_head, _trajectories_only(pipeline_out, tmp_path),
                                   trainer_tokenizer, tmp_path, capsys,
                                   f"model.init_from={start}", "data.max_seq_len=1024")
    assert (code, groups) == (1, 1), last
    assert last.startswith("training failed: diverged: step 1: gradient norm inf, the update "
                           "was not applied; lower optim.lr or check the data."), last
    assert not list((tmp_path / "run").glob("checkpoint_*"))


def test_a_checkpoint_holding_nan_is_refused_as_it_loads(ray_head, pipeline_out,
                                                        trainer_tokenizer, tmp_path, capsys):
    def three_nans(model):
        model.model.layers[1].mlp.down_proj.weight[0, :3] = float("nan")

    start = _checkpoint(tmp_path, three_nans)
    code, last, groups = _fit_once(ray_head, _trajectories_only(pipeline_out, tmp_path),
                                   trainer_tokenizer, tmp_path, capsys,
                                   f"model.init_from={start}", "data.max_seq_len=1024")
    assert (code, groups) == (1, 1), last
    assert last == (f"training failed: bad checkpoint: {start}/model.safetensors: tensor "
                    f"model.layers.1.mlp.down_proj.weight holds 3 nan or inf values (of 8,192, "
                    f"in float32); start from a checkpoint whose weights are finite"), last
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before any step
