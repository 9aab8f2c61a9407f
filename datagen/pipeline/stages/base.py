"""The pipeline stage interface and registry: a new stage starts in one file.

A stage turns a chunk's trajectories into rows of the tables it declares, plus counts:

    @register_stage
    class MyStage(Stage):
        name = "my_stage"
        tables = (Table("my_rows", MY_SCHEMA, "one row per ...", {"col": "meaning", ...}),)

        @classmethod
        def build(cls, config, context):        # once per chunk worker
            return cls(...)

        def run(self, trajectories, envs):      # once per chunk, on the whole batch
            batch = StageBatch()
            ...batch.add("my_rows", row); batch.count("made", kind)...
            return batch.output(self.tables)

Everything else takes the stage from here. The chunk processor runs the configured stages in
order (the built-ins first: trajectories, negatives, critics) and writes every declared table
as one shard per chunk; a table several stages declare (`preferences`) gets their rows in that
order. The shard store, the manifest and `datagen verify` know the tables; the run summary,
`datagen inspect` and the dataset card show each stage through `merge`, `summary_lines`,
`inspect_lines`, `card_lines` and its tables' column docs (the defaults show counts, rows and
columns, so a stage that overrides none of them still appears everywhere).

Built-in stages live in this package and are switched by their config section (`enabled`).
Your own: decorate it with @register_stage in a module you list under the config's
`env_modules` (imported on the driver and on every worker); it runs in runs that list it.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from datagen.config import GenerateConfig
from datagen.envs import import_modules
from datagen.rows import shared_text_column
from datagen.teachers import EnvPool
from datagen.types import Trajectory

if TYPE_CHECKING:
    from datagen.pipeline.inspect import DatasetView
    from mutators import Rejected

_BUILTIN_MODULES = ("datagen.pipeline.stages.trajectories", "datagen.pipeline.stages.negatives",
                    "datagen.pipeline.stages.critics", "datagen.pipeline.stages.consistency")


@dataclass(frozen=True)
class Table:
    """An output table: the folder under OUT, its Arrow schema, what a row is, and what each
    column means (the dataset card lists them with their types). `optional` columns are
    appended by some runs only (token ids with a tokenizer, an LLM teacher's top-k)."""

    name: str
    schema: pa.Schema
    about: str
    columns: Mapping[str, str]
    optional: tuple[pa.Field, ...] = ()
    # string columns whose long values many rows share (a pair's prompt text and tools JSON):
    # built by `shared_text_column`, the others row by row
    shared_text: tuple[str, ...] = ()

    def from_rows(self, rows: list[dict[str, Any]]) -> pa.Table:
        # Row by row on purpose: for the negatives / preferences / repairs rows (long strings
        # in message lists) from_pylist measured 2-2.5x faster than building the columns in
        # Python as `trajectory_table` does for its many small span structs.
        if not self.shared_text or not rows:
            return pa.Table.from_pylist(rows, schema=self.schema)
        rest = pa.schema([f for f in self.schema if f.name not in self.shared_text],
                         metadata=self.schema.metadata)
        table = pa.Table.from_pylist(rows, schema=rest)
        for index, field in enumerate(self.schema):  # in schema order: each lands at its index
            if field.name in self.shared_text:
                column = shared_text_column([row.get(field.name) for row in rows])
                table = table.add_column(index, field, column)
        return table

    def fields(self) -> list[pa.Field]:
        return [*self.schema, *self.optional]


@dataclass(frozen=True)
class StageContext:
    """What a stage may take from the worker that builds it (built once per worker)."""

    out: str
    teacher: Any  # the run's Teacher: an LLM critic may share its loaded model
    tokenizer: Any = None
    tokenizer_name: str | None = None
    # what a stage leaves for later stages of the same worker, by name (the negatives stage's
    # mutation reports, which the critics stage reuses at the step it injects an error into)
    handoff: dict[str, Any] = field(default_factory=dict)


@dataclass
class StageOutput:
    """A stage's result for one chunk: a table per declared table name, and counts (JSON
    values: numbers and nested dicts of them) that the chunk marker records."""

    tables: dict[str, pa.Table]
    stats: dict[str, Any]

    def rows(self, table: str) -> list[dict[str, Any]]:
        return self.tables[table].to_pylist()


@dataclass
class StageBatch:
    """Rows per table and named counters, gathered while a stage goes over a batch."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows[table].append(row)

    def count(self, counter: str, key: str, n: int = 1) -> None:
        self.counts[counter][key] += n

    def reject(self, counter: str, rejected: Rejected) -> None:
        """Count a rejection by its kind (the detail is for a person, not for a summary)."""
        self.counts[counter][rejected.kind] += 1

    def output(self, tables: Iterable[Table], **extra: Any) -> StageOutput:
        stats = {name: dict(counter) for name, counter in sorted(self.counts.items())}
        return StageOutput({t.name: t.from_rows(self.rows.get(t.name, [])) for t in tables},
                           {**stats, **extra})


class Stage(ABC):
    """One step of a chunk after the rollout (see the module docstring)."""

    name: ClassVar[str]
    tables: ClassVar[tuple[Table, ...]]

    @classmethod
    def enabled(cls, config: GenerateConfig) -> bool:
        """Whether a run of `config` uses this stage (a built-in reads its config section)."""
        return True

    @classmethod
    @abstractmethod
    def build(cls, config: GenerateConfig, context: StageContext) -> Stage:
        """The stage for `config`, built once per chunk worker (models load here)."""

    @abstractmethod
    def run(self, trajectories: list[Trajectory], envs: EnvPool) -> StageOutput:
        """Rows for every declared table, and counts, for one chunk's trajectories. Errors
        are data: a trajectory that breaks the stage costs its own rows, counted."""

    # what a run or an OUT shows, from the chunks' counts (class methods: `datagen inspect`
    # and the summary need no config and build nothing)

    @classmethod
    def merge(cls, chunk_stats: list[dict[str, Any]]) -> dict[str, Any]:
        """The run's counts from the chunks' (default: numbers added up, key by key)."""
        total: dict[str, Any] = {}
        for stats in chunk_stats:
            add_counts(total, stats)
        return total

    @classmethod
    def summary_lines(cls, stats: dict[str, Any]) -> list[str]:
        """Lines of the run summary (default: each count, a counter by its total)."""
        totals = {key: value if isinstance(value, (int, float)) else _total(value)
                  for key, value in stats.items()}
        if not totals:
            return []
        return [f"{cls.name}: " + ", ".join(f"{k} {v:,}" for k, v in totals.items())]

    @classmethod
    def inspect_lines(cls, view: DatasetView) -> list[str]:
        """Lines of `datagen inspect` (default: rows and columns of each table)."""
        return view.table_lines([table.name for table in cls.tables])

    @classmethod
    def card_lines(cls, stats: dict[str, Any]) -> list[str]:
        """Markdown lines of the dataset card's counts section (default: none; the columns
        of every table are listed anyway)."""
        return []


def _total(value: Any) -> float:
    if isinstance(value, Mapping):
        return sum(_total(item) for item in value.values())
    return value if isinstance(value, (int, float)) else 0


def add_counts(total: dict[str, Any], stats: Mapping[str, Any]) -> dict[str, Any]:
    """Add `stats` into `total`: numbers are summed, nested dicts recursively."""
    for key, value in stats.items():
        if isinstance(value, Mapping):
            add_counts(total.setdefault(key, {}), value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
    return total


_REGISTRY: dict[str, type[Stage]] = {}


def register_stage(cls: type[Stage]) -> type[Stage]:
    """Class decorator: make `cls` a stage. Its name must be new, and a table it shares with
    another stage must be declared with the same schema (their rows are concatenated)."""
    if not getattr(cls, "name", None) or not getattr(cls, "tables", None):
        raise ValueError(f"{cls.__qualname__} needs class attributes `name` and `tables`")
    if cls.__module__ not in _BUILTIN_MODULES:  # checked against the built-ins too
        _load_builtins()
    known = _REGISTRY.get(cls.name)
    if known is not None and known.__qualname__ != cls.__qualname__:
        raise ValueError(f"a stage named {cls.name!r} is registered already ({known.__module__})")
    others = [stage for name, stage in _REGISTRY.items() if name != cls.name]
    tables_of([*others, cls])
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def stage_classes() -> list[type[Stage]]:
    """Every registered stage: the built-ins in their order, then the others as registered."""
    _load_builtins()
    builtin = [s for m in _BUILTIN_MODULES for s in _REGISTRY.values() if s.__module__ == m]
    return builtin + [s for s in _REGISTRY.values() if s.__module__ not in _BUILTIN_MODULES]


def find_stage(name: str) -> type[Stage] | None:
    _load_builtins()
    return _REGISTRY.get(name)


def configured_stages(config: GenerateConfig) -> list[type[Stage]]:
    """The stages a run of `config` uses, in run order: the built-ins it enables, then the
    stages registered by its `env_modules`."""
    import_modules(config.env_modules)
    return [stage for stage in stage_classes()
            if (stage.__module__ in _BUILTIN_MODULES or stage.__module__ in config.env_modules)
            and stage.enabled(config)]


def tables_of(stages: Iterable[type[Stage]]) -> dict[str, Table]:
    """Table name -> Table over `stages`, checking that a shared table has one schema."""
    tables: dict[str, Table] = {}
    for stage in stages:
        for table in stage.tables:
            known = tables.setdefault(table.name, table)
            if not known.schema.equals(table.schema):
                raise ValueError(f"stage {stage.name!r} declares table {table.name!r} with "
                                 "another schema than a stage before it")
    return tables
