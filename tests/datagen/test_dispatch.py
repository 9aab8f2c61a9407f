"""Chunk dispatch of the pipeline, without Ray: how chunks are queued on workers, and what
happens to the chunks of a worker that is lost."""

from __future__ import annotations

from itertools import count

from datagen.pipeline.chunk import Chunk
from datagen.pipeline.dispatch import ChunkDispatch


class _SubmitLog:
    """Stands in for `WorkerPool.submit`: records which slot got which chunk, returns a
    unique handle."""

    def __init__(self) -> None:
        self.handles = count()
        self.got: dict[int, list[int]] = {}

    def __call__(self, slot: int, chunk: Chunk) -> int:
        self.got.setdefault(slot, []).append(chunk.index)
        return next(self.handles)


def _dispatch(n_chunks: int, max_in_flight: int = 2, max_attempts: int = 3) -> ChunkDispatch:
    chunks = [Chunk(i, i * 10, (i + 1) * 10) for i in range(n_chunks)]
    return ChunkDispatch(chunks, max_in_flight, max_attempts)


def _handles_of(dispatch: ChunkDispatch, slot: int) -> list[int]:
    return list(dispatch.per_slot.get(slot, []))


def test_workers_are_topped_up_while_there_is_work_for_all():
    dispatch, submit = _dispatch(10), _SubmitLog()
    dispatch.fill([0, 1], submit)
    assert [dispatch.busy(0), dispatch.busy(1)] == [2, 2] and len(dispatch.queue) == 6


def test_the_last_chunks_wait_for_an_idle_worker():
    dispatch, submit = _dispatch(5), _SubmitLog()
    dispatch.fill([0, 1], submit)
    assert [dispatch.busy(0), dispatch.busy(1)] == [2, 2]
    assert [c.index for c in dispatch.queue] == [4]
    dispatch.done(_handles_of(dispatch, 0)[0])
    dispatch.fill([0, 1], submit)  # worker 0 still runs a chunk: chunk 4 is held
    assert [dispatch.busy(0), dispatch.busy(1)] == [1, 2] and len(dispatch.queue) == 1
    dispatch.done(_handles_of(dispatch, 1)[0])
    dispatch.done(_handles_of(dispatch, 0)[0])
    dispatch.fill([0, 1], submit)  # worker 0 is idle now: it takes chunk 4
    assert [dispatch.busy(0), dispatch.busy(1)] == [1, 1] and not dispatch.queue
    assert submit.got[0][-1] == 4


def test_a_worker_that_is_not_ready_never_holds_a_chunk():
    # The deadlock of two concurrent runs: chunks queued on a worker still waiting for a CPU.
    dispatch, submit = _dispatch(12), _SubmitLog()
    for _ in range(12):
        dispatch.fill([0], submit)  # worker 1 exists but is still pending
        dispatch.done(_handles_of(dispatch, 0)[0])
    assert dispatch.finished and set(submit.got) == {0} and len(submit.got[0]) == 12


def test_a_lost_workers_chunks_go_back_to_the_front_and_only_its_running_one_is_charged():
    dispatch, submit = _dispatch(6), _SubmitLog()
    dispatch.fill([0, 1], submit)  # 0: chunks 0, 1; 1: chunks 2, 3; queue: 4, 5
    running, queued = submit.got[0]
    assert dispatch.worker_lost(0, "node died") == []
    assert [c.index for c in dispatch.queue] == [running, queued, 4, 5]
    assert dispatch.attempts[running] == 1 and dispatch.attempts[queued] == 0
    assert dispatch.requeued == 2 and dispatch.busy(0) == 0 and len(dispatch.in_flight) == 2
    dispatch.fill([1, 2], submit)  # the replacement (slot 2) takes the re-queued chunks first
    assert submit.got[2] == [running, queued]


def test_a_chunk_that_keeps_killing_its_worker_fails_after_max_attempts():
    dispatch, submit = _dispatch(1, max_attempts=3), _SubmitLog()
    for attempt in range(1, 4):
        dispatch.fill([attempt], submit)
        given_up = dispatch.worker_lost(attempt, f"OOM {attempt}")
    assert [c.index for c in given_up] == [0] and dispatch.finished
    [(chunk, reason)] = dispatch.failed
    assert chunk.index == 0 and "3 times" in reason and "OOM 3" in reason


def test_with_no_worker_left_every_remaining_chunk_fails_with_the_reason():
    dispatch, submit = _dispatch(5), _SubmitLog()
    dispatch.fill([0], submit)
    dispatch.done(_handles_of(dispatch, 0)[0])
    failed = dispatch.fail_rest("no chunk worker could be placed within 60s")
    assert sorted(c.index for c in failed) == [1, 2, 3, 4] and dispatch.finished
    assert all("60s" in reason for _, reason in dispatch.failed)


def test_chunks_failing_in_a_row_stop_new_ones_and_a_written_chunk_resets_the_count():
    """Before, a failure every chunk meets (an endpoint down) ran once per chunk of the run."""
    dispatch, submit = ChunkDispatch([Chunk(i, i, i + 1) for i in range(10)], 1, 3,
                                     stop_after=3), _SubmitLog()

    def finish(fails: bool) -> None:
        dispatch.fill([0], submit)
        handle = dispatch.handles()[0]
        _, chunk = dispatch.done(handle)
        if fails:
            dispatch.fail(chunk, "boom")
        else:
            dispatch.written()

    for fails in (True, True, False, True, True):  # the written chunk breaks the run of 2
        finish(fails)
    assert len(dispatch.queue) == 5 and not dispatch.not_started
    finish(True)  # the third in a row
    assert dispatch.finished and [c.index for c in dispatch.not_started] == [6, 7, 8, 9]
    assert [chunk.index for chunk, _ in dispatch.failed] == [0, 1, 3, 4, 5]


def test_without_a_limit_every_chunk_runs_whatever_fails():
    dispatch, submit = _dispatch(4, max_in_flight=1), _SubmitLog()
    while not dispatch.finished:
        dispatch.fill([0], submit)
        dispatch.fail(dispatch.done(dispatch.handles()[0])[1], "boom")
    assert len(dispatch.failed) == 4 and not dispatch.not_started
