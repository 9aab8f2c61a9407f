"""Which chunk runs on which worker, and what happens to the chunks of a worker that is lost.

Knows nothing of Ray: a worker is a slot number, a submitted chunk is an opaque handle that
`submit(slot, chunk)` returns. The pipeline feeds it the workers that are ready and the
outcome of every handle. Rules:

- every ready worker is kept `max_in_flight` chunks deep while there is work for all; near the
  end a chunk goes only to a worker with nothing queued, so that no chunk waits behind a busy
  worker while another idles (at 5 chunks per 2 workers that wait was a fifth of the run);
- only ready workers get chunks: one still waiting for resources never holds any (two
  concurrent runs on 2 CPUs each got one worker, queued chunks on the second, and both waited
  forever for it);
- a lost worker's chunks go back to the front of the queue; the one it was running (its
  oldest: an actor runs its calls in order) is charged an attempt, and after `max_attempts`
  it fails with the reason, so a chunk that kills every worker cannot loop forever;
- after `stop_after` chunks in a row failed (none written between them) no new chunk starts:
  the chunks in flight finish, the queue is dropped (`not_started`). A failure every chunk
  meets (the teacher's endpoint down, an engine that cannot start) otherwise ran, or waited
  out its retries, once per chunk: 10,000 times in a 5M run, for nothing a rerun keeps.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any, Callable, Iterable

from datagen.pipeline.chunk import Chunk


class ChunkDispatch:
    def __init__(self, chunks: Iterable[Chunk], max_in_flight: int, max_attempts: int,
                 stop_after: int | None = None) -> None:
        self.queue: deque[Chunk] = deque(chunks)
        self.max_in_flight = max_in_flight
        self.max_attempts = max_attempts
        self.stop_after = stop_after  # failed chunks in a row that stop new ones (None: never)
        self.failed_in_a_row = 0
        self.not_started: list[Chunk] = []  # dropped from the queue when the run stopped
        self.in_flight: dict[Any, tuple[int, Chunk]] = {}
        self.per_slot: dict[int, list[Any]] = {}  # handles in submission order
        self.attempts: Counter[int] = Counter()  # chunk index -> attempts lost with a worker
        self.failed: list[tuple[Chunk, str]] = []
        self.requeued = 0

    @property
    def finished(self) -> bool:
        return not self.queue and not self.in_flight

    def busy(self, slot: int) -> int:
        return len(self.per_slot.get(slot, ()))

    def handles(self) -> list[Any]:
        return list(self.in_flight)

    def fill(self, ready: list[int], submit: Callable[[int, Chunk], Any]) -> None:
        """Top up the ready workers (see the module docstring for the tail rule)."""
        for slot in sorted(ready, key=self.busy):
            depth = self.max_in_flight if len(self.queue) > len(ready) else 1
            while self.queue and self.busy(slot) < depth:
                chunk = self.queue.popleft()
                handle = submit(slot, chunk)
                self.in_flight[handle] = (slot, chunk)
                self.per_slot.setdefault(slot, []).append(handle)

    def done(self, handle: Any) -> tuple[int, Chunk]:
        """The chunk behind `handle` finished (written, or failed with an error of its own)."""
        slot, chunk = self.in_flight.pop(handle)
        self.per_slot[slot].remove(handle)
        return slot, chunk

    def written(self) -> None:
        """A chunk was written: the failures so far were not in a row."""
        self.failed_in_a_row = 0

    def fail(self, chunk: Chunk, reason: str) -> None:
        self.failed.append((chunk, reason))
        self.failed_in_a_row += 1
        if self.stop_after is not None and self.failed_in_a_row >= self.stop_after:
            self.not_started.extend(self.queue)
            self.queue.clear()

    def worker_lost(self, slot: int, reason: str) -> list[Chunk]:
        """Take back every chunk of `slot`; returns the chunks that failed for good."""
        handles = self.per_slot.pop(slot, [])
        chunks = [self.in_flight.pop(handle)[1] for handle in handles]
        given_up = []
        for position, chunk in reversed(list(enumerate(chunks))):
            if position == 0:
                self.attempts[chunk.index] += 1
            if self.attempts[chunk.index] >= self.max_attempts:
                given_up.append(chunk)
                self.fail(chunk, f"lost with its worker {self.attempts[chunk.index]} times "
                                 f"(last: {reason})")
            else:
                self.queue.appendleft(chunk)
                self.requeued += 1
        return given_up

    def fail_rest(self, reason: str) -> list[Chunk]:
        """No worker is left: every queued and in-flight chunk fails with `reason`."""
        rest = [chunk for _, chunk in self.in_flight.values()] + list(self.queue)
        self.in_flight.clear()
        self.per_slot.clear()
        self.queue.clear()
        for chunk in rest:
            self.fail(chunk, reason)
        return rest
