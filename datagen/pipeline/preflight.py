"""What a chunk worker needs before it can run a chunk, checked where the chunk will run.

Workers on an existing cluster do not share the submitting shell's working directory or
environment, nor (unless it is shared storage) its disk. The driver therefore makes every path
absolute (`resolve_paths`) and writes a probe file into OUT; each worker, before it gets a
chunk, checks that it sees that probe and can write next to it, that the API-key variables the
config names are set, that local model and tokenizer paths exist and that `env_modules`
import (`worker_problems`). A problem is reported with how to fix it, instead of every chunk
failing (or shards landing on a disk the driver never reads).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from datagen.config import GenerateConfig
from datagen.envs import import_modules

ENV_HELP = ("workers do not inherit the submitting shell's environment: pass it with "
            "`ray job submit --runtime-env-json '{\"env_vars\": {\"%s\": \"...\"}}'`, from a "
            "Kubernetes Secret in the worker pods' env (cluster/), or set it in the nodes' "
            "environment before `ray start`")
PATH_HELP = ("put it on storage every node mounts at the same path (or ship it with "
             "`ray job submit --working-dir`)")
MODULE_HELP = ("ship it with `ray job submit --working-dir .` (or runtime_env py_modules) or "
               "install it in the worker image")
OUT_HELP = ("on a multi-node cluster OUT must be a filesystem every node mounts at the same "
            "path (NFS, a shared volume); pass an absolute --out on it")

# (section path, field) of every local path a worker loads; sections may be absent.
MODEL_PATHS = (((), "tokenizer"), (("teacher", "hf"), "model"), (("teacher", "hf"), "tokenizer"),
               (("teacher", "vllm"), "model"), (("teacher", "vllm"), "tokenizer"),
               (("teacher", "openai"), "tokenizer"), (("critics", "llm", "hf"), "model"),
               (("critics", "llm", "hf"), "tokenizer"), (("critics", "llm", "openai"), "tokenizer"))
KEY_VARIABLES = (("teacher", "openai"), ("critics", "llm", "openai"))


@dataclass(frozen=True)
class OutProbe:
    """A file the driver writes into OUT that every worker must be able to read."""

    path: str
    token: str

    @classmethod
    def create(cls, folder: str | Path) -> OutProbe:
        token = secrets.token_hex(8)
        path = Path(folder) / f"probe-{token}"
        path.write_text(token)
        return cls(str(path), token)

    def remove(self) -> None:
        Path(self.path).unlink(missing_ok=True)

    def check(self) -> str | None:
        """On a worker: None if it sees the driver's probe and can write beside it."""
        probe = Path(self.path)
        try:
            if probe.read_text() != self.token:
                return f"OUT probe {probe} has other contents than the driver wrote; {OUT_HELP}"
        except OSError:
            return (f"OUT is not visible here: the driver's probe file {probe} is missing; "
                    f"{OUT_HELP}")
        mine = probe.with_name(f"{probe.name}-{os.getpid()}")
        try:
            mine.write_text(self.token)
            mine.unlink()
        except OSError as exc:
            return f"cannot write to OUT ({probe.parent}): {exc.strerror or exc}"
        return None


def _section(config: BaseModel, path: tuple[str, ...]) -> Any:
    for name in path:
        config = getattr(config, name, None)
        if config is None:
            return None
    return config


def _replace(model: BaseModel, path: tuple[str, ...], field: str, value: Any) -> BaseModel:
    """A copy of the frozen `model` with `path.field` set to `value`."""
    if not path:
        return model.model_copy(update={field: value})
    child = getattr(model, path[0])
    return model.model_copy(update={path[0]: _replace(child, path[1:], field, value)})


def resolve_paths(config: GenerateConfig, keep_relative: bool = False) -> GenerateConfig:
    """OUT made absolute, and every model/tokenizer path that exists relative to this
    directory: a worker would resolve them against its own working directory. With
    `keep_relative` (a Ray job whose working_dir every worker starts in) the model paths stay
    as written, so rows do not record a per-session temporary path."""
    config = config.model_copy(update={"out": os.path.abspath(config.out)})
    if keep_relative:
        return config
    for path, field in MODEL_PATHS:
        section = _section(config, path)
        value = getattr(section, field, None) if section is not None else None
        if value and not os.path.isabs(value) and os.path.exists(value):
            config = _replace(config, path, field, os.path.abspath(value))
    return config


def _worker_paths(config: GenerateConfig) -> list[tuple[str, str]]:
    """(field, path) of what a chunk worker loads itself. A vLLM model is loaded by the engine
    actors, which may run on other (GPU) nodes; the chunk worker only reads its tokenizer."""
    paths = []
    for path, field in MODEL_PATHS:
        value = getattr(_section(config, path), field, None)
        if value and path != ("teacher", "vllm"):
            paths.append((".".join((*path, field)), value))
    if config.teacher.backend == "vllm":
        paths.append(("teacher.vllm tokenizer", config.teacher.teacher_tokenizer()))
    return paths


def invalid_config_problem(error: ValidationError) -> str:
    """The config the driver validated fails here: in practice an env_modules module that
    this node cannot import."""
    details = "; ".join(f"{'.'.join(str(p) for p in item['loc'])}: "
                        f"{item['msg'].removeprefix('Value error, ')}" for item in error.errors())
    return f"the config does not load here ({details}); {MODULE_HELP}"


def worker_problems(config: GenerateConfig, probe: OutProbe | None) -> list[str]:
    """Everything this process lacks to run `config`'s chunks, each with how to provide it."""
    problems = []
    if probe is not None and (problem := probe.check()):
        problems.append(problem)
    for path in KEY_VARIABLES:
        variable = getattr(_section(config, path), "api_key_env", None)
        if variable and not os.environ.get(variable):
            where = ".".join(path)
            problems.append(f"{where}.api_key_env names ${variable}, which is not set here; "
                            + ENV_HELP % variable)
    for name, value in _worker_paths(config):
        if os.path.isabs(value) and not os.path.exists(value):
            problems.append(f"{name} {value} does not exist here; {PATH_HELP}")
    for module in config.env_modules:
        try:
            import_modules([module])
        except Exception as exc:  # noqa: BLE001 - any import failure is the same problem
            problems.append(f"env_modules: cannot import {module!r} here ({type(exc).__name__}: "
                            f"{exc}); {MODULE_HELP}")
    return problems
