"""Same seed, same negatives: in one process and across processes with different hash seeds
(no set iteration over strings, no hash())."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mutators import ALL_KINDS, mutate
from tests.mutators.fake_crm_env import CREATE_TICKET, CRM_TOOLS

ROOT = Path(__file__).resolve().parents[2]
CALL = {"name": "create_ticket", "arguments": {"customer_id": "C-1001", "title": "Login",
                                               "priority": "high", "due_date": "2024-05-01"}}
SCRIPT = """
import orjson
from mutators import ALL_KINDS, mutate
from tests.mutators.fake_crm_env import CREATE_TICKET, CRM_TOOLS
from tests.mutators.test_determinism import CALL
rows = [n.to_dict() for seed in range(25)
        for n in mutate(CALL, CREATE_TICKET, seed, other_tools=CRM_TOOLS, kinds=ALL_KINDS)]
print(orjson.dumps(rows).decode())
"""


def test_same_seed_same_negatives():
    first = mutate(CALL, CREATE_TICKET, 7, other_tools=CRM_TOOLS, kinds=ALL_KINDS)
    second = mutate(CALL, CREATE_TICKET, 7, other_tools=CRM_TOOLS, kinds=ALL_KINDS)
    assert [n.to_dict() for n in first] == [n.to_dict() for n in second]


def test_seeds_differ():
    outputs = {str([n.to_dict() for n in mutate(CALL, CREATE_TICKET, seed)]) for seed in range(10)}
    assert len(outputs) > 5


def test_same_across_processes_and_hash_seeds():
    outputs = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] and len(outputs[0]) > 1000
