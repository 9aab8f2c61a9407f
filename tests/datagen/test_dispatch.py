"""Chunk dispatch of the pipeline, without Ray: how chunks are queued on workers."""

from __future__ import annotations

from collections import deque
from itertools import count

from datagen.chunk import Chunk
from datagen.pipeline import _Dispatch


class _FakeWorker:
    """Stands in for a ChunkWorker handle: `process.remote(chunk)` returns a unique ref."""

    refs = count()

    def __init__(self) -> None:
        self.process = self
        self.got: list[int] = []

    def remote(self, chunk: Chunk) -> int:
        self.got.append(chunk.index)
        return next(self.refs)


def _dispatch(n_workers: int) -> _Dispatch:
    return _Dispatch([_FakeWorker() for _ in range(n_workers)], {}, [0] * n_workers)


def _chunks(n: int) -> deque[Chunk]:
    return deque(Chunk(i, i * 10, (i + 1) * 10) for i in range(n))


def test_workers_are_topped_up_while_there_is_work_for_all():
    dispatch, queue = _dispatch(2), _chunks(10)
    dispatch.fill(queue, max_in_flight=2)
    assert dispatch.busy == [2, 2] and len(queue) == 6


def test_the_last_chunks_wait_for_an_idle_worker():
    dispatch, queue = _dispatch(2), _chunks(5)
    dispatch.fill(queue, max_in_flight=2)
    assert dispatch.busy == [2, 2] and [c.index for c in queue] == [4]
    first = next(ref for ref, (worker, _) in dispatch.in_flight.items() if worker == 0)
    dispatch.done(first)
    dispatch.fill(queue, max_in_flight=2)  # worker 0 still runs a chunk: chunk 4 is held
    assert dispatch.busy == [1, 2] and len(queue) == 1
    second = next(ref for ref, (worker, _) in dispatch.in_flight.items() if worker == 1)
    dispatch.done(second)
    for ref in [ref for ref, (worker, _) in dispatch.in_flight.items() if worker == 0]:
        dispatch.done(ref)
    dispatch.fill(queue, max_in_flight=2)  # worker 0 is idle now: it takes chunk 4
    assert dispatch.busy == [1, 1] and not queue
    assert dispatch.workers[0].got[-1] == 4
