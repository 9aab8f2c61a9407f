"""Benchmark scripts run as their docstrings say, from any working directory.

`python benchmarks/X.py` puts `benchmarks/`, not the repository, on `sys.path`: a script that
imports `tests.*` helpers must add the repository root itself (the editable install maps only
the four packages).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_negative_stages_counts_runs_outside_the_repo(tmp_path):
    script = ROOT / "benchmarks" / "bench_negative_stages.py"
    done = subprocess.run([sys.executable, str(script), "--n", "3", "--counts"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "per gold call" in done.stdout
    assert "step" in done.stdout


def test_native_split_charges_each_sample_to_what_its_python_frame_called(tmp_path):
    """py-spy's raw format: `frame;frame;... count`, root first. A sample is Python when its
    deepest Python frame runs its own bytecode or only the interpreter's C; a call into an
    extension is that extension's; import samples and samples outside a chunk are left out."""
    from tests.conftest import load_script

    split = load_script("benchmarks/native_split.py")
    chunk = "<module> (profile_pipeline.py:1);ChunkProcessor.process (datagen/pipeline/chunk.py:9)"
    profile = tmp_path / "spy.txt"
    profile.write_text("\n".join([
        f"{chunk};NegativeStage.run (datagen/pipeline/stages/negatives.py:3);"
        "_run_kind (mutators/mutate.py:7) 5",
        f"{chunk};NegativeStage.run (datagen/pipeline/stages/negatives.py:3);"
        "_run_kind (mutators/mutate.py:7);_PyObject_Malloc (libpython3.11.so.1.0);"
        "malloc (libc.so.6) 2",
        f"{chunk};CriticStage.run (datagen/pipeline/stages/critics.py:5);"
        "SqlEnv.reset (datagen/envs/sql.py:4);pysqlite_connection_execute (connection.c:9);"
        "sqlite3VdbeExec (libsqlite3.so.0.8.6);memcpy (libc.so.6) 3",
        f"{chunk};ShardStore.write_chunk (datagen/pipeline/shards.py:4);"
        "write_table (pyarrow/parquet/core.py:2);ZSTD_compressBlock_fast "
        "(pyarrow/libarrow.so.2600) 4",
        f"{chunk};TrajectoryStage.run (datagen/pipeline/stages/trajectories.py:1);"
        "_find_and_load (<frozen importlib._bootstrap>:1176);exec_module (x.py:1) 9",
        "<module> (other.py:1);idle (other.py:2) 7",
    ]) + "\n")
    overall, by_stage = split.split(profile)
    assert overall == {"python": 7, "sqlite": 3, "arrow": 4}
    assert by_stage["negatives"] == {"python": 7}
    assert by_stage["critics"] == {"sqlite": 3}
    assert by_stage["write"] == {"arrow": 4}
    assert "trajectories" not in by_stage
