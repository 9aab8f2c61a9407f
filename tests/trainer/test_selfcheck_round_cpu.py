"""The GPU round self-check's code path (round 0: SAD on oracle trajectories and a held-out
score; round 1: the student's own rollouts on fresh tasks, rule-critic repairs from the first
wrong step, SAD on repairs + replay, the same held-out score) at smoke size on CPU, with Ray,
vLLM and DeepSpeed made unimportable as on the GPU machine."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "gpu" / "selfcheck_round.py"
WITHOUT_RAY_VLLM_DEEPSPEED = (  # None in sys.modules makes `import ray` raise ImportError
    "import runpy, sys\n"
    "for name in ('ray', 'vllm', 'deepspeed'):\n"
    "    sys.modules[name] = None\n"
    f"sys.argv = [{str(SCRIPT)!r}] + sys.argv[1:]\n"
    f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n")


def test_round_selfcheck_smoke_passes_on_cpu_without_ray_vllm_deepspeed():
    completed = subprocess.run([sys.executable, "-c", WITHOUT_RAY_VLLM_DEEPSPEED, "--device", "cpu",
                                "--smoke"], capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    summary = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("{")))
    assert not summary["failures"]
    round0, round1 = summary["rounds"]
    assert (round0["round"], round1["round"]) == (0, 1)
    # both rounds scored on the same held-out tasks, none of them a training or student task
    assert round0["heldout_ids"] == round1["heldout_ids"]
    assert all(task_id.startswith("heldout-") for task_id in round0["heldout_ids"])
    # round 1 trained on the student's repaired failures plus the replay share of round 0
    assert round1["failed"] >= round1["repairs"] > 0
    assert round1["train_rows"] == round1["repairs"] + round1["replay_rows"]
    assert round1["replay_rows"] == round1["repairs"]  # replay share 0.5 of the mix
    for row in (round0, round1):
        assert math.isfinite(row["nats_per_char"]) and "success_rate" in row
        assert row["last_loss"] < row["first_loss"]
    assert "PASS" in completed.stdout.splitlines()[-1]
