"""Chunk worker actors and their life cycle: started, set up, ready, lost, replaced, given up.

A worker is created with nothing to do in its constructor, so that its `__ray_ready__`
resolving means "placed on a node and its process is up"; `setup` then builds the chunk
processor (environments, teacher, tokenizer: seconds, or minutes for a model) and runs the
preflight checks there. That split lets the driver bound the two waits separately.

A worker that Ray cannot place (resources held by another job, a custom resource nobody has,
the CPUs of a node that died) gets no chunk and costs nothing while other workers run: it
joins if the resources appear (the other job ends, the node comes back, an autoscaler adds
one) and is stopped at the end. Only while no worker is ready does its wait count: after
`worker_start_timeout_s` of that it is given up, and with no worker left the run fails with
what the workers asked for and what the cluster has.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import ray

from datagen.pipeline.chunk import Chunk, ChunkProcessor, tune_gc
from datagen.pipeline.cluster import ClusterError, describe_resources
from datagen.config import GenerateConfig
from datagen.pipeline.preflight import OutProbe, invalid_config_problem, worker_problems
from datagen.pipeline.shards import ChunkRecord


@dataclass(frozen=True)
class LivenessPolicy:
    """How long a run waits for its workers and how often it retries, so that it never waits
    forever. Each field mirrors the run-only config field of the same name."""

    worker_start_timeout_s: float = 300.0  # placement + process start (runtime_env installs
    # included) while no worker is ready; a worker waiting longer than that is given up
    worker_setup_timeout_s: float = 1800.0  # building the processor (a model may load here)
    max_chunk_attempts: int = 3  # a chunk lost with its worker this often fails for good
    max_worker_restarts: int = 3  # replacements per worker slot after a worker is lost
    worker_resources: dict[str, float] = field(default_factory=dict)  # beyond 1 CPU, e.g.
    # {"datagen": 1} to keep chunk workers on nodes that offer that custom resource

    @classmethod
    def from_config(cls, config: GenerateConfig) -> LivenessPolicy:
        return cls(**{name: getattr(config, name) for name in cls.__dataclass_fields__})

    @property
    def wanted(self) -> dict[str, float]:
        return {"CPU": 1.0, **self.worker_resources}


@dataclass(frozen=True)
class WorkerReport:
    node: str
    problems: list[str]


@ray.remote(num_cpus=1)
class ChunkWorker:
    """Holds a ChunkProcessor (environments, teacher, tokenizer) for the whole run."""

    def __init__(self) -> None:
        self.processor: ChunkProcessor | None = None

    def setup(self, config_json: str, probe: OutProbe | None, fence: Any = None,
              ) -> WorkerReport:
        """Build the processor after checking, here, what it needs; never raises. `fence`:
        the run lock's check before each write (s3lease.LeaseFence), or None."""
        node = ray.util.get_node_ip_address()
        try:
            config = GenerateConfig.model_validate_json(config_json)
        except Exception as exc:  # noqa: BLE001 - reported as data
            from pydantic import ValidationError

            problem = (invalid_config_problem(exc) if isinstance(exc, ValidationError)
                       else f"the config does not load here: {exc}")
            return WorkerReport(node, [problem])
        problems = worker_problems(config, probe)
        if not problems:
            try:
                self.processor = ChunkProcessor(config)
                self.processor.store.fence = fence.check if fence is not None else None
                tune_gc()
            except Exception as exc:  # noqa: BLE001 - reported as data
                problems.append(f"building the chunk processor failed: {type(exc).__name__}: "
                                f"{str(exc)[:300]}")
        return WorkerReport(node, problems)

    def process(self, chunk: Chunk) -> ChunkRecord:
        return self.processor.process(chunk)


STARTING, SETTING_UP, READY, GONE = "starting", "setting up", "ready", "gone"


@dataclass
class Slot:
    handle: Any
    state: str
    since: float
    lifecycle_ref: Any  # __ray_ready__ while starting, setup while setting up
    setup_ref: Any
    starts: int = 1


