"""The teacher-backend registry: datagen's four backends are registered, a package adds its
own without datagen importing it (the trainer's `policy`), configs are checked against what
is registered, and a registered backend runs through the shared episode loop."""

from __future__ import annotations

import pytest

from datagen.teachers import make_teacher, registry
from datagen.teachers.config import HFConfig, TeacherConfig
from datagen.teachers.episode import Generation, TurnBackend, TurnRequest
from datagen.teachers.llm import LLMTeacher
from datagen.teachers.base import EnvPool
from datagen.tasks import TaskSource


class AnswerOnlyFakeModel(TurnBackend):
    """A stand-in for a model: every turn is the same final answer."""

    async def generate(self, request: TurnRequest) -> Generation:
        return Generation(text="Final answer: 42")


def _answer_teacher(config: TeacherConfig, work_dir: str | None) -> LLMTeacher:
    return LLMTeacher(config, AnswerOnlyFakeModel())


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))


def test_datagen_registers_its_own_backends():
    assert {"oracle", "hf", "openai", "vllm"} <= set(registry.registered_backends())
    assert registry.backend_spec("hf").section == "hf"
    assert registry.backend_spec("oracle").section is None
    assert make_teacher("oracle").name == "oracle"


def test_a_registered_backend_is_configured_and_played(scratch_registry):
    registry.register_backend("answer", _answer_teacher, section=None)
    teacher = make_teacher(TeacherConfig(backend="answer", name="fake"))
    tasks = TaskSource(("sql",), (1.0,), seed=0, count=2).generate(0, 2, EnvPool())
    trajectories = teacher.rollout_batch(tasks)
    assert [t.teacher for t in trajectories] == ["fake", "fake"]
    # the shared loop parsed the answer and ran the environment's checker on it
    assert all(t.steps[0].answer == "42" and t.error_kind == "wrong_answer" for t in trajectories)


def test_config_names_the_registered_backends_and_the_section(scratch_registry):
    with pytest.raises(ValueError, match="unknown teacher backend 'answer'; registered: 'oracle'"):
        TeacherConfig(backend="answer")
    registry.register_backend("answer_hf", _answer_teacher, section="hf")
    with pytest.raises(ValueError, match="teacher.hf is required when teacher.backend is "
                                         "'answer_hf'"):
        TeacherConfig(backend="answer_hf")
    with pytest.raises(ValueError, match="teacher.hf is set but teacher.backend is 'oracle'"):
        TeacherConfig(backend="oracle", hf=HFConfig(model="m"))
    config = TeacherConfig(backend="answer_hf", hf=HFConfig(model="m", tokenizer="tok"))
    assert config.teacher_tokenizer() == "tok"
    with pytest.raises(ValueError, match="needs its config section"):
        make_teacher("answer_hf")


def test_registering_a_name_twice_is_refused(scratch_registry):
    registry.register_backend("answer", _answer_teacher, section=None)
    registry.register_backend("answer", _answer_teacher, section=None)  # same factory: fine

    def other(config, work_dir):
        return _answer_teacher(config, work_dir)

    with pytest.raises(ValueError, match="already registered"):
        registry.register_backend("answer", other, section=None)
    registry.register_backend("answer", other, section=None, replace=True)
    with pytest.raises(ValueError, match="section 'gpu'"):
        registry.register_backend("x", other, section="gpu")
