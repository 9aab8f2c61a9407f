"""Trajectories stage: the rolled-out trajectories as the `trajectories` table (text, spans,
and token columns with a tokenizer or an LLM teacher), and the counts the run summary shows
per environment, per span kind and per error kind."""

from __future__ import annotations

from collections import Counter, defaultdict
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from datagen.config import GenerateConfig
from datagen.pipeline.stages.base import Stage, StageContext, StageOutput, register_stage
from datagen.pipeline.stages.tables import TRAJECTORIES
from datagen.rows import n_tool_steps, render, trajectory_table
from datagen.spans import tokenize_with_spans
from datagen.teachers import EnvPool
from datagen.teachers.trace import teacher_columns
from datagen.types import SPAN_KINDS, Span, Trajectory

if TYPE_CHECKING:
    from datagen.pipeline.inspect import DatasetView

_SPAN_TEXT_LIMIT = 240


class Renderings:
    """The chunk's trajectories as this stage rendered them (text, spans), for the later
    stages of the same worker that render the same trajectories again (the negatives stage's
    preference pairs): one rendering per trajectory per chunk, ~50-70 us each."""

    HANDOFF = "renderings"  # its name in `StageContext.handoff`

    def __init__(self) -> None:
        # by object: a later stage gets a rendering of the very trajectory it holds (the entry
        # keeps the trajectory alive, so its id is not reused while it is here)
        self._by_object: dict[int, tuple[Trajectory, tuple[str, list[Span]]]] = {}

    def reset(self, trajectories: list[Trajectory],
              rendered: list[tuple[str, list[Span]]]) -> None:
        self._by_object = {id(traj): (traj, pair) for traj, pair in zip(trajectories, rendered)
                           if traj.task.instruction}  # else `render` gave "", not the template

    def get(self, traj: Trajectory) -> tuple[str, list[Span]] | None:
        found = self._by_object.get(id(traj))
        return found[1] if found is not None and found[0] is traj else None


@register_stage
class TrajectoryStage(Stage):
    """Always on: every other stage reads the trajectories this one writes."""

    name = "trajectories"
    tables = (TRAJECTORIES,)

    def __init__(self, llm_teacher: bool, tokenizer: Any = None,
                 tokenizer_name: str | None = None,
                 renderings: Renderings | None = None) -> None:
        self.llm_teacher = llm_teacher
        self.tokenizer, self.tokenizer_name = tokenizer, tokenizer_name
        self.renderings = renderings

    @classmethod
    def build(cls, config: GenerateConfig, context: StageContext) -> TrajectoryStage:
        return cls(config.teacher.backend != "oracle", context.tokenizer, context.tokenizer_name,
                   context.handoff.setdefault(Renderings.HANDOFF, Renderings()))

    def run(self, trajectories: list[Trajectory], envs: EnvPool) -> StageOutput:
        table, spans = self.table(trajectories)
        return StageOutput({"trajectories": table}, chunk_stats(trajectories, spans))

    def table(self, trajectories: list[Trajectory]) -> tuple[pa.Table, list[list[Span]]]:
        rendered = [render(traj) for traj in trajectories]
        if self.renderings is not None:
            self.renderings.reset(trajectories, rendered)
        spans = [s for _, s in rendered]
        if self.llm_teacher:
            tokens, teacher = teacher_columns(trajectories, rendered, self.tokenizer,
                                              self.tokenizer_name)
            return trajectory_table(trajectories, rendered, tokens, teacher), spans
        tokens, named = None, None
        if self.tokenizer is not None:
            tokens = tokenize_with_spans(self.tokenizer, [text for text, _ in rendered], spans)
            # Recorded like an LLM teacher's, so a trainer with another tokenizer refuses
            # these ids instead of training on garbage (trainer.data.check_shard_tokenizer).
            named = {"tokenizer": [self.tokenizer_name] * len(trajectories)}
        return trajectory_table(trajectories, rendered, tokens, named), spans

    @classmethod
    def summary_lines(cls, stats: dict[str, Any]) -> list[str]:
        if not per_env(stats):  # no chunk written: an empty table says nothing
            return []
        lines = [f"{'env':<14}{'trajectories':>13}{'success':>9}{'tool calls/traj':>17}"
                 f"{'errors':>8}"]
        for env, s in per_env(stats).items():
            lines.append(f"{env:<14}{s['trajectories']:>13,.0f}{s['success_rate']:>9.1%}"
                         f"{s['mean_tool_calls']:>17.2f}{s['errors']:>8,.0f}")
        lines.append("spans: " + ", ".join(f"{kind} {s['count']:,.0f} (mean "
                                           f"{s['mean_chars']:.0f} chars)"
                                           for kind, s in span_stats(stats).items()))
        if errors := stats.get("error_kinds"):
            lines.append("errors by kind: " + _most_common(errors))
        return lines

    @classmethod
    def inspect_lines(cls, view: DatasetView) -> list[str]:
        import polars as pl

        df = view.scan("trajectories")
        if df is None:
            return ["(no trajectory shards yet)"]
        lines = ["", "per environment:", view.frame(view.collect(_per_env_frame(df))), "",
                 "spans:", view.frame(view.collect(_span_frame(df)))]
        if "error_kind" in df.collect_schema().names():  # shards of schema version 2 have none
            failed = view.collect(df.filter(pl.col("error_kind").is_not_null())
                                  .group_by("env", "error_kind").len().sort("env", "len"))
            if failed.height:
                lines += ["", "errors by kind:", view.frame(failed)]
        if view.samples > 0:
            lines += ["", f"{view.samples} sampled trajectories:"]
            for row in view.sample_rows("trajectories", view.samples):
                lines += [format_trajectory(row), ""]
        return lines

    @classmethod
    def card_lines(cls, stats: dict[str, Any]) -> list[str]:
        rows = [f"| {env} | {s['trajectories']:,.0f} | {s['success_rate']:.1%} | "
                f"{s['mean_tool_calls']:.2f} |" for env, s in per_env(stats).items()]
        lines = ["| env | trajectories | success | tool calls / trajectory |",
                 "|---|---|---|---|", *rows]
        if errors := stats.get("error_kinds"):
            lines += ["", f"Failed trajectories by `error_kind`: {_most_common(errors)}."]
        return lines


