"""The test sessions' Ray heads leave nothing behind: a head stopped by
`tests.conftest.stop_ray_processes` has no process left, the Ray client server and the
renamed dashboard / runtime-env agents included (they outlived every session before)."""

from __future__ import annotations

import os
import shutil
import time

import psutil

from tests.conftest import ROOT, _start_head, stop_ray_processes


def _started_since(before: set[int]) -> list[psutil.Process]:
    """Processes started since `before` that no process of `before` started (the session's
    own Ray head may start workers meanwhile; this head's processes are daemons or theirs)."""
    older = before - {1, os.getpid()}
    found = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            if (proc.pid in before or proc.status() == psutil.STATUS_ZOMBIE
                    or any(parent.pid in older for parent in proc.parents())):
                continue
        except psutil.NoSuchProcess:
            continue
        found.append(proc)
    return found


def test_a_stopped_head_leaves_no_process():
    before = {p.pid for p in psutil.process_iter()}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    temp_dir, port, _ = _start_head(env)
    try:
        started = _started_since(before)
        names = " ".join(" ".join(p.info["cmdline"] or [p.info["name"]]) for p in started)
        assert "ray.util.client.server" in names and "DashboardAgent" in names, names[:2000]
    finally:
        stop_ray_processes(temp_dir, port)
        shutil.rmtree(temp_dir, ignore_errors=True)
    deadline = time.monotonic() + 10
    while (left := _started_since(before)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [" ".join(p.info["cmdline"] or [p.info["name"]])[:200] for p in left]
