"""The GPU learning self-check's code path (oracle data, a `lines` tokenizer, a teacher
trained with SFT, students distilled with sft / token_kd / sad from library functions,
held-out step metrics and episodes) at smoke size on CPU, as the GPU machine runs it, with
Ray, vLLM and DeepSpeed made unimportable (the GPU image has PyTorch + Transformers only)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "gpu" / "selfcheck_learning.py"
# None in sys.modules makes `import ray` (and its submodules) raise ImportError.
WITHOUT_RAY_VLLM_DEEPSPEED = (
    "import runpy, sys\n"
    "for name in ('ray', 'vllm', 'deepspeed'):\n"
    "    sys.modules[name] = None\n"
    f"sys.argv = [{str(SCRIPT)!r}] + sys.argv[1:]\n"
    f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n")


def test_learning_selfcheck_smoke_passes_on_cpu_without_ray_vllm_deepspeed():
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_RAY_VLLM_DEEPSPEED, "--device", "cpu", "--smoke",
         "--seeds", "0", "--budget-s", "100000"],  # a loaded CI host must not skip episodes
        capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    summary = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("{")))
    rows = summary["rows"]
    assert not summary["failures"]
    assert set(rows) == {"untrained", "teacher", "sft", "token_kd", "sad"}
    assert all(math.isfinite(r["nats_per_char"]) for arm in rows.values() for r in arm)
    assert all("success_rate" in r for arm in ("teacher", "sft", "token_kd", "sad") for r in rows[arm])
    assert "PASS" in completed.stdout.splitlines()[-1]
