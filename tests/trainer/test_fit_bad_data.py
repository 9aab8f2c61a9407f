"""A shard row that breaks the data contract ends a real `trainer fit` with one line naming
the shard, the row id, the column and the problem, without advice to rerun (a rerun fails
the same way): the reader stage's DataError reaches the driver through Ray Data and Ray
Train (trainer.fit.original_map_errors, root_error)."""

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


def test_a_bad_row_fails_the_fit_with_one_line_naming_it(pipeline_out, trainer_tokenizer,
                                                          tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(pipeline_out, out)
    for table in ("repairs", "preferences", "consistency"):  # trajectories alone: a short feed
        shutil.rmtree(out / table, ignore_errors=True)
    row_id = _with_unknown_span_kind(out)
    code = main(["fit", "--config", str(ROOT / "configs" / "train_tiny.yaml"),
                 "--set", f"shards={out}", "--set", f"tokenizer={trainer_tokenizer}",
                 "--set", f"run_dir={tmp_path / 'run'}", "--set", "run.max_steps=2",
                 "--set", "run.progress=false", "--set", "data.max_seq_len=256"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 1
    assert last.startswith(f"training failed: bad data: {out}/trajectories/part-000000.parquet: "
                           f"row id={row_id!r} (row 0): column 'spans' has a span of unknown "
                           f"kind 'BOGUS'"), last
    assert "rerun" not in last
