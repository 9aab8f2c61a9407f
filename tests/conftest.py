"""Shared fixtures: one local Ray head per test session (started only if a test needs it),
and a tiny tokenizer trained on generated text."""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RAY_BIN = str(Path(sys.executable).with_name("ray"))

# Token auth for the whole session, set before anything imports Ray: Ray reads the auth mode
# once, and a driver without the token is refused by a head that has one.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))
# Ray Train's controller polls its workers every 2 s and takes several polls to wind a fit
# down: ~5 s of every fit's ~25 s here (a 2-step SAD fit, 28 -> 23 s). A missed poll only
# waits on (a worker is declared dead after 10 minutes), so a short interval is safe.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")
# Every fit starts ~7 actor processes (controller, placement-group cleaner, synchronisation,
# dataset manager, split coordinator, the train worker, Ray 2.60's preemption watcher), each
# ~3 s of CPU to start on this 2-core host. The watcher reacts to node drains (spot notices),
# which no test sends: off here, one process less per fit (~45 fits a run). Users keep it.
os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
# As `trainer.fit.job_env_vars` does for a fit: tests that run Ray Data in this process would
# otherwise start its usage poller, whose daemon thread can print a traceback at exit.
os.environ.setdefault("RAY_DATA_USAGE_DISABLED", "1")


def load_script(relative: str):
    """A benchmark or script of the repository (not a package) imported by its path, e.g.
    `load_script("benchmarks/dpo_effect.py")`; registered in sys.modules under its stem, as
    dataclasses look their module up there."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class RayHead:
    address: str        # GCS address for ray.init / --address
    dashboard: str      # http address for `ray job submit`
    env: dict           # environment with the auth token, for subprocesses


def submit_to_head(head: RayHead, command: list[str], env: dict | None = None,
                   timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a command that submits a Ray job to `head` (`ray job submit`, cluster/submit.sh);
    retried while a just-started head answers 500 because its job agent has not registered
    yet (the job was not created, so retrying submits it once)."""
    for _ in range(12):
        result = subprocess.run(command, cwd=ROOT, env=env or head.env, capture_output=True,
                                text=True, timeout=timeout)
        if "No available agent to submit job" not in result.stderr + result.stdout:
            break
        time.sleep(5)
    return result


def ray_job_submit(head: RayHead, *options: str, entrypoint: list[str],
                   timeout: float = 300) -> subprocess.CompletedProcess:
    """`ray job submit --working-dir . [options] -- entrypoint` against `head`, as a user runs
    it (the CLI reads the token from the environment)."""
    return submit_to_head(head, [RAY_BIN, "job", "submit", "--address", head.dashboard,
                                 "--working-dir", ".", *options, "--", *entrypoint],
                          timeout=timeout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory):
    """A Ray head started as a cluster operator would (`ray start --head`, token auth on);
    tests connect to it in-process, from CLI subprocesses, and with `ray job submit`."""
    # The venv's bin first on PATH: a job's `python ...` entrypoint must find this interpreter.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=path)
    temp_dir, port, dashboard_port = _start_head(env)
    head = RayHead(f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard_port}", env)
    import ray

    try:
        # Workers' output stays in the session's logs: forwarded to this driver it lands in
        # whichever test's capture is open (a worker's exit noise broke an exact stderr check).
        ray.init(address=head.address, logging_level="WARNING", log_to_driver=False)
        yield head
    finally:
        ray.shutdown()
        stop_ray_processes(temp_dir, port)
        shutil.rmtree(temp_dir, ignore_errors=True)


HEAD_START_ATTEMPTS = 3
STOP_GRACE_S = 2


def _start_head(env: dict) -> tuple[str, int, int]:
    """`ray start --head` on fresh ports; (temp dir, GCS port, dashboard port). On a loaded host
    the raylet can give up waiting for its agents (a fixed ~30 s in Ray): the failed attempt's
    processes are stopped (they would outlive the session) and it is tried again."""
    for _ in range(HEAD_START_ATTEMPTS):
        # Every port chosen here, none left at Ray's fixed defaults: another Ray on the host (a
        # developer's, a second test run) holding 52365 leaves this head without a job agent.
        port, dashboard_port, agent_port, agent_grpc, metrics, client = (_free_port() for _ in range(6))
        temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: socket paths are capped
        started = subprocess.run(
            [RAY_BIN, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
             f"--temp-dir={temp_dir}", "--num-cpus=2",
             "--include-dashboard=true", "--dashboard-host=127.0.0.1",
             f"--dashboard-port={dashboard_port}", f"--dashboard-agent-listen-port={agent_port}",
             f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
             f"--ray-client-server-port={client}",
             "--disable-usage-stats"],
            env=env, capture_output=True, text=True, cwd=ROOT)
        if started.returncode == 0:
            return temp_dir, port, dashboard_port
        stop_ray_processes(temp_dir, port)
        shutil.rmtree(temp_dir, ignore_errors=True)
    raise RuntimeError(f"`ray start --head` failed {HEAD_START_ATTEMPTS} times; last output:\n"
                       f"{(started.stdout + started.stderr)[-2000:]}")


def stop_ray_processes(temp_dir: str, port: int | None) -> None:
    """Stop one Ray cluster only (`ray stop` would stop every Ray on the host): the processes
    that name its temp dir or its GCS port (the Ray client server names only the port, with
    the host's IP, not 127.0.0.1) and everything they started (the dashboard and runtime-env
    agents rename themselves). Matching the temp dir alone left three processes behind per
    session, one of them holding the client server's port."""
    import psutil

    def ours(proc: psutil.Process) -> bool:
        parts = proc.info["cmdline"] or []
        return any(temp_dir in part or (port is not None and part.endswith(f":{port}"))
                   for part in parts)

    roots = [p for p in psutil.process_iter(["cmdline"]) if ours(p)]
    tree = {p.pid: p for p in roots}
    for root in roots:
        try:
            tree.update((child.pid, child) for child in root.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    for proc in tree.values():
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    # The raylet, the GCS, the runtime-env agent and the autoscaler monitor were still up 10 s
    # after SIGTERM in every stop measured (their graceful shutdown); a test's cluster is
    # thrown away and needs none of it, so the grace is short.
    _, alive = psutil.wait_procs(list(tree.values()), timeout=STOP_GRACE_S)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory):
    """A 1k-token byte-level BPE with Qwen2.5 special tokens, trained on oracle trajectories."""
    from datagen.tokenizer import build_bpe_tokenizer
    from tests.datagen.helpers import oracle_texts

    out = tmp_path_factory.mktemp("tokenizer")
    build_bpe_tokenizer(oracle_texts(60), vocab_size=1000, out_dir=out)
    return out


@pytest.fixture
def clean_out(tmp_path):
    out = tmp_path / "out"
    yield out
    shutil.rmtree(out, ignore_errors=True)
