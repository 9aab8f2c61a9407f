"""Run summary: totals, per-environment stats, spans per kind, throughput."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from datagen.shards import ChunkRecord


def negative_kind_stats(records: list[ChunkRecord]) -> dict[str, dict[str, float]]:
    """Per negative kind: produced, impossible, and the impossible rate, over all chunks."""
    totals: dict[str, Counter] = defaultdict(Counter)
    for record in records:
        for kind, counts in record.stats.get("negatives", {}).get("kinds", {}).items():
            totals[kind].update(counts)
    return {kind: {"produced": c["produced"], "impossible": c["impossible"],
                   "impossible_rate": c["impossible"] / max(c["produced"] + c["impossible"], 1)}
            for kind, c in sorted(totals.items())}


def critic_stats(records: list[ChunkRecord]) -> dict[str, Any]:
    """Repairs, repairs not emitted and safety pairs over all chunks, plus the commonest
    reasons a repair was not emitted (see datagen/critic_stage)."""
    totals: Counter = Counter()
    reasons: Counter = Counter()
    for record in records:
        for key, value in record.stats.get("critics", {}).items():
            if isinstance(value, dict):  # per error kind or reason (repaired, rejected): total
                totals[key] += sum(value.values())
                if key == "rejected":
                    reasons.update(value)
            elif isinstance(value, int):
                totals[key] += value
    if not totals:
        return {}
    return {**totals, "rejected_reasons": dict(reasons.most_common(4))}


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
    per_env: dict[str, dict[str, float]]
    spans: dict[str, dict[str, float]]
    generated: int
    seconds: float
    complete: bool
    failed_chunks: list[tuple[int, str]] = field(default_factory=list)
    negative_kinds: dict[str, dict[str, float]] = field(default_factory=dict)
    critics: dict[str, Any] = field(default_factory=dict)
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
        lines.append("rows: " + ", ".join(f"{k}={v:,}" for k, v in self.counts.items() if v))
        lines.append(f"{'env':<14}{'trajectories':>13}{'success':>9}{'tool calls/traj':>17}"
                     f"{'errors':>8}")
        for env, stats in self.per_env.items():
            lines.append(f"{env:<14}{stats['trajectories']:>13,.0f}{stats['success_rate']:>9.1%}"
                         f"{stats['mean_tool_calls']:>17.2f}{stats['errors']:>8,.0f}")
        lines.append("spans: " + ", ".join(
            f"{kind} {s['count']:,.0f} (mean {s['mean_chars']:.0f} chars)"
            for kind, s in self.spans.items()))
        if self.negative_kinds:
            lines.append("negatives: " + ", ".join(
                f"{kind} {s['produced']:,.0f} ({s['impossible_rate']:.1%} impossible)"
                for kind, s in self.negative_kinds.items()))
        if self.critics:
            c = self.critics
            why = ", ".join(f"{reason} {n:,}" for reason, n in c["rejected_reasons"].items())
            lines.append(f"critics: {c.get('repaired', 0):,} repairs ({c.get('rejected', 0):,} "
                         f"not emitted{': ' + why if why else ''}), safety pairs "
                         f"{c.get('safety_dangerous', 0):,} dangerous + "
                         f"{c.get('safety_benign', 0):,} benign look-alikes")
        lines.append(self._this_run())
        if self.stage_seconds:
            total = sum(self.stage_seconds.values())
            lines.append(f"chunk CPU time ({total:,.1f} worker-s): " + ", ".join(
                f"{stage} {seconds / total:.0%}" for stage, seconds in self.stage_seconds.items()))
        if self.requeued:
            lines.append(f"retried: {self.requeued} chunk(s) went back to the queue after their "
                         "worker was lost")
        lines.extend(f"note: {note}" for note in self.notes)
        for chunk, error in self.failed_chunks:
            lines.append(f"FAILED chunk {chunk}: {error} (rerun the same command to retry)")
        lines.append(f"look inside: datagen inspect {self.out}")
        return "\n".join(lines)


def _merge(records: list[ChunkRecord]) -> tuple[dict[str, Counter], Counter, Counter]:
    per_env: dict[str, Counter] = defaultdict(Counter)
    span_count: Counter = Counter()
    span_chars: Counter = Counter()
    for record in records:
        for env, counts in record.stats.get("per_env", {}).items():
            per_env[env].update(counts)
        span_count.update(record.stats.get("span_count", {}))
        span_chars.update(record.stats.get("span_chars", {}))
    return per_env, span_count, span_chars


def summarise(records: list[ChunkRecord], new_records: list[ChunkRecord], seconds: float,
              manifest: dict[str, Any], failed: list, out: str,
              startup_seconds: float = 0.0, requeued: int = 0,
              notes: list[str] | None = None) -> RunSummary:
    per_env_counts, span_count, span_chars = _merge(records)
    per_env = {}
    for env, c in sorted(per_env_counts.items()):
        n = c["trajectories"] or 1
        per_env[env] = {"trajectories": c["trajectories"], "success_rate": c["success"] / n,
                        "mean_tool_calls": c["tool_calls"] / n, "errors": c["errors"]}
    spans = {kind: {"count": span_count[kind],
                    "mean_chars": span_chars[kind] / span_count[kind] if span_count[kind] else 0}
             for kind in ("PROMPT", "REASON", "ACT", "OBS") if span_count[kind]}
    generated = sum(r.shards["trajectories"].rows for r in new_records)
    return RunSummary(out=out, counts=manifest["counts"], per_env=per_env, spans=spans,
                      generated=generated, seconds=seconds, complete=manifest["complete"],
                      failed_chunks=[(chunk.index, error) for chunk, error in failed],
                      negative_kinds=negative_kind_stats(records),
                      critics=critic_stats(records), startup_seconds=startup_seconds,
                      requeued=requeued, notes=list(notes or []),
                      stage_seconds=stage_seconds(new_records))
