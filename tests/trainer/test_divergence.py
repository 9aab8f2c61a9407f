"""A diverging run stops: a step whose gradient norm is inf or nan raises TrainingDiverged
before anything moves (trainer.engines), and the CLI and the loop say so in one line without
the rerun advice a lost worker gets (trainer.fit.lasting_failure). Before, the step loop
clipped and applied whatever the gradient was and checkpointed NaN weights."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.trainer.helpers import tiny_model
from trainer.config import OptimConfig
from trainer.engines import DDPEngine, DeepSpeedEngine, TrainingDiverged

ROOT = Path(__file__).resolve().parents[2]
IDS = torch.randint(10, 300, (2, 12), generator=torch.Generator().manual_seed(0))


def _engine(grad_clip: float = 1.0) -> DDPEngine:
    model = tiny_model(use_mch=False).train()
    return DDPEngine(model, OptimConfig(lr=1e-3, warmup_steps=0, grad_clip=grad_clip), 10,
                     wrap=False)


def _loss(engine: DDPEngine) -> torch.Tensor:
    return engine.module(IDS).logits.float().pow(2).mean()


def _snapshot(engine: DDPEngine) -> tuple[dict, dict]:
    weights = {name: value.clone() for name, value in engine.unwrapped.state_dict().items()}
    return weights, copy.deepcopy(engine.state_dict())


def _same_state(left: object, right: object) -> bool:
    if isinstance(left, torch.Tensor):
        return torch.equal(left, right)
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_same_state(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)):
        return len(left) == len(right) and all(map(_same_state, left, right))
    return left == right


@pytest.mark.parametrize("scale,value", [(float("nan"), "nan"), (float("inf"), "inf")])
@pytest.mark.parametrize("grad_clip", [1.0, 0.0])
def test_a_non_finite_gradient_raises_and_moves_nothing(scale, value, grad_clip):
    """One good step (Adam has moments, the schedule a count), then a loss whose gradient is
    nan or inf: TrainingDiverged naming step 2 and the value; weights, Adam's state and the
    schedule as after step 1, the gradients dropped."""
    engine = _engine(grad_clip)
    engine.backward(_loss(engine))
    assert torch.isfinite(torch.tensor(engine.step()))
    weights, state = _snapshot(engine)
    lr = engine.lr
    if scale != scale:  # nan: every gradient nan
        engine.backward(_loss(engine) * scale)
    else:  # inf: the gradient of one weight overflows float32 (inf, not inf - inf = nan)
        engine.backward(engine.unwrapped.lm_head.weight.sum() * 1e30 * 1e30)
    with pytest.raises(TrainingDiverged, match=rf"^step 2: gradient norm {value}, the update "
                                               rf"was not applied; lower optim.lr") as raised:
        engine.step()
    assert "newest checkpoint holds the weights from before it" in str(raised.value)
    after_weights, after_state = _snapshot(engine)
    assert _same_state(after_weights, weights) and _same_state(after_state, state)
    assert engine.lr == lr and engine.scheduler.last_epoch == 1
    assert all(p.grad is None for p in engine.unwrapped.parameters())
    engine.backward(_loss(engine))  # the run could go on (it does not: the worker raised)
    assert torch.isfinite(torch.tensor(engine.step())) and engine.scheduler.last_epoch == 2


def test_the_step_named_counts_the_resumed_steps_too():
    """A resumed run's schedule continues from the checkpoint's: the step named is the run's
    (metrics.jsonl's), not the count since the restart."""
    first = _engine()
    for _ in range(3):
        first.backward(_loss(first))
        first.step()
    resumed = _engine()
    resumed.load_state_dict(first.state_dict())
    resumed.backward(_loss(resumed) * float("nan"))
    with pytest.raises(TrainingDiverged, match="^step 4: gradient norm nan"):
        resumed.step()


class _DeepSpeedModule:
    """What DeepSpeedEngine.step reads of DeepSpeed's engine after its step."""

    def __init__(self, norm: float | None, applied: bool, fp16: bool = False) -> None:
        self.norm, self.applied, self.fp16, self.stepped = norm, applied, fp16, 0

    def step(self) -> None:
        self.stepped += 1

    def get_global_grad_norm(self) -> float | None:
        return self.norm

    def was_step_applied(self) -> bool:
        return self.applied

    def fp16_enabled(self) -> bool:
        return self.fp16


def _deepspeed(module: _DeepSpeedModule) -> DeepSpeedEngine:
    engine = DeepSpeedEngine.__new__(DeepSpeedEngine)  # DeepSpeed itself needs a process group
    engine.module, engine.scheduler = module, SimpleNamespace(last_epoch=6)
    return engine


def test_deepspeed_raises_on_a_step_it_skipped_or_applied_with_a_non_finite_norm():
    """DeepSpeed steps inside its engine, so its norm is checked after: a skipped step (its
    overflow check) or a non-finite norm it applied raise, naming what happened; a finite
    step, a step without a computed norm, and fp16's skips (its loss scaler's search for a
    scale) pass."""
    for norm, applied, reads in [
            (float("inf"), False, "gradient norm inf, the update was not applied"),
            (0.5, False, "gradient norm inf or nan, the update was not applied"),  # stale
            (None, False, "gradient norm inf or nan, the update was not applied"),
            (float("nan"), True, "gradient norm nan, DeepSpeed applied the update"),  # check off
            (-1.0, True, "gradient norm inf or nan, DeepSpeed applied the update")]:  # sentinel
        module = _DeepSpeedModule(norm, applied)
        with pytest.raises(TrainingDiverged, match=f"^step 7: {reads}; lower optim.lr"):
            _deepspeed(module).step()
        assert module.stepped == 1
    assert _deepspeed(_DeepSpeedModule(0.5, True)).step() == 0.5
    assert math.isnan(_deepspeed(_DeepSpeedModule(None, True)).step())  # no norm computed
    assert _deepspeed(_DeepSpeedModule(float("inf"), False, fp16=True)).step() == float("inf")


MESSAGE = ("step 7: gradient norm nan, the update was not applied; lower optim.lr or check "
           "the data. The newest checkpoint holds the weights from before it: start a new "
           "run_dir from it (model.init_from=<this run_dir>), as a resume keeps the old "
           "learning rate")


def _ray_failure() -> Exception:
    """A WorkerGroupError as Ray Train raises it: rank 0's divergence as a RayTaskError
    (Ray's traceback as its text), and an error raised while handling it on rank 1."""
    from ray.exceptions import RayTaskError
    from ray.train import WorkerGroupError

    try:
        try:
            raise TrainingDiverged(MESSAGE)
        except TrainingDiverged:
            raise RuntimeError("cleanup after the step failed too")
    except RuntimeError as exc:
        secondary = exc
    rank0 = RayTaskError("train_loop_per_worker", "Traceback ...", TrainingDiverged(MESSAGE))
    return WorkerGroupError("Training failed due to worker errors: ... (Output truncated)",
                            {1: secondary, 0: rank0})


def test_a_divergence_behind_ray_wrappers_is_named_without_rerun_advice():
    from trainer.fit import failure_cause, lasting_failure, root_error
    from trainer.loop.run import PhaseFailed

    failed = _ray_failure()
    assert isinstance(root_error(failed), TrainingDiverged)
    assert lasting_failure(failed) == "diverged"
    assert failure_cause(failed) == MESSAGE  # the kind is the caller's to say
    # an error raised while handling the divergence still shows the divergence
    assert lasting_failure(type(failed)("...", {0: failed.worker_failures[1]})) == "diverged"
    assert str(PhaseFailed(2, "train", failed)) == (
        f"round 2, phase train: diverged: {MESSAGE} (a rerun fails the same way: change the "
        f"config, into another out)")


def test_the_cli_says_diverged_in_one_line_and_exits_1(monkeypatch, capsys):
    import trainer.fit
    from trainer.__main__ import main

    def diverging_fit(cfg):
        raise _ray_failure()

    monkeypatch.setattr(trainer.fit, "fit", diverging_fit)
    assert main(["fit", "--config", str(ROOT / "configs" / "train_tiny.yaml")]) == 1
    assert capsys.readouterr().err.strip() == f"training failed: diverged: {MESSAGE}"
