"""The generation pipeline on Ray: chunks of tasks fan out to worker actors, shards come back.

Topology (one process per box):

    driver: plan chunks -> skip complete ones -> feed workers -> progress -> manifest + card
    ChunkWorker x N (1 CPU each): ChunkProcessor.process(chunk) -> shards + marker on disk

A chunk (default 1,000 tasks) is the unit of work, of writing and of resume, which keeps the
cost of a Ray call (~1 ms) negligible next to the work it carries. Each worker keeps up to
`max_in_flight` chunks queued so it never waits on the driver; the last chunks go only to idle
workers, so that none waits behind a busy one at the end. The same code runs on a laptop
(`ray.init()` starts a local Ray) and on a cluster (`--address`, `RAY_ADDRESS`, or inside a
`ray job submit` job, where Ray sets the address).
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import ray
from tqdm import tqdm

from datagen.card import write_card
from datagen.chunk import Chunk, ChunkProcessor, plan_chunks, tune_gc
from datagen.config import RUN_ONLY_FIELDS, GenerateConfig, fingerprint
from datagen.shards import ChunkRecord, ShardStore
from datagen.summary import RunSummary, negative_kind_stats, summarise

log = logging.getLogger(__name__)
STARTUP_WAIT_S = 60.0  # longest wait for every worker to be up before chunks go out


@ray.remote(num_cpus=1)
class ChunkWorker:
    """Holds a ChunkProcessor (environments, teacher, tokenizer) for the whole run."""

    def __init__(self, config_json: str) -> None:
        self.processor = ChunkProcessor(GenerateConfig.model_validate_json(config_json))
        tune_gc()

    def process(self, chunk: Chunk) -> ChunkRecord:
        return self.processor.process(chunk)


def init_ray(address: str | None = None) -> bool:
    """Connect to `address`, else $RAY_ADDRESS, else start a local Ray. True if we started it."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
    return address is None


@dataclass
class _Dispatch:
    """Bookkeeping of in-flight chunks: which worker runs which chunk, how many each holds."""

    workers: list[Any]
    in_flight: dict[Any, tuple[int, Chunk]]
    busy: list[int]

    def submit(self, worker_index: int, chunk: Chunk) -> None:
        ref = self.workers[worker_index].process.remote(chunk)
        self.in_flight[ref] = (worker_index, chunk)
        self.busy[worker_index] += 1

    def done(self, ref: Any) -> tuple[int, Chunk]:
        worker_index, chunk = self.in_flight.pop(ref)
        self.busy[worker_index] -= 1
        return worker_index, chunk

    def fill(self, queue: deque[Chunk], max_in_flight: int) -> None:
        """Top up every worker to `max_in_flight` queued chunks while there is work for all;
        near the end, hand a chunk only to a worker with nothing left, so that no chunk waits
        behind a busy worker while another one idles (at 5 chunks per 2 workers that wait
        was a fifth of the run)."""
        for worker_index in sorted(range(len(self.workers)), key=self.busy.__getitem__):
            depth = max_in_flight if len(queue) > len(self.workers) else 1
            while queue and self.busy[worker_index] < depth:
                self.submit(worker_index, queue.popleft())


def _start_workers(config_json: str, n_workers: int) -> tuple[list[Any], float]:
    """Start the chunk workers and wait until they are built (imports, environments), so that
    the start-up seconds can be reported apart from the seconds spent on chunks. A worker that
    fails to start counts as ready (its first chunk fails and is reported); on a cluster that
    is still scaling up, chunks go out after STARTUP_WAIT_S whether or not all workers are up."""
    started = time.perf_counter()
    workers = [ChunkWorker.remote(config_json) for _ in range(n_workers)]
    ready = [worker.__ray_ready__.remote() for worker in workers]
    ray.wait(ready, num_returns=len(ready), timeout=STARTUP_WAIT_S)
    return workers, time.perf_counter() - started


def _run_chunks(config: GenerateConfig, todo: list[Chunk], done_rows: int,
                ) -> tuple[list[ChunkRecord], list[tuple[Chunk, str]], float, float]:
    """Feed `todo` to worker actors; return new records, failed chunks, wall seconds (worker
    start-up included) and the worker start-up seconds."""
    started = time.perf_counter()
    n_workers = config.num_workers or max(int(ray.cluster_resources().get("CPU", 1)), 1)
    n_workers = min(n_workers, len(todo))
    config_json = config.model_dump_json()
    workers, startup = _start_workers(config_json, n_workers)
    dispatch = _Dispatch(workers, {}, [0] * n_workers)
    queue = deque(todo)
    records: list[ChunkRecord] = []
    failed: list[tuple[Chunk, str]] = []
    bar = tqdm(total=config.num_trajectories, initial=done_rows, unit="traj",
               disable=not config.progress, smoothing=0.1, dynamic_ncols=True)
    try:
        dispatch.fill(queue, config.max_in_flight)
        while dispatch.in_flight:
            [ref], _ = ray.wait(list(dispatch.in_flight), num_returns=1)
            worker_index, chunk = dispatch.done(ref)
            try:
                records.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                dispatch.workers[worker_index] = ChunkWorker.remote(config_json)
                failed.append((chunk, f"worker died: {exc}"))
            except ray.exceptions.RayTaskError as exc:
                failed.append((chunk, str(exc).splitlines()[-1]))
            bar.update(chunk.stop - chunk.start)
            dispatch.fill(queue, config.max_in_flight)
    finally:
        bar.close()
        for worker in dispatch.workers:
            ray.kill(worker)
    return records, failed, time.perf_counter() - started, startup


def run_generation(config: GenerateConfig, address: str | None = None) -> RunSummary:
    """Generate (or resume) the dataset described by `config` into `config.out`."""
    store = ShardStore(config.out)
    fp = fingerprint(config)
    config_dump = config.model_dump(mode="json", exclude=RUN_ONLY_FIELDS)
    store.claim(fp, config_dump, config.overwrite)
    chunks = plan_chunks(config)
    todo = [chunk for chunk in chunks if not store.is_complete(chunk.index)]
    done_rows = sum(c.stop - c.start for c in chunks) - sum(c.stop - c.start for c in todo)
    new_records: list[ChunkRecord] = []
    failed: list[tuple[Chunk, str]] = []
    seconds = startup = 0.0
    try:
        if todo:
            init_ray(address)
            new_records, failed, seconds, startup = _run_chunks(config, todo, done_rows)
    finally:  # also on Ctrl-C: only complete chunks count; the manifest says what is there
        store.clear_tmp()
        records = store.records()
        manifest = store.write_manifest(fp, config_dump, len(chunks), records,
                                        {"negative_kinds": negative_kind_stats(records)})
    summary = summarise(records, new_records, seconds, manifest, failed, str(store.root),
                        startup_seconds=startup)
    write_card(store.root, manifest, summary)
    return summary
