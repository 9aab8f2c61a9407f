"""A shard row that breaks the data contract ends a real `trainer fit` with one line naming
the shard, the row id, the column and the problem, without advice to rerun (a rerun fails
the same way): the reader stage's DataError reaches the driver through Ray Data and Ray
Train (trainer.fit.original_map_errors, root_error). The unknown-span-kind row's fit is
tests/trainer/test_fit_not_retried.py's (with restarts allowed) and test_fit_console.py's
(the CLI's whole stderr); helpers here serve both."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from trainer.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def _with_unknown_span_kind(out: Path) -> str:
    """Row 0 of the first trajectory shard gets a span of kind BOGUS; its id."""
    shard = out / "trajectories" / "part-000000.parquet"
    table = pq.read_table(shard)
    spans = table.column("spans").to_pylist()
    spans[0][1]["kind"] = "BOGUS"
    index = table.column_names.index("spans")
    pq.write_table(table.set_column(index, table.field(index),
                                    pa.array(spans, table.field(index).type)), shard)
    return table.column("id")[0].as_py()


def _fit(out, tokenizer, tmp_path, capsys, *overrides: str) -> tuple[int, str]:
    """`trainer fit` of train_tiny.yaml for 2 steps on `out`: exit code, last stderr line."""
    sets = [f"shards={out}", f"tokenizer={tokenizer}", f"run_dir={tmp_path / 'run'}",
            "run.max_steps=2", "run.progress=false", *overrides]
    code = main(["fit", "--config", str(ROOT / "configs" / "train_tiny.yaml"),
                 *[arg for value in sets for arg in ("--set", value)]])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def test_a_repairs_column_of_another_type_is_refused_before_training(pipeline_out,
                                                                     trainer_tokenizer,
                                                                     tmp_path, capsys):
    """A repairs shard whose spans hold `start` as text (another struct than the contract's)
    trained silently here (exit 0: NumPy read the texts as numbers), and failed minutes in,
    in a Ray Data worker, where a pool mixed its rows with another chunk's ("ArrowInvalid:
    Schema at index 1 was different", advising a rerun); now the footer check stops it
    before any work: one line naming the shard, the column, its type and the contract's."""
    out = tmp_path / "out"
    shutil.copytree(pipeline_out, out)
    for table in ("preferences", "consistency"):
        shutil.rmtree(out / table, ignore_errors=True)
    shard = out / "repairs" / "part-000001.parquet"
    table = pq.read_table(shard)
    span_type = table.schema.field("spans").type.value_type
    text_start = pa.list_(pa.struct([field.with_type(pa.string()) if field.name == "start"
                                     else field for field in span_type]))
    spans = [[dict(span, start=str(span["start"])) for span in row]
             for row in table.column("spans").to_pylist()]
    pq.write_table(table.set_column(table.column_names.index("spans"), "spans",
                                    pa.array(spans, text_start)), shard)
    code, last = _fit(out, trainer_tokenizer, tmp_path, capsys,
                      "data.tables=[trajectories, repairs]")
    assert code == 2
    assert last == (f"cannot train: {shard}: columns of another type than the data contract's: "
                    f"spans is list<element: struct<kind: string, start: string, end: int32, "
                    f"step: int16>>, not list<struct<kind: string, start: integer, end: "
                    f"integer>>"), last
