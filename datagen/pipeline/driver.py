"""The generation pipeline on Ray: chunks of tasks fan out to worker actors, shards come back.

Topology (one process per box):

    driver: resolve paths -> configured stages -> plan chunks -> skip complete ones -> start
            workers -> feed the ready ones -> re-queue chunks of lost workers -> progress ->
            manifest (at the start, as chunks complete, at the end) + summary + card (each
            stage's counts, merged by the stage)
    ChunkWorker x N (1 CPU each): setup (preflight checks, ChunkProcessor) -> process(chunk):
            rollout -> every stage (stages/) -> one shard per table + marker on disk

A chunk (default 1,000 tasks) is the unit of work, of writing and of resume, which keeps the
cost of a Ray call (~1 ms) negligible next to the work it carries. The driver never waits
without a bound: it waits on chunks and on worker life-cycle calls together, with a timeout
that is the next worker's deadline (`LivenessPolicy`). A worker Ray cannot place is given up
and the run goes on with the others; a worker that dies has its chunks re-queued on the
others and is replaced; when no worker is left the run fails with the reason. The same code
runs on a laptop (`ray.init()` starts a local Ray) and on a cluster (`--address`,
`RAY_ADDRESS`, or inside a `ray job submit` job, where Ray sets the address).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from tqdm import tqdm

from datagen.pipeline.card import write_card
from datagen.pipeline.chunk import Chunk, plan_chunks
from datagen.pipeline.cluster import ClusterError, init_ray, job_working_dir
from datagen.config import GenerateConfig, fingerprint, public_dump
from datagen.pipeline.dispatch import ChunkDispatch
from datagen.pipeline.live_manifest import LiveManifest
from datagen.pipeline.placement import check_engines, engine_demand
from datagen.pipeline.preflight import OutProbe, resolve_paths
from datagen.pipeline.runlock import LockOwner, run_lock
from datagen.pipeline.s3lease import LeaseFence, LeaseLost
from datagen.pipeline.shards import ChunkRecord, ShardStore
from datagen.pipeline.stages.base import configured_stages, tables_of
from datagen.pipeline.summary import RunSummary, stage_stats, summarise
from datagen.pipeline.workers import LivenessPolicy, WorkerPool, short_error
from datagen.provenance import mixed_code_note

__all__ = ["ClusterError", "LivenessPolicy", "init_ray", "run_generation"]


@dataclass
class ChunkRun:
    """What one run of the dispatch loop produced, for the summary."""

    records: list[ChunkRecord] = field(default_factory=list)
    failed: list[tuple[Chunk, str]] = field(default_factory=list)
    seconds: float = 0.0
    startup_seconds: float = 0.0  # until the first worker was ready: nothing could run before
    requeued: int = 0
    notes: list[str] = field(default_factory=list)


def _worker_count(config: GenerateConfig, n_chunks: int, policy: LivenessPolicy) -> int:
    """`num_workers`, else as many as the cluster's resources hold (one CPU each, plus the
    policy's custom resources) beside the `vllm` teacher's engines (workers holding every CPU
    left the engines they create none), never more than there are chunks."""
    if config.num_workers:
        return min(config.num_workers, n_chunks)
    total, engines = ray.cluster_resources(), engine_demand(config)
    fits = [int((total.get(name, 0) - engines.get(name, 0)) // amount)
            for name, amount in policy.wanted.items() if amount]
    return max(min([*fits, n_chunks]), 1)


class _Loop:
    """One step at a time: top up the ready workers, wait (bounded) for a chunk or a worker
    life-cycle call, apply what happened."""

    def __init__(self, pool: WorkerPool, dispatch: ChunkDispatch, bar: tqdm,
                 run: ChunkRun, on_record: Callable[[ChunkRecord], None] | None = None) -> None:
        self.pool, self.dispatch, self.bar, self.run = pool, dispatch, bar, run
        self.on_record = on_record

    def step(self) -> None:
        self.dispatch.fill(self.pool.ready(), self.pool.submit)
        if not self.pool.alive():
            self._no_worker_left()
            return
        refs = self.dispatch.handles() + self.pool.refs()
        done, _ = ray.wait(refs, num_returns=1, timeout=self.pool.seconds_to_deadline())
        for ref in done:
            if self.pool.owns(ref):
                self.pool.on_ref(ref)
            else:
                self._chunk_done(ref)
        self.pool.expire()

    def _chunk_done(self, ref: Any) -> None:
        slot, chunk = self.dispatch.in_flight[ref]
        try:
            record = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the chunk's own error: no retry
            if isinstance(getattr(exc, "cause", None), LeaseLost):
                raise exc.cause from None  # another run owns OUT now: stop, write nothing
            self.dispatch.done(ref)
            self.dispatch.fail(chunk, str(exc).strip().splitlines()[-1][:300])
            self.bar.update(chunk.stop - chunk.start)
            return
        except ray.exceptions.RayError as exc:  # worker or node lost: its chunks go back
            reason = short_error(exc)
            self.pool.lost(slot, reason)
            for lost in self.dispatch.worker_lost(slot, reason):
                self.bar.update(lost.stop - lost.start)
            return
        self.dispatch.done(ref)
        self.dispatch.written()
        self.run.records.append(record)
        if self.on_record is not None:
            self.on_record(record)
        self.bar.update(chunk.stop - chunk.start)

    def _no_worker_left(self) -> None:
        error = self.pool.failure()
        if not self.run.records and not self.dispatch.failed:
            raise error  # nothing ran: fail before work, with the reason
        for chunk in self.dispatch.fail_rest(str(error)):
            self.bar.update(chunk.stop - chunk.start)


def _run_chunks(config: GenerateConfig, todo: list[Chunk], done_rows: int,
                policy: LivenessPolicy, fence: LeaseFence | None = None,
                on_record: Callable[[ChunkRecord], None] | None = None) -> ChunkRun:
    """Feed `todo` to worker actors until every chunk is written or has failed; `on_record`
    sees each chunk as it is written."""
    started = time.perf_counter()
    run = ChunkRun()
    probe = OutProbe.create(ShardStore(config.out).tmp)
    pool = WorkerPool(config.model_dump_json(), probe, policy, fence)
    dispatch = ChunkDispatch(todo, config.max_in_flight, policy.max_chunk_attempts,
                             config.stop_after_failed_chunks)
    bar = tqdm(total=config.num_trajectories, initial=done_rows, unit="traj",
               disable=None if config.progress is None else not config.progress,  # None: tty
               smoothing=0.1, dynamic_ncols=True)
    try:
        pool.start(_worker_count(config, len(todo), policy))
        loop = _Loop(pool, dispatch, bar, run, on_record)
        while not dispatch.finished:
            loop.step()
    finally:
        bar.close()
        pool.shutdown()
        probe.remove()
    run.failed, run.requeued, run.notes = dispatch.failed, dispatch.requeued, pool.notes
    if dispatch.not_started:
        run.notes.append(f"stopped: {config.stop_after_failed_chunks} chunk(s) failed in a row "
                         f"(stop_after_failed_chunks), so {len(dispatch.not_started):,} chunk(s) "
                         f"did not start; rerun the same command to resume once the reason "
                         f"below is fixed")
    run.seconds = time.perf_counter() - started
    run.startup_seconds = pool.first_ready_s or 0.0
    return run


def run_generation(config: GenerateConfig, address: str | None = None,
                   policy: LivenessPolicy | None = None) -> RunSummary:
    """Generate (or resume) the dataset described by `config` into `config.out`. Raises a
    ClusterError (a ConfigError) before any chunk runs when Ray cannot be reached or no worker
    can run the config; chunks that fail after that are reported in the summary."""
    policy = policy or LivenessPolicy.from_config(config)
    working_dir = job_working_dir()
    config = resolve_paths(config, keep_relative=working_dir is not None)
    fp = fingerprint(config)
    with run_lock(config.out, LockOwner.current(fp)) as lock:  # one run per OUT, to the card
        return _generate_locked(config, fp, address, policy, working_dir, lock.fence())


def _generate_locked(config: GenerateConfig, fp: str, address: str | None,
                     policy: LivenessPolicy, working_dir: str | None,
                     fence: LeaseFence | None) -> RunSummary:
    stages = configured_stages(config)
    store = ShardStore(config.out, tables_of(stages))
    config_dump = public_dump(config)
    chunks = plan_chunks(config)
    store.claim(fp, config_dump, config.overwrite, planned=len(chunks))
    complete = store.complete_chunks()
    todo = [chunk for chunk in chunks if chunk.index not in complete]
    done_rows = config.num_trajectories - sum(c.stop - c.start for c in todo)
    stage_list = [{"name": s.name, "tables": [t.name for t in s.tables]} for s in stages]

    def write_manifest(records: list[ChunkRecord]) -> dict[str, Any]:
        return store.write_manifest(fp, config_dump, len(chunks), records,
                                    stage_stats(stages, records), stage_list)

    live = LiveManifest(write_manifest, store.kept,
                        allowed=fence.held if fence is not None else lambda: True)
    run = ChunkRun()
    try:
        if todo:
            live.start()  # inspect and verify see the run from its start (live_manifest.py)
            check_engines(config, policy.wanted, started_here=init_ray(address))
            run = _run_chunks(config, todo, done_rows, policy, fence, live.add)
    finally:  # also on Ctrl-C: only complete chunks count; the manifest says what is there
        lost = fence is not None and not fence.held()  # OUT is another run's now: hands off
        if not lost:
            store.clear_tmp()
            records = store.records()
            manifest = write_manifest(records)
    if lost:
        fence.check()  # raises LeaseLost, naming the run that holds OUT now
        raise LeaseLost(f"{config.out}: this run's lease could not be confirmed; no manifest "
                        "written, rerun to resume")
    if working_dir is not None and config.out.startswith(_cwd_prefix() or "\x00"):
        run.notes.append(f"OUT {config.out} lies in this Ray job's working directory, a per-node "
                         "copy that Ray deletes with the session: give --out an absolute path "
                         "on shared storage")
    if mixed := mixed_code_note(manifest["code"]):
        run.notes.append(mixed)
    summary = summarise(stages, records, run.records, run.seconds, manifest, run.failed,
                        str(store.root), startup_seconds=run.startup_seconds,
                        requeued=run.requeued, notes=run.notes)
    write_card(store.root, manifest, summary)
    return summary


def _cwd_prefix() -> str | None:
    """This process's directory with a trailing separator; None when it was deleted under us
    (Ray removes a job's working_dir copy when it thinks no one uses it any more): the data
    is written by then, so a missing cwd must not turn a complete run into a traceback."""
    try:
        return os.path.join(os.getcwd(), "")
    except FileNotFoundError:
        return None
