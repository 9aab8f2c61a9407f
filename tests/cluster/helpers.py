"""A real multi-node Ray cluster on this machine, as an operator starts one: a head
(`ray start --head`, token auth, dashboard on) and worker nodes that join it with
`ray start --address ... --block`, each in its own process group so that SIGKILL of the group
is a node loss as Ray sees it (raylet, its agents and its workers die at once).

Every port is chosen free, none left at Ray's defaults, so this cluster coexists with the test
session's head and with other test runs on the host. Nothing here calls `ray.init`: the test
process may already be connected to the session's head, and a process holds one connection.
The cluster is driven from subprocesses (`ray job submit`, one probe driver).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


from tests.conftest import RAY_BIN, ROOT, stop_ray_processes
from tests.conftest import _free_port as free_port

START_TIMEOUT_S = 180  # `ray start` on a loaded 2-core machine: 10-40 s measured, more at
# load 30+
# A raylet aborts ("Timed out waiting for file .../dashboard_agent_listen_port_...") when its
# dashboard agent takes over 15 s to start (a fixed wait in Ray 2.60, seen at load 40 on 2
# cores): each `ray start` gets this many tries.
START_ATTEMPTS = 3


def _port_flags(names: tuple[str, ...]) -> list[str]:
    return [f"--{name}={free_port()}" for name in names]


# A driver that answers probes of the cluster's state, one JSON line per expression read.
_PROBER = """
import collections, json, sys, ray, ray.util.state
ADDRESS = %r
ray.init(address=ADDRESS, logging_level="ERROR", log_to_driver=False)
for line in sys.stdin:
    try:
        print("PROBE=" + json.dumps(eval(line)), flush=True)
    except Exception as exc:
        print(f"ERROR={type(exc).__name__}: {exc}", flush=True)
"""

NODE_PORTS = ("node-manager-port", "object-manager-port", "metrics-export-port",
              "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
              "runtime-env-agent-port")


@dataclass
class WorkerNode:
    """One `ray start --address ... --block` process group."""

    proc: subprocess.Popen
    resources: dict[str, float]
    node_id: str = ""

    def kill(self) -> None:
        """SIGKILL the node's whole process group: no goodbye reaches the GCS."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


