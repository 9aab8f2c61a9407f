"""Teacher backends. `make_teacher(config)` builds the one a config names, through the
backend registry (datagen.teachers.registry): datagen registers oracle, hf, openai and vllm;
other packages register theirs (the trainer's `policy`) when imported.

LLM backends are imported only when chosen: each pulls in its own heavy stack (torch and
Transformers, vLLM, an HTTP client).
"""

from __future__ import annotations

from datagen.teachers.base import EnvPool, Teacher, failed_trajectory
from datagen.teachers.config import TEACHER_BACKENDS, TeacherConfig
from datagen.teachers.oracle import OracleTeacher
from datagen.teachers.registry import backend_spec, register_backend, registered_backends


def make_teacher(backend: str | TeacherConfig, name: str | None = None,
                 work_dir: str | None = None) -> Teacher:
    """The teacher a config names (a bare backend name works for backends that read no
    config section, i.e. `oracle`). `work_dir` is the run's output directory, where the
    openai request cache lives by default."""
    if isinstance(backend, TeacherConfig):
        return backend_spec(backend.backend).factory(backend, work_dir)
    spec = backend_spec(backend)
    if spec.section is not None:
        raise ValueError(f"teacher backend {backend!r} needs its config section "
                         f"(teacher.{spec.section}); pass the TeacherConfig")
    return spec.factory(TeacherConfig(backend=backend, name=name), work_dir)


__all__ = ["EnvPool", "Teacher", "OracleTeacher", "TeacherConfig", "failed_trajectory",
           "make_teacher", "register_backend", "registered_backends", "TEACHER_BACKENDS"]
