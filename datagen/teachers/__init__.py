"""Teacher backends. `make_teacher(config)` builds the one a config names."""

from __future__ import annotations

from datagen.teachers.base import EnvPool, Teacher, failed_trajectory
from datagen.teachers.oracle import OracleTeacher

TEACHER_BACKENDS = ("oracle",)


def make_teacher(backend: str, name: str | None = None) -> Teacher:
    if backend == "oracle":
        return OracleTeacher(name or "oracle")
    raise ValueError(f"unknown teacher backend {backend!r}; allowed: {', '.join(TEACHER_BACKENDS)}")


__all__ = ["EnvPool", "Teacher", "OracleTeacher", "failed_trajectory", "make_teacher",
           "TEACHER_BACKENDS"]
