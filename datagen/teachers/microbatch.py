"""Lock-step micro-batching of turn requests from concurrent episodes.

A backend that generates whole batches at a time (the HF teacher: one forward pass serves
every sequence) wants all live episodes in one batch. The batcher launches a batch when every
live episode is waiting for its turn, or when `max_batch` requests wait - no timer, so a batch
never waits longer than the slowest episode's environment step, and never goes out half-empty
while an episode is merely busy with its tool.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from datagen.teachers.base import describe_exception
from datagen.teachers.episode import Generation, TurnBackend, TurnRequest

BatchFn = Callable[[list[TurnRequest]], list[Generation]]


class MicroBatcher:
    """Collects `submit`ted requests into batches for a synchronous `run` (run in a thread,
    one batch at a time: the model is one device). Episodes report start and finish so the
    batcher knows how many requests to expect."""

    def __init__(self, run: BatchFn, max_batch: int) -> None:
        self.run = run
        self.max_batch = max_batch
        self.live = 0
        self.pending: list[tuple[TurnRequest, asyncio.Future]] = []
        self.busy = False
        self.batches = 0
        self.batch_sizes = 0  # summed, for the mean batch size

    def episode_started(self) -> None:
        self.live += 1

    def episode_finished(self) -> None:
        self.live -= 1
        self._maybe_launch()

    async def submit(self, request: TurnRequest) -> Generation:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pending.append((request, future))
        # Decide on the next loop iteration: episodes that are ready to run (just started, or
        # just got their previous turn) then submit first, instead of racing a lone request.
        loop.call_soon(self._maybe_launch)
        return await future

    def _maybe_launch(self) -> None:
        if self.busy or not self.pending:
            return
        if len(self.pending) < min(self.max_batch, self.live):
            return  # some live episode is still stepping its environment; it will submit soon
        batch, self.pending = self.pending[:self.max_batch], self.pending[self.max_batch:]
        self.busy = True
        asyncio.get_running_loop().create_task(self._run(batch))

    async def _run(self, batch: list[tuple[TurnRequest, asyncio.Future]]) -> None:
        requests = [request for request, _ in batch]
        try:
            results = await asyncio.to_thread(self.run, requests)
        except Exception as exc:  # e.g. out of memory: every turn of the batch fails, as data
            results = [Generation(error=f"batch failed: {describe_exception(exc)}")
                       for _ in requests]
        self.batches += 1
        self.batch_sizes += len(requests)
        self.busy = False
        for (_, future), result in zip(batch, results):
            if not future.done():
                future.set_result(result)
        self._maybe_launch()


class BatchedTurnBackend(TurnBackend):
    """A turn backend that generates whole batches (`generate_batch`, run in a worker
    thread) of the turns concurrent episodes ask for, micro-batched as above: the HF teacher,
    the trainer's policy backend. Subclasses set `max_batch_size` and `generate_batch`."""

    max_batch_size: int = 1
    batcher: MicroBatcher | None = None

    def generate_batch(self, requests: list[TurnRequest]) -> list[Generation]:
        raise NotImplementedError

    async def start(self) -> None:
        self.batcher = MicroBatcher(self.generate_batch, self.max_batch_size)

    async def stop(self) -> None:
        self.batcher = None

    def episode_started(self) -> None:
        self.batcher.episode_started()

    def episode_finished(self) -> None:
        self.batcher.episode_finished()

    async def generate(self, request: TurnRequest) -> Generation:
        return await self.batcher.submit(request)
