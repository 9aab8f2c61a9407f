"""The `cluster` fixture: a real multi-node Ray cluster on this machine (see helpers.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.cluster.helpers import LocalCluster
from tests.conftest import ROOT

HEAD_CPUS = 1  # one chunk worker on the head: it carries the run when the other node is gone


@pytest.fixture(scope="module")
def cluster():
    """A token-authenticated head with the dashboard on; tests add and kill worker nodes."""
    # The venv's bin first on PATH: a job's `python ...` entrypoint must find this interpreter.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    local = LocalCluster(dict(os.environ, PYTHONPATH=str(ROOT), PATH=path))
    try:
        local.start_head(num_cpus=HEAD_CPUS)
        local.wait_for_job_agent()
        yield local
    finally:
        local.stop()
