"""FAKES for the engine-placement tests, importable by Ray workers through `env_modules`: the
`vllm` teacher with the fake engine (no model is loaded; the tests give it second-long
`teacher.vllm.place_timeout_s` / `start_timeout_s`), and engine actors whose engine never
finishes starting or fails to."""

from __future__ import annotations

import asyncio

from datagen.teachers.registry import register_backend
from datagen.teachers.vllm_engine import VLLMTeacher
from tests.datagen.teachers.engine_fakes import FakeSlowEngineActor, FakeSlowEngineTeacher

SHORT_WAIT_S = 2.0  # the tests' place_timeout_s and start_timeout_s (the defaults are minutes)


class FakeNeverStartingEngineActor(FakeSlowEngineActor):
    """Placed at once; its engine never reports ready (a load that hangs)."""

    async def ready(self) -> dict:
        await asyncio.sleep(3600)
        return {}


class FakeFailingStartEngineActor(FakeSlowEngineActor):
    """Placed at once; its engine's start raises, with a message of several lines (as a model
    that does not load would)."""

    async def ready(self) -> dict:
        raise RuntimeError("the engine did not load\n  (details over several lines)")


class FakeNeverStartingEngineTeacher(VLLMTeacher):
    engine_class = FakeNeverStartingEngineActor


class FakeFailingStartEngineTeacher(VLLMTeacher):
    engine_class = FakeFailingStartEngineActor


register_backend("fake_slow_vllm", lambda config, work_dir: FakeSlowEngineTeacher(config),
                 "vllm", "FAKE: the vllm client with a fake engine that loads no model (tests)")
