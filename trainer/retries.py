"""Which failed fits Ray Train restarts (`run.max_failures`): a lost worker, not a lasting
failure.

A worker that dies (killed, OOM, its node lost) is restarted from the latest checkpoint, up to
`run.max_failures` times: the restart goes on past the loss. A lasting failure
(trainer.fit.lasting_failure: bad data, a diverged step, weights that are not finite) is not:
a restart reads the same rows, or steps the same weights at the same rate, and fails the same
way, max_failures times over, each time after loading the model and training up to the
failing step again (tiny fits with max_failures 2 here: three worker groups and 46-54 s
before, one and 22-27 s now; on a real model, minutes to hours per restart).

Ray Train 2.60 (v2, the default) has no error a worker can mark non-retryable: its failure
policy retries every WorkerGroupError up to max_failures (`DefaultFailurePolicy.
_is_retryable_error`, ray/train/v2/_internal/execution/failure_handling/default.py) and is
built from FailureConfig alone (`create_failure_policy`, factory.py). A worker that caught the
error and returned normally would leave the other ranks waiting for it in a collective. But
the controller's poll of the workers hands their errors to the UserCallbacks of
RunConfig.callbacks before it decides (`WorkerGroup.poll_status` -> `UserCallbackHandler.
after_worker_group_poll_status` -> `after_exception`; the failure decision follows in
`TrainController._step`), and an exception raised there ends that control-loop step as a
ControllerError (`_run_control_loop_iteration`), which the policy does not retry: of the
controller's errors only a worker group that failed to start is, and fit.py sets
controller_failure_limit 0. So `StopOnLastingFailure` raises `NotRetried` there, holding the
workers' WorkerGroupError; the controller stops the workers and ends the run, and
`lasting_failures_unwrapped` hands that WorkerGroupError to the caller, as Ray Train raises it
with max_failures 0: what the CLI and the loop print is unchanged. (Each worker logs its own
traceback: "Error in training function".)
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from ray.train import ControllerError, UserCallback, WorkerGroupError


class NotRetried(Exception):
    """Raised in Ray Train's controller to end the run: the workers' `error` is a lasting
    failure of `kind`."""

    def __init__(self, kind: str, error: WorkerGroupError) -> None:
        super().__init__(kind, error)  # the args pickle: the controller sends it to the driver
        self.kind, self.error = kind, error

    def __str__(self) -> str:  # the controller logs it, with the traceback of its own raise
        from trainer.fit import failure_cause

        return f"{self.kind}, not retried (a restart would fail the same way): " \
               f"{failure_cause(self.error)}"


class StopOnLastingFailure(UserCallback):
    """Runs in Ray Train's controller (pickled with the RunConfig; the controller imports
    `trainer` as the workers do, through the job's PYTHONPATH)."""

    def after_exception(self, run_context: Any, worker_exceptions: dict[int, Exception]) -> None:
        from trainer.fit import lasting_failure

        failed = WorkerGroupError("\n".join(f"[Rank {rank}]: {error}" for rank, error in
                                            sorted(worker_exceptions.items())),
                                  dict(worker_exceptions))
        if kind := lasting_failure(failed):
            raise NotRetried(kind, failed)


@contextlib.contextmanager
def lasting_failures_unwrapped() -> Iterator[None]:
    """Around `trainer.fit()`: a run that StopOnLastingFailure ended raises the workers'
    WorkerGroupError, not Ray's ControllerError around it."""
    try:
        yield
    except ControllerError as exc:
        if isinstance(exc.controller_failure, NotRetried):
            raise exc.controller_failure.error from None
        raise
