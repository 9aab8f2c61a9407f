"""Teacher backends. `make_teacher(config)` builds the one a config names.

LLM backends are imported only when chosen: each pulls in its own heavy stack (torch and
Transformers, vLLM, an HTTP client).
"""

from __future__ import annotations

from datagen.teachers.base import EnvPool, Teacher, failed_trajectory
from datagen.teachers.config import TEACHER_BACKENDS, TeacherConfig
from datagen.teachers.oracle import OracleTeacher


def make_teacher(backend: str | TeacherConfig, name: str | None = None,
                 work_dir: str | None = None) -> Teacher:
    """The teacher a config names (a bare backend name works for `oracle`). `work_dir` is the
    run's output directory, where the openai request cache lives by default."""
    config = backend if isinstance(backend, TeacherConfig) else None
    backend = config.backend if config is not None else backend
    if backend == "oracle":
        return OracleTeacher((config.name if config else None) or name or "oracle")
    if backend not in TEACHER_BACKENDS:
        raise ValueError(f"unknown teacher backend {backend!r}; allowed: "
                         f"{', '.join(TEACHER_BACKENDS)}")
    if config is None:
        raise ValueError(f"teacher backend {backend!r} needs its config section "
                         f"(teacher.{backend}); pass the TeacherConfig")
    if backend == "hf":
        from datagen.teachers.hf import make_hf_teacher

        return make_hf_teacher(config)
    if backend == "openai":
        from datagen.teachers.openai_client import make_openai_teacher

        return make_openai_teacher(config, work_dir)
    from datagen.teachers.vllm_engine import VLLMTeacher

    return VLLMTeacher(config)


__all__ = ["EnvPool", "Teacher", "OracleTeacher", "TeacherConfig", "failed_trajectory",
           "make_teacher", "TEACHER_BACKENDS"]
