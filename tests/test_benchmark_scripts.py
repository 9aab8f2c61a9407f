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
