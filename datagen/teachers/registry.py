"""The teacher-backend registry: how `make_teacher` finds the backend a config names.

A backend is a name, the config sub-section it reads (`hf`, `openai`, `vllm`, or none) and
a factory `(TeacherConfig, work_dir) -> Teacher`. datagen registers its own four here;
another package adds one with `register_backend` when it is imported - the trainer registers
`policy` (a checkpoint of the modified model decoding with its modifications active, in
trainer.agent_backend) - so datagen never imports the trainer, and the trainer never needs
datagen's internals to plug its policy into the episode loop.

Factories import their heavy stack (torch, vLLM, an HTTP client) only when called; this module
imports nothing of it, so `datagen.teachers.config` can validate backend names against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from datagen.teachers.base import Teacher
    from datagen.teachers.config import TeacherConfig

TeacherFactory = Callable[["TeacherConfig", "str | None"], "Teacher"]
SECTIONS = ("hf", "openai", "vllm")  # the backend sub-sections TeacherConfig has


@dataclass(frozen=True)
class BackendSpec:
    """One registered backend: its name, the config section it reads (None: none) and what
    builds it."""

    name: str
    section: str | None
    factory: TeacherFactory
    description: str = ""


_BACKENDS: dict[str, BackendSpec] = {}


def register_backend(name: str, factory: TeacherFactory, section: str | None,
                     description: str = "", replace: bool = False) -> BackendSpec:
    """Make `name` a teacher backend. Registering a name twice is refused unless `replace`
    (a second import of the same module re-registers the same factory: allowed)."""
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"backend name {name!r} must be a non-empty identifier")
    if section is not None and section not in SECTIONS:
        raise ValueError(f"backend {name!r}: section {section!r} is not one of {SECTIONS}")
    existing = _BACKENDS.get(name)
    spec = BackendSpec(name, section, factory, description)
    if existing is not None and not replace and existing.factory is not factory \
            and _qualname(existing.factory) != _qualname(factory):
        raise ValueError(f"teacher backend {name!r} is already registered "
                         f"({_qualname(existing.factory)})")
    _BACKENDS[name] = spec
    return spec


def _qualname(factory: Callable) -> str:
    return f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', '?')}"


def backend_spec(name: str) -> BackendSpec:
    """The registered backend `name`; the error lists the registered ones."""
    spec = _BACKENDS.get(name)
    if spec is None:
        raise ValueError(f"unknown teacher backend {name!r}; registered: "
                         f"{', '.join(map(repr, registered_backends()))} (a backend of another "
                         f"package is registered when that package's module is imported, e.g. "
                         f"'policy' by trainer.agent_backend)")
    return spec


def registered_backends() -> tuple[str, ...]:
    return tuple(_BACKENDS)


# -- datagen's own backends ------------------------------------------------------------------

def _oracle(config: "TeacherConfig", work_dir: str | None) -> "Teacher":
    from datagen.teachers.oracle import OracleTeacher

    return OracleTeacher(config.name or "oracle")


def _hf(config: "TeacherConfig", work_dir: str | None) -> "Teacher":
    from datagen.teachers.hf import make_hf_teacher

    return make_hf_teacher(config)


def _openai(config: "TeacherConfig", work_dir: str | None) -> "Teacher":
    from datagen.teachers.openai_client import make_openai_teacher

    return make_openai_teacher(config, work_dir)


def _vllm(config: "TeacherConfig", work_dir: str | None) -> "Teacher":
    from datagen.teachers.vllm_engine import VLLMTeacher

    return VLLMTeacher(config)


register_backend("oracle", _oracle, None, "scripted gold-solution teacher (CPU)")
register_backend("hf", _hf, "hf", "Transformers model in the worker, batched across episodes")
register_backend("openai", _openai, "openai", "OpenAI-compatible chat-completions endpoint")
register_backend("vllm", _vllm, "vllm", "vLLM engines held by Ray actors")
