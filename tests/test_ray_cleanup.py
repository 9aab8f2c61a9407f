"""The test sessions' Ray heads leave nothing behind: a head stopped by
`tests.conftest.stop_ray_processes` has no process left, the Ray client server and the
renamed dashboard / runtime-env agents included (they outlived every session before)."""

from __future__ import annotations

import os
import shutil
import time

import psutil

from tests.conftest import ROOT, _start_head, stop_ray_processes


def _processes_of_head(temp_dir: str, port: int, before: set[int]) -> list[psutil.Process]:
    """The head's processes, found independently of how `stop_ray_processes` finds them:
    new since `before`, and naming the head's temp dir or GCS port or connected to that port
    (the renamed agents and the client server talk to the GCS). Other sessions' heads on the
    host (a parallel test run) are left out."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid in before:
            continue
        try:
            command = " ".join(proc.info["cmdline"] or [])
            talks = any(c.raddr and c.raddr.port == port
                        for c in proc.net_connections(kind="tcp"))
            if temp_dir in command or f":{port}" in command or talks:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _describe(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:200] or proc.name()
    except psutil.Error:
        return f"pid {proc.pid}"


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for_agents(temp_dir: str, port: int, before: set[int],
                     timeout_s: float = 90) -> tuple[list[psutil.Process], str]:
    """The head's processes once the client server and the dashboard agent are among them.
    They start and connect to the GCS some seconds after `ray start` returns, later on a
    loaded host (a CI run once saw neither 2 s after the start)."""
    deadline = time.monotonic() + timeout_s
    while True:
        ours = _processes_of_head(temp_dir, port, before)
        names = " ".join(_describe(p) for p in ours)
        if ("ray.util.client.server" in names and "DashboardAgent" in names
                or time.monotonic() > deadline):
            return ours, names
        time.sleep(1)


def test_a_stopped_head_leaves_no_process():
    before = {p.pid for p in psutil.process_iter()}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    temp_dir, port, _ = _start_head(env)
    try:
        ours, names = _wait_for_agents(temp_dir, port, before)
        assert "ray.util.client.server" in names and "DashboardAgent" in names, names[:2000]
    finally:
        stop_ray_processes(temp_dir, port)
        shutil.rmtree(temp_dir, ignore_errors=True)
    deadline = time.monotonic() + 10
    while (left := [p for p in ours if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [_describe(p) for p in left]