@dataclass
class LocalCluster:
    """A head and the worker nodes added to it; `stop()` ends every process it started."""

    env: dict
    temp_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="rayc-", dir="/tmp"))
    address: str = ""
    dashboard: str = ""
    port: int | None = None  # the GCS port, also how its processes are found at stop()
    nodes: list[WorkerNode] = field(default_factory=list)
    _prober: subprocess.Popen | None = field(default=None, repr=False)

    def start_head(self, num_cpus: int, resources: dict[str, float] | None = None) -> None:
        """Start the head; the GCS declares a silent node dead after ~3 s instead of Ray's
        default ~15 s (health check every 3 s, 5 misses), which keeps the tests short."""
        env = dict(self.env, RAY_health_check_period_ms="1000",
                   RAY_health_check_failure_threshold="3")
        for attempt in range(1, START_ATTEMPTS + 1):
            port, dashboard_port = free_port(), free_port()
            self.port = port  # before the start: a failed one's processes are found by it
            started = subprocess.run(
                [RAY_BIN, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                 f"--temp-dir={self.temp_dir}", f"--num-cpus={num_cpus}",
                 f"--resources={json.dumps(resources or {})}", "--include-dashboard=true",
                 "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
                 f"--ray-client-server-port={free_port()}", "--disable-usage-stats",
                 *_port_flags(NODE_PORTS)],
                env=env, capture_output=True, text=True, cwd=ROOT, timeout=START_TIMEOUT_S)
            if started.returncode == 0:
                break
            self._end_processes()  # what the failed start left running, before the retry
            if attempt == START_ATTEMPTS:
                raise RuntimeError(f"ray start --head failed {attempt} times: "
                                   f"{started.stderr[-2000:]}")
        self.address = f"127.0.0.1:{port}"
        self.dashboard = f"http://127.0.0.1:{dashboard_port}"

    def add_node(self, num_cpus: int, resources: dict[str, float]) -> WorkerNode:
        """Start a worker node and wait until it is alive in the cluster (a node that died a
        moment ago may still be listed: the new one is told apart by its node id)."""
        known = set(self.alive_nodes())
        for attempt in range(1, START_ATTEMPTS + 1):
            node = self._start_node(num_cpus, resources)
            try:
                self.wait_for(lambda nodes: self._joined(node, nodes, known),
                              f"a new node with {resources} to join")
                return node
            except RuntimeError:  # its raylet aborted while starting (see START_ATTEMPTS)
                node.kill()
                if attempt == START_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _start_node(self, num_cpus: int, resources: dict[str, float]) -> WorkerNode:
        # It shares the head's temp dir, as Ray sets it up for nodes on one machine: with a
        # temp dir of its own, its raylet aborted at every start at load 40-60 (its dashboard
        # agent missed the raylet's 15 s wait), sharing it the node joined in 10-20 s.
        proc = subprocess.Popen(
            [RAY_BIN, "start", f"--address={self.address}", "--node-ip-address=127.0.0.1",
             f"--num-cpus={num_cpus}", f"--resources={json.dumps(resources)}", "--block",
             "--disable-usage-stats", *_port_flags(NODE_PORTS)],
            env=self.env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)  # own process group: killed as one
        node = WorkerNode(proc, resources)
        self.nodes.append(node)
        return node

    @staticmethod
    def _joined(node: WorkerNode, nodes: dict[str, dict[str, float]], known: set[str]) -> bool:
        """Whether `node` is alive in `nodes` (told apart from the ones `known` before it);
        raises RuntimeError if its `ray start` process ended instead."""
        name = next(iter(node.resources))
        new = [nid for nid, res in nodes.items() if nid not in known and name in res]
        if new:
            node.node_id = new[0]
            return True
        if node.proc.poll() is not None:
            raise RuntimeError(f"the node's `ray start` exited with {node.proc.returncode}")
        return False

    def alive_nodes(self) -> dict[str, dict[str, float]]:
        """Node id -> resources of the nodes the GCS thinks alive."""
        return self._probe("{n['NodeID']: n['Resources'] for n in ray.nodes() if n['Alive']}")

    def running_chunks(self) -> dict[str, int]:
        """Node id -> chunks being processed there now (ChunkWorker.process tasks running)."""
        return self._probe(
            "collections.Counter(t.node_id for t in ray.util.state.list_tasks(address=ADDRESS, "
            "filters=["
            "('name', '=', 'ChunkWorker.process'), ('state', '=', 'RUNNING')], detail=True))")

    def _probe(self, expression: str):
        """Evaluate `expression` in a driver connected to this cluster (this process may hold
        a connection to another cluster); its value comes back as JSON. One driver serves
        every probe: starting one costs seconds of CPU that a loaded machine lacks."""
        if self._prober is None or self._prober.poll() is not None:
            self._prober = subprocess.Popen(
                [sys.executable, "-u", "-c", _PROBER % self.address], env=self.env, cwd=ROOT,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True)
        self._prober.stdin.write(expression.replace("\n", " ") + "\n")
        self._prober.stdin.flush()
        line = self._prober.stdout.readline()
        while line and not line.startswith(("PROBE=", "ERROR=")):  # Ray's own output
            line = self._prober.stdout.readline()
        if not line.startswith("PROBE="):
            raise RuntimeError(f"cluster probe failed: {line[-2000:]}")
        return json.loads(line.removeprefix("PROBE="))

    def wait_for(self, condition, what: str, timeout_s: float = START_TIMEOUT_S,
                 probe=None) -> None:
        """Poll `condition(probe())` (default probe: the alive nodes) until true or timeout."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if condition((probe or self.alive_nodes)()):
                return
            time.sleep(1.0)
        raise TimeoutError(f"waited {timeout_s:g}s for {what}")

    def submit(self, entrypoint: list[str]) -> subprocess.Popen:
        """`ray job submit` of `entrypoint`. Without `--working-dir`: the nodes share one
        session dir here, and the second node's runtime-env agent re-extracted the job's
        working_dir over the head's copy, leaving the driver without its cwd (a single-machine
        artefact; `ray job submit --working-dir` itself is tested in tests/datagen/test_cli.py).
        The entrypoint finds the code through the PYTHONPATH the nodes were started with."""
        return subprocess.Popen(
            [RAY_BIN, "job", "submit", "--address", self.dashboard, "--", *entrypoint],
            cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_for_job_agent(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """A just-started head answers "No available agent to submit job" until its job agent
        has registered: submit a no-op job until one is accepted."""
        deadline = time.time() + timeout_s
        while True:
            result = subprocess.run(
                [RAY_BIN, "job", "submit", "--address", self.dashboard, "--", "python", "-c",
                 "pass"], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120)
            if result.returncode == 0 or time.time() > deadline:
                break
            time.sleep(2.0)
        if result.returncode != 0:
            raise RuntimeError(f"no job agent after {timeout_s:g}s: {result.stderr[-2000:]}")

    def stop(self) -> None:
        """Kill the worker nodes' groups, then everything of this cluster still running
        (`ray stop` would stop every Ray on the host)."""
        if self._prober is not None:
            self._prober.kill()
            self._prober.wait(timeout=30)
        for node in self.nodes:
            node.kill()
        self._end_processes()

    def _end_processes(self) -> None:
        stop_ray_processes(self.temp_dir, self.port)
