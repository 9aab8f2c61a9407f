"""Stand-ins for a vLLM engine inside the real engine actor, for the engine-death tests: the
actor, its Ray options (`max_restarts`), the client's resend and the episode runner are the
real ones; only the model is replaced by scripted text at a fixed pace, so a test can kill
the actor while episodes are in flight without a 30-150 s vLLM start per incarnation."""

from __future__ import annotations

import asyncio
import os

from datagen.envs import make_env
from datagen.teachers.config import TeacherConfig
from datagen.teachers.episode import EnvLeases, EpisodeRunner, Generation, TurnBackend, TurnRequest
from datagen.teachers.vllm_engine import VLLMEngineActor, VLLMTeacher

TURN_S = 5.0  # a fake turn's latency: a batch of episodes stays in flight for seconds


class FakeSlowTextBackend(TurnBackend):
    """Answers every turn with a wrong final answer after TURN_S; counts the turns started."""

    def __init__(self) -> None:
        self.turns_started = 0

    def describe(self) -> dict:
        return {"backend": "fake-slow-engine", "pid": os.getpid()}

    async def generate(self, request: TurnRequest) -> Generation:
        self.turns_started += 1
        await asyncio.sleep(TURN_S)
        return Generation(text="Final answer: (fake engine)", seconds=TURN_S)


class FakeSlowEngineActor(VLLMEngineActor):
    """The engine actor with the fake backend; `pid` and `turns_started` let a test aim."""

    backend_class: type = FakeSlowTextBackend

    def __init__(self, config_json: str) -> None:
        self.config = TeacherConfig.model_validate_json(config_json)
        self.backend = self.backend_class()
        self.runner = EpisodeRunner(self.backend, self.config, self.config.name or "fake",
                                    EnvLeases(make_env))

    async def pid(self) -> int:
        return os.getpid()

    async def turns_started(self) -> int:
        return self.backend.turns_started


class FakeCountingBackend(FakeSlowTextBackend):
    """Turns of `pace_s` that end the episode with a (wrong) final answer; records the
    episodes whose turns started, in order, and the most turns in flight at once."""

    def __init__(self, pace_s: float = 0.1) -> None:
        super().__init__()
        self.pace_s, self.live, self.most_live = pace_s, 0, 0
        self.started: list[str] = []  # episode keys

    async def generate(self, request: TurnRequest) -> Generation:
        self.turns_started += 1
        self.started.append(request.key.rsplit(":", 1)[0])
        self.live += 1
        self.most_live = max(self.most_live, self.live)
        try:
            await asyncio.sleep(self.pace_s)
            return Generation(text="Final answer: (fake engine)", seconds=self.pace_s)
        finally:
            self.live -= 1


class FakeCountingEngineActor(FakeSlowEngineActor):
    """The engine actor with the counting backend (`most_in_flight`)."""

    backend_class = FakeCountingBackend

    async def most_in_flight(self) -> int:
        return self.backend.most_live


class FakeCrashingEngineActor(FakeSlowEngineActor):
    """An engine that dies (its process exits) on every batch, as a crashing engine would."""

    async def rollout_batch(self, tasks, round_=0):
        os._exit(1)


class FakeSlowEngineTeacher(VLLMTeacher):
    engine_class = FakeSlowEngineActor


class FakeCountingEngineTeacher(VLLMTeacher):
    engine_class = FakeCountingEngineActor


class FakeCrashingEngineTeacher(VLLMTeacher):
    engine_class = FakeCrashingEngineActor


def fake_engine_config(name: str) -> TeacherConfig:
    """A `vllm` teacher config for the fakes: no GPU, no CPU reserved (the session head's two
    CPUs stay for chunk workers)."""
    return TeacherConfig(backend="vllm", name=name,
                         vllm={"model": "fake-engine", "num_gpus": 0, "num_cpus": 0},
                         episode={"max_turns": 2, "max_total_tokens": 4096,
                                  "max_concurrent_episodes": 32})
