"""The generation pipeline on Ray: chunks of tasks fan out to worker actors, shards come back.

Topology (one process per box):

    driver: plan chunks -> skip complete ones -> feed workers -> progress -> manifest + card
    ChunkWorker x N (1 CPU each): ChunkProcessor.process(chunk) -> shards + marker on disk

A chunk (default 1,000 tasks) is the unit of work, of writing and of resume, which keeps the
cost of a Ray call (~1 ms) negligible next to the work it carries. Each worker keeps up to
`max_in_flight` chunks queued so it never waits on the driver. The same code runs on a laptop
(`ray.init()` starts a local Ray) and on a cluster (`--address`, `RAY_ADDRESS`, or inside a
`ray job submit` job, where Ray sets the address).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import ray
from tqdm import tqdm

from datagen.card import write_card
from datagen.chunk import Chunk, ChunkProcessor, plan_chunks
from datagen.config import RUN_ONLY_FIELDS, GenerateConfig, fingerprint
from datagen.shards import ChunkRecord, ShardStore
from datagen.summary import RunSummary, negative_kind_stats, summarise

log = logging.getLogger(__name__)


@ray.remote(num_cpus=1)
class ChunkWorker:
    """Holds a ChunkProcessor (environments, teacher, tokenizer) for the whole run."""

    def __init__(self, config_json: str) -> None:
        self.processor = ChunkProcessor(GenerateConfig.model_validate_json(config_json))
        # Millions of short-lived small objects: the collector's young-generation passes cost
        # 10-20% of a chunk; freezing the start-up heap and raising the threshold removes it.
        gc.freeze()
        gc.set_threshold(20_000, 50, 100)

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
    """Bookkeeping of in-flight chunks: which worker runs which chunk."""

    workers: list[Any]
    in_flight: dict[Any, tuple[int, Chunk]]

    def submit(self, worker_index: int, chunk: Chunk) -> None:
        ref = self.workers[worker_index].process.remote(chunk)
        self.in_flight[ref] = (worker_index, chunk)


def _run_chunks(config: GenerateConfig, todo: list[Chunk], done_rows: int,
                ) -> tuple[list[ChunkRecord], list[tuple[Chunk, str]], float]:
    """Feed `todo` to worker actors; return new records, failed chunks and wall seconds."""
    n_workers = config.num_workers or max(int(ray.cluster_resources().get("CPU", 1)), 1)
    n_workers = min(n_workers, len(todo))
    config_json = config.model_dump_json()
    dispatch = _Dispatch([ChunkWorker.remote(config_json) for _ in range(n_workers)], {})
    queue = deque(todo)
    records: list[ChunkRecord] = []
    failed: list[tuple[Chunk, str]] = []
    bar = tqdm(total=config.num_trajectories, initial=done_rows, unit="traj",
               disable=not config.progress, smoothing=0.1, dynamic_ncols=True)
    started = time.perf_counter()
    try:
        for _ in range(config.max_in_flight):
            for worker_index in range(n_workers):
                if queue:
                    dispatch.submit(worker_index, queue.popleft())
        while dispatch.in_flight:
            [ref], _ = ray.wait(list(dispatch.in_flight), num_returns=1)
            worker_index, chunk = dispatch.in_flight.pop(ref)
            try:
                records.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                dispatch.workers[worker_index] = ChunkWorker.remote(config_json)
                failed.append((chunk, f"worker died: {exc}"))
            except ray.exceptions.RayTaskError as exc:
                failed.append((chunk, str(exc).splitlines()[-1]))
            bar.update(chunk.stop - chunk.start)
            if queue:
                dispatch.submit(worker_index, queue.popleft())
    finally:
        bar.close()
        for worker in dispatch.workers:
            ray.kill(worker)
    return records, failed, time.perf_counter() - started


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
    seconds = 0.0
    try:
        if todo:
            init_ray(address)
            new_records, failed, seconds = _run_chunks(config, todo, done_rows)
    finally:  # also on Ctrl-C: only complete chunks count; the manifest says what is there
        store.clear_tmp()
        records = store.records()
        manifest = store.write_manifest(fp, config_dump, len(chunks), records,
                                        {"negative_kinds": negative_kind_stats(records)})
    summary = summarise(records, new_records, seconds, manifest, failed, str(store.root))
    write_card(store.root, manifest, summary)
    return summary
