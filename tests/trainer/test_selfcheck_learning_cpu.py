"""The GPU learning self-check's code path (oracle data, a `lines` tokenizer, a teacher
trained with SFT, students distilled with sft / token_kd / sad from library functions,
held-out step metrics and episodes) at smoke size on CPU, as the GPU machine runs it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_learning_selfcheck_smoke_passes_on_cpu():
    completed = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "gpu" / "selfcheck_learning.py"), "--device", "cpu",
         "--smoke", "--seeds", "0"], capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    summary = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("{")))
    rows = summary["rows"]
    assert not summary["failures"]
    assert set(rows) == {"untrained", "teacher", "sft", "token_kd", "sad"}
    assert all(math.isfinite(r["nats_per_char"]) for arm in rows.values() for r in arm)
    assert all("success_rate" in r for arm in ("teacher", "sft", "token_kd", "sad") for r in rows[arm])
