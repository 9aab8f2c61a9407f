"""AIMD concurrency control for HTTP teachers: grow while the server keeps up, halve on 429.

TCP's congestion rule applied to requests in flight. Each success adds 1/limit, so the limit
grows by about one per round trip of a full window; a 429 (the server saying "too many")
halves it. All the 429s caused by one overloaded window count as one signal: a request only
decreases the limit if it started after the last decrease, otherwise a burst of 64 rejections
would collapse the limit to its floor.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator


@dataclass
class Slot:
    """A request's permission to be in flight; mark it `throttled` on a 429."""

    epoch: int
    throttled: bool = False
    succeeded: bool = False


class AIMDLimiter:
    """Requests in flight <= floor(limit); limit in [minimum, maximum]."""

    def __init__(self, initial: int, minimum: int, maximum: int, decrease: float = 0.5) -> None:
        self.minimum, self.maximum, self.decrease = minimum, maximum, decrease
        self.limit = float(min(max(initial, minimum), maximum))
        self.in_flight = 0
        self.epoch = 0  # number of decreases so far
        self.throttles = 0
        self.peak_in_flight = 0
        self._condition: asyncio.Condition | None = None

    def bind_loop(self) -> None:
        """Create the wait condition on the running loop (each batch runs on a new loop; the
        limit itself carries over)."""
        self._condition = asyncio.Condition()
        self.in_flight = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        condition = self._condition
        async with condition:
            await condition.wait_for(lambda: self.in_flight < int(self.limit))
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            slot = Slot(self.epoch)
        try:
            yield slot
        finally:
            async with condition:
                self.in_flight -= 1
                self._adjust(slot)
                condition.notify_all()

    def _adjust(self, slot: Slot) -> None:
        if slot.throttled:
            self.throttles += 1
            if slot.epoch == self.epoch:  # first 429 of this window: one decrease per window
                self.limit = max(float(self.minimum), self.limit * self.decrease)
                self.epoch += 1
        elif slot.succeeded:
            self.limit = min(float(self.maximum), self.limit + 1.0 / self.limit)
