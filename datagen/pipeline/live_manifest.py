"""manifest.json kept current while a run lasts.

It used to be written only when a run ended: during a first run `datagen inspect` and
`datagen verify` found none ("not a datagen output directory") however many chunks were
done - an hour into a 5M run, nothing to look at - and during a resume they showed the
previous run's chunks as if nothing were running. The driver now writes it when the run
starts (the chunks the resume check kept), then at most every `EVERY_S` seconds as chunks
complete, from the records it holds (no marker is read again), and at the end from the
markers as before. A large OUT's manifest costs more to build (10,000 chunks, a 5M run: ~8 MB,
0.7-0.9 CPU-s with the stages' merged counts), so the interval grows to `COST_FACTOR` times the
last write's CPU time: the driver spends at most ~1% of a core on it. A killed run leaves a
manifest that old at most; the markers stay the truth for resume.

An s3 run asks its lease before each write (`allowed`). Between that check and the PUT a
driver that stalls (SIGSTOP, swap) past the lease TTL could still land one stale manifest, as
a chunk worker could land one unmarked shard; writing at most every 30 s keeps that window
rare, and the run that took OUT over rewrites the manifest itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from datagen.pipeline.shards import ChunkRecord

log = logging.getLogger(__name__)

EVERY_S = 30.0
COST_FACTOR = 100.0  # seconds between writes per CPU-second a write took


class LiveManifest:
    """Rewrites the manifest through `write(records)` (the run's `ShardStore.write_manifest`
    with its fixed arguments) as chunks complete. `allowed()` is asked before each write: an
    s3 run whose lease was taken over must not write over the new holder's manifest."""

    def __init__(self, write: Callable[[list[ChunkRecord]], Any], kept: Iterable[ChunkRecord],
                 allowed: Callable[[], bool] = lambda: True, every_s: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._write, self._allowed, self._clock = write, allowed, clock
        self.every_s = every_s
        self.interval_s = every_s  # every_s, or more once writes get costly
        self.records = {record.chunk: record for record in kept}
        self.writes = 0
        self._last: float | None = None
        self._warned = False

    def start(self) -> None:
        self._flush()

    def add(self, record: ChunkRecord) -> None:
        self.records[record.chunk] = record
        if self._last is None or self._clock() - self._last >= self.interval_s:
            self._flush()

    def _flush(self) -> None:
        self._last = self._clock()
        if not self._allowed():
            return
        started = time.thread_time()  # this thread's: Ray's own threads run beside it
        try:
            self._write(sorted(self.records.values(), key=lambda record: record.chunk))
        except OSError as exc:  # the end of the run writes it again; a full disk shows there
            if not self._warned:
                log.warning("manifest.json not updated during the run: %s", exc)
                self._warned = True
            return
        self.writes += 1
        self.interval_s = max(self.every_s, COST_FACTOR * (time.thread_time() - started))
