"""Run summary: totals, each stage's counts (from the stage), throughput, where time went."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from datagen.pipeline.shards import ChunkRecord
from datagen.pipeline.stages.base import Stage

MAX_CHUNKS_NAMED = 10  # of the chunks that failed for one reason, the summary names this many


def stage_stats(stages: list[type[Stage]], records: list[ChunkRecord]) -> dict[str, Any]:
    """Stage name -> the run's counts, each stage merging its chunks' own (the manifest's
    `stats`)."""
    return {stage.name: stage.merge([record.stats.get("stages", {}).get(stage.name, {})
                                     for record in records])
            for stage in stages}


def stage_seconds(records: list[ChunkRecord]) -> dict[str, float]:
    """Worker seconds per chunk stage over `records`. Chunks that time each stage record
    `stats["stage_seconds"]`; older ones only split rollout (tasks, rollout, rows) from the
    rest (negatives, critics), without the shard write."""
    totals: Counter = Counter()
    for record in records:
        stats = record.stats
        if isinstance(stats.get("stage_seconds"), dict):
            totals.update(stats["stage_seconds"])
        elif "seconds" in stats and "seconds_rollout" in stats:
            totals["rollout+rows"] += stats["seconds_rollout"]
            totals["negatives+critics"] += stats["seconds"] - stats["seconds_rollout"]
    return {stage: seconds for stage, seconds in totals.items() if seconds > 0}


@dataclass
class RunSummary:
    out: str
    counts: dict[str, int]
    generated: int
    seconds: float
    complete: bool
    stages: list[type[Stage]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)  # stage name -> the run's counts
    failed_chunks: list[tuple[int, str]] = field(default_factory=list)
    startup_seconds: float = 0.0  # of `seconds`: until the first worker was ready
    requeued: int = 0  # chunks given back to the queue after their worker was lost
    notes: list[str] = field(default_factory=list)  # workers given up, lost or dropped
    stage_seconds: dict[str, float] = field(default_factory=dict)  # this run's chunks

    @property
    def rate(self) -> float:
        return self.generated / self.seconds if self.seconds else 0.0

    @property
    def steady_rate(self) -> float:
        """Trajectories per second once the workers are up."""
        working = self.seconds - self.startup_seconds
        return self.generated / working if working > 0 else 0.0

    def _this_run(self) -> str:
        if self.generated:
            return (f"this run: {self.generated:,} trajectories in {self.seconds:.1f}s "
                    f"= {self.rate:,.0f} traj/s ({self.startup_seconds:.1f}s of it starting "
                    f"workers; {self.steady_rate:,.0f} traj/s after)")
        if self.failed_chunks:
            return f"this run: no chunk was written; {len(self.failed_chunks)} FAILED (below)"
        if self.complete:
            return "this run: nothing to do, every chunk was already complete"
        return "this run: no chunk was written"

    def format(self) -> str:
        status = "complete" if self.complete else (
            f"INCOMPLETE, {len(self.failed_chunks)} chunk(s) failed" if self.failed_chunks
            else "INCOMPLETE")
        lines = [f"output: {self.out}  ({status}); "
                 f"shards in {self.out}/trajectories/, see {self.out}/README.md"]
        lines.append("rows: " + (", ".join(f"{k}={v:,}" for k, v in self.counts.items() if v)
                                 or "none"))
        for stage in self.stages:
            lines += stage.summary_lines(self.stats.get(stage.name, {}))
        lines.append(self._this_run())
        if self.stage_seconds:
            total = sum(self.stage_seconds.values())
            lines.append(f"chunk CPU time ({total:,.1f} worker-s): " + ", ".join(
                f"{stage} {seconds / total:.0%}" for stage, seconds in self.stage_seconds.items()))
        if self.requeued:
            lines.append(f"retried: {self.requeued} chunk(s) went back to the queue after their "
                         "worker was lost")
        lines.extend(f"note: {note}" for note in self.notes)
        lines.extend(failed_lines(self.failed_chunks))
        lines.append(f"look inside: datagen inspect {self.out}")
        return "\n".join(lines)


def failed_lines(failed: list[tuple[int, str]], shown: int = MAX_CHUNKS_NAMED) -> list[str]:
    """One line per distinct reason, naming its first chunks: when every chunk fails the same
    way (an engine that cannot start, a bad key), 10,000 chunks give one line, not 10,000."""
    by_reason: dict[str, list[int]] = {}
    for chunk, error in failed:
        by_reason.setdefault(error, []).append(chunk)
    lines = []
    for error, chunks in by_reason.items():
        named = ", ".join(map(str, chunks[:shown])) + (", ..." if len(chunks) > shown else "")
        which = f"chunk {chunks[0]}" if len(chunks) == 1 else f"{len(chunks):,} chunks ({named})"
        lines.append(f"FAILED {which}: {error} (rerun the same command to retry)")
    return lines


def summarise(stages: list[type[Stage]], records: list[ChunkRecord],
              new_records: list[ChunkRecord], seconds: float, manifest: dict[str, Any],
              failed: list, out: str, startup_seconds: float = 0.0, requeued: int = 0,
              notes: list[str] | None = None) -> RunSummary:
    generated = sum(r.shards["trajectories"].rows for r in new_records
                    if "trajectories" in r.shards)
    return RunSummary(out=out, counts=manifest["counts"], generated=generated, seconds=seconds,
                      complete=manifest["complete"], stages=list(stages),
                      stats=manifest.get("stats") or stage_stats(stages, records),
                      failed_chunks=[(chunk.index, error) for chunk, error in failed],
                      startup_seconds=startup_seconds, requeued=requeued,
                      notes=list(notes or []), stage_seconds=stage_seconds(new_records))
