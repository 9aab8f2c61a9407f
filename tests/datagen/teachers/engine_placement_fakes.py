"""FAKES for the engine-placement tests, importable by Ray workers through `env_modules`: the
`vllm` teacher with second-long bounds on its wait for the engines (the real ones are minutes),
and an engine actor whose engine never finishes starting. No model is loaded."""

from __future__ import annotations

import asyncio

from datagen.teachers.registry import register_backend
from datagen.teachers.vllm_engine import VLLMTeacher
from tests.datagen.teachers.engine_fakes import FakeSlowEngineActor

SHORT_WAIT_S = 2.0


class FakeNeverStartingEngineActor(FakeSlowEngineActor):
    """Placed at once; its engine never reports ready (a load that hangs)."""

    async def ready(self) -> dict:
        await asyncio.sleep(3600)
        return {}


class FakeShortWaitEngineTeacher(VLLMTeacher):
    """The real client with the fake engine and SHORT_WAIT_S for both waits."""

    engine_class = FakeSlowEngineActor
    place_timeout_s = start_timeout_s = SHORT_WAIT_S


class FakeNeverStartingEngineTeacher(FakeShortWaitEngineTeacher):
    engine_class = FakeNeverStartingEngineActor


register_backend("fake_short_wait_vllm", lambda config, work_dir: FakeShortWaitEngineTeacher(
    config), "vllm", "FAKE: the vllm client with second-long waits for its engines (tests)")
