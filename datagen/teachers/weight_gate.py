"""The admission gate between a vLLM engine and its turns, so that a weight swap is atomic
per turn: every turn runs entirely under one weight version and knows which.

    turn()   waits while a swap is pending, then enters under the current `version`; the
             version it yields is the one the turn's tokens come from
    swap()   closes the gate (new turns wait in the actor, not in the engine), waits until
             the turns already admitted have left (bounded), runs the load, counts the new
             version and reopens, whatever happened

Why drain here and not only in vLLM (`pause_generation(mode="wait")`, which the swap also
uses): vLLM 0.32's "wait" mode keeps stepping the requests that are *running* but leaves the
ones still in its waiting queue (not yet scheduled, or preempted for KV space with tokens
already generated) queued until resume (`Scheduler.schedule`, PAUSED_NEW admits only
`kv_holding_waiting`); those would run, or finish, under the new weights while they were
submitted, or partly generated, under the old. Counting turns at the actor makes "every
admitted turn has returned" the drain condition, so no turn is in the engine during a load.

Pure asyncio (no vLLM, no Ray): one event loop, the engine actor's.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, TypeVar

T = TypeVar("T")


class SwapTimeout(TimeoutError):
    """The turns in flight did not finish in time; nothing was loaded, the old weights serve."""


class WeightGate:
    """Counts weight versions and the turns in the engine; one swap at a time."""

    def __init__(self) -> None:
        self.version = 0  # successful swaps so far (0 = the weights the engine started with)
        self.in_flight = 0  # admitted turns that have not returned
        self.waiting = 0  # turns held at the closed gate
        self.broken: str | None = None  # why the served weights are undefined (a failed load)
        self.last_drain_s: float | None = None  # how long the last swap waited for turns
        self._open = asyncio.Event()
        self._open.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._swap = asyncio.Lock()

    @property
    def swapping(self) -> bool:
        return not self._open.is_set()

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[int]:
        """Hold the gate for one turn; yields the weight version the turn runs under."""
        while not self._open.is_set():  # re-checked: a second swap may close it again
            self.waiting += 1
            try:
                await self._open.wait()
            finally:
                self.waiting -= 1
        self.in_flight += 1  # no await since the check: the swap cannot slip in between
        self._drained.clear()
        try:
            yield self.version
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._drained.set()

    async def swap(self, load: Callable[[float], Awaitable[T]], timeout_s: float) -> T:
        """Drain, then `load(seconds_left)`; the version counts only a load that returned.
        Raises SwapTimeout (nothing loaded) when the drain takes longer than `timeout_s`."""
        async with self._swap:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            self._open.clear()
            try:
                try:
                    await asyncio.wait_for(self._drained.wait(), timeout_s)
                    self.last_drain_s = timeout_s - (deadline - loop.time())
                except asyncio.TimeoutError:
                    raise SwapTimeout(
                        f"weight swap: {self.in_flight} turn(s) still in the engine after "
                        f"{timeout_s:g} s; nothing was loaded, version {self.version} still "
                        f"serves (raise the drain timeout or shorten turns)") from None
                result = await load(max(deadline - loop.time(), 0.0))
                self.version += 1
                return result
            finally:
                self._open.set()