class WorkerPool:
    """The run's chunk workers. `refs()` are the life-cycle calls to wait on beside the chunks;
    `on_ref` advances a worker when one resolves, `expire` gives up on workers past their
    bound. `notes` says, for the summary, what was given up, lost or dropped."""

    def __init__(self, config_json: str, probe: OutProbe | None, policy: LivenessPolicy,
                 fence: Any = None) -> None:
        self.config_json, self.probe, self.policy = config_json, probe, policy
        self.fence = fence
        self.slots: list[Slot] = []
        self.notes: list[str] = []
        self.problems: dict[str, list[str]] = {}  # preflight problem -> nodes
        self.started_at = time.perf_counter()
        self.last_ready_at = self.started_at  # the wait for placement counts from here
        self.first_ready_s: float | None = None
        self.gave_up_pending = 0

    def start(self, n_workers: int) -> None:
        for _ in range(n_workers):
            self.slots.append(self._new_slot())

    def _new_slot(self, starts: int = 1) -> Slot:
        handle = ChunkWorker.options(resources=self.policy.worker_resources or None).remote()
        setup = handle.setup.remote(self.config_json, self.probe, self.fence)
        return Slot(handle, STARTING, time.perf_counter(), handle.__ray_ready__.remote(), setup,
                    starts)

    # what the driver reads --------------------------------------------------------------

    def ready(self) -> list[int]:
        return [i for i, slot in enumerate(self.slots) if slot.state == READY]

    def alive(self) -> bool:
        return any(slot.state != GONE for slot in self.slots)

    def refs(self) -> list[Any]:
        return [slot.lifecycle_ref for slot in self.slots if slot.state in (STARTING, SETTING_UP)]

    def owns(self, ref: Any) -> bool:
        return any(slot.lifecycle_ref == ref for slot in self.slots)

    def seconds_to_deadline(self) -> float | None:
        """Until the next worker is due to be given up (None: nobody is waited on)."""
        deadlines = [self._deadline(slot) for slot in self.slots]
        deadlines = [d for d in deadlines if d is not None]
        return max(min(deadlines) - time.perf_counter(), 0.0) if deadlines else None

    def _deadline(self, slot: Slot) -> float | None:
        if slot.state == SETTING_UP:
            return slot.since + self.policy.worker_setup_timeout_s
        if slot.state == STARTING and not self.ready():
            return max(slot.since, self.last_ready_at) + self.policy.worker_start_timeout_s
        return None

    def submit(self, index: int, chunk: Chunk) -> Any:
        return self.slots[index].handle.process.remote(chunk)

    # what happens to workers ----------------------------------------------------------

    def on_ref(self, ref: Any) -> None:
        index = next(i for i, slot in enumerate(self.slots) if slot.lifecycle_ref == ref)
        slot = self.slots[index]
        try:
            result = ray.get(ref)
        except ray.exceptions.RayError as exc:
            self.lost(index, f"worker died while {slot.state}: {short_error(exc)}")
            return
        if slot.state == STARTING:
            slot.state, slot.since = SETTING_UP, time.perf_counter()
            slot.lifecycle_ref = slot.setup_ref
        elif result.problems:
            for problem in result.problems:
                self.problems.setdefault(problem, []).append(result.node)
            self._retire(index)
            self.notes.append(f"a chunk worker on {result.node} was dropped: "
                              + "; ".join(result.problems))
        else:
            slot.state = READY
            if self.first_ready_s is None:
                self.first_ready_s = time.perf_counter() - self.started_at

    def expire(self) -> None:
        """Give up on workers past their deadline (see the module docstring)."""
        now = time.perf_counter()
        self._expire_setups(now)
        if self.ready():
            self.last_ready_at = now
            return
        for index, slot in enumerate(self.slots):
            deadline = self._deadline(slot)
            if slot.state == STARTING and deadline is not None and now > deadline:
                self._retire(index)
                self.gave_up_pending += 1
                self.notes.append(
                    f"a chunk worker not placed after {self.policy.worker_start_timeout_s:g}s "
                    f"without any worker ready was given up ({self.waiting_for()})")

    def _expire_setups(self, now: float) -> None:
        for index, slot in enumerate(self.slots):
            if slot.state == SETTING_UP and now - slot.since > self.policy.worker_setup_timeout_s:
                self._retire(index)
                self.notes.append(f"a chunk worker still setting up after "
                                  f"{self.policy.worker_setup_timeout_s:g}s was given up")

    def lost(self, index: int, reason: str) -> None:
        """The worker died (or stopped answering): replace it while restarts remain."""
        slot = self.slots[index]
        self._retire(index)
        self.notes.append(f"lost a chunk worker: {reason}")
        if slot.starts <= self.policy.max_worker_restarts:
            self.slots[index] = self._new_slot(slot.starts + 1)

    def _retire(self, index: int) -> None:
        slot = self.slots[index]
        if slot.state == READY:  # from now on a worker waiting for placement may hold us up
            self.last_ready_at = time.perf_counter()
        slot.state = GONE
        ray.kill(slot.handle)  # releases its resource request if it is still pending

    def shutdown(self) -> None:
        never_placed = [slot for slot in self.slots if slot.state == STARTING]
        if never_placed:
            waited = time.perf_counter() - min(slot.since for slot in never_placed)
            self.notes.append(f"{len(never_placed)} chunk worker(s) were never placed (waited up "
                              f"to {waited:.0f}s; {self.waiting_for()})")
        for slot in self.slots:
            if slot.state != GONE:
                ray.kill(slot.handle)
                slot.state = GONE

    # messages -----------------------------------------------------------------------------

    def waiting_for(self) -> str:
        return describe_resources(self.policy.wanted)

    def failure(self) -> ClusterError:
        """Why no worker is left, as the error to raise or the reason chunks fail."""
        if self.problems:
            lines = [f"  - on {', '.join(sorted(set(nodes)))}: {problem}"
                     for problem, nodes in self.problems.items()]
            return ClusterError("no chunk worker can run this config:\n" + "\n".join(lines))
        if self.gave_up_pending:
            return ClusterError(f"no chunk worker could be placed within "
                                f"{self.policy.worker_start_timeout_s:g}s: {self.waiting_for()}"
                                " (other jobs may hold the rest)")
        return ClusterError("no chunk worker is left: " + (self.notes[-1] if self.notes else
                                                            "all of them were stopped"))


def short_error(exc: BaseException) -> str:
    """The first line of a Ray error, without Ray's multi-line actor and task dumps."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"