def chunk_stats(trajectories: list[Trajectory], spans: list[list[Span]]) -> dict[str, Any]:
    """Counts the run summary adds up: per env, per span kind, per error kind."""
    per_env_counts: dict[str, Counter] = defaultdict(Counter)
    error_kinds: Counter = Counter()
    for traj in trajectories:
        env = per_env_counts[traj.task.env]
        env["trajectories"] += 1
        env["success"] += int(traj.success)
        env["errors"] += int(traj.error is not None)
        env["tool_calls"] += n_tool_steps(traj)
        if traj.error is not None:
            error_kinds[traj.error_kind or "unknown"] += 1
    # ~25 spans per trajectory: count with C-level helpers, add lengths into a plain dict
    # (Counter's Python-level += per span cost more than the rest of this function).
    flat = [span for traj_spans in spans for span in traj_spans]
    span_count = Counter(map(attrgetter("kind"), flat))
    span_chars = dict.fromkeys(span_count, 0)
    for span in flat:
        span_chars[span.kind] += span.end - span.start
    return {"per_env": {name: dict(counts) for name, counts in sorted(per_env_counts.items())},
            "span_count": dict(span_count), "span_chars": span_chars,
            "error_kinds": dict(error_kinds)}


def per_env(stats: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per environment: trajectories, success rate, mean tool calls, errors (from the run's
    merged counts)."""
    out = {}
    for env, c in sorted(stats.get("per_env", {}).items()):
        n = c.get("trajectories", 0) or 1
        out[env] = {"trajectories": c.get("trajectories", 0),
                    "success_rate": c.get("success", 0) / n,
                    "mean_tool_calls": c.get("tool_calls", 0) / n, "errors": c.get("errors", 0)}
    return out


def span_stats(stats: dict[str, Any]) -> dict[str, dict[str, float]]:
    count, chars = stats.get("span_count", {}), stats.get("span_chars", {})
    return {kind: {"count": count[kind], "mean_chars": chars.get(kind, 0) / count[kind]}
            for kind in SPAN_KINDS if count.get(kind)}


def _most_common(counts: dict[str, int], limit: int = 6) -> str:
    top = Counter(counts).most_common(limit)
    rest = sum(counts.values()) - sum(n for _, n in top)
    return ", ".join(f"{kind} {n:,}" for kind, n in top) + (f", other {rest:,}" if rest else "")


def _per_env_frame(df: Any) -> Any:
    import polars as pl

    return (df.group_by("env").agg(
        pl.len().alias("trajectories"),
        pl.col("success").mean().round(3).alias("success_rate"),
        pl.col("n_steps").mean().round(2).alias("mean_tool_calls"),
        pl.col("error").is_not_null().sum().alias("errors"),
        pl.col("text").str.len_chars().mean().round(0).alias("mean_chars"),
    ).sort("env"))


def _span_frame(df: Any) -> Any:
    import polars as pl

    spans = df.select(pl.col("spans").explode()).unnest("spans")
    return (spans.with_columns((pl.col("end") - pl.col("start")).alias("chars"))
            .group_by("kind").agg(pl.len().alias("spans"), pl.col("chars").mean().round(1)
                                  .alias("mean_chars"), pl.col("chars").max().alias("max_chars"))
            .sort("kind"))


def _clip(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= _SPAN_TEXT_LIMIT else text[:_SPAN_TEXT_LIMIT] + " ..."


def format_trajectory(row: dict) -> str:
    """A trajectory (or repair) row as its spans, one per line: `[KIND step] text`."""
    head = (f"--- {row['id']}  env={row['env']}  task={row['task_id']}  "
            f"success={row['success']}  tool calls={row['n_steps']}")
    lines = [head, f"task: {row['task']}"]
    if row["error"]:
        lines.append(f"error ({row.get('error_kind')}): {row['error']}")
    for span in row["spans"]:
        if span["kind"] == "PROMPT" and span["step"] < 0:
            lines.append(f"  [PROMPT] ({span['end'] - span['start']} chars of system + user turn)")
            continue
        text = row["text"][span["start"]:span["end"]]
        lines.append(f"  [{span['kind']:<6} {span['step']:>2}] {_clip(text)}")
    return "\n".join(lines)
